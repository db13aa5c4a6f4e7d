/**
 * Runs a release file the way a user would, for release_test.ts (which may start this inside a network
 * namespace of its own, so that the server and its client share the only network there is): in an empty
 * folder, with only `PATH` and `HOME` in the environment. Waits for `/v2/health/ready`, sends one inference to
 * the bundled `simple` model, stops the server with SIGTERM and prints what it saw as one JSON line.
 *
 * `deno run -A _release_probe.ts <release file> <empty folder> <home>`
 * @module
 */

import { freePorts, loopbackFlags } from "../helpers.ts";

const [release, cwd, home] = Deno.args;
if (!release || !cwd || !home) {
  throw new Error("Usage: _release_probe.ts <release file> <empty folder> <home>");
}

const ports = freePorts(3);
const url = `http://127.0.0.1:${ports[0]}`;
const started = performance.now();
const child = new Deno.Command(release, {
  args: loopbackFlags(ports),
  cwd,
  clearEnv: true,
  env: { PATH: "/usr/bin:/bin", HOME: home },
  stdin: "null",
  stdout: "piped",
  stderr: "piped",
}).spawn();
const output = child.output();

let ready = 0;
let readyAfterMs = 0;
let infer: unknown = null;
const deadline = Date.now() + 120_000;
let exited = false;
output.finally(() => exited = true);
while (Date.now() < deadline && !exited) {
  try {
    const r = await fetch(`${url}/v2/health/ready`);
    await r.body?.cancel();
    if (r.status === 200) {
      ready = 200;
      readyAfterMs = Math.round(performance.now() - started);
      break;
    }
  } catch {
    // Not listening yet (the first start unpacks).
  }
  await new Promise((r) => setTimeout(r, 100));
}
if (ready === 200) {
  const r = await fetch(`${url}/v2/models/simple/infer`, {
    method: "POST",
    body: JSON.stringify({
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(3) },
      ],
    }),
  });
  infer = { status: r.status, body: await r.json() };
}
if (!exited) child.kill("SIGTERM");
const out = await output;
console.log(JSON.stringify({
  ready,
  readyAfterMs,
  infer,
  code: out.code,
  signal: out.signal,
  stderr: new TextDecoder().decode(out.stderr),
}));
