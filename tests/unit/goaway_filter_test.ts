/**
 * The gRPC connection filter that drops clients' HTTP/2 GOAWAY frames: byte-exact output for streams cut at
 * every position, non-HTTP/2 connections untouched, writes held for one socket write per answer.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { EventEmitter } from "node:events";
import type { Socket } from "node:net";
import { GoawayFilter } from "../../server/frontends/grpc/goaway_filter.ts";
import { turns } from "../turns.ts";

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
  writableNeedDrain = false;
  write(chunk: Buffer, _enc?: unknown, cb?: () => void) {
    this.written.push(Buffer.from(chunk));
    cb?.();
    return true;
  }
  /** Ends the socket; as a real one, it closes (destroyed) once the peer has closed too, here a turn later. */
  end(cb?: () => void) {
    this.ended = true;
    cb?.();
    queueMicrotask(() => {
      this.destroyed = true;
      this.emit("close");
    });
  }
  destroy() {
    this.destroyed = true;
  }
  setNoDelay() {}
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

Deno.test("writes of three event-loop turns leave in one socket write, after them", async () => {
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  // As node:http2 answers: headers and data in one turn, the trailers two turns later.
  const taken: string[] = [];
  filter.write(Buffer.from("head"), () => taken.push("head"));
  filter.write(Buffer.from("data"), () => taken.push("data"));
  await turns(2);
  assert.deepEqual(taken, ["head", "data"], "each chunk is taken at once");
  assert.deepEqual(socket.written, [], "and held");
  filter.write(Buffer.from("trailers"));
  await turns(2);
  assert.deepEqual(socket.written, [Buffer.from("headdatatrailers")]);
  filter.write(Buffer.from("next"));
  await turns(4);
  assert.deepEqual(socket.written, [Buffer.from("headdatatrailers"), Buffer.from("next")]);
  filter.destroy();
});

Deno.test("64 KiB held go out at once", async () => {
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  const big = Buffer.alloc(64 * 1024 - 1, 7);
  filter.write(Buffer.from("a"));
  await turns(1);
  assert.deepEqual(socket.written, []);
  filter.write(big);
  await turns(1);
  assert.deepEqual(socket.written, [Buffer.concat([Buffer.from("a"), big])]);
  filter.destroy();
});

Deno.test("while the socket needs to drain, a chunk is taken once it has drained", async () => {
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  socket.writableNeedDrain = true;
  let taken = false;
  filter.write(Buffer.from("x"), () => taken = true);
  await turns(4);
  assert.equal(taken, false);
  assert.deepEqual(socket.written, [Buffer.from("x")], "what is held still goes out");
  socket.writableNeedDrain = false;
  socket.emit("drain");
  await turns(1);
  assert.equal(taken, true);
  filter.destroy();
});

Deno.test("the end writes what is held, then ends the socket", async () => {
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  filter.write(Buffer.from("abc"));
  await new Promise<void>((r) => filter.end(() => r()));
  assert.deepEqual(socket.written, [Buffer.from("abc")]);
  assert.equal(socket.ended, true);
  filter.destroy();
  await turns(1);
  assert.equal(socket.destroyed, true);
});

Deno.test("destroying the filter cleanly writes what is held, then ends the socket rather than cutting it", async () => {
  // The session's last bytes (a call's status, a GOAWAY) leave before the connection closes: a socket destroyed
  // at once could drop a write still under way.
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  filter.write(Buffer.from("goaway"));
  filter.destroy();
  assert.deepEqual(socket.written, [Buffer.from("goaway")]);
  assert.equal(socket.ended, true);
  assert.equal(socket.destroyed, false);
  await turns(1);
  assert.equal(socket.destroyed, true);
});

Deno.test("destroying the filter with an error cuts the socket at once", () => {
  const socket = new FakeSocket();
  const filter = new GoawayFilter(socket as unknown as Socket);
  filter.on("error", () => {});
  filter.write(Buffer.from("late"));
  filter.destroy(new Error("the session failed"));
  assert.equal(socket.ended, false);
  assert.equal(socket.destroyed, true);
});
