/**
 * pb_utils' model loading API, which a Python model's own code calls: is_model_ready, load_model (with a config
 * override and files), unload_model and get_model_dir, in explicit model control and, refused, in none.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { pythonPath, startTestServer, type TestServer } from "../helpers.ts";
import { inferJson, outputsOf } from "./_http.ts";

const MODELS = fileURLToPath(new URL("../fixtures/model_control_models", import.meta.url));

function startServer(mode: string): Promise<TestServer> {
  return startTestServer([
    `--model-repository=${MODELS}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
    `--model-control-mode=${mode}`,
    ...(mode === "explicit" ? ["--load-model=manage_py"] : []),
  ]);
}

/** Runs a command through manage_py; returns its answer ({ok} or {error}). */
async function manage(s: TestServer, command: Record<string, unknown>): Promise<unknown> {
  const a = await inferJson(s.url, "manage_py", {
    inputs: [{ name: "command", datatype: "BYTES", shape: [1], data: [JSON.stringify(command)] }],
  });
  assert.equal(a.status, 200, JSON.stringify(a.json));
  return JSON.parse(String(outputsOf(a)[0]!.data![0]));
}

/** Doubles [3, 4] on a model: its answer's status and y. */
async function double(s: TestServer, model: string): Promise<[number, unknown]> {
  const a = await inferJson(s.url, model, {
    inputs: [{ name: "x", datatype: "INT32", shape: [2], data: [3, 4] }],
  });
  return [a.status, a.status === 200 ? outputsOf(a)[0]!.data : a.json?.error];
}

const TRIPLE = `import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy() * 3)]) for r in requests]
`;

Deno.test("a Python model loads, unloads and checks models through pb_utils in explicit mode", async (t) => {
  await using s = await startServer("explicit");
  await t.step("is_model_ready and get_model_dir", async () => {
    assert.deepEqual(await manage(s, { op: "ready", model: "target_py" }), { ok: false });
    assert.deepEqual(await manage(s, { op: "ready", model: "manage_py" }), { ok: true });
    assert.deepEqual(await manage(s, { op: "ready", model: "manage_py", version: "1" }), { ok: true });
    assert.deepEqual(await manage(s, { op: "ready", model: "manage_py", version: "2" }), { ok: false });
    assert.deepEqual(await manage(s, { op: "dir" }), { ok: `${MODELS}/manage_py/1` });
  });
  await t.step("load_model loads from the repository and returns once the model is ready", async () => {
    assert.deepEqual(await double(s, "target_py"), [
      404,
      "Request for unknown model: 'target_py' is not found",
    ]);
    assert.deepEqual(await manage(s, { op: "load", model: "target_py" }), { ok: null });
    assert.deepEqual(await manage(s, { op: "ready", model: "target_py" }), { ok: true });
    assert.deepEqual(await double(s, "target_py"), [200, [6, 8]]);
  });
  await t.step("load_model with a config override and files makes a new model", async () => {
    const config = JSON.stringify({
      name: "made_py",
      backend: "python",
      max_batch_size: 0,
      input: [{ name: "x", data_type: "TYPE_INT32", dims: [2] }],
      output: [{ name: "y", data_type: "TYPE_INT32", dims: [2] }],
    });
    const files = { "file:1/model.py": TRIPLE };
    assert.deepEqual(await manage(s, { op: "load", model: "made_py", config, files }), { ok: null });
    assert.deepEqual(await double(s, "made_py"), [200, [9, 12]]);
    assert.deepEqual(await manage(s, { op: "load", model: "made_py", config, files: { "1/model.py": "" } }), {
      error: "Failed to load model: file key '1/model.py' must start with 'file:'",
    });
  });
  await t.step("unload_model returns as the unload starts; the model is gone soon after", async () => {
    assert.deepEqual(await manage(s, { op: "unload", model: "target_py" }), { ok: null });
    let ready = true;
    for (let i = 0; i < 100 && ready; i++) {
      ready = ((await manage(s, { op: "ready", model: "target_py" })) as { ok: boolean }).ok;
      if (ready) await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(ready, false);
    assert.deepEqual(await double(s, "target_py"), [
      404,
      "Request for unknown model: 'target_py' has no available versions: unloaded",
    ]);
  });
  await t.step("errors are the model's exceptions, and the server serves on", async () => {
    const missing = await manage(s, { op: "load", model: "nope" }) as { error: string };
    assert.match(missing.error, /^Failed to load model: Cannot load 'nope': failed to load 'nope': /);
    assert.deepEqual(await manage(s, { op: "ready", model: "manage_py", version: "x" }), {
      error:
        "Failed to check model readiness: Cannot resolve a version of 'manage_py': failed to get model " +
        "version from specified version string 'x', version should be an integral value > 0",
    });
    // Its own reload (here with a config that changes it) returns once the new version serves, while this very
    // call still runs on the old one (as Triton 2.51).
    const own = JSON.stringify({
      name: "manage_py",
      backend: "python",
      max_batch_size: 0,
      input: [{ name: "command", data_type: "TYPE_STRING", dims: [1] }],
      output: [{ name: "answer", data_type: "TYPE_STRING", dims: [1] }],
      parameters: { changed: { string_value: "yes" } },
    });
    assert.deepEqual(await manage(s, { op: "load", model: "manage_py", config: own }), { ok: null });
    const config = await (await fetch(`${s.url}/v2/models/manage_py/config`)).json();
    assert.deepEqual(config.parameters, { changed: { string_value: "yes" } });
    assert.deepEqual(await double(s, "made_py"), [200, [9, 12]]);
  });
});

Deno.test("without explicit model control, load_model and unload_model are refused", async () => {
  await using s = await startServer("none");
  const load = await manage(s, { op: "load", model: "target_py" }) as { error: string };
  const unload = await manage(s, { op: "unload", model: "target_py" }) as { error: string };
  assert.match(load.error, /^Failed to load model: .*explicit/);
  assert.match(unload.error, /^Failed to unload model: .*explicit/);
  assert.deepEqual(await double(s, "target_py"), [200, [6, 8]]);
});

/** The lines of the metrics endpoint that name the test's own metric families. */
async function customLines(s: TestServer): Promise<string[]> {
  const text = await fetch(`http://127.0.0.1:${s.server.metricsAddr!.port}/metrics`).then((r) => r.text());
  return text.split("\n").filter((l) => l.includes("dinfer_test_"));
}

Deno.test("pb_utils.MetricFamily: a model's counters, gauges and histograms on the metrics endpoint", async (t) => {
  await using s = await startServer("explicit");
  await t.step("none before the model loads", async () => {
    assert.deepEqual(await customLines(s), []);
    assert.deepEqual(await manage(s, { op: "load", model: "metrics_py" }), { ok: null });
  });
  const infer = async (x: number) => {
    const a = await inferJson(s.url, "metrics_py", {
      inputs: [{ name: "x", datatype: "FP32", shape: [1], data: [x] }],
    });
    assert.equal(a.status, 200, JSON.stringify(a.json));
    return JSON.parse(String(outputsOf(a)[0]!.data![0]));
  };
  await t.step("values as the model reads them, and the errors of what a kind does not do", async () => {
    const first = await infer(1.5);
    assert.deepEqual([first.requests, first.last], [1, 1.5]);
    assert.deepEqual(first.errors, [
      "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented " +
      "monotonically by non-negative values.",
      "Failed to set metric value: TRITONSERVER_METRIC_KIND_COUNTER does not support Set",
      "Failed to observe metric value: TRITONSERVER_METRIC_KIND_GAUGE does not support Observe",
      "Failed to get metric value: TRITONSERVER_METRIC_KIND_HISTOGRAM does not support Value",
      "Error when creating MetricFamily: Family name already exists with different type",
      "Error when creating MetricFamily: Invalid metric name 'bad name'",
      "Error when creating MetricFamily: names starting with 'nv_' are the server's",
      "Error when creating Metric: Invalid label name 'a b'",
      "Failed to create metric. Unexpected buckets found.",
      "Error when creating Metric: buckets must be numbers in increasing order",
    ]);
    const third = (await infer(3), await infer(0.5));
    assert.deepEqual([third.requests, third.last], [3, 0.5]);
  });
  await t.step("the metrics endpoint shows them", async () => {
    assert.deepEqual(await customLines(s), [
      "# HELP dinfer_test_requests Requests seen",
      "# TYPE dinfer_test_requests counter",
      'dinfer_test_requests{model="metrics_py"} 3',
      "# HELP dinfer_test_last The last x",
      "# TYPE dinfer_test_last gauge",
      'dinfer_test_last{model="metrics_py"} 0.5',
      "# HELP dinfer_test_x The values of x",
      "# TYPE dinfer_test_x histogram",
      'dinfer_test_x_bucket{model="metrics_py",le="1"} 1',
      'dinfer_test_x_bucket{model="metrics_py",le="2"} 2',
      'dinfer_test_x_bucket{model="metrics_py",le="5"} 3',
      'dinfer_test_x_bucket{model="metrics_py",le="+Inf"} 3',
      'dinfer_test_x_sum{model="metrics_py"} 5',
      'dinfer_test_x_count{model="metrics_py"} 3',
    ]);
  });
  await t.step("they leave with the model", async () => {
    assert.deepEqual(await manage(s, { op: "unload", model: "metrics_py" }), { ok: null });
    let lines = await customLines(s);
    for (let i = 0; i < 100 && lines.length > 0; i++) {
      await new Promise((r) => setTimeout(r, 20));
      lines = await customLines(s);
    }
    assert.deepEqual(lines, []);
  });
});
