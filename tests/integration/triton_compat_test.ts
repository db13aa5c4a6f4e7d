/**
 * Behaviour that matches Triton 2.51 where a migrating client notices it: version strings, statistics errors,
 * Python models that leave out outputs, models whose inputs are all optional, and the request parameters a
 * Python model sees. Each expectation was taken from the real Triton serving the same models
 * (tests/fixtures/compat_models; tests/compat/differential.py compares the two servers).
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { startTestServer } from "../helpers.ts";
import { call, get, inferJson } from "./_http.ts";
import { pythonJson } from "./_python.ts";

const COMPAT = fileURLToPath(new URL("../fixtures/compat_models", import.meta.url));
const PYTHON = fileURLToPath(new URL("../fixtures/python_models", import.meta.url));

const FLAGS = [
  `--model-repository=${COMPAT}`,
  `--model-repository=${PYTHON}`,
  "--model-control-mode=explicit",
  "--load-model=partial_py",
  "--load-model=optional_py",
  "--load-model=params_py",
  "--load-model=error_py",
  "--allow-grpc=true",
];

/** The phrase Triton's clients look for when a version string is not a number. */
const BAD_VERSION = (model: string, version: string) =>
  `Cannot resolve a version of '${model}': failed to get model version from specified version string '${version}', version should be an integral value > 0`;

/**
 * Runs raw gRPC calls from Python and returns, per call, `["OK", json]` or `[status name, details]`.
 * @param port the gRPC port
 * @param calls Python expressions `(method, request)` over `pb` (service_pb2)
 */
async function grpcCalls(port: number, calls: string[]): Promise<[string, unknown][]> {
  return await pythonJson(
    `
import json, os, grpc
from google.protobuf.json_format import MessageToDict
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc as pbg
stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(os.environ["URL"]))
def infer_request(model, version="", params=None):
    r = pb.ModelInferRequest(model_name=model, model_version=version)
    i = r.inputs.add(name="IN", datatype="INT32", shape=[1])
    i.contents.int_contents.append(1)
    for k, v in (params or {}).items():
        if isinstance(v, bool): r.parameters[k].bool_param = v
        elif isinstance(v, int): r.parameters[k].int64_param = v
        else: r.parameters[k].string_param = v
    return r
out = []
for method, request in [${calls.join(", ")}]:
    try:
        reply = getattr(stub, method)(request)
        if method == "ModelInfer":
            out.append(["OK", [c.decode() for c in reply.raw_output_contents]])
        else:
            out.append(["OK", MessageToDict(reply, preserving_proto_field_name=True)])
    except grpc.RpcError as e:
        out.append([e.code().name, e.details()])
print(json.dumps(out))
`,
    { URL: `127.0.0.1:${port}` },
  ) as [string, unknown][];
}

/** The JSON text of a BYTES element as the binary extension serializes it (4-byte length, then the text). */
function bytesElement(raw: string): unknown {
  return JSON.parse(raw.slice(4));
}

Deno.test("Triton compatibility: versions, statistics, outputs, optional inputs and parameters", async (t) => {
  await using s = await startTestServer(FLAGS);
  const grpcPort = s.server.grpcPort!;

  await t.step("a version in an HTTP path that is not digits is no route (404)", async () => {
    for (const path of ["/v2/models/partial_py/versions/abc", "/v2/models/partial_py/versions/-1/ready"]) {
      const r = await get(s.url, path);
      assert.deepEqual([r.status, r.json], [404, { error: `Not found: '${path}'` }], path);
    }
    // Digits that do not fit in 64 bits are Triton's parse error, 400.
    const big = await get(s.url, "/v2/models/partial_py/versions/99999999999999999999");
    assert.deepEqual([big.status, big.json], [400, {
      error: BAD_VERSION("partial_py", "99999999999999999999"),
    }]);
  });

  await t.step("gRPC answers INVALID_ARGUMENT for a version that is not a number", async () => {
    const out = await grpcCalls(grpcPort, [
      `("ModelMetadata", pb.ModelMetadataRequest(name="partial_py", version="abc"))`,
      `("ModelReady", pb.ModelReadyRequest(name="partial_py", version="abc"))`,
      `("ModelConfig", pb.ModelConfigRequest(name="partial_py", version="abc"))`,
      `("ModelStatistics", pb.ModelStatisticsRequest(name="partial_py", version="abc"))`,
      `("ModelInfer", infer_request("partial_py", "abc"))`,
      `("ModelMetadata", pb.ModelMetadataRequest(name="nope", version="abc"))`,
      `("ModelMetadata", pb.ModelMetadataRequest(name="partial_py", version="-1"))`,
      // As Triton (std::stol): leading digits count.
      `("ModelReady", pb.ModelReadyRequest(name="partial_py", version="1a"))`,
      `("ModelReady", pb.ModelReadyRequest(name="partial_py", version="7"))`,
    ]);
    const bad = ["INVALID_ARGUMENT", BAD_VERSION("partial_py", "abc")];
    assert.deepEqual(out, [
      bad,
      bad,
      bad,
      bad,
      bad,
      ["INVALID_ARGUMENT", BAD_VERSION("nope", "abc")],
      [
        "INVALID_ARGUMENT",
        "Cannot resolve a version of 'partial_py': invalid model version specified '-1', version should be an integral value > 0",
      ],
      ["OK", { ready: true }],
      ["OK", {}],
    ]);
  });

  await t.step("statistics of an unknown model or version are 400 / INVALID_ARGUMENT", async () => {
    const model = await get(s.url, "/v2/models/nope/stats");
    assert.deepEqual([model.status, model.json], [400, {
      error: "Cannot get the statistics of 'nope': requested model 'nope' is not available",
    }]);
    const version = await get(s.url, "/v2/models/partial_py/versions/3/stats");
    assert.deepEqual([version.status, version.json], [400, {
      error:
        "Cannot get the statistics of 'partial_py' version 3: requested model version is not available for model 'partial_py'",
    }]);
    // A model that is in the repository but not loaded is not available either.
    const unloaded = await get(s.url, "/v2/models/add_sub_py/stats");
    assert.equal(unloaded.status, 400);
    const out = await grpcCalls(grpcPort, [
      `("ModelStatistics", pb.ModelStatisticsRequest(name="nope"))`,
      `("ModelStatistics", pb.ModelStatisticsRequest(name="partial_py", version="3"))`,
    ]);
    assert.deepEqual(out, [
      ["INVALID_ARGUMENT", "Cannot get the statistics of 'nope': requested model 'nope' is not available"],
      [
        "INVALID_ARGUMENT",
        "Cannot get the statistics of 'partial_py' version 3: requested model version is not available for model 'partial_py'",
      ],
    ]);
  });

  await t.step("a Python model's response carries the outputs it produced", async () => {
    const inputs = [{ name: "IN", datatype: "INT32", shape: [2], data: [1, 2] }];
    const out0 = { name: "OUT0", datatype: "INT32", shape: [2], data: [1, 2] };
    const all = await inferJson(s.url, "partial_py", { inputs });
    assert.deepEqual([all.status, all.json], [200, {
      model_name: "partial_py",
      model_version: "1",
      outputs: [out0],
    }]);
    const missing = await inferJson(s.url, "partial_py", { inputs, outputs: [{ name: "OUT1" }] });
    assert.deepEqual([missing.status, missing.json?.outputs], [200, []]);
    const both = await inferJson(s.url, "partial_py", {
      inputs,
      outputs: [{ name: "OUT1" }, { name: "OUT0" }],
    });
    assert.deepEqual([both.status, both.json?.outputs], [200, [out0]]);
  });

  await t.step("a model whose inputs are all optional runs a request without inputs", async () => {
    const none = await inferJson(s.url, "optional_py", { inputs: [] });
    assert.deepEqual([none.status, none.json], [200, {
      model_name: "optional_py",
      model_version: "1",
      outputs: [{ name: "OUT", datatype: "INT32", shape: [1], data: [0] }],
    }]);
    const one = await inferJson(s.url, "optional_py", {
      inputs: [{ name: "B", datatype: "INT32", shape: [1], data: [5] }],
    });
    assert.deepEqual([one.status, one.json?.outputs], [200, [
      { name: "OUT", datatype: "INT32", shape: [1], data: [1] },
    ]]);
  });

  await t.step("the server's own request parameters do not reach the model", async () => {
    const r = await inferJson(s.url, "params_py", {
      parameters: {
        priority: 1,
        timeout: 5,
        sequence_id: 3,
        sequence_start: true,
        sequence_end: false,
        binary_data_output: false,
        custom: "x",
        n: 7,
      },
      inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [1] }],
    });
    assert.equal(r.status, 200);
    const [text] = (r.json?.outputs as { data: string[] }[])[0]!.data;
    assert.deepEqual(JSON.parse(text!), { custom: "x", n: 7 });
    const reserved = await inferJson(s.url, "params_py", {
      parameters: { triton_enable_empty_final_response: true },
      inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [1] }],
    });
    assert.deepEqual([reserved.status, reserved.json], [400, {
      error:
        "Cannot read the inference request for 'params_py': parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified",
    }]);
    const out = await grpcCalls(grpcPort, [
      `("ModelInfer", infer_request("params_py", params={"priority": 1, "timeout": 5, "sequence_id": 3, "sequence_start": True, "sequence_end": True, "binary_data_output": 0, "custom": 7, "triton_enable_empty_final_response": True}))`,
      `("ModelInfer", infer_request("params_py", params={"triton_x": 1}))`,
    ]);
    assert.equal(out[0]![0], "OK");
    // Over gRPC binary_data_output means nothing to the server, so the model sees it (as in Triton).
    assert.deepEqual(bytesElement((out[0]![1] as string[])[0]!), { binary_data_output: 0, custom: 7 });
    assert.deepEqual(out[1], [
      "INVALID_ARGUMENT",
      "Cannot read the inference request for 'params_py': parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response",
    ]);
  });

  await t.step(
    "statistics: an error response is a success, a failed execute a failure, a refusal nothing",
    async () => {
      const mode = (m: number) =>
        inferJson(s.url, "error_py", {
          inputs: [{ name: "MODE", datatype: "INT32", shape: [1], data: [m] }],
        });
      const statuses = [];
      for (const m of [0, 1, 2, 3]) statuses.push((await mode(m)).status);
      const refused = await inferJson(s.url, "error_py", {
        inputs: [{ name: "MODE", datatype: "FP32", shape: [1], data: [1] }],
      });
      assert.deepEqual([...statuses, refused.status], [500, 500, 404, 200, 400]);
      const r = await get(s.url, "/v2/models/error_py/stats");
      const [st] = (r.json as { model_stats: Record<string, unknown>[] }).model_stats;
      const counts = (d: Record<string, { count: number }>) =>
        Object.fromEntries(Object.entries(d).map(([k, v]) => [k, v.count]));
      assert.deepEqual({
        inference_count: st!.inference_count,
        execution_count: st!.execution_count,
        inference_stats: counts(st!.inference_stats as Record<string, { count: number }>),
        response_stats: st!.response_stats,
        memory_usage: st!.memory_usage,
        keys: Object.keys(st!),
      }, {
        inference_count: 3,
        execution_count: 4,
        inference_stats: {
          success: 3,
          fail: 1,
          queue: 3,
          compute_input: 3,
          compute_infer: 3,
          compute_output: 3,
          cache_hit: 0,
          cache_miss: 0,
        },
        response_stats: {},
        memory_usage: [],
        keys: [
          "name",
          "version",
          "last_inference",
          "inference_count",
          "execution_count",
          "inference_stats",
          "response_stats",
          "batch_stats",
          "memory_usage",
        ],
      });
    },
  );

  await t.step("model configs carry the fields Triton fills in", async () => {
    const config = async (model: string) => (await get(s.url, `/v2/models/${model}/config`)).json!;
    const optimization = {
      priority: "PRIORITY_DEFAULT",
      input_pinned_memory: { enable: true },
      output_pinned_memory: { enable: true },
      gather_kernel_buffer_threshold: 0,
      eager_batching: false,
    };
    // No instance_group in the config: one group named after the model.
    const partial = await config("partial_py");
    assert.deepEqual(partial.optimization, optimization);
    assert.deepEqual((partial.instance_group as { name: string }[]).map((g) => g.name), ["partial_py"]);
    assert.equal(partial.model_transaction_policy, undefined);
    // The oldest strategy's preferred batch size and the idle time are filled in.
    const load = await call(`${s.url}/v2/repository/models/oldest_py/load`, { method: "POST" });
    assert.equal(load.status, 200);
    const oldest = await config("oldest_py");
    assert.deepEqual(oldest.sequence_batching, {
      oldest: {
        max_candidate_sequences: 4,
        preferred_batch_size: [4],
        max_queue_delay_microseconds: 0,
        preserve_ordering: false,
      },
      max_sequence_idle_microseconds: 1000000,
      control_input: [],
      state: [],
      iterative_sequence: false,
    });
    // Loading the ensemble loads add_sub_py, whose config names an unnamed group: <model>_0.
    assert.equal((await call(`${s.url}/v2/repository/models/ens_py/load`, { method: "POST" })).status, 200);
    const addSub = await config("add_sub_py");
    assert.deepEqual((addSub.instance_group as { name: string }[]).map((g) => g.name), ["add_sub_py_0"]);
    const ensemble = await config("ens_py");
    assert.deepEqual(ensemble.model_transaction_policy, { decoupled: false });
    assert.equal((ensemble.ensemble_scheduling as Record<string, unknown>).max_inflight_requests, undefined);
    assert.equal(ensemble.optimization, undefined);
    assert.deepEqual(ensemble.instance_group, []);
    assert.deepEqual(Object.keys(ensemble).slice(0, 6), [
      "name",
      "platform",
      "backend",
      "runtime",
      "version_policy",
      "max_batch_size",
    ]);
  });

  await t.step("an ensemble's response carries the request's sequence parameters", async () => {
    const inputs = [
      { name: "IN0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] },
      { name: "IN1", datatype: "FP32", shape: [1, 4], data: [1, 1, 1, 1] },
    ];
    const plain = await inferJson(s.url, "ens_py", { inputs });
    assert.deepEqual([plain.status, plain.json?.parameters], [200, {
      sequence_id: 0,
      sequence_start: false,
      sequence_end: false,
    }]);
    const named = await inferJson(s.url, "ens_py", {
      parameters: { sequence_id: "abc", sequence_end: true },
      inputs,
    });
    assert.deepEqual(named.json?.parameters, {
      sequence_id: "abc",
      sequence_start: false,
      sequence_end: true,
    });
    // A uint64 id beyond 2^53 comes back with every digit (JSON.stringify threw on it).
    const big = await fetch(`${s.url}/v2/models/ens_py/infer`, {
      method: "POST",
      body: `{"parameters":{"sequence_id":9007199254740993,"sequence_start":true},"inputs":${
        JSON.stringify(inputs)
      }}`,
    });
    const bigText = await big.text();
    assert.equal(big.status, 200, bigText);
    assert.match(
      bigText,
      /"parameters":\{"sequence_id":9007199254740993,"sequence_start":true,"sequence_end":false\}/,
    );
    const grpc = await pythonJson(
      `
import json, os, grpc
from google.protobuf.json_format import MessageToDict
from tritonclient.grpc import service_pb2 as pb, service_pb2_grpc as pbg
stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(os.environ["URL"]))
r = pb.ModelInferRequest(model_name="ens_py")
for n in ("IN0", "IN1"):
    r.inputs.add(name=n, datatype="FP32", shape=[1, 4]).contents.fp32_contents.extend([1, 2, 3, 4])
r.parameters["sequence_id"].int64_param = 7
r.parameters["sequence_start"].bool_param = True
print(json.dumps(MessageToDict(stub.ModelInfer(r), preserving_proto_field_name=True)["parameters"]))
`,
      { URL: `127.0.0.1:${grpcPort}` },
    );
    assert.deepEqual(grpc, {
      sequence_id: { int64_param: "7" },
      sequence_start: { bool_param: true },
      sequence_end: { bool_param: false },
    });
  });

  await t.step("loading a model that serves from unchanged files leaves it as it is", async () => {
    const count = async () =>
      ((await get(s.url, "/v2/models/partial_py/stats")).json!.model_stats as { inference_count: number }[])[
        0
      ]!
        .inference_count;
    const before = await count();
    assert.ok(before > 0, "partial_py has run");
    const load = await call(`${s.url}/v2/repository/models/partial_py/load`, { method: "POST" });
    assert.equal(load.status, 200);
    // Not reloaded: the same version, with its statistics.
    assert.equal(await count(), before);
  });

  await t.step("unloading a model that is not loaded or not known succeeds", async () => {
    for (const name of ["nope", "empty_py"]) {
      const r = await call(`${s.url}/v2/repository/models/${name}/unload`, { method: "POST" });
      assert.deepEqual([r.status, r.bytes.byteLength], [200, 0], name);
    }
  });
});
