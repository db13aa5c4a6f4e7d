/**
 * gRPC clients that close with an HTTP/2 GOAWAY after hundreds of calls (h2load, grpc-js) must not take the
 * server down (Deno's node:http2 aborts on such a GOAWAY unless the server filters it; see
 * server/frontends/grpc/goaway_filter.ts). A raw HTTP/2 client over TCP makes the calls, so the test sees the
 * exact bytes of each answer; the server runs in this process, so a crash fails the test run.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, startTestServer } from "../helpers.ts";

const enc = new TextEncoder();
const PREFACE = enc.encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const DATA = 0, HEADERS = 1, SETTINGS = 4, PING = 6, GOAWAY = 7;
const END_STREAM = 1, END_HEADERS = 4, ACK = 1;

function frame(type: number, flags: number, stream: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.length);
  const v = new DataView(out.buffer);
  v.setUint8(0, payload.length >> 16);
  v.setUint16(1, payload.length & 0xffff);
  v.setUint8(3, type);
  v.setUint8(4, flags);
  v.setUint32(5, stream);
  out.set(payload, 9);
  return out;
}

/** An HPACK header block of literal fields without indexing (RFC 7541 §6.2.2), plain strings. */
function headerBlock(fields: [string, string][]): Uint8Array {
  const bytes: number[] = [];
  for (const [name, value] of fields) {
    bytes.push(0, name.length, ...enc.encode(name), value.length, ...enc.encode(value));
  }
  return Uint8Array.from(bytes);
}

/** A raw HTTP/2 connection that makes unary ServerLive calls and collects each stream's DATA bytes. */
class RawClient {
  #conn: Deno.Conn;
  #buf = new Uint8Array(0);
  #data = new Map<number, number[]>();
  #done = new Set<number>();
  #waiters: (() => void)[] = [];
  #nextStream = 1;
  #reading: Promise<void>;

  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
    this.#reading = this.#read();
  }

  static async open(port: number): Promise<RawClient> {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    const c = new RawClient(conn);
    await c.#write(PREFACE, frame(SETTINGS, 0, 0, new Uint8Array(0)));
    return c;
  }

  async #write(...parts: Uint8Array[]): Promise<void> {
    for (const p of parts) {
      let at = 0;
      while (at < p.length) at += await this.#conn.write(p.subarray(at));
    }
  }

  async #read(): Promise<void> {
    const chunk = new Uint8Array(1 << 16);
    for (;;) {
      let n: number | null;
      try {
        n = await this.#conn.read(chunk);
      } catch {
        return;
      }
      if (n === null) return;
      const next = new Uint8Array(this.#buf.length + n);
      next.set(this.#buf);
      next.set(chunk.subarray(0, n), this.#buf.length);
      this.#buf = next;
      while (this.#buf.length >= 9) {
        const v = new DataView(this.#buf.buffer, this.#buf.byteOffset);
        const len = (v.getUint8(0) << 16) | v.getUint16(1);
        if (this.#buf.length < 9 + len) break;
        const type = v.getUint8(3), flags = v.getUint8(4), stream = v.getUint32(5) & 0x7fffffff;
        const payload = this.#buf.slice(9, 9 + len);
        this.#buf = this.#buf.subarray(9 + len);
        if (type === SETTINGS && !(flags & ACK)) {
          await this.#write(frame(SETTINGS, ACK, 0, new Uint8Array(0)));
        }
        if (type === PING && !(flags & ACK)) await this.#write(frame(PING, ACK, 0, payload));
        if (type === DATA) this.#data.set(stream, [...(this.#data.get(stream) ?? []), ...payload]);
        if ((type === HEADERS || type === DATA) && flags & END_STREAM) {
          this.#done.add(stream);
          this.#waiters.splice(0).forEach((w) => w());
        }
      }
    }
  }

  /** Starts a ServerLive call; returns its stream id. */
  async call(): Promise<number> {
    const id = this.#nextStream;
    this.#nextStream += 2;
    const block = headerBlock([
      [":method", "POST"],
      [":scheme", "http"],
      [":path", "/inference.GRPCInferenceService/ServerLive"],
      [":authority", "localhost"],
      ["content-type", "application/grpc"],
      ["te", "trailers"],
    ]);
    // An empty ServerLiveRequest: the 5-byte gRPC message prefix and no body.
    await this.#write(frame(HEADERS, END_HEADERS, id, block), frame(DATA, END_STREAM, id, new Uint8Array(5)));
    return id;
  }

  /** Waits until every stream has ended; returns each stream's DATA bytes. */
  async results(ids: number[]): Promise<number[][]> {
    while (!ids.every((id) => this.#done.has(id))) await new Promise<void>((r) => this.#waiters.push(r));
    return ids.map((id) => this.#data.get(id) ?? []);
  }

  /** Sends GOAWAY as h2load and grpc-js do when they close, then closes the connection. */
  async goawayAndClose(): Promise<void> {
    const payload = new Uint8Array(8); // last stream id 0, NO_ERROR
    await this.#write(frame(GOAWAY, 0, 0, payload));
    this.#conn.close();
    await this.#reading;
  }
}

// ServerLiveResponse { live: true }, framed: uncompressed, 2 bytes, field 1 varint 1.
const LIVE = [0, 0, 0, 0, 2, 0x08, 0x01];

Deno.test("clients that close with GOAWAY after hundreds of gRPC calls leave the server serving", async () => {
  await using srv = await startTestServer([`--model-repository=${EXAMPLES}`, "--allow-grpc=true"]);
  const port = srv.server.grpcPort!;
  for (let round = 0; round < 4; round++) {
    const client = await RawClient.open(port);
    const ids: number[] = [];
    for (let batch = 0; batch < 8; batch++) {
      const started = await Promise.all(Array.from({ length: 50 }, () => client.call()));
      ids.push(...started);
      await client.results(started);
    }
    const answers = await client.results(ids);
    assert.equal(answers.length, 400);
    for (const a of answers) assert.deepEqual(a, LIVE);
    await client.goawayAndClose();
  }
  // Still serving, on both endpoints.
  const live = await fetch(`${srv.url}/v2/health/live`);
  assert.equal(live.status, 200);
  await live.body?.cancel();
  const client = await RawClient.open(port);
  const id = await client.call();
  assert.deepEqual(await client.results([id]), [LIVE]);
  await client.goawayAndClose();
});
