/**
 * SIGTERM answers every request that arrived before it, also on keep-alive connections and on the HTTP listener
 * threads, then exits cleanly.
 * @module
 */

import assert from "node:assert/strict";
import { readHttpResponse, startServerProcess } from "../helpers.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

// Padded, so that a body is still arriving when SIGTERM comes.
const BODY = " ".repeat(1 << 18) + JSON.stringify({
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array(16).fill(2) },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
  ],
});

function request(port: number): Uint8Array {
  return encoder.encode(
    `POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${encoder.encode(BODY).byteLength}\r\n\r\n${BODY}`,
  );
}

/** Sends requests on 16 keep-alive connections around SIGTERM and checks that all are answered. */
async function answersAroundSigterm(flags: string[]): Promise<void> {
  const server = await startServerProcess(["--log-info=false", ...flags]);
  const conns: Deno.Conn[] = [];
  try {
    // The HTTP endpoint answers from the main thread before the listener threads listen; the metrics
    // endpoint starts after them.
    let metrics = 0;
    for (let i = 0; i < 200 && metrics !== 200; i++) {
      metrics = await fetch(`http://127.0.0.1:${server.metrics}/metrics`).then(async (r) => {
        await r.body?.cancel();
        return r.status;
      }, () => 0);
      if (metrics !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(metrics, 200);
    for (let i = 0; i < 16; i++) conns.push(await Deno.connect({ hostname: "127.0.0.1", port: server.http }));
    // One request each, so that every connection is an idle keep-alive connection.
    for (const c of conns) await c.write(request(server.http));
    for (const c of conns) assert.match(await readHttpResponse(c), /^HTTP\/1\.1 200 /);
    // A second request on each: all but its last bytes, SIGTERM, then the rest.
    const second = request(server.http);
    const half = second.byteLength - 10;
    for (const c of conns) await c.write(second.subarray(0, half));
    await new Promise((r) => setTimeout(r, 100));
    server.child.kill("SIGTERM");
    // Longer than a quiet moment: the server waits for the bodies it has started to receive.
    await new Promise((r) => setTimeout(r, 500));
    for (const c of conns) await c.write(second.subarray(half)).catch(() => 0);
    const answers = await Promise.all(conns.map((c) => readHttpResponse(c)));
    assert.deepEqual(answers.map((a) => a.split("\r\n")[0]), Array(16).fill("HTTP/1.1 200 OK"));
    // Each answer says that the connection closes, so that no client sends another request into it.
    assert.deepEqual(answers.map((a) => /\r\nconnection: close\r\n/i.test(a)), Array(16).fill(true));
    const out = await server.output;
    assert.equal(out.code, 0, decoder.decode(out.stderr));
  } finally {
    for (const c of conns) {
      try {
        c.close();
      } catch {
        // Closed.
      }
    }
    try {
      server.child.kill("SIGKILL");
    } catch {
      // Exited.
    }
    await server.output;
  }
}

Deno.test("requests arriving on keep-alive connections around SIGTERM are all answered", async () => {
  await answersAroundSigterm([]);
});

// The kernel spreads the 16 connections over the main thread and the listener thread (SO_REUSEPORT): the
// chance that none reaches the listener thread is 2^-16.
Deno.test("requests on the HTTP listener threads around SIGTERM are all answered", async () => {
  await answersAroundSigterm(["--http-thread-count=2"]);
});
