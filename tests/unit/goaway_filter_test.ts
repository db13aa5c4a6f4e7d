/**
 * The gRPC connection filter that drops clients' HTTP/2 GOAWAY frames: byte-exact output for streams cut at
 * every position, non-HTTP/2 connections untouched, writes passed to the socket.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { EventEmitter } from "node:events";
import type { Socket } from "node:net";
import { GoawayFilter } from "../../server/frontends/grpc/goaway_filter.ts";

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/** A stand-in socket: emits what the test feeds, records what the filter writes. */
class FakeSocket extends EventEmitter {
  written: Buffer[] = [];
  ended = false;
  destroyed = false;
  pause() {}
  resume() {}
  write(chunk: Buffer, _enc: unknown, cb: () => void) {
    this.written.push(Buffer.from(chunk));
    cb();
    return true;
  }
  end(cb: () => void) {
    this.ended = true;
    cb();
  }
  destroy() {
    this.destroyed = true;
  }
  setNoDelay() {}
  corked = 0;
  cork() {
    this.corked++;
  }
  uncork() {
    this.corked--;
  }
}

/** Feeds `input` in pieces cut at `cuts` and returns everything the filter let through. */
async function run(input: Buffer, cuts: number[]): Promise<Buffer> {
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  const out: Buffer[] = [];
  filter.on("data", (b: Buffer) => out.push(b));
  const ended = new Promise((r) => filter.on("end", r));
  let at = 0;
  for (const cut of [...cuts, input.length]) {
    if (cut > at) socket.emit("data", input.subarray(at, cut));
    at = Math.max(at, cut);
  }
  socket.emit("end");
  await ended;
  return Buffer.concat(out);
}

const settings = frame(4, 0, 0, Buffer.from([0, 3, 0, 0, 0, 100]));
const headers = frame(1, 4, 1, Buffer.from("header block"));
const data = frame(0, 1, 1, Buffer.alloc(300, 7));
const goaway = frame(7, 0, 0, Buffer.from([0, 0, 0, 0, 0, 0, 0, 0]));
const ping = frame(6, 0, 0, Buffer.alloc(8, 1));
const empty = frame(4, 1, 0, Buffer.alloc(0));

Deno.test("GOAWAY frames are dropped, every other byte passes in order, wherever the chunks are cut", async () => {
  const input = Buffer.concat([PREFACE, settings, headers, data, goaway, ping, empty, goaway]);
  const want = Buffer.concat([PREFACE, settings, headers, data, ping, empty]);
  assert.deepEqual(await run(input, []), want);
  for (let cut = 1; cut < input.length; cut++) {
    assert.deepEqual(await run(input, [cut]), want, `cut at ${cut}`);
  }
  assert.deepEqual(await run(input, Array.from({ length: input.length }, (_, i) => i)), want, "byte by byte");
});

Deno.test("a connection that does not start with the HTTP/2 preface passes through untouched", async () => {
  const input = Buffer.concat([Buffer.from("GET / HTTP/1.1\r\nhost: x\r\n\r\n"), goaway]);
  assert.deepEqual(await run(input, [3]), input);
});

Deno.test("writes and the end go to the socket", async () => {
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  await new Promise<void>((r) => filter.write(Buffer.from("abc"), () => r()));
  assert.equal(socket.corked, 1, "writes of one event-loop turn are held together");
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(socket.corked, 0, "and released at the end of the turn");
  await new Promise<void>((r) => filter.end(() => r()));
  assert.deepEqual(socket.written, [Buffer.from("abc")]);
  assert.equal(socket.ended, true);
  filter.destroy();
  assert.equal(socket.destroyed, true);
});
