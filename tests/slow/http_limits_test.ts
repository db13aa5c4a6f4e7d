/**
 * HTTP connection limits and timeouts against a real server process: a connection that sends its header
 * slowly (or nothing) is closed after --http-header-timeout-secs, an idle kept-alive one after
 * --http-idle-timeout-secs, a body that trickles in is answered 408 after --http-body-timeout-secs and its
 * connection closed, and past --http-max-connections a new connection is answered 503 and closed while the
 * server goes on serving once the flood ends. Streams and slow models are not cut by any of them.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  EXAMPLES,
  httpStatus,
  pythonPath,
  readHttpResponse,
  type ServerProcess,
  startServerProcess,
  untilClosed,
} from "../helpers.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();
const GENERATE_MODELS = fileURLToPath(new URL("../fixtures/generate_models", import.meta.url));
/** Added to a timeout for "closed within the timeout": the server checks a few times per timeout. */
const MARGIN_MS = 5_000;

const INFER = JSON.stringify({
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array(16).fill(2) },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
  ],
});

function connect(port: number): Promise<Deno.TcpConn> {
  return Deno.connect({ hostname: "127.0.0.1", port });
}

function inferRequest(port: number, body = INFER): string {
  return `POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${encoder.encode(body).byteLength}\r\n\r\n${body}`;
}

/** The body of a response. */
function bodyOf(response: string): string {
  return response.slice(response.indexOf("\r\n\r\n") + 4);
}

/** Closes the connections and stops the server; its exit code, with what it wrote to stderr. */
async function stop(server: ServerProcess, conns: Deno.Conn[] = []): Promise<[number, string]> {
  for (const c of conns) {
    try {
      c.close();
    } catch {
      // Closed.
    }
  }
  try {
    server.child.kill("SIGTERM");
  } catch {
    // Exited.
  }
  const out = await server.output;
  return [out.code, decoder.decode(out.stderr)];
}

Deno.test("connections that send nothing or a partial header are closed after --http-header-timeout-secs", async () => {
  const server = await startServerProcess([
    `--model-repository=${EXAMPLES}`,
    "--http-header-timeout-secs=1",
    "--http-idle-timeout-secs=600",
    "--http-body-timeout-secs=600",
  ]);
  const conns: Deno.Conn[] = [];
  try {
    for (let i = 0; i < 20; i++) {
      const c = await connect(server.http);
      // Half send a header they never finish (slowloris), half send nothing.
      if (i % 2 === 0) await c.write(encoder.encode("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"));
      conns.push(c);
    }
    // A client that sends its header in pieces, each well within the timeout, is answered.
    const slow = await connect(server.http);
    conns.push(slow);
    const request = encoder.encode(inferRequest(server.http));
    await slow.write(request.subarray(0, 40));
    await new Promise((r) => setTimeout(r, 200));
    await slow.write(request.subarray(40));
    const answer = await readHttpResponse(slow);
    assert.match(answer, /^HTTP\/1\.1 200 OK\r\n/);
    assert.deepEqual(JSON.parse(bodyOf(answer)).outputs[0].data, Array(16).fill(3));

    const closed = await Promise.all(conns.slice(0, 20).map((c) => untilClosed(c, 1_000 + MARGIN_MS)));
    // Closed without an answer.
    assert.deepEqual(closed, Array(20).fill(""));
    assert.equal(await httpStatus(`${server.url}/v2/health/ready`), 200);
    const [code, stderr] = await stop(server, conns);
    assert.equal(code, 0, stderr);
  } finally {
    await stop(server, conns);
  }
});

Deno.test("an idle kept-alive connection is closed after --http-idle-timeout-secs, a busy one is not", async () => {
  const server = await startServerProcess([
    `--model-repository=${EXAMPLES}`,
    "--http-header-timeout-secs=600",
    "--http-idle-timeout-secs=3",
    "--http-body-timeout-secs=600",
  ]);
  const conns: Deno.Conn[] = [];
  try {
    const idle = await connect(server.http);
    const loris = await connect(server.http);
    const busy = await connect(server.http);
    conns.push(idle, loris, busy);
    for (const c of conns) await c.write(encoder.encode(inferRequest(server.http)));
    for (const c of conns) assert.match(await readHttpResponse(c), /^HTTP\/1\.1 200 OK\r\n/);
    // The next request's header never ends: the idle timeout bounds it.
    await loris.write(encoder.encode("GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n"));
    // A request every 250 ms for 4.5 s, longer than the idle timeout, on one connection.
    const answers: string[] = [];
    for (let i = 0; i < 18; i++) {
      await busy.write(encoder.encode(inferRequest(server.http)));
      answers.push((await readHttpResponse(busy)).split("\r\n")[0]!);
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.deepEqual(answers, Array(18).fill("HTTP/1.1 200 OK"));
    assert.deepEqual(
      await Promise.all([idle, loris, busy].map((c) => untilClosed(c, 3_000 + MARGIN_MS))),
      ["", "", ""],
    );
    const [code, stderr] = await stop(server, conns);
    assert.equal(code, 0, stderr);
  } finally {
    await stop(server, conns);
  }
});

Deno.test("a body that trickles in is answered 408 after --http-body-timeout-secs and its connection closed", async () => {
  const server = await startServerProcess([
    `--model-repository=${EXAMPLES}`,
    "--http-header-timeout-secs=600",
    "--http-idle-timeout-secs=600",
    "--http-body-timeout-secs=1",
  ]);
  const conns: Deno.Conn[] = [];
  let trickling = true;
  try {
    const infer = await connect(server.http);
    const unread = await connect(server.http);
    conns.push(infer, unread);
    const request = encoder.encode(inferRequest(server.http));
    // A body the server reads, and one it never reads (the answer, 404, comes before it).
    await infer.write(request.subarray(0, request.byteLength - 100));
    await unread.write(
      encoder.encode("POST /v2/nothing/here HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nxx"),
    );
    const trickle = (async () => {
      let off = request.byteLength - 100;
      while (trickling && off < request.byteLength - 1) {
        await new Promise((r) => setTimeout(r, 300));
        await infer.write(request.subarray(off, ++off)).catch(() => 0);
        await unread.write(encoder.encode("x")).catch(() => 0);
      }
    })();
    const [inferred, refused] = await Promise.all([
      untilClosed(infer, 1_000 + MARGIN_MS),
      untilClosed(unread, 1_000 + MARGIN_MS),
    ]);
    trickling = false;
    await trickle;
    assert.ok(inferred !== null, "the connection with the slow body stays open");
    assert.match(inferred, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.match(inferred, /\r\nconnection: close\r\n/i);
    assert.deepEqual(JSON.parse(bodyOf(inferred)), {
      error: "Cannot read the request body: it did not arrive within --http-body-timeout-secs (1 s)",
    });
    assert.ok(refused !== null, "the connection with the unread slow body stays open");
    assert.match(refused, /^HTTP\/1\.1 404 Not Found\r\n/);
    // A body that comes at once is read and answered as ever.
    const c = await connect(server.http);
    conns.push(c);
    await c.write(encoder.encode(inferRequest(server.http)));
    assert.deepEqual(JSON.parse(bodyOf(await readHttpResponse(c))).outputs[0].data, Array(16).fill(3));
    const [code, stderr] = await stop(server, conns);
    assert.equal(code, 0, stderr);
  } finally {
    trickling = false;
    await stop(server, conns);
  }
});

Deno.test("past --http-max-connections a connection is answered 503 and closed; all threads count", async () => {
  const server = await startServerProcess([
    `--model-repository=${EXAMPLES}`,
    "--http-max-connections=20",
    "--http-thread-count=2",
    "--http-idle-timeout-secs=1",
  ]);
  const conns: Deno.Conn[] = [];
  try {
    // The kept-alive connections of the readiness checks (this process's fetch) count too: they are closed
    // after the idle timeout.
    await new Promise((r) => setTimeout(r, 1_000 + 2_000));
    // Twenty connections that send nothing (the header timeout is 30 s), given a moment to be accepted.
    for (let i = 0; i < 20; i++) conns.push(await connect(server.http));
    await new Promise((r) => setTimeout(r, 500));
    const refused: (string | null)[] = [];
    for (let i = 0; i < 5; i++) {
      const extra = await connect(server.http);
      refused.push(await untilClosed(extra, MARGIN_MS));
      extra.close();
    }
    const body = '{"error":"Cannot accept the connection: 20 connections are open (--http-max-connections)"}';
    assert.deepEqual(
      refused,
      Array(5).fill(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n" +
          `content-length: ${body.length}\r\n\r\n${body}`,
      ),
    );
    // The held connections are served.
    await conns[0]!.write(encoder.encode(inferRequest(server.http)));
    assert.match(await readHttpResponse(conns[0]!), /^HTTP\/1\.1 200 OK\r\n/);
    // Once the flood ends, new clients are served.
    for (const c of conns.splice(0)) c.close();
    let ready: number | string = "";
    for (let i = 0; i < 100 && ready !== 200; i++) {
      ready = await httpStatus(`${server.url}/v2/health/ready`);
      if (ready !== 200) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(ready, 200);
    // Half the limit at once: this process's kept-alive readiness connection and a closed connection the server
    // has not seen close yet still count, so a burst may find a few of the flood's closes not yet counted (seen
    // on CI: 2 of 10 refused); once they are, a whole burst is served.
    const burst = () =>
      Promise.all(
        Array.from(
          { length: 10 },
          () =>
            fetch(`${server.url}/v2/models/simple/infer`, { method: "POST", body: INFER }).then(async (r) => {
              await r.body?.cancel();
              return r.status;
            }),
        ),
      );
    let answers = await burst();
    for (let i = 0; i < 20 && answers.some((a) => a !== 200); i++) {
      await new Promise((r) => setTimeout(r, 100));
      answers = await burst();
    }
    assert.deepEqual(answers, Array(10).fill(200));
    const [code, stderr] = await stop(server, conns);
    assert.equal(code, 0, stderr);
  } finally {
    await stop(server, conns);
  }
});

Deno.test("a stream and a model slower than every timeout are answered whole", async () => {
  const server = await startServerProcess([
    `--model-repository=${GENERATE_MODELS}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
    "--http-header-timeout-secs=1",
    "--http-idle-timeout-secs=1",
    "--http-body-timeout-secs=1",
  ]);
  try {
    // Each word comes 1.5 s after the one before: the handler waits longer than the timeouts for the first,
    // and the stream goes on longer than them after it.
    const r = await fetch(`${server.url}/v2/models/words_py/generate_stream`, {
      method: "POST",
      body: '{"text_input":"x y z","parameters":{"delay_ms":1500}}',
    });
    assert.equal(r.status, 200);
    const words = (await r.text()).split("\n\n").filter((e) => e !== "").map((e) =>
      JSON.parse(e.slice("data: ".length)).text_output
    );
    assert.deepEqual(words, ["x", "y", "z"]);
    const [code, stderr] = await stop(server);
    assert.equal(code, 0, stderr);
  } finally {
    await stop(server);
  }
});
