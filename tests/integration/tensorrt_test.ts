/**
 * Plan models served end to end through the MOCK libtrtshim: auto-complete from the engine, inference over
 * HTTP with exact outputs, dynamic shapes and the optimisation profile, concurrent instances, compute
 * capability plan choice and a missing library.
 * @module
 */

import assert from "node:assert/strict";
import { startTestServer } from "../helpers.ts";
import { mockShim } from "../_trtshim.ts";
import { call, get, inferJson, outputsOf } from "./_http.ts";

const shim = await mockShim();
const ignore = shim === undefined;

const ADD_SUB = `trtshim-mock-engine 1
# OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, batch 1..8
input INPUT0 INT32 -1,16
input INPUT1 INT32 -1,16
output OUTPUT0 INT32 -1,16
output OUTPUT1 INT32 -1,16
op add INPUT0 INPUT1 OUTPUT0
op sub INPUT0 INPUT1 OUTPUT1
profile 0 INPUT0 1,16 4,16 8,16
profile 0 INPUT1 1,16 4,16 8,16
`;

const MATMUL = `trtshim-mock-engine 1
# batched C[b] = A[b] x B[b]; A has dynamic rows
input A FP32 -1,-1,3
input B FP32 -1,3,2
output C FP32 -1,-1,2
op matmul A B C
profile 0 A 1,1,3 2,2,3 4,5,3
profile 0 B 1,3,2 2,3,2 4,3,2
`;

const SLOW = `trtshim-mock-engine 1
delay_ms 300
input X FP32 2,2
output Y FP32 2,2
op identity X Y
`;

async function writeModel(repo: string, name: string, config: string, files: Record<string, string>) {
  await Deno.mkdir(`${repo}/${name}/1`, { recursive: true });
  await Deno.writeTextFile(`${repo}/${name}/config.pbtxt`, config);
  for (const [file, text] of Object.entries(files)) {
    await Deno.writeTextFile(`${repo}/${name}/1/${file}`, text);
  }
}

async function tempRepo(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "dinfer_trt_" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

function shimFlag(): string {
  return `--backend-config=tensorrt,shim-path=${shim}`;
}

Deno.test(
  { name: "plan models load, auto-complete from the engine and infer over HTTP", ignore },
  async (t) => {
    await using repo = await tempRepo();
    await writeModel(repo.path, "add_sub", `platform: "tensorrt_plan"`, { "model.plan": ADD_SUB });
    await writeModel(
      repo.path,
      "matmul",
      `backend: "tensorrt"\ninstance_group [ { kind: KIND_GPU, count: 1, gpus: [ 0 ] } ]`,
      { "model.plan": MATMUL },
    );
    await using s = await startTestServer([`--model-repository=${repo.path}`, shimFlag()]);

    await t.step("auto-complete fills I/O, datatypes, dims and the batch size from the profile", async () => {
      const cfg = (await get(s.url, "/v2/models/add_sub/config")).json!;
      assert.equal(cfg.platform, "tensorrt_plan");
      assert.equal(cfg.backend, "tensorrt");
      assert.equal(cfg.max_batch_size, 8);
      assert.deepEqual(
        (cfg.input as { name: string; data_type: string; dims: unknown[] }[]).map((
          i,
        ) => [i.name, i.data_type, i.dims]),
        [["INPUT0", "TYPE_INT32", [16]], ["INPUT1", "TYPE_INT32", [16]]],
      );
      const meta = (await get(s.url, "/v2/models/matmul")).json!;
      assert.equal(meta.platform, "tensorrt_plan");
      assert.deepEqual(meta.inputs, [
        { name: "A", datatype: "FP32", shape: [-1, -1, 3] },
        { name: "B", datatype: "FP32", shape: [-1, 3, 2] },
      ]);
      assert.deepEqual(meta.outputs, [{ name: "C", datatype: "FP32", shape: [-1, -1, 2] }]);
    });

    await t.step("add and sub give exact outputs", async () => {
      const x = Array.from({ length: 32 }, (_, i) => i);
      const y = Array.from({ length: 32 }, (_, i) => 2 * i);
      const r = await inferJson(s.url, "add_sub", {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [2, 16], data: x },
          { name: "INPUT1", datatype: "INT32", shape: [2, 16], data: y },
        ],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const out = outputsOf(r);
      assert.deepEqual(out.map((o) => [o.name, o.datatype, o.shape]), [
        ["OUTPUT0", "INT32", [2, 16]],
        ["OUTPUT1", "INT32", [2, 16]],
      ]);
      assert.deepEqual(out[0]!.data, x.map((v) => 3 * v));
      assert.deepEqual(out[1]!.data, x.map((v, i) => v - y[i]!));
    });

    await t.step("a batched matmul with dynamic rows answers with its actual output shape", async () => {
      const r = await inferJson(s.url, "matmul", {
        inputs: [
          { name: "A", datatype: "FP32", shape: [1, 3, 3], data: [1, 2, 3, 4, 5, 6, 7, 8, 9] },
          { name: "B", datatype: "FP32", shape: [1, 3, 2], data: [1, 0, 0, 1, 1, 1] },
        ],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const [c] = outputsOf(r);
      assert.deepEqual(c!.shape, [1, 3, 2]);
      assert.deepEqual(c!.data, [4, 5, 10, 11, 16, 17]);
    });

    await t.step("a shape outside the optimisation profile is a 400 with the reason", async () => {
      const r = await inferJson(s.url, "matmul", {
        inputs: [
          { name: "A", datatype: "FP32", shape: [1, 6, 3], data: new Array(18).fill(1) },
          { name: "B", datatype: "FP32", shape: [1, 3, 2], data: new Array(6).fill(1) },
        ],
      });
      assert.equal(r.status, 400);
      assert.equal(
        r.json?.error,
        "Cannot run 'matmul': Input 'A' shape [1,6,3] is outside optimisation profile 0: min [1,1,3], max [4,5,3]",
      );
    });
  },
);

Deno.test({ name: "two instances of a plan model run at the same time", ignore }, async () => {
  await using repo = await tempRepo();
  await writeModel(
    repo.path,
    "slow",
    `platform: "tensorrt_plan"\ninstance_group [ { kind: KIND_GPU, count: 2 } ]`,
    { "model.plan": SLOW },
  );
  await using s = await startTestServer([`--model-repository=${repo.path}`, shimFlag()]);
  const request = (v: number) =>
    inferJson(s.url, "slow", {
      inputs: [{ name: "X", datatype: "FP32", shape: [2, 2], data: [v, v, v, v] }],
    });
  await request(0); // both instances exist; warm the path
  const started = performance.now();
  const [a, b] = await Promise.all([request(1), request(2)]);
  const ms = performance.now() - started;
  assert.deepEqual(outputsOf(a)[0]!.data, [1, 1, 1, 1]);
  assert.deepEqual(outputsOf(b)[0]!.data, [2, 2, 2, 2]);
  assert.ok(ms < 550, `two 300 ms executions took ${ms.toFixed(0)} ms: they did not overlap`);
});

Deno.test(
  { name: "cc_model_filenames picks the plan of the device's compute capability", ignore },
  async () => {
    await using repo = await tempRepo();
    const identity =
      "trtshim-mock-engine 1\ncompute_capability 7.5\ninput X INT64 2\noutput Y INT64 2\nop identity X Y\n";
    const add =
      "trtshim-mock-engine 1\ncompute_capability 8.6\ninput X INT64 2\noutput Y INT64 2\nop add X X Y\n";
    await writeModel(
      repo.path,
      "cc",
      `platform: "tensorrt_plan"\ncc_model_filenames { key: "8.6" value: "model_86.plan" }`,
      { "model.plan": identity, "model_86.plan": add },
    );
    const previous = Deno.env.get("TRTSHIM_MOCK_COMPUTE_CAPABILITY");
    Deno.env.set("TRTSHIM_MOCK_COMPUTE_CAPABILITY", "8.6");
    try {
      await using s = await startTestServer([`--model-repository=${repo.path}`, shimFlag()]);
      const r = await inferJson(s.url, "cc", {
        inputs: [{ name: "X", datatype: "INT64", shape: [2], data: [3, 4] }],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(outputsOf(r)[0]!.data, [6, 8]);
    } finally {
      if (previous === undefined) Deno.env.delete("TRTSHIM_MOCK_COMPUTE_CAPABILITY");
      else Deno.env.set("TRTSHIM_MOCK_COMPUTE_CAPABILITY", previous);
    }
  },
);

Deno.test({ name: "an instance group on a GPU the shim does not have is UNAVAILABLE", ignore }, async () => {
  await using repo = await tempRepo();
  await writeModel(
    repo.path,
    "gpu1",
    `platform: "tensorrt_plan"\ninstance_group [ { kind: KIND_GPU, count: 1, gpus: [ 1 ] } ]`,
    { "model.plan": ADD_SUB },
  );
  await using s = await startTestServer([`--model-repository=${repo.path}`, shimFlag()]);
  const index = await call(`${s.url}/v2/repository/index`, { method: "POST", body: "{}" });
  const row = (index.json as unknown as { name: string; state: string; reason: string }[])
    .find((m) => m.name === "gpu1");
  assert.equal(row?.state, "UNAVAILABLE");
  assert.equal(row?.reason, "Cannot load 'gpu1': GPU 1 does not exist (1 device)");
});

Deno.test(
  { name: "without the shim library a plan model is UNAVAILABLE with the reason", ignore },
  async () => {
    await using repo = await tempRepo();
    await writeModel(repo.path, "add_sub", `platform: "tensorrt_plan"`, { "model.plan": ADD_SUB });
    await using s = await startTestServer([
      `--model-repository=${repo.path}`,
      "--backend-config=tensorrt,shim-path=/nonexistent/libtrtshim.so",
    ]);
    const index = await call(`${s.url}/v2/repository/index`, { method: "POST", body: "{}" });
    const rows = index.json as unknown as { name: string; state: string; reason: string }[];
    const row = rows.find((m) => m.name === "add_sub");
    assert.equal(row?.state, "UNAVAILABLE");
    assert.match(
      row!.reason,
      /^Cannot load 'add_sub': Cannot open the TensorRT shim '\/nonexistent\/libtrtshim.so': /,
    );
    assert.match(row!.reason, /set DINFER_TRTSHIM or --backend-config=tensorrt,shim-path=/);
  },
);
