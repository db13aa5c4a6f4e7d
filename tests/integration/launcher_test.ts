/**
 * The `./dinfer` launcher as a supervisor uses it: the process it starts is the server itself, so a signal sent
 * to that process stops the server and leaves nothing running; and it serves from the caller's directory, where
 * relative paths in its flags point.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, freePorts, loopbackFlags, ROOT } from "../helpers.ts";

/** The processes whose working directory is `dir`. */
function processesIn(dir: string): number[] {
  const found: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^[0-9]+$/.test(entry.name)) continue;
    try {
      if (Deno.readLinkSync(`/proc/${entry.name}/cwd`) === dir) found.push(Number(entry.name));
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return found;
}

Deno.test("./dinfer serves from the caller's folder, and SIGTERM to the process it started stops the server and leaves none behind", async () => {
  const parent = await Deno.makeTempDir({ prefix: "dinfer-launcher-" });
  const repo = `${parent}/models`;
  await Deno.mkdir(`${repo}/simple/1`, { recursive: true });
  await Deno.copyFile(`${EXAMPLES}/simple/config.pbtxt`, `${repo}/simple/config.pbtxt`);
  await Deno.copyFile(`${EXAMPLES}/simple/1/model.onnx`, `${repo}/simple/1/model.onnx`);
  const ports = freePorts(3);
  // Started from a folder of its own (which tells this server's processes apart from any other), with the
  // repository's path relative to it.
  const child = new Deno.Command(`${ROOT}dinfer`, {
    args: ["serve", "--model-repository=models", ...loopbackFlags(ports)],
    cwd: parent,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = child.output();
  try {
    const url = `http://127.0.0.1:${ports[0]}/v2/health/live`;
    let live = 0;
    for (const deadline = Date.now() + 60_000; live !== 200 && Date.now() < deadline;) {
      try {
        const r = await fetch(url);
        await r.body?.cancel();
        live = r.status;
      } catch {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    assert.equal(live, 200);
    const ready = await fetch(`http://127.0.0.1:${ports[0]}/v2/models/simple/ready`);
    await ready.body?.cancel();
    assert.equal(ready.status, 200);
    // The launcher replaced itself with the server: one process holds the server's command line, the one
    // started here.
    assert.deepEqual(processesIn(parent), [child.pid]);
    child.kill("SIGTERM");
    const { code, stderr } = await output;
    assert.equal(code, 0, new TextDecoder().decode(stderr));
    assert.match(new TextDecoder().decode(stderr), /Stopped/);
    assert.deepEqual(processesIn(parent), []);
  } finally {
    for (const pid of new Set([...processesIn(parent), child.pid])) {
      try {
        Deno.kill(pid, "SIGKILL");
      } catch {
        // Gone already.
      }
    }
    await output.catch(() => undefined);
    await Deno.remove(parent, { recursive: true });
  }
});
