/**
 * A Python model's coroutines run on one event loop of their own, as in Triton's stub: a task that an async
 * `initialize` starts keeps running between calls, and `sys.exit()` in an async `execute` ends the stub (which
 * is started again) rather than hanging it.
 * @module
 */

import assert from "node:assert/strict";
import { pythonPath, startTestServer } from "../helpers.ts";
import { inferJson, outputsOf } from "./_http.ts";
import { writePythonModel } from "./_python.ts";

const MODEL = `import asyncio
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def initialize(self, args):
        self.ticks = 0
        self.task = asyncio.create_task(self.tick())

    async def tick(self):
        while True:
            await asyncio.sleep(0.005)
            self.ticks += 1

    async def exit(self, code):
        sys.exit(code)

    async def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "x").as_numpy()[0]
            if x == 3:
                sys.exit(3)
            if x == 4:
                await asyncio.gather(self.exit(4))
            await asyncio.sleep(0)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("ticks", np.array([self.ticks], np.int64))]))
        return out
`;

const CONFIG = `name: "tick_py"
backend: "python"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "ticks" data_type: TYPE_INT64 dims: [ 1 ] } ]
`;

Deno.test("a model's coroutines share one loop that keeps running; sys.exit in an async execute ends the stub", async (t) => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-async-" });
  try {
    await writePythonModel(repo, "tick_py", CONFIG, MODEL);
    await using s = await startTestServer([
      `--model-repository=${repo}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
    ]);
    const infer = (x: number) =>
      inferJson(s.url, "tick_py", { inputs: [{ name: "x", datatype: "INT32", shape: [1], data: [x] }] });
    const ticks = async () => {
      const a = await infer(1);
      assert.equal(a.status, 200, JSON.stringify(a.json));
      return Number(outputsOf(a)[0]!.data![0]);
    };
    await t.step("the task initialize started ticks between calls (every 5 ms)", async () => {
      const first = await ticks();
      await new Promise((r) => setTimeout(r, 500));
      const second = await ticks();
      // About 100 ticks in 500 ms; a loop that ran only during calls would have ticked once or twice.
      assert.ok(second - first >= 15, `${first} then ${second}`);
    });
    await t.step("sys.exit(3) in the coroutine fails its call; the stub starts again", async () => {
      const exited = await infer(3);
      assert.equal(exited.status, 500);
      assert.match(String(exited.json?.error), /the Python stub exited with code 3/);
      assert.ok((await ticks()) >= 0);
    });
    await t.step("sys.exit(4) in a task the coroutine awaits ends the stub too", async () => {
      const exited = await infer(4);
      assert.equal(exited.status, 500);
      assert.match(String(exited.json?.error), /the Python stub exited with code 4/);
      assert.ok((await ticks()) >= 0);
    });
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
