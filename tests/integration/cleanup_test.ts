/**
 * No shared-memory objects or temporary folders outlive the server: a start-up removes those of servers that no
 * longer run (crash, kill -9), and every way out of a process removes its own (a stop past --exit-timeout-secs,
 * a failed start).
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { tmpdir } from "node:os";
import {
  EXAMPLES,
  FIXTURES,
  freePorts,
  loopbackFlags,
  pythonPath,
  ROOT,
  startServerProcess,
  startTestServer,
} from "../helpers.ts";

const PYTHON_MODELS = new URL("../fixtures/python_models", import.meta.url).pathname;

/** The server files (shared memory, temporary folders) named with a process id. */
function filesOf(pid: number): string[] {
  const out: string[] = [];
  for (
    const [dir, re] of [["/dev/shm", /^dinfer-(py|resp|bls|blsr)-(\d+)-/], [
      tmpdir(),
      /^dinfer-(upload|py)-(\d+)-/,
    ]] as const
  ) {
    for (const e of Deno.readDirSync(dir)) {
      const m = re.exec(e.name);
      if (m && Number(m[2]) === pid) out.push(`${dir}/${e.name}`);
    }
  }
  return out.sort();
}

/** A process id that is not running (a process that has exited). */
async function deadPid(): Promise<number> {
  const child = new Deno.Command("true").spawn();
  await child.status;
  return child.pid;
}

Deno.test("a start-up removes the objects and folders of servers that no longer run, and only those", async () => {
  const dead = await deadPid();
  const mine = [`/dev/shm/dinfer-py-${Deno.pid}-keep`, `${tmpdir()}/dinfer-upload-${Deno.pid}-keep`];
  await Deno.writeFile(`/dev/shm/dinfer-py-${dead}-abc`, new Uint8Array(8));
  await Deno.writeFile(`/dev/shm/dinfer-resp-${dead}-1-2`, new Uint8Array(8));
  await Deno.mkdir(`${tmpdir()}/dinfer-upload-${dead}-abc/m/1`, { recursive: true });
  await Deno.writeTextFile(`${tmpdir()}/dinfer-upload-${dead}-abc/m/1/model.py`, "");
  await Deno.mkdir(`${tmpdir()}/dinfer-py-${dead}-abc`);
  await Deno.writeFile(mine[0]!, new Uint8Array(8));
  await Deno.mkdir(mine[1]!);
  try {
    assert.equal(filesOf(dead).length, 4);
    await using _s = await startTestServer([`--model-repository=${EXAMPLES}`]);
    assert.deepEqual(filesOf(dead), []);
    // A running process's files stay.
    for (const path of mine) Deno.statSync(path);
  } finally {
    for (const path of [...mine, ...filesOf(dead)]) {
      await Deno.remove(path, { recursive: true }).catch(() => {});
    }
  }
});

Deno.test("a server stopped past --exit-timeout-secs leaves no upload folder, stub folder or shared memory", async () => {
  const server = await startServerProcess([
    `--model-repository=${FIXTURES}`,
    "--model-control-mode=explicit",
    "--exit-timeout-secs=1",
    `--backend-config=python,python-executable=${pythonPath()}`,
  ]);
  const pid = server.child.pid;
  try {
    // An uploaded Python model that never finishes loading: its upload folder, stub folder and shared memory
    // stay in use when the server stops.
    const config = JSON.stringify({
      name: "hang_py",
      backend: "python",
      input: [{ name: "IN", data_type: "TYPE_FP32", dims: [1] }],
      output: [{ name: "OUT", data_type: "TYPE_FP32", dims: [1] }],
    });
    const model =
      "import time\nclass TritonPythonModel:\n    def initialize(self, args):\n        time.sleep(600)\n";
    const load = fetch(`${server.url}/v2/repository/models/hang_py/load`, {
      method: "POST",
      body: JSON.stringify({
        parameters: { config, "file:1/model.py": Buffer.from(model).toString("base64") },
      }),
    }).then((r) => r.body?.cancel()).catch(() => {});
    const deadline = Date.now() + 20_000;
    while (filesOf(pid).length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    assert.deepEqual(
      filesOf(pid).map((f) => f.replace(/^(.*dinfer-[a-z]+-\d+)-.*$/, "$1")),
      [
        `/dev/shm/dinfer-py-${pid}`,
        `${tmpdir()}/dinfer-py-${pid}`,
        `${tmpdir()}/dinfer-upload-${pid}`,
      ].sort(),
    );
    server.child.kill("SIGTERM");
    await server.child.status;
    await load;
    assert.deepEqual(filesOf(pid), []);
  } finally {
    try {
      server.child.kill("SIGKILL");
    } catch {
      // Exited.
    }
    await server.output.catch(() => {});
    for (const path of filesOf(pid)) await Deno.remove(path, { recursive: true }).catch(() => {});
  }
});

Deno.test("a failed start (port in use) leaves no stub folder or shared memory", async () => {
  const ports = freePorts(3);
  const taken = Deno.listen({ hostname: "127.0.0.1", port: ports[0]! });
  try {
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "main.ts",
        `--model-repository=${PYTHON_MODELS}`,
        "--model-control-mode=explicit",
        "--load-model=add_sub_py",
        `--backend-config=python,python-executable=${pythonPath()}`,
        ...loopbackFlags(ports),
      ],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const out = await child.output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    assert.match(stderr, /dinfer: Cannot start the HTTP service on 127\.0\.0\.1:\d+: /);
    assert.deepEqual(filesOf(child.pid), []);
  } finally {
    taken.close();
  }
});
