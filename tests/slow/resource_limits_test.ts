/**
 * Running out of file descriptors does not end the server: a failed accept is logged and tried again (the HTTP
 * endpoint without limits listens again), and the server answers once connections are given back; under
 * --http-max-connections the HTTP endpoint does not run out at all.
 * @module
 */

import assert from "node:assert/strict";
import { HANDSHAKE_TIMEOUT_MS } from "../../server/frontends/grpc/server.ts";
import {
  EXAMPLES,
  freePorts,
  httpStatus,
  loopbackFlags,
  ROOT,
  startTestServer,
  untilClosed,
} from "../helpers.ts";

/**
 * Starts a server under a limit of 256 file descriptors, floods its HTTP and gRPC ports with 400 connections
 * each, and checks that it answers once the flood ends.
 * @returns what the server wrote to stderr
 */
async function flood(flags: string[], nofile = 256): Promise<string> {
  const ports = freePorts(3);
  const [http, grpc] = ports as [number, number, number];
  // 256 descriptors by default: the server needs about 60 of its own; the flood takes the rest.
  const child = new Deno.Command("prlimit", {
    args: [
      `--nofile=${nofile}:${nofile}`,
      Deno.execPath(),
      "run",
      "-A",
      "main.ts",
      "--model-repository=examples/models",
      "--allow-metrics=false",
      ...flags,
      ...loopbackFlags(ports),
    ],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = child.output();
  const url = `http://127.0.0.1:${http}/v2/health/live`;
  try {
    let ready: number | string = "";
    for (let i = 0; i < 300 && ready !== 200; i++) {
      ready = await httpStatus(url);
      if (ready !== 200) await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(ready, 200, "the server did not start");
    for (const port of [http, grpc]) {
      const conns: Deno.Conn[] = [];
      for (let i = 0; i < 400; i++) {
        try {
          conns.push(await Deno.connect({ hostname: "127.0.0.1", port }));
        } catch {
          break; // refused or reset: the server is at its limit
        }
      }
      // Let the server try to accept past its limit.
      await new Promise((r) => setTimeout(r, 500));
      for (const c of conns) c.close();
      let status: number | string = "";
      for (let i = 0; i < 100 && status !== 200; i++) {
        status = await httpStatus(url);
        if (status !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(status, 200, `the server does not answer after a flood of port ${port}`);
    }
    child.kill("SIGTERM");
    const out = await output;
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    return stderr;
  } finally {
    try {
      child.kill("SIGKILL");
    } catch {
      // Exited.
    }
    await output;
  }
}

Deno.test("the server survives running out of file descriptors on its HTTP port and answers again", async () => {
  const stderr = await flood(["--http-max-connections=10000"]);
  // The limit leaves no room below the 256 descriptors: the server says so at start.
  assert.match(
    stderr,
    /--http-max-connections=10000 leaves less than 256 of the 256 open files this process may have for its own files/,
  );
  assert.match(
    stderr,
    /HTTPService cannot accept a connection: Too many open files \(os error 24\); accepting again in \d+ ms/,
  );
});

Deno.test("without HTTP limits, plain Deno.serve listens again after running out of file descriptors", async () => {
  const stderr = await flood([
    "--http-max-connections=0",
    "--http-header-timeout-secs=0",
    "--http-idle-timeout-secs=0",
    "--http-body-timeout-secs=0",
  ]);
  assert.match(
    stderr,
    /HTTPService stopped accepting connections: Error: Too many open files \(os error 24\); listening again in \d+ ms/,
  );
  assert.match(stderr, /HTTPService listening again at 127\.0\.0\.1:\d+/);
});

Deno.test("under --http-max-connections below the descriptor limit, a flood is refused and no HTTP accept fails", async () => {
  // 512 descriptors: the limit's 100 connections, those being refused and the server's own stay well below.
  const stderr = await flood(["--http-max-connections=100"], 512);
  assert.doesNotMatch(stderr, /HTTPService cannot accept a connection/);
});

Deno.test("gRPC: past --grpc-max-connections a connection is closed at once; a silent one after 10 s", async () => {
  await using s = await startTestServer([
    `--model-repository=${EXAMPLES}`,
    "--allow-grpc=true",
    "--grpc-max-connections=2",
  ]);
  const port = s.server.grpcPort!;
  const a = await Deno.connect({ hostname: "127.0.0.1", port });
  const b = await Deno.connect({ hostname: "127.0.0.1", port });
  await new Promise((r) => setTimeout(r, 200));
  const c = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    assert.equal((await untilClosed(c, 2_000)) !== null, true, "the third connection stays open");
    // The first two never send the HTTP/2 preface: closed after HANDSHAKE_TIMEOUT_MS.
    const t0 = Date.now();
    assert.equal(
      (await untilClosed(a, HANDSHAKE_TIMEOUT_MS + 3_000)) !== null,
      true,
      "a silent connection stays open",
    );
    assert.ok(Date.now() - t0 > HANDSHAKE_TIMEOUT_MS - 1_000);
    assert.equal((await untilClosed(b, 1_000)) !== null, true);
  } finally {
    for (const conn of [a, b, c]) {
      try {
        conn.close();
      } catch {
        // Closed.
      }
    }
  }
});
