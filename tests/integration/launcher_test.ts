/**
 * The `./dinfer` launcher as a supervisor uses it: the process it starts is the server itself, so a signal sent
 * to that process stops the server and leaves nothing running.
 * @module
 */

import assert from "node:assert/strict";
import { freePorts, loopbackFlags, ROOT } from "../helpers.ts";

/** The processes whose command line holds `text`. */
function processesWith(text: string): number[] {
  const found: number[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^[0-9]+$/.test(entry.name)) continue;
    try {
      const cmdline = Deno.readTextFileSync(`/proc/${entry.name}/cmdline`).replaceAll("\0", " ");
      if (cmdline.includes(text)) found.push(Number(entry.name));
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

Deno.test("SIGTERM to the process ./dinfer started stops the server gracefully and leaves no process behind", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-launcher-" });
  const ports = freePorts(3);
  // The repository folder's name is unique: it tells this server's processes apart from any other.
  const child = new Deno.Command(`${ROOT}dinfer`, {
    args: ["serve", `--model-repository=${repo}`, ...loopbackFlags(ports)],
    cwd: ROOT,
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
    // The launcher replaced itself with the server: one process holds the server's command line, the one
    // started here.
    assert.deepEqual(processesWith(repo), [child.pid]);
    child.kill("SIGTERM");
    const { code, stderr } = await output;
    assert.equal(code, 0, new TextDecoder().decode(stderr));
    assert.match(new TextDecoder().decode(stderr), /Stopped/);
    assert.deepEqual(processesWith(repo), []);
  } finally {
    for (const pid of processesWith(repo)) Deno.kill(pid, "SIGKILL");
    await output.catch(() => undefined);
    await Deno.remove(repo, { recursive: true });
  }
});
