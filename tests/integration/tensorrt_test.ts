/**
 * Plan models served end to end through the MOCK libtrtshim: auto-complete from the engine, inference over
 * HTTP with exact outputs, dynamic shapes and optimisation profiles (one or several per instance), concurrent
 * instances, KIND_GPU instances on every visible GPU, compute capability plan choice, and the reasons a plan
 * model does not load (no library, no GPU, KIND_CPU). Tests that describe the mock's devices
 * (TRTSHIM_MOCK_*) run dinfer as a process with its own environment.
 * @module
 */

import assert from "node:assert/strict";
import { startTestServer } from "../helpers.ts";
import { mockShim, startShimServer } from "../_trtshim.ts";
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

/** The repository index rows of a server, by model name. */
async function indexRows(url: string): Promise<Map<string, { state: string; reason: string }>> {
  const index = await call(`${url}/v2/repository/index`, { method: "POST", body: "{}" });
  const rows = index.json as unknown as { name: string; state: string; reason: string }[];
  return new Map(rows.map((r) => [r.name, { state: r.state, reason: r.reason }]));
}

Deno.test(
  {
    name:
      "cc_model_filenames picks the plan of the device's compute capability; model.plan is needed only as the fallback",
    ignore,
  },
  async () => {
    await using repo = await tempRepo();
    const plan = (cc: string, op: string) =>
      `trtshim-mock-engine 1\ncompute_capability ${cc}\ninput X INT64 2\noutput Y INT64 2\n${op}\n`;
    const identity86 = plan("8.6", "op identity X Y");
    const add86 = plan("8.6", "op add X X Y");
    const add75 = plan("7.5", "op add X X Y");
    // Only the plan for 8.6, no model.plan.
    await writeModel(
      repo.path,
      "cc_only",
      `platform: "tensorrt_plan"\ncc_model_filenames { key: "8.6" value: "model_sm86.plan" }`,
      { "model_sm86.plan": add86 },
    );
    // A plan for 7.5 only: the 8.6 device falls back to model.plan.
    await writeModel(
      repo.path,
      "cc_fallback",
      `platform: "tensorrt_plan"\ncc_model_filenames { key: "7.5" value: "model_sm75.plan" }`,
      { "model_sm75.plan": add75, "model.plan": identity86 },
    );
    // A plan for 7.5 only and no fallback.
    await writeModel(
      repo.path,
      "cc_missing",
      `platform: "tensorrt_plan"\ncc_model_filenames [ { key: "7.5" value: "model_sm75.plan" }, { key: "9.0" value: "model_sm90.plan" } ]`,
      { "model_sm75.plan": add75 },
    );
    await using s = await startShimServer([`--model-repository=${repo.path}`, shimFlag()], {
      TRTSHIM_MOCK_COMPUTE_CAPABILITY: "8.6",
    });
    const x = { inputs: [{ name: "X", datatype: "INT64", shape: [2], data: [3, 4] }] };
    const only = await inferJson(s.url, "cc_only", x);
    assert.equal(only.status, 200, JSON.stringify(only.json));
    assert.deepEqual(outputsOf(only)[0]!.data, [6, 8]);
    const fallback = await inferJson(s.url, "cc_fallback", x);
    assert.equal(fallback.status, 200, JSON.stringify(fallback.json));
    assert.deepEqual(outputsOf(fallback)[0]!.data, [3, 4]);
    assert.deepEqual((await indexRows(s.url)).get("cc_missing"), {
      state: "UNAVAILABLE",
      reason:
        `Cannot load 'cc_missing': GPU 0 has compute capability 8.6, which cc_model_filenames does not name (it names 7.5, 9.0), and the default plan '${repo.path}/cc_missing/1/model.plan' does not exist`,
    });
  },
);

Deno.test(
  { name: "a plan model without instance_group gets one KIND_GPU instance on each visible GPU", ignore },
  async () => {
    await using repo = await tempRepo();
    await writeModel(repo.path, "slow", `platform: "tensorrt_plan"`, { "model.plan": SLOW });
    await using s = await startShimServer(
      [`--model-repository=${repo.path}`, shimFlag(), "--metrics-interval-ms=50"],
      { TRTSHIM_MOCK_DEVICE_COUNT: "2" },
    );
    const cfg = (await get(s.url, "/v2/models/slow/config")).json!;
    const groups = cfg.instance_group as { name: string; kind: string; count: number; gpus: number[] }[];
    assert.deepEqual(groups.map(({ name, kind, count, gpus }) => ({ name, kind, count, gpus })), [
      { name: "slow", kind: "KIND_GPU", count: 1, gpus: [0, 1] },
    ]);
    const request = (v: number) =>
      inferJson(s.url, "slow", {
        inputs: [{ name: "X", datatype: "FP32", shape: [2, 2], data: [v, v, v, v] }],
      });
    const started = performance.now();
    const [a, b] = await Promise.all([request(1), request(2)]);
    const ms = performance.now() - started;
    assert.deepEqual(outputsOf(a)[0]!.data, [1, 1, 1, 1]);
    assert.deepEqual(outputsOf(b)[0]!.data, [2, 2, 2, 2]);
    assert.ok(ms < 550, `two 300 ms executions took ${ms.toFixed(0)} ms: they did not run on two instances`);
    // Each instance staged X and Y (16 bytes each, 256-byte buffers) in its own GPU's memory.
    await new Promise((r) => setTimeout(r, 200));
    const metrics = await (await fetch(s.metricsUrl)).text();
    const used = metrics.split("\n").filter((l) => l.startsWith("nv_gpu_memory_used_bytes{"));
    assert.deepEqual(used.map((l) => l.split(" ").at(-1)), ["512", "512"], metrics);
  },
);

Deno.test(
  { name: "a KIND_CPU instance group on a plan model is refused with the reason", ignore },
  async () => {
    await using repo = await tempRepo();
    await writeModel(
      repo.path,
      "cpu",
      `platform: "tensorrt_plan"
input [ { name: "X", data_type: TYPE_FP32, dims: [ 2, 2 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 2, 2 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]`,
      { "model.plan": SLOW },
    );
    const expected = {
      state: "UNAVAILABLE",
      reason:
        "Cannot load 'cpu': instance group 'cpu_0' has kind KIND_CPU: TensorRT plans run only on GPUs (use KIND_GPU, or leave instance_group out)",
    };
    for (const flags of [[], ["--disable-auto-complete-config"]]) {
      await using s = await startTestServer([`--model-repository=${repo.path}`, shimFlag(), ...flags]);
      assert.deepEqual((await indexRows(s.url)).get("cpu"), expected, flags.join(" "));
    }
  },
);

Deno.test({ name: "without a GPU a plan model is UNAVAILABLE with the reason", ignore }, async () => {
  await using repo = await tempRepo();
  await writeModel(repo.path, "add_sub", `platform: "tensorrt_plan"`, { "model.plan": ADD_SUB });
  await using s = await startShimServer([`--model-repository=${repo.path}`, shimFlag()], {
    TRTSHIM_MOCK_DEVICE_COUNT: "0",
  });
  assert.deepEqual((await indexRows(s.url)).get("add_sub"), {
    state: "UNAVAILABLE",
    reason: `Cannot load 'add_sub': no GPU found ('${shim}' is a mock build)`,
  });
});

const TWO_PROFILES = `trtshim-mock-engine 1
# Y = X; rows 1..4 in profile 0, 5..8 in profile 1
input X INT32 -1,2
output Y INT32 -1,2
op identity X Y
profile 0 X 1,2 2,2 4,2
profile 1 X 5,2 6,2 8,2
`;

Deno.test(
  { name: "instances use the optimisation profiles their instance group names", ignore },
  async (t) => {
    await using repo = await tempRepo();
    const config = (profile: string) =>
      `platform: "tensorrt_plan"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_INT32, dims: [ -1, 2 ] } ]
output [ { name: "Y", data_type: TYPE_INT32, dims: [ -1, 2 ] } ]
instance_group [ { kind: KIND_GPU, count: 1${profile} } ]`;
    await writeModel(repo.path, "both", config(`, profile: [ "0", "1" ]`), { "model.plan": TWO_PROFILES });
    await writeModel(repo.path, "first", config(""), { "model.plan": TWO_PROFILES });
    await writeModel(repo.path, "second", config(`, profile: [ "1" ]`), { "model.plan": TWO_PROFILES });
    await writeModel(repo.path, "third", config(`, profile: [ "2" ]`), { "model.plan": TWO_PROFILES });
    await using s = await startTestServer([`--model-repository=${repo.path}`, shimFlag()]);
    const rows = (n: number) => ({
      inputs: [{
        name: "X",
        datatype: "INT32",
        shape: [n, 2],
        data: Array.from({ length: 2 * n }, (_, i) => i),
      }],
    });
    const answer = async (model: string, n: number) => {
      const r = await inferJson(s.url, model, rows(n));
      return r.status === 200 ? outputsOf(r)[0]!.shape : [r.status, r.json?.error];
    };

    await t.step("with profiles 0 and 1, shapes of either run", async () => {
      assert.deepEqual(await answer("both", 2), [2, 2]);
      assert.deepEqual(await answer("both", 6), [6, 2]);
      assert.deepEqual(await answer("both", 4), [4, 2]);
      assert.deepEqual(await answer("both", 9), [
        400,
        "Cannot run 'both': the input shapes fit none of the instance's optimisation profiles 0, 1: Input 'X' shape [9,2] is outside optimisation profile 0: min [1,2], max [4,2]; Input 'X' shape [9,2] is outside optimisation profile 1: min [5,2], max [8,2]",
      ]);
    });

    await t.step("without a profile list an instance uses profile 0", async () => {
      assert.deepEqual(await answer("first", 3), [3, 2]);
      assert.deepEqual(await answer("first", 6), [
        400,
        "Cannot run 'first': Input 'X' shape [6,2] is outside optimisation profile 0: min [1,2], max [4,2]",
      ]);
    });

    await t.step("profile 1 alone runs only its shapes", async () => {
      assert.deepEqual(await answer("second", 8), [8, 2]);
      assert.deepEqual(await answer("second", 2), [
        400,
        "Cannot run 'second': Input 'X' shape [2,2] is outside optimisation profile 1: min [5,2], max [8,2]",
      ]);
    });

    await t.step("a profile the plan lacks fails the load", async () => {
      assert.deepEqual((await indexRows(s.url)).get("third"), {
        state: "UNAVAILABLE",
        reason:
          "Cannot load 'third': instance group 'third_0' names optimisation profile '2': the plan has profiles 0 to 1",
      });
    });
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
  assert.deepEqual((await indexRows(s.url)).get("gpu1"), {
    state: "UNAVAILABLE",
    reason: "Cannot load 'gpu1': GPU 1 does not exist (1 device)",
  });
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
