/**
 * The metadata, health and readiness endpoints of the HTTP frontend, against a real server.
 * @module
 */

import assert from "node:assert/strict";
import { EXTENSIONS, VERSION } from "../../server/server.ts";
import { EXAMPLES, FIXTURES, startTestServer } from "../helpers.ts";
import { call, get, inferJson } from "./_http.ts";

const SIMPLE_CONFIG = {
  name: "simple",
  platform: "onnxruntime_onnx",
  backend: "onnxruntime",
  runtime: "",
  version_policy: { latest: { num_versions: 1 } },
  max_batch_size: 8,
  input: ["INPUT0", "INPUT1"].map((name) => ({
    name,
    data_type: "TYPE_INT32",
    format: "FORMAT_NONE",
    dims: [16],
    is_shape_tensor: false,
    allow_ragged_batch: false,
    optional: false,
    is_non_linear_format_io: false,
  })),
  output: ["OUTPUT0", "OUTPUT1"].map((name) => ({
    name,
    data_type: "TYPE_INT32",
    dims: [16],
    label_filename: "",
    is_shape_tensor: false,
    is_non_linear_format_io: false,
  })),
  batch_input: [],
  batch_output: [],
  // Filled as Triton fills it.
  optimization: {
    priority: "PRIORITY_DEFAULT",
    input_pinned_memory: { enable: true },
    output_pinned_memory: { enable: true },
    gather_kernel_buffer_threshold: 0,
    eager_batching: false,
  },
  instance_group: [{
    name: "simple",
    kind: "KIND_CPU",
    count: 2,
    gpus: [],
    secondary_devices: [],
    profile: [],
    passive: false,
    host_policy: "",
  }],
  default_model_filename: "model.onnx",
  cc_model_filenames: {},
  metric_tags: {},
  parameters: { intra_op_thread_count: { string_value: "1" } },
  model_warmup: [],
  dynamic_batching: {
    preferred_batch_size: [],
    max_queue_delay_microseconds: 0,
    preserve_ordering: false,
    priority_levels: 0,
    default_priority_level: 0,
    priority_queue_policy: {},
  },
};

const SIMPLE_METADATA = {
  name: "simple",
  versions: ["1"],
  platform: "onnxruntime_onnx",
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [-1, 16] },
    { name: "INPUT1", datatype: "INT32", shape: [-1, 16] },
  ],
  outputs: [
    { name: "OUTPUT0", datatype: "INT32", shape: [-1, 16] },
    { name: "OUTPUT1", datatype: "INT32", shape: [-1, 16] },
  ],
};

Deno.test("server, health and model endpoints answer for the example repository", async (t) => {
  await using s = await startTestServer([`--model-repository=${EXAMPLES}`]);

  await t.step("GET /v2 names the server, its version and extensions", async () => {
    const r = await get(s.url, "/v2");
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "application/json");
    assert.deepEqual(r.json, { name: "dinfer", version: VERSION, extensions: EXTENSIONS });
    // Triton 2.51's list, in its order.
    assert.deepEqual(EXTENSIONS, [
      "classification",
      "sequence",
      "model_repository",
      "model_repository(unload_dependents)",
      "schedule_policy",
      "model_configuration",
      "system_shared_memory",
      "cuda_shared_memory",
      "binary_tensor_data",
      "parameters",
      "statistics",
      "trace",
      "logging",
    ]);
  });

  await t.step("live and ready answer 200 with an empty body when every model loaded", async () => {
    for (const path of ["/v2/health/live", "/v2/health/ready"]) {
      const r = await get(s.url, path);
      assert.equal(r.status, 200, path);
      assert.equal(r.bytes.byteLength, 0, path);
    }
  });

  await t.step("model metadata lists versions, platform and shapes with -1 for the batch dim", async () => {
    for (const path of ["/v2/models/simple", "/v2/models/simple/versions/1"]) {
      const r = await get(s.url, path);
      assert.equal(r.status, 200, path);
      assert.deepEqual(r.json, SIMPLE_METADATA, path);
    }
    const digits = await get(s.url, "/v2/models/digits");
    assert.deepEqual(digits.json, {
      name: "digits",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [{ name: "input", datatype: "FP32", shape: [-1, 64] }],
      outputs: [{ name: "probabilities", datatype: "FP32", shape: [-1, 10] }],
    });
    const strings = await get(s.url, "/v2/models/simple_string");
    assert.deepEqual(
      (strings.json?.inputs as { datatype: string }[]).map((i) => i.datatype),
      ["BYTES", "BYTES"],
    );
  });

  await t.step("model ready answers 200 for a loaded model and version", async () => {
    for (const path of ["/v2/models/simple/ready", "/v2/models/simple/versions/1/ready"]) {
      const r = await get(s.url, path);
      assert.equal(r.status, 200, path);
      assert.equal(r.bytes.byteLength, 0);
    }
  });

  await t.step("model ready answers 400 for an unknown model or version", async () => {
    for (const path of ["/v2/models/nope/ready", "/v2/models/simple/versions/7/ready"]) {
      const r = await get(s.url, path);
      assert.equal(r.status, 400, path);
      assert.equal(r.bytes.byteLength, 0);
    }
  });

  await t.step("model config of simple holds every field of the normalized config", async () => {
    for (const path of ["/v2/models/simple/config", "/v2/models/simple/versions/1/config"]) {
      const r = await get(s.url, path);
      assert.equal(r.status, 200, path);
      assert.deepEqual(r.json, SIMPLE_CONFIG, path);
    }
  });

  await t.step("digits' config keeps its label file", async () => {
    const r = await get(s.url, "/v2/models/digits/config");
    const output = (r.json?.output as { label_filename: string }[])[0]!;
    assert.equal(output.label_filename, "labels.txt");
  });

  await t.step("an unknown model is 404 with Triton's message", async () => {
    for (const path of ["/v2/models/nope", "/v2/models/nope/config"]) {
      const r = await get(s.url, path);
      assert.equal(r.status, 404, path);
      assert.equal(r.headers.get("content-type"), "application/json");
      assert.deepEqual(r.json, { error: "Request for unknown model: 'nope' is not found" });
    }
  });

  await t.step("an unknown version is 404 with Triton's message", async () => {
    for (const path of ["/v2/models/simple/versions/2", "/v2/models/simple/versions/2/config"]) {
      const r = await get(s.url, path);
      assert.equal(r.status, 404, path);
      assert.deepEqual(r.json, { error: "Request for unknown model: 'simple' version 2 is not found" });
    }
    // As Triton's routes: a version in the path that is not digits matches no route (404), whatever follows.
    for (const action of ["", "/ready", "/config", "/stats", "/infer"]) {
      const path = `/v2/models/simple/versions/latest${action}`;
      const word = await call(`${s.url}${path}`, {
        method: action === "/infer" ? "POST" : "GET",
        body: action === "/infer" ? "{}" : undefined,
      });
      assert.deepEqual([word.status, word.json], [404, { error: `Not found: '${path}'` }], path);
    }
  });
});

Deno.test("strict readiness: a model that failed to load makes the server not ready", async (t) => {
  await using s = await startTestServer([`--model-repository=${FIXTURES}`]);

  await t.step("live is 200 and ready is 400", async () => {
    assert.equal((await get(s.url, "/v2/health/live")).status, 200);
    const ready = await get(s.url, "/v2/health/ready");
    assert.equal(ready.status, 400);
    assert.equal(ready.bytes.byteLength, 0);
  });

  await t.step("the failed model is 404 with its load error, and not ready", async () => {
    const path = `${FIXTURES}/bad_model/1/model.onnx`;
    const error = `Request for unknown model: 'bad_model' has no available versions: ` +
      `Cannot load ONNX model '${path}': Load model from ${path} failed:Protobuf parsing failed.`;
    for (const p of ["/v2/models/bad_model", "/v2/models/bad_model/config"]) {
      const r = await get(s.url, p);
      assert.equal(r.status, 404, p);
      assert.deepEqual(r.json, { error }, p);
    }
    const infer = await inferJson(s.url, "bad_model", {
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [4], data: [1, 2, 3, 4] }],
    });
    assert.equal(infer.status, 404);
    assert.deepEqual(infer.json, { error });
    assert.equal((await get(s.url, "/v2/models/bad_model/ready")).status, 400);
    assert.equal((await get(s.url, "/v2/models/bad_model/versions/1/ready")).status, 400);
  });

  await t.step("the other models are ready and serve metadata", async () => {
    assert.equal((await get(s.url, "/v2/models/identity_fp32/ready")).status, 200);
    const r = await get(s.url, "/v2/models/add_sub_fp32_nobatch");
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, {
      name: "add_sub_fp32_nobatch",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [4] },
        { name: "INPUT1", datatype: "FP32", shape: [4] },
      ],
      outputs: [
        { name: "OUTPUT0", datatype: "FP32", shape: [4] },
        { name: "OUTPUT1", datatype: "FP32", shape: [4] },
      ],
    });
  });

  await t.step("auto-completed models report the shapes read from the ONNX file", async () => {
    const dynamic = await get(s.url, "/v2/models/no_config_dynamic");
    assert.deepEqual(dynamic.json, {
      name: "no_config_dynamic",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [{ name: "x", datatype: "FP32", shape: [-1, 3] }],
      outputs: [{ name: "y", datatype: "FP32", shape: [-1, 3] }],
    });
    const config = await get(s.url, "/v2/models/no_config_dynamic/config");
    assert.equal(config.json?.max_batch_size, 4);
    assert.ok(config.json?.dynamic_batching, "dynamic batching is turned on");
    const fixed = await get(s.url, "/v2/models/no_config_static");
    assert.deepEqual(fixed.json, {
      name: "no_config_static",
      versions: ["1"],
      platform: "onnxruntime_onnx",
      inputs: [{ name: "a", datatype: "INT64", shape: [2, 2] }],
      outputs: [{ name: "b", datatype: "INT64", shape: [2, 2] }],
    });
    const fixedConfig = await get(s.url, "/v2/models/no_config_static/config");
    assert.equal(fixedConfig.json?.max_batch_size, 0);
    assert.equal(fixedConfig.json?.dynamic_batching, undefined);
  });
});

Deno.test("--strict-readiness=false: the server is ready although a model failed", async () => {
  await using s = await startTestServer([`--model-repository=${FIXTURES}`, "--strict-readiness=false"]);
  const ready = await get(s.url, "/v2/health/ready");
  assert.equal(ready.status, 200);
  assert.equal(ready.bytes.byteLength, 0);
  assert.equal((await get(s.url, "/v2/models/bad_model/ready")).status, 400);
});
