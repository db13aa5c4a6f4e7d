/**
 * No shared-memory objects, temporary folders, stub processes or listeners outlive the server: a start-up
 * removes the files of servers that no longer run (crash, kill -9), and every way out of a process removes its
 * own (a stop past --exit-timeout-secs, a failed start).
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { tmpdir } from "node:os";
import { parseCommandLine } from "../../server/cli.ts";
import type { ServerConfig } from "../../server/config.ts";
import { startServer, StartupError } from "../../server/server.ts";
import {
  deadPid,
  EXAMPLES,
  fileLogger,
  FIXTURES,
  freePorts,
  loopbackFlags,
  pythonPath,
  ROOT,
  startServerProcess,
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

/** The Python stubs whose command line contains the given text (it names their socket and model folders). */
function stubsWith(text: string): number[] {
  const out: number[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const cmdline = Deno.readTextFileSync(`/proc/${e.name}/cmdline`);
      if (cmdline.includes("stub.py") && cmdline.includes(text)) out.push(Number(e.name));
    } catch {
      // Exited meanwhile.
    }
  }
  return out;
}

/** Whether something listens on the port of 127.0.0.1. */
function listening(port: number): boolean {
  try {
    Deno.listen({ hostname: "127.0.0.1", port }).close();
    return false;
  } catch {
    return true;
  }
}

Deno.test("a start-up removes the folders of servers that no longer run, and only those", async () => {
  // The server gets a temporary folder of its own: the start-ups of other tests' servers sweep the shared one
  // too. (The same sweep over /dev/shm is tested on folders of its own in tests/unit/cleanup_test.ts.)
  const tmp = await Deno.makeTempDir({ prefix: "cleanup-test-" });
  try {
    const dead = await deadPid();
    await Deno.mkdir(`${tmp}/dinfer-upload-${dead}-abc/m/1`, { recursive: true });
    await Deno.writeTextFile(`${tmp}/dinfer-upload-${dead}-abc/m/1/model.py`, "");
    await Deno.mkdir(`${tmp}/dinfer-py-${dead}-abc`);
    // A running process's folders, and a name that is not the server's, stay.
    await Deno.mkdir(`${tmp}/dinfer-upload-${Deno.pid}-keep`);
    await Deno.mkdir(`${tmp}/dinfer-other-${dead}-keep`);
    const server = await startServerProcess([`--model-repository=${EXAMPLES}`], { env: { TMPDIR: tmp } });
    try {
      // (Libraries the server loads put files of their own there too.)
      const left = [...Deno.readDirSync(tmp)].map((e) => e.name).filter((n) => n.startsWith("dinfer-"))
        .sort();
      assert.deepEqual(left, [`dinfer-other-${dead}-keep`, `dinfer-upload-${Deno.pid}-keep`]);
    } finally {
      server.child.kill("SIGTERM");
      await server.output;
    }
    const stderr = new TextDecoder().decode((await server.output).stderr);
    assert.match(
      stderr,
      /Removed \d+ shared-memory objects and temporary folders of servers no longer running/,
    );
  } finally {
    await Deno.remove(tmp, { recursive: true });
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

for (const [taken, service] of [[0, "HTTP service"], [2, "metrics service"]] as const) {
  Deno.test(`a failed start (the ${service}'s port in use) leaves no stub, stub folder or shared memory`, async () => {
    const ports = freePorts(3);
    const listener = Deno.listen({ hostname: "127.0.0.1", port: ports[taken]! });
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
      assert.match(stderr, new RegExp(`dinfer: Cannot start the ${service} on 127\\.0\\.0\\.1:\\d+: `));
      // The model had loaded: its stub started, and went with the server.
      assert.match(stderr, /Model 'add_sub_py' version 1: READY/);
      assert.deepEqual(filesOf(child.pid), []);
      assert.deepEqual(stubsWith(`dinfer-py-${child.pid}-`), []);
    } finally {
      listener.close();
    }
  });
}

Deno.test("a failed start in process undoes every step: no listener, no stub", async () => {
  // A repository of its own, so that the stub's command line (its model folder) is this test's alone.
  const repository = await Deno.makeTempDir({ prefix: "cleanup-test-" });
  await Deno.mkdir(`${repository}/add_sub_py/1`, { recursive: true });
  for (const file of ["config.pbtxt", "1/model.py"]) {
    await Deno.copyFile(`${PYTHON_MODELS}/add_sub_py/${file}`, `${repository}/add_sub_py/${file}`);
  }
  const [http, grpc, metrics] = freePorts(3) as [number, number, number];
  const taken = Deno.listen({ hostname: "127.0.0.1", port: metrics });
  const lines: string[] = [];
  const logger = fileLogger("");
  logger.info = (m: string) => void lines.push(m);
  try {
    const config = parseCommandLine([
      `--model-repository=${repository}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
      "--allow-gpu-metrics=false",
      ...loopbackFlags([http, grpc, metrics]),
    ]) as ServerConfig;
    await assert.rejects(
      startServer(config, { logger }),
      (err: unknown) =>
        err instanceof StartupError &&
        err.message.startsWith(`Cannot start the metrics service on 127.0.0.1:${metrics}: `),
    );
    assert.ok(lines.includes("Model 'add_sub_py' version 1: READY"), lines.join("\n"));
    assert.ok(lines.includes(`Started HTTPService at 127.0.0.1:${http}`), lines.join("\n"));
    assert.ok(lines.includes(`Started GRPCInferenceService at 127.0.0.1:${grpc}`), lines.join("\n"));
    assert.deepEqual([listening(http), listening(grpc)], [false, false]);
    assert.deepEqual(stubsWith(repository), []);
    assert.equal(lines.at(-1), "Stopped");
  } finally {
    taken.close();
    await Deno.remove(repository, { recursive: true });
  }
});

Deno.test("SIGTERM during a load that hangs at start fails the start, and the stub and files go", async () => {
  const repository = await Deno.makeTempDir({ prefix: "cleanup-test-" });
  await Deno.mkdir(`${repository}/hang_py/1`, { recursive: true });
  await Deno.writeTextFile(
    `${repository}/hang_py/config.pbtxt`,
    'name: "hang_py"\nbackend: "python"\ninput [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n' +
      'output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n',
  );
  await Deno.writeTextFile(
    `${repository}/hang_py/1/model.py`,
    "import time\nclass TritonPythonModel:\n    def initialize(self, args):\n        time.sleep(600)\n",
  );
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "main.ts",
      `--model-repository=${repository}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
      "--exit-timeout-secs=1",
      ...loopbackFlags(freePorts(3)),
    ],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = child.output();
  try {
    const deadline = Date.now() + 20_000;
    while (stubsWith(repository).length === 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(stubsWith(repository).length, 1);
    child.kill("SIGTERM");
    const out = await output;
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 1, stderr);
    assert.match(stderr, /dinfer: Cannot start: the start was aborted\n$/);
    // The stub sees its server gone and exits.
    const gone = Date.now() + 20_000;
    while (stubsWith(repository).length > 0 && Date.now() < gone) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.deepEqual(stubsWith(repository), []);
    assert.deepEqual(filesOf(child.pid), []);
  } finally {
    try {
      child.kill("SIGKILL");
    } catch {
      // Exited.
    }
    await output.catch(() => {});
    await Deno.remove(repository, { recursive: true });
  }
});
