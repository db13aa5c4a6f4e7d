/**
 * HTTP listener threads (`--http-thread-count`): a server with several threads on its HTTP port answers every
 * kind of request exactly as a server with one thread does. Each request goes on a fresh connection, so that
 * the kernel spreads them over the threads (SO_REUSEPORT); with 24 connections per case, the chance that none
 * reaches a listener thread is 2^-24.
 * @module
 */

import assert from "node:assert/strict";
import { startServerProcess, startTestServer } from "../helpers.ts";
import { binaryBody, rawRequest, SIMPLE_DIFF, SIMPLE_REQUEST, SIMPLE_SUM } from "./_http.ts";

const ROUNDS = 24;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

interface Case {
  name: string;
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: Uint8Array;
}

function int32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(Int32Array.from(values).buffer);
}

function gzip(bytes: Uint8Array): Promise<Uint8Array> {
  const stream = new Blob([bytes as BlobPart]).stream().pipeThrough(new CompressionStream("gzip"));
  return new Response(stream).bytes();
}

const json = (v: unknown) => encoder.encode(JSON.stringify(v));
const binary = binaryBody({
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
  ],
  outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }, { name: "OUTPUT1" }],
}, [int32Bytes(Array.from({ length: 16 }, (_, i) => i)), int32Bytes(Array(16).fill(1))]);

const CASES: Case[] = [
  { name: "JSON inference", method: "POST", path: "/v2/models/simple/infer", body: json(SIMPLE_REQUEST) },
  {
    name: "binary inference with a binary and a JSON output",
    method: "POST",
    path: "/v2/models/simple/infer",
    headers: { "inference-header-content-length": String(binary.headerLength) },
    body: binary.body,
  },
  {
    name: "BYTES inference",
    method: "POST",
    path: "/v2/models/simple_string/infer",
    body: json({
      id: "7",
      inputs: [
        {
          name: "INPUT0",
          datatype: "BYTES",
          shape: [1, 16],
          data: Array.from({ length: 16 }, (_, i) => `${i}`),
        },
        { name: "INPUT1", datatype: "BYTES", shape: [1, 16], data: Array(16).fill("2") },
      ],
    }),
  },
  {
    name: "classification",
    method: "POST",
    path: "/v2/models/digits/infer",
    body: json({
      inputs: [{
        name: "input",
        datatype: "FP32",
        shape: [1, 64],
        data: Array.from({ length: 64 }, (_, i) => i % 17),
      }],
      outputs: [{ name: "probabilities", parameters: { classification: 2 } }],
    }),
  },
  { name: "an unknown model", method: "POST", path: "/v2/models/nope/infer", body: json(SIMPLE_REQUEST) },
  {
    name: "malformed JSON",
    method: "POST",
    path: "/v2/models/simple/infer",
    body: encoder.encode('{"inputs": ['),
  },
  {
    name: "a wrong shape",
    method: "POST",
    path: "/v2/models/simple/infer",
    body: json({
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 15], data: Array(15).fill(1) },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
      ],
    }),
  },
  {
    name: "a body over --http-max-input-size",
    method: "POST",
    path: "/v2/models/simple/infer",
    body: json({ ...SIMPLE_REQUEST, id: "x".repeat(5000) }),
  },
  { name: "model metadata", method: "GET", path: "/v2/models/simple" },
  { name: "readiness", method: "GET", path: "/v2/health/ready" },
  { name: "an unknown route", method: "GET", path: "/v2/nothing" },
  { name: "the repository index", method: "POST", path: "/v2/repository/index", body: json({ ready: true }) },
];

async function answer(base: string, c: Case): Promise<string> {
  const a = await rawRequest(base, {
    method: c.method,
    path: c.path,
    headers: { "content-type": "application/json", ...c.headers },
    ...(c.body ? { body: c.body } : {}),
  });
  const hl = a.headers.get("inference-header-content-length");
  const head = hl === null ? a.body : a.body.subarray(0, Number(hl));
  const rest = hl === null ? [] : [...a.body.subarray(Number(hl))];
  return JSON.stringify({ status: a.status, head: decoder.decode(head), rest, hl });
}

Deno.test("a server with two HTTP threads answers every request as a server with one thread does", async () => {
  const flags = ["--http-max-input-size=4096"];
  await using one = await startTestServer([...flags, "--http-thread-count=1"]);
  await using two = await startTestServer([...flags, "--http-thread-count=2"]);
  for (const c of CASES) {
    const expected = await answer(one.url, c);
    for (let i = 0; i < ROUNDS; i++) assert.equal(await answer(two.url, c), expected, c.name);
  }
  // A compressed request, answered compressed.
  const gz = await gzip(json(SIMPLE_REQUEST));
  for (let i = 0; i < ROUNDS; i++) {
    const a = await rawRequest(two.url, {
      method: "POST",
      path: "/v2/models/simple/infer",
      headers: { "content-encoding": "gzip", "accept-encoding": "gzip" },
      body: gz,
    });
    assert.equal(a.status, 200);
    assert.equal(a.headers.get("content-encoding"), "gzip");
    const text = decoder.decode(
      await new Response(
        new Blob([a.body as BlobPart]).stream().pipeThrough(
          new DecompressionStream("gzip"),
        ),
      ).bytes(),
    );
    const outputs = (JSON.parse(text) as { outputs: { name: string; data: number[] }[] }).outputs;
    assert.deepEqual(outputs.map((o) => [o.name, o.data]), [["OUTPUT0", SIMPLE_SUM], [
      "OUTPUT1",
      SIMPLE_DIFF,
    ]]);
  }
});

/** POSTs a body in chunks (no Content-Length) on a fresh connection; returns the status and the body. */
async function postChunked(base: string, path: string, body: Uint8Array): Promise<string> {
  const url = new URL(base);
  const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
  try {
    const head = `POST ${path} HTTP/1.1\r\nHost: ${url.host}\r\nConnection: close\r\n` +
      "Transfer-Encoding: chunked\r\n\r\n";
    const parts: Uint8Array[] = [encoder.encode(head)];
    for (let off = 0; off < body.byteLength; off += 1000) {
      const chunk = body.subarray(off, off + 1000);
      parts.push(encoder.encode(`${chunk.byteLength.toString(16)}\r\n`), chunk, encoder.encode("\r\n"));
    }
    parts.push(encoder.encode("0\r\n\r\n"));
    for (const p of parts) for (let o = 0; o < p.byteLength;) o += await conn.write(p.subarray(o));
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(65536);
    for (;;) {
      const n = await conn.read(buf).catch(() => null);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
    const text = decoder.decode(new Uint8Array(chunks.flatMap((c) => [...c])));
    return `${text.split(" ")[1]} ${text.slice(text.indexOf("{"))}`;
  } finally {
    conn.close();
  }
}

Deno.test("a chunked body over --http-max-input-size is refused by both kinds of thread with the same error", async () => {
  const flags = ["--http-max-input-size=4096"];
  await using one = await startTestServer([...flags, "--http-thread-count=1"]);
  await using two = await startTestServer([...flags, "--http-thread-count=2"]);
  const big = json({ ...SIMPLE_REQUEST, id: "x".repeat(5000) });
  const small = json(SIMPLE_REQUEST);
  for (const body of [big, small]) {
    const expected = await postChunked(one.url, "/v2/models/simple/infer", body);
    assert.equal(expected.split(" ")[0], body === big ? "400" : "200");
    for (let i = 0; i < ROUNDS; i++) {
      assert.equal(await postChunked(two.url, "/v2/models/simple/infer", body), expected);
    }
  }
});

Deno.test("GET requests without Content-Length (as fetch sends them) are answered by every HTTP thread", async () => {
  await using one = await startTestServer(["--http-thread-count=1"]);
  await using two = await startTestServer(["--http-thread-count=2"]);
  for (const path of ["/v2/models/simple", "/v2/models/simple/stats", "/v2/health/ready"]) {
    const expected = await (await fetch(`${one.url}${path}`)).text();
    for (let i = 0; i < ROUNDS; i++) {
      // A client of its own per request: a new connection each time, spread over the threads.
      using client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
      const r = await fetch(`${two.url}${path}`, { client });
      assert.equal(r.status, 200, path);
      const text = await r.text();
      if (!path.endsWith("/stats")) assert.equal(text, expected, path);
    }
  }
});

Deno.test("requests answered by HTTP listener threads are counted in the model's statistics", async () => {
  await using two = await startTestServer(["--http-thread-count=2"]);
  const body = json(SIMPLE_REQUEST);
  const n = 40;
  const answers = await Promise.all(
    Array.from(
      { length: n },
      () => rawRequest(two.url, { method: "POST", path: "/v2/models/simple/infer", body }),
    ),
  );
  assert.deepEqual(answers.map((a) => a.status), Array(n).fill(200));
  for (const a of answers) {
    const outputs = (JSON.parse(decoder.decode(a.body)) as { outputs: { data: number[] }[] }).outputs;
    assert.deepEqual(outputs.map((o) => o.data), [SIMPLE_SUM, SIMPLE_DIFF]);
  }
  const stats = await rawRequest(two.url, { method: "GET", path: "/v2/models/simple/stats" });
  const model = (JSON.parse(decoder.decode(stats.body)) as {
    model_stats: { inference_count: number; inference_stats: { success: { count: number } } }[];
  }).model_stats[0]!;
  assert.equal(model.inference_count, n);
  assert.equal(model.inference_stats.success.count, n);
});

Deno.test("requests in flight together through a listener thread's channel each get their own answer", async () => {
  // simple_string (BYTES tensors) runs on the main thread: a listener thread's requests for it cross the channel.
  await using two = await startTestServer(["--http-thread-count=2"]);
  const n = 96;
  const answers = await Promise.all(
    Array.from({ length: n }, (_, k) =>
      rawRequest(two.url, {
        method: "POST",
        path: "/v2/models/simple_string/infer",
        body: json({
          id: `r${k}`,
          inputs: [
            { name: "INPUT0", datatype: "BYTES", shape: [1, 16], data: Array(16).fill(String(k)) },
            {
              name: "INPUT1",
              datatype: "BYTES",
              shape: [1, 16],
              data: Array.from({ length: 16 }, (_, i) => `${i}`),
            },
          ],
        }),
      })),
  );
  for (const [k, a] of answers.entries()) {
    assert.equal(a.status, 200);
    const body = JSON.parse(decoder.decode(a.body)) as {
      id: string;
      outputs: { name: string; data: string[] }[];
    };
    assert.equal(body.id, `r${k}`);
    assert.deepEqual(body.outputs.map((o) => [o.name, o.data]), [
      ["OUTPUT0", Array.from({ length: 16 }, (_, i) => String(k + i))],
      ["OUTPUT1", Array.from({ length: 16 }, (_, i) => String(k - i))],
    ]);
  }
});

Deno.test("a server with HTTP listener threads finishes requests in flight when it shuts down", async () => {
  const two = await startTestServer(["--http-thread-count=2"]);
  const body = json(SIMPLE_REQUEST);
  const inFlight = Array.from(
    { length: 16 },
    () => rawRequest(two.url, { method: "POST", path: "/v2/models/simple/infer", body }),
  );
  await new Promise((r) => setTimeout(r, 0));
  const closing = two.close();
  const answers = await Promise.allSettled(inFlight);
  await closing;
  // Every request is answered or was refused before it connected; none is answered with an error.
  for (const a of answers) if (a.status === "fulfilled") assert.equal(a.value.status, 200);
  await assert.rejects(() => rawRequest(two.url, { method: "GET", path: "/v2/health/live" }));
});

Deno.test("an inference restriction holds on every HTTP thread", async () => {
  await using two = await startTestServer([
    "--http-thread-count=2",
    "--http-restricted-api=inference:infer-key=s3cret",
  ]);
  const body = json(SIMPLE_REQUEST);
  const path = "/v2/models/simple/infer";
  for (let i = 0; i < ROUNDS; i++) {
    const refused = await rawRequest(two.url, { method: "POST", path, body });
    assert.equal(refused.status, 403);
    assert.equal(
      decoder.decode(refused.body),
      `{"error":"This API is restricted, expecting header 'infer-key'"}`,
    );
    const wrong = await rawRequest(two.url, {
      method: "POST",
      path,
      headers: { "infer-key": "s3cre" },
      body,
    });
    assert.equal(wrong.status, 403);
    const allowed = await rawRequest(two.url, {
      method: "POST",
      path,
      headers: { "infer-key": "s3cret" },
      body,
    });
    assert.equal(allowed.status, 200);
    const outputs = (JSON.parse(decoder.decode(allowed.body)) as { outputs: { data: number[] }[] }).outputs;
    assert.deepEqual(outputs.map((o) => o.data), [SIMPLE_SUM, SIMPLE_DIFF]);
  }
});

/** The sockets listening on a TCP port of this machine (/proc/net/tcp and tcp6, state 0A). */
function listeningSockets(port: number): number {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  let n = 0;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of Deno.readTextFileSync(file).split("\n").slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      if (local?.endsWith(hex) && state === "0A") n++;
    }
  }
  return n;
}

Deno.test("readiness answers ready only once every listener thread listens on the HTTP and gRPC ports", async () => {
  // A connection made before a thread listens stays on the main thread for its life: a client that waits for
  // readiness and then opens its connections must find every thread listening. Asked every 2 ms, a server whose
  // readiness did not wait for the threads answered ready before they listened in 4 starts of 4.
  const server = await startServerProcess(["--http-thread-count=2", "--grpc-thread-count=2"], { pollMs: 2 });
  try {
    assert.deepEqual([listeningSockets(server.http), listeningSockets(server.grpc)], [2, 2]);
  } finally {
    server.child.kill("SIGTERM");
    await server.output;
  }
});
