/**
 * A model whose load hangs (initialize() never returns) holds up nothing else: polling goes on for the other
 * models, an unload of it cancels the load (also while the model warms up), a server stopped in the same process stops its stub, SIGTERM exits
 * within --exit-timeout-secs, and the stub does not outlive the server.
 * @module
 */

import assert from "node:assert/strict";
import { FIXTURES, pythonPath, startServerProcess, startTestServer, type TestServer } from "../helpers.ts";
import { writePythonModel } from "./_python.ts";

const HANG_CONFIG = `name: "hang_py"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
`;

const HANG_MODEL = `import os
import time


class TritonPythonModel:
    def initialize(self, args):
        open(os.path.join(args["model_repository"], "initializing"), "w").close()
        time.sleep(600)

    def execute(self, requests):
        return []
`;

/** Copies a fixture model folder under a new name. */
async function copy(from: string, to: string, oldName: string, newName: string): Promise<void> {
  const out = await new Deno.Command("cp", { args: ["-r", from, to] }).output();
  assert.equal(out.code, 0);
  const config = await Deno.readTextFile(`${to}/config.pbtxt`);
  await Deno.writeTextFile(`${to}/config.pbtxt`, config.replace(`name: "${oldName}"`, `name: "${newName}"`));
}

function addHangingModel(repo: string): Promise<void> {
  return writePythonModel(repo, "hang_py", HANG_CONFIG, HANG_MODEL);
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

/** The pids of processes whose command line mentions `text` (the stubs of a repository). */
function processesMentioning(text: string): number[] {
  const pids: number[] = [];
  for (const e of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(e.name)) continue;
    try {
      const cmd = Deno.readTextFileSync(`/proc/${e.name}/cmdline`);
      if (cmd.includes(text) && cmd.includes("stub.py")) pids.push(Number(e.name));
    } catch {
      // Gone.
    }
  }
  return pids;
}

async function until(what: string, check: () => boolean | Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Timed out waiting until ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function status(url: string): Promise<number> {
  const r = await fetch(url);
  await r.body?.cancel();
  return r.status;
}

Deno.test("a hanging load: polling goes on for other models, SIGTERM exits in time, the stub goes too", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-hang-" });
  try {
    await copy(`${FIXTURES}/identity_fp32`, `${repo}/keep`, "identity_fp32", "keep");
    await copy(`${FIXTURES}/identity_int32`, `${repo}/gone`, "identity_int32", "gone");
    const server = await startServerProcess([
      `--model-repository=${repo}`,
      "--model-control-mode=poll",
      "--repository-poll-secs=1",
      "--strict-readiness=false",
      "--exit-timeout-secs=2",
      `--backend-config=python,python-executable=${pythonPath()}`,
    ]);
    try {
      assert.equal(await status(`${server.url}/v2/models/gone/ready`), 200);
      await addHangingModel(repo);
      await until("the stub hangs in initialize()", () => exists(`${repo}/hang_py/initializing`), 20_000);
      // The next polls still see the other models: a removed one is unloaded while hang_py hangs.
      await Deno.remove(`${repo}/gone`, { recursive: true });
      await until(
        "'gone' is unloaded",
        async () => (await status(`${server.url}/v2/models/gone/ready`)) !== 200,
        10_000,
      );
      assert.equal(await status(`${server.url}/v2/models/keep/ready`), 200);

      const stub = processesMentioning(repo);
      const t0 = Date.now();
      server.child.kill("SIGTERM");
      const out = await server.output;
      const took = Date.now() - t0;
      assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
      assert.ok(took < 8_000, `SIGTERM took ${took} ms with --exit-timeout-secs=2`);
      await until(
        "the stub is gone",
        () => stub.every((pid) => !processesMentioning(repo).includes(pid)),
        5_000,
      );
    } finally {
      try {
        server.child.kill("SIGKILL");
      } catch {
        // Exited.
      }
      // A stub left behind would hold the output pipes open.
      for (const pid of processesMentioning(repo)) Deno.kill(pid, "SIGKILL");
      await server.output;
    }
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});

Deno.test("a stub whose server was killed with SIGKILL exits by itself", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-hang-" });
  try {
    await copy(`${FIXTURES}/identity_fp32`, `${repo}/keep`, "identity_fp32", "keep");
    const server = await startServerProcess([
      `--model-repository=${repo}`,
      "--model-control-mode=poll",
      "--repository-poll-secs=1",
      "--strict-readiness=false",
      `--backend-config=python,python-executable=${pythonPath()}`,
    ]);
    try {
      await addHangingModel(repo);
      await until("the stub hangs in initialize()", () => exists(`${repo}/hang_py/initializing`), 20_000);
      server.child.kill("SIGKILL");
      await until("the orphaned stub exits", () => processesMentioning(repo).length === 0, 10_000);
    } finally {
      try {
        server.child.kill("SIGKILL");
      } catch {
        // Exited.
      }
      for (const pid of processesMentioning(repo)) Deno.kill(pid, "SIGKILL");
      await server.output;
    }
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});

/**
 * Starts a load of hang_py in explicit mode and waits until its stub hangs in initialize().
 * @returns the load request's answer, still to come (in an object, so that awaiting the call does not wait
 *   for it)
 */
async function hangingLoad(url: string, repo: string): Promise<{ load: Promise<Response> }> {
  await Deno.remove(`${repo}/hang_py/initializing`).catch(() => {});
  const load = fetch(`${url}/v2/repository/models/hang_py/load`, { method: "POST" });
  await until("the stub hangs in initialize()", () => exists(`${repo}/hang_py/initializing`), 20_000);
  assert.equal(processesMentioning(repo).length, 1);
  return { load };
}

/** Unloads a model whose load is under way: the unload answers 200, the load 400, saying it was cancelled. */
async function unloadCancels(url: string, name: string, load: Promise<Response>): Promise<void> {
  const unload = await fetch(`${url}/v2/repository/models/${name}/unload`, { method: "POST" });
  assert.equal(unload.status, 200, await unload.text());
  const loaded = await load;
  assert.equal(loaded.status, 400);
  assert.deepEqual(await loaded.json(), {
    error:
      `Cannot load '${name}': failed to load '${name}': Cannot load '${name}': the load was cancelled: ` +
      `'${name}' was unloaded while it loaded`,
  });
}

/** A server in explicit mode over a new repository holding hang_py (or what `add` puts there). */
async function explicitServer(
  add: (repo: string) => Promise<void> = addHangingModel,
): Promise<{ repo: string; s: TestServer }> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-hang-" });
  await add(repo);
  const s = await startTestServer([
    `--model-repository=${repo}`,
    "--model-control-mode=explicit",
    "--strict-readiness=false",
    `--backend-config=python,python-executable=${pythonPath()}`,
  ]);
  return { repo, s };
}

Deno.test("unloading a model whose load hangs cancels the load and stops its stub", async () => {
  const { repo, s } = await explicitServer();
  try {
    const { load } = await hangingLoad(s.url, repo);
    await unloadCancels(s.url, "hang_py", load);
    assert.deepEqual(processesMentioning(repo), []);
    // The server goes on: the model loads again (and hangs again) when asked.
    const again = await hangingLoad(s.url, repo);
    await s.close();
    assert.equal((await again.load).status, 400);
  } finally {
    await s.close();
    for (const pid of processesMentioning(repo)) Deno.kill(pid, "SIGKILL");
    await Deno.remove(repo, { recursive: true });
  }
});

Deno.test("a server stopped in its own process cancels a hanging load and stops its stub", async () => {
  const { repo, s } = await explicitServer();
  try {
    const { load } = await hangingLoad(s.url, repo);
    // Without the cancel, the close waits for initialize() (600 s) and the test runs into its limit.
    await s.close();
    assert.deepEqual(processesMentioning(repo), []);
    const loaded = await load;
    assert.equal(loaded.status, 400);
    assert.deepEqual(await loaded.json(), {
      error:
        "Cannot load 'hang_py': failed to load 'hang_py': Cannot load 'hang_py': the load was cancelled: " +
        "the server is shutting down",
    });
  } finally {
    await s.close();
    for (const pid of processesMentioning(repo)) Deno.kill(pid, "SIGKILL");
    await Deno.remove(repo, { recursive: true });
  }
});

/** Adds warm_py: 1000 warmup runs of 50 ms each (50 s), each counted in the file `runs`. */
function addWarmingModel(repo: string): Promise<void> {
  return writePythonModel(
    repo,
    "warm_py",
    HANG_CONFIG.replace('"hang_py"', '"warm_py"') +
      'model_warmup [ { name: "w" count: 1000 inputs { key: "IN" value: { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true } } } ]\n',
    `import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = os.path.join(args["model_repository"], "runs")

    def execute(self, requests):
        with open(self.runs, "a") as f:
            f.write("x")
        time.sleep(0.05)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.zeros(1, np.float32))]) for _ in requests]
`,
  );
}

Deno.test("unloading a model while its warmup runs stops the warmup and cancels the load", async () => {
  const { repo, s } = await explicitServer(addWarmingModel);
  try {
    const load = fetch(`${s.url}/v2/repository/models/warm_py/load`, { method: "POST" });
    await until("the warmup runs", () => exists(`${repo}/warm_py/runs`), 20_000);
    await unloadCancels(s.url, "warm_py", load);
    // The warmup stopped after the run in progress (each takes 50 ms; all of them would take 50 s).
    const runs = (await Deno.readTextFile(`${repo}/warm_py/runs`)).length;
    assert.ok(runs < 1000, `${runs} warmup runs`);
    assert.deepEqual(processesMentioning(repo), []);
  } finally {
    await s.close();
    for (const pid of processesMentioning(repo)) Deno.kill(pid, "SIGKILL");
    await Deno.remove(repo, { recursive: true });
  }
});
