/**
 * The ONNX Runtime backend checks a config's inputs and outputs against the ONNX model's when a model loads, as
 * Triton's onnxruntime backend does: names, datatypes and dims (or the reshape), with and without auto-complete.
 * The models are copies of the fixtures under configs written here.
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { assertRejects } from "../assert.ts";
import { EXAMPLES, FIXTURES, startTestServer } from "../helpers.ts";
import { call, copyDir, inferJson, outputsOf, SIMPLE_REQUEST, SIMPLE_SUM } from "./_http.ts";
import { onnxRuntimeBackend } from "../../server/backends/onnxruntime.ts";
import { ServerError } from "../../server/core/errors.ts";
import { toModelConfig } from "../../server/repository/config.ts";

/** A model of the test repository: a copy of a fixture folder under a config written here. */
interface Case {
  /** The model name. */
  name: string;
  /** The folder to copy: `simple` (INT32 [-1,16] x2 -> x2), `add_sub` (FP32 [4] x2 -> x2, no batching), ... */
  from: string;
  /** The config after its name and platform. */
  config: string;
  /** The load failure with auto-complete on; undefined when the model loads. */
  reason?: string;
  /** The load failure with --disable-auto-complete-config, where it differs. */
  strictReason?: string;
}

const FOLDERS: Record<string, string> = {
  simple: `${EXAMPLES}/simple`,
  add_sub: `${FIXTURES}/add_sub_fp32_nobatch`,
  static: `${FIXTURES}/no_config_static`,
  identity: `${FIXTURES}/identity_fp32`,
  optional: `${FIXTURES}/optional_input`,
};

/** The inputs and outputs of `simple`, with INPUT0's datatype, dims and reshape, and two names, given. */
function simpleIo(
  { in0 = "INT32", dims0 = "[ 16 ]", name1 = "INPUT1", out1 = "OUTPUT1", extra0 = "" } = {},
): string {
  return `max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_${in0} dims: ${dims0} ${extra0} },
  { name: "${name1}" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "${out1}" data_type: TYPE_INT32 dims: [ 16 ] }
]`;
}

/** The inputs and outputs of `add_sub_fp32_nobatch` (FP32 [4], max_batch_size 0), INPUT0 and OUTPUT1 given. */
function addSubIo(input0: string, output1 = `dims: [ 4 ]`): string {
  return `max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 ${input0} },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 ${output1} }
]`;
}

/** The config of `optional_input` (x + bias, bias an initializer of the model) with bias's name and type. */
function optionalIo(bias: string, type = "FP32"): string {
  return `max_batch_size: 8
input [
  { name: "x" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "${bias}" data_type: TYPE_${type} dims: [ 4 ] optional: true }
]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]`;
}

const WORKER = `parameters { key: "instance_thread" value: { string_value: "worker" } }`;

const CASES: Case[] = [
  { name: "good", from: "simple", config: simpleIo() },
  { name: "good_worker", from: "simple", config: `${simpleIo()}\n${WORKER}` },
  {
    name: "wrong_input_name",
    from: "simple",
    config: simpleIo({ name1: "INPUTX" }),
    reason: "Cannot load 'wrong_input_name': config input 'INPUTX' is not an input of the model " +
      "(its inputs: INPUT0, INPUT1)",
  },
  {
    name: "wrong_datatype",
    from: "simple",
    config: simpleIo({ in0: "FP32" }),
    reason:
      "Cannot load 'wrong_datatype': input 'INPUT0' has datatype FP32 in the config but INT32 in the model",
  },
  {
    name: "wrong_datatype_worker",
    from: "simple",
    config: `${simpleIo({ in0: "INT64" })}\n${WORKER}`,
    reason:
      "Cannot load 'wrong_datatype_worker': input 'INPUT0' has datatype INT64 in the config but INT32 in the model",
  },
  {
    name: "wrong_dims",
    from: "simple",
    config: simpleIo({ dims0: "[ 4 ]" }),
    reason: "Cannot load 'wrong_dims': input 'INPUT0' has dims [4] in the config but [16] in the model " +
      "(shape [-1,16] with the batch dimension)",
  },
  {
    name: "wrong_rank",
    from: "simple",
    config: simpleIo({ dims0: "[ 2, 8 ]" }),
    reason: "Cannot load 'wrong_rank': input 'INPUT0' has dims [2,8] in the config but [16] in the model " +
      "(shape [-1,16] with the batch dimension)",
  },
  {
    name: "wrong_output_name",
    from: "simple",
    config: simpleIo({ out1: "OUTPUT9" }),
    reason: "Cannot load 'wrong_output_name': config output 'OUTPUT9' is not an output of the model " +
      "(its outputs: OUTPUT0, OUTPUT1)",
  },
  {
    name: "wrong_output_dims",
    from: "add_sub",
    config: addSubIo("dims: [ 4 ]", "dims: [ 1, 3 ]"),
    reason:
      "Cannot load 'wrong_output_dims': output 'OUTPUT1' has dims [1,3] in the config but [4] in the model",
  },
  {
    name: "fixed_batch_dim",
    from: "static",
    config: `max_batch_size: 2
input [ { name: "a" data_type: TYPE_INT64 dims: [ 2 ] } ]
output [ { name: "b" data_type: TYPE_INT64 dims: [ 2 ] } ]`,
    reason: "Cannot load 'fixed_batch_dim': input 'a' has shape [2,2] in the model, but max_batch_size 2 " +
      "needs a first dimension of -1 (dynamic) for the batch; use max_batch_size 0 for a model that does not batch",
  },
  {
    name: "missing_input",
    from: "simple",
    config: `max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]`,
    // Auto-complete adds INPUT1 from the model; without it the config lacks an input the model needs.
    strictReason:
      "Cannot load 'missing_input': model input 'INPUT1' is not in the config (config inputs: INPUT0)",
  },
  {
    name: "output_subset",
    from: "simple",
    config: `max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]`,
  },
  { name: "dynamic_config_dim", from: "add_sub", config: addSubIo("dims: [ -1 ]") },
  {
    name: "symbolic_model_dim",
    from: "identity",
    config: `max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]`,
  },
  { name: "reshape_ok", from: "add_sub", config: addSubIo("dims: [ 2, 2 ] reshape: { shape: [ 4 ] }") },
  {
    name: "reshape_bad",
    from: "add_sub",
    config: addSubIo("dims: [ 4 ] reshape: { shape: [ 2, 2 ] }"),
    reason: "Cannot load 'reshape_bad': input 'INPUT0' has reshape [2,2] in the config but [4] in the model",
  },
  {
    name: "reshape_batched_ok",
    from: "simple",
    config: simpleIo({ dims0: "[ 4, 4 ]", extra0: "reshape: { shape: [ 16 ] }" }),
  },
  {
    name: "reshape_batched_bad",
    from: "simple",
    config: simpleIo({ dims0: "[ 4, 4 ]", extra0: "reshape: { shape: [ 4, 4 ] }" }),
    reason: "Cannot load 'reshape_batched_bad': input 'INPUT0' has reshape [4,4] in the config but [16] in " +
      "the model (shape [-1,16] with the batch dimension)",
  },
  { name: "optional_initializer", from: "optional", config: optionalIo("bias") },
  {
    name: "optional_not_initializer",
    from: "optional",
    config: optionalIo("biass"),
    reason:
      "Cannot load 'optional_not_initializer': config input 'biass' is not an input of the model (its inputs: x)",
  },
  {
    name: "optional_wrong_datatype",
    from: "optional",
    config: optionalIo("bias", "INT32"),
    reason:
      "Cannot load 'optional_wrong_datatype': input 'bias' has datatype INT32 in the config but FP32 in the model",
  },
];

async function tempRepo(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "dinfer_onnx_check_" });
  for (const c of CASES) {
    const dir = join(path, c.name);
    await copyDir(FOLDERS[c.from]!, dir);
    await Deno.writeTextFile(
      join(dir, "config.pbtxt"),
      `name: "${c.name}"\nplatform: "onnxruntime_onnx"\n${c.config}\n`,
    );
  }
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

/** Each model's load failure by name ("" when it is READY), from the repository index. */
async function reasons(base: string): Promise<Record<string, string>> {
  const r = await call(`${base}/v2/repository/index`, { method: "POST", body: "{}" });
  assert.equal(r.status, 200);
  const index = r.json as unknown as { name: string; state: string; reason?: string }[];
  return Object.fromEntries(index.map((m) => [m.name, m.state === "READY" ? "" : m.reason ?? m.state]));
}

for (const strict of [false, true]) {
  const mode = strict ? "with --disable-auto-complete-config" : "with auto-complete";
  Deno.test(`an ONNX model whose config disagrees with the model fails to load, ${mode}`, async (t) => {
    await using repo = await tempRepo();
    const flags = [`--model-repository=${repo.path}`, "--strict-readiness=false"];
    await using s = await startTestServer(strict ? [...flags, "--disable-auto-complete-config"] : flags);
    const got = await reasons(s.url);

    for (const c of CASES) {
      const want = (strict && c.strictReason !== undefined ? c.strictReason : c.reason) ?? "";
      await t.step(`${c.name}: ${want || "loads"}`, () => {
        assert.equal(got[c.name], want);
      });
    }

    await t.step("the reason answers an inference request of a failed model", async () => {
      const r = await inferJson(s.url, "wrong_datatype", SIMPLE_REQUEST);
      assert.equal(r.status, 404);
      assert.deepEqual(r.json, {
        error: "Request for unknown model: 'wrong_datatype' has no available versions: " +
          CASES.find((c) => c.name === "wrong_datatype")!.reason,
      });
    });

    await t.step("the models that loaded serve", async () => {
      for (const name of ["good", "good_worker"]) {
        const good = await inferJson(s.url, name, SIMPLE_REQUEST);
        assert.equal(good.status, 200);
        assert.deepEqual(outputsOf(good).find((o) => o.name === "OUTPUT0")?.data, SIMPLE_SUM);
      }

      const reshaped = await inferJson(s.url, "reshape_ok", {
        inputs: [
          { name: "INPUT0", datatype: "FP32", shape: [2, 2], data: [1, 2, 3, 4] },
          { name: "INPUT1", datatype: "FP32", shape: [4], data: [1, 1, 1, 1] },
        ],
      });
      assert.equal(reshaped.status, 200);
      assert.deepEqual(outputsOf(reshaped).find((o) => o.name === "OUTPUT0")?.data, [2, 3, 4, 5]);

      const batched = await inferJson(s.url, "reshape_batched_ok", {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 4, 4], data: Array(16).fill(2) },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
        ],
        outputs: [{ name: "OUTPUT0" }],
      });
      assert.equal(batched.status, 200);
      assert.deepEqual(outputsOf(batched)[0]?.data, Array(16).fill(3));

      const optional = await inferJson(s.url, "optional_initializer", {
        inputs: [{ name: "x", datatype: "FP32", shape: [1, 4], data: [10, 10, 10, 10] }],
      });
      assert.equal(optional.status, 200);
      assert.deepEqual(outputsOf(optional)[0]?.data, [11, 12, 13, 14]);
    });
  });
}

Deno.test("the backend refuses an instance of a mismatched config with INVALID_ARG", async () => {
  const dir = join(EXAMPLES, "simple");
  const config = toModelConfig({
    name: "simple",
    platform: "onnxruntime_onnx",
    backend: "onnxruntime",
    max_batch_size: 8,
    input: [
      { name: "INPUT0", data_type: "TYPE_INT32", dims: [16] },
      { name: "INPUT1", data_type: "TYPE_INT32", dims: [8] },
    ],
    output: [{ name: "OUTPUT0", data_type: "TYPE_INT32", dims: [16] }],
  }, "simple");
  await assertRejects(
    () =>
      onnxRuntimeBackend.createInstance(config, {
        modelDir: dir,
        versionDir: join(dir, "1"),
        version: 1,
        modelPath: join(dir, "1", "model.onnx"),
        instanceName: "simple_0",
        kind: "KIND_CPU",
        deviceId: 0,
        backendConfig: {},
      }),
    ServerError,
    {
      code: "INVALID_ARG",
      message: "Cannot load 'simple': input 'INPUT1' has dims [8] in the config but [16] in the model " +
        "(shape [-1,16] with the batch dimension)",
    },
  );
});
