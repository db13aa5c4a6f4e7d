/**
 * Passive instance groups (`passive: true`), as Triton: their instances load and warm up but the scheduler sends
 * them no requests; a model whose every group is passive is refused, since nothing would serve it.
 * @module
 */

import assert from "node:assert/strict";
import { pythonPath, startTestServer } from "../helpers.ts";
import { call, inferJson, outputsOf } from "./_http.ts";
import { writePythonModel } from "./_python.ts";

/** Answers the name of the instance that ran the request; counts its warmup runs in a file. */
const MODEL = `import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.warmups = os.path.join(args["model_repository"], "warmup-" + self.name)

    def execute(self, requests):
        out = []
        time.sleep(0.05)
        for r in requests:
            if pb_utils.get_input_tensor_by_name(r, "x").as_numpy()[0] == 0:
                with open(self.warmups, "a") as f:
                    f.write("x")
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("who", np.array([self.name.encode()], dtype=np.object_))]))
        return out
`;

function config(groups: string): string {
  return `name: "who_py"
backend: "python"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "who" data_type: TYPE_STRING dims: [ 1 ] } ]
instance_group [ ${groups} ]
model_warmup [ { name: "w" batch_size: 1 inputs { key: "x" value: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]
`;
}

async function repository(groups: string): Promise<string> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-passive-" });
  await writePythonModel(repo, "who_py", config(groups), MODEL);
  return repo;
}

Deno.test("a passive group's instances load and warm up but serve no request", async () => {
  const repo = await repository(
    '{ name: "idle" count: 2 kind: KIND_CPU passive: true }, { name: "busy" count: 1 kind: KIND_CPU }',
  );
  try {
    await using s = await startTestServer([
      `--model-repository=${repo}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
    ]);
    // Eight at once, each taking 50 ms: a pool of three serving instances would spread them.
    const who = new Set<unknown>();
    await Promise.all(Array.from({ length: 8 }, async () => {
      const a = await inferJson(s.url, "who_py", {
        inputs: [{ name: "x", datatype: "INT32", shape: [1], data: [1] }],
      });
      assert.equal(a.status, 200, JSON.stringify(a.json));
      who.add(outputsOf(a)[0]!.data![0]);
    }));
    assert.deepEqual([...who], ["busy_0"]);
    const warmed = [...Deno.readDirSync(`${repo}/who_py`)].map((e) => e.name).filter((n) =>
      n.startsWith("warmup-")
    );
    assert.deepEqual(warmed.sort(), ["warmup-busy_0", "warmup-idle_0", "warmup-idle_1"]);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});

Deno.test("a model whose every instance group is passive is refused at load", async () => {
  const repo = await repository('{ name: "idle" count: 1 kind: KIND_CPU passive: true }');
  try {
    await using s = await startTestServer([
      `--model-repository=${repo}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
      "--strict-readiness=false",
    ]);
    const index = await call(`${s.url}/v2/repository/index`, { method: "POST" });
    assert.deepEqual(index.json, [{
      name: "who_py",
      version: "1",
      state: "UNAVAILABLE",
      reason: "Cannot load 'who_py': every instance group is passive, so no instance would serve",
    }]);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
