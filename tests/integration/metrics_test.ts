/**
 * Observability by numbers: after a known set of requests, the statistics extension (HTTP and gRPC through
 * tritonclient) and the Prometheus metrics report exactly those requests. Durations are only checked to be
 * consistent with each other (phases within the request, metrics equal to the statistics in µs), never
 * against the wall clock.
 * @module
 */

import assert from "node:assert/strict";
import { FIXTURES, startTestServer, type TestServer } from "../helpers.ts";
import { get, inferJson, SIMPLE_REQUEST } from "./_http.ts";
import { pythonJson } from "./_python.ts";
import { mockShim } from "../_trtshim.ts";
import { openTrtShim } from "../../ffi/trtshim.ts";

interface Duration {
  count: number;
  ns: number;
}

interface ModelStats {
  name: string;
  version: string;
  last_inference: number;
  inference_count: number;
  execution_count: number;
  inference_stats: Record<string, Duration>;
  response_stats: Record<string, unknown>;
  memory_usage: unknown[];
  batch_stats: {
    batch_size: number;
    compute_input: Duration;
    compute_infer: Duration;
    compute_output: Duration;
  }[];
}

/** One sample of the Prometheus text format. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** A scrape: the samples and the `# TYPE` of each metric. */
interface Scrape {
  samples: Sample[];
  types: Map<string, string>;
}

function parseMetrics(text: string): Scrape {
  const samples: Sample[] = [];
  const types = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (line.startsWith("# TYPE ")) {
      const [name, type] = line.slice(7).split(" ");
      types.set(name!, type!);
      continue;
    }
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `Unparsable metrics line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[l[1]!] = l[2]!;
    }
    samples.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  return { samples, types };
}

async function scrape(s: TestServer): Promise<Scrape> {
  const res = await fetch(`http://127.0.0.1:${s.server.metricsAddr!.port}/metrics`);
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^text\/plain/);
  return parseMetrics(await res.text());
}

/** The value of the one sample of `name` whose labels include `labels`. */
function metric(m: Scrape, name: string, labels: Record<string, string> = {}): number {
  const found = m.samples.filter((s) =>
    s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)
  );
  assert.equal(found.length, 1, `${name}${JSON.stringify(labels)}: ${found.length} samples`);
  return found[0]!.value;
}

async function stats(s: TestServer, path: string): Promise<ModelStats[]> {
  const a = await get(s.url, path);
  assert.equal(a.status, 200, JSON.stringify(a.json));
  return (a.json as { model_stats: ModelStats[] }).model_stats;
}

const ZERO: Duration = { count: 0, ns: 0 };

/** Triton's declared type of every metric this server reports. */
const TYPES: Record<string, string> = {
  nv_inference_request_success: "counter",
  nv_inference_request_failure: "counter",
  nv_inference_count: "counter",
  nv_inference_exec_count: "counter",
  nv_inference_request_duration_us: "counter",
  nv_inference_queue_duration_us: "counter",
  nv_inference_compute_input_duration_us: "counter",
  nv_inference_compute_infer_duration_us: "counter",
  nv_inference_compute_output_duration_us: "counter",
  nv_inference_pending_request_count: "gauge",
  nv_model_load_duration_secs: "gauge",
  nv_pinned_memory_pool_total_bytes: "gauge",
  nv_pinned_memory_pool_used_bytes: "gauge",
  nv_cpu_utilization: "gauge",
  nv_cpu_memory_total_bytes: "gauge",
  nv_cpu_memory_used_bytes: "gauge",
};

const EXAMPLE_MODELS = ["digits", "simple", "simple_dyna_sequence", "simple_sequence", "simple_string"];

/** Asserts a duration counter in µs equals the statistics' nanoseconds (rounding allowed). */
function assertMicros(us: number, ns: number, what: string): void {
  assert.ok(Math.abs(us - ns / 1000) <= 1, `${what}: ${us} µs for ${ns} ns`);
}

Deno.test("statistics, gRPC ModelStatistics and /metrics count 5 successes exactly; validation failures not at all", async () => {
  await using s = await startTestServer(["--allow-grpc=true"]);
  for (let i = 0; i < 5; i++) assert.equal((await inferJson(s.url, "simple", SIMPLE_REQUEST)).status, 200);
  const shortInput = {
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 15], data: Array.from({ length: 15 }, () => 0) },
      SIMPLE_REQUEST.inputs[1],
    ],
  };
  const short = await inferJson(s.url, "simple", shortInput);
  assert.deepEqual([short.status, short.json], [400, {
    error:
      "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]",
  }]);
  const missing = await inferJson(s.url, "simple", { inputs: [SIMPLE_REQUEST.inputs[0]] });
  assert.equal(missing.status, 400);

  const [st, ...rest] = await stats(s, "/v2/models/simple/stats");
  assert.equal(rest.length, 0);
  assert.ok(st);
  assert.ok(st.last_inference > 0, "last_inference is set");
  const is = st.inference_stats;
  assert.deepEqual(
    {
      name: st.name,
      version: st.version,
      inference_count: st.inference_count,
      execution_count: st.execution_count,
      counts: Object.fromEntries(Object.entries(is).map(([k, d]) => [k, d.count])),
      batch_sizes: st.batch_stats.map((b) => [b.batch_size, b.compute_input.count, b.compute_infer.count]),
    },
    {
      name: "simple",
      version: "1",
      inference_count: 5,
      execution_count: 5,
      counts: {
        success: 5,
        // As Triton: a request refused at validation never reached the model.
        fail: 0,
        queue: 5,
        compute_input: 5,
        compute_infer: 5,
        compute_output: 5,
        cache_hit: 0,
        cache_miss: 0,
      },
      batch_sizes: [[1, 5, 5]],
    },
  );
  for (const k of ["success", "compute_infer"]) assert.ok(is[k]!.ns > 0, `${k}.ns is positive`);
  assert.deepEqual(is.fail, ZERO);
  // Triton's shape: response statistics (decoupled models) and memory usage, here empty.
  assert.deepEqual([st.response_stats, st.memory_usage], [{}, []]);
  assert.ok(
    is.queue!.ns + is.compute_input!.ns + is.compute_infer!.ns + is.compute_output!.ns <= is.success!.ns,
    "the phases fit in the request",
  );
  // One request per execution: the batch statistics are the request statistics.
  const b = st.batch_stats[0]!;
  assert.deepEqual(
    [b.compute_input, b.compute_infer, b.compute_output],
    [is.compute_input, is.compute_infer, is.compute_output],
  );
  assert.deepEqual([is.cache_hit, is.cache_miss], [ZERO, ZERO]);

  // The same entry by version and among all models; the other models have seen nothing.
  assert.deepEqual(await stats(s, "/v2/models/simple/versions/1/stats"), [st]);
  const all = await stats(s, "/v2/models/stats");
  assert.deepEqual(all.map((m) => m.name), EXAMPLE_MODELS);
  assert.deepEqual(all.find((m) => m.name === "simple"), st);
  for (const m of all.filter((m) => m.name !== "simple")) {
    assert.deepEqual([m.inference_count, m.execution_count, m.last_inference, m.batch_stats], [0, 0, 0, []]);
    assert.deepEqual(m.inference_stats.success, ZERO);
  }
  const unknown = await get(s.url, "/v2/models/nope/stats");
  assert.deepEqual([unknown.status, unknown.json], [400, {
    error: "Cannot get the statistics of 'nope': requested model 'nope' is not available",
  }]);
  assert.equal((await get(s.url, "/v2/models/simple/versions/7/stats")).status, 400);

  // Prometheus: the same numbers, read at scrape time.
  const m = await scrape(s);
  for (const [name, type] of Object.entries(TYPES)) assert.equal(m.types.get(name), type, `# TYPE ${name}`);
  const simple = { model: "simple", version: "1" };
  assert.equal(metric(m, "nv_inference_request_success", simple), 5);
  assert.deepEqual(
    ["REJECTED", "CANCELED", "BACKEND", "OTHER"].map((reason) =>
      metric(m, "nv_inference_request_failure", { ...simple, reason })
    ),
    [0, 0, 0, 0],
  );
  assert.deepEqual(
    [metric(m, "nv_pinned_memory_pool_total_bytes"), metric(m, "nv_pinned_memory_pool_used_bytes")],
    [0, 0],
  );
  assert.equal(metric(m, "nv_inference_count", simple), 5);
  assert.equal(metric(m, "nv_inference_exec_count", simple), 5);
  assertMicros(metric(m, "nv_inference_request_duration_us", simple), is.success!.ns, "request duration");
  assertMicros(metric(m, "nv_inference_queue_duration_us", simple), is.queue!.ns, "queue duration");
  for (const phase of ["input", "infer", "output"]) {
    assertMicros(
      metric(m, `nv_inference_compute_${phase}_duration_us`, simple),
      is[`compute_${phase}`]!.ns,
      `compute ${phase} duration`,
    );
  }
  for (const model of EXAMPLE_MODELS) {
    const labels = { model, version: "1" };
    assert.equal(metric(m, "nv_inference_pending_request_count", labels), 0);
    assert.ok(metric(m, "nv_model_load_duration_secs", labels) > 0, `${model} load duration`);
    if (model !== "simple") assert.equal(metric(m, "nv_inference_count", labels), 0);
  }
  // Every per-model sample is labelled with a ready model and its version, nothing else, in Triton's order (by
  // name: its clients' tests match the lines as text).
  for (
    const sample of m.samples.filter((x) =>
      x.name.startsWith("nv_inference") || x.name.startsWith("nv_model")
    )
  ) {
    const keys = Object.keys(sample.labels);
    assert.deepEqual(
      keys,
      sample.name === "nv_inference_request_failure" ? ["model", "reason", "version"] : [
        "model",
        "version",
      ],
    );
    assert.ok(EXAMPLE_MODELS.includes(sample.labels.model!), `model label ${sample.labels.model}`);
  }
  assert.equal(metric(m, "nv_cpu_memory_total_bytes"), Deno.systemMemoryInfo().total);
  const used = metric(m, "nv_cpu_memory_used_bytes");
  assert.ok(used > 0 && used <= Deno.systemMemoryInfo().total);
  const cpu = metric(m, "nv_cpu_utilization");
  assert.ok(cpu >= 0 && cpu <= 1, `nv_cpu_utilization ${cpu}`);

  // gRPC ModelStatistics through tritonclient: the same numbers (int64 fields as JSON strings).
  const grpc = await pythonJson(
    `
import json, os
import tritonclient.grpc as g
from tritonclient.utils import InferenceServerException
c = g.InferenceServerClient(os.environ["URL"])
one = c.get_inference_statistics("simple", as_json=True)
version = c.get_inference_statistics("simple", "1", as_json=True)
everything = c.get_inference_statistics(as_json=True)
try:
    c.get_inference_statistics("nope")
    unknown = None
except InferenceServerException as e:
    unknown = [e.status(), e.message()]
print(json.dumps({"one": one, "version": version, "all": everything, "unknown": unknown}))
`,
    { URL: `127.0.0.1:${s.server.grpcPort}` },
  ) as {
    one: { model_stats: unknown[] };
    version: unknown;
    all: { model_stats: { name: string }[] };
    unknown: unknown;
  };
  const asProto = (d: Duration) => ({ count: String(d.count), ns: String(d.ns) });
  assert.deepEqual(grpc.one, {
    model_stats: [{
      name: "simple",
      version: "1",
      last_inference: String(st.last_inference),
      inference_count: "5",
      execution_count: "5",
      inference_stats: {
        success: asProto(is.success!),
        fail: {},
        queue: asProto(is.queue!),
        compute_input: asProto(is.compute_input!),
        compute_infer: asProto(is.compute_infer!),
        compute_output: asProto(is.compute_output!),
        cache_hit: {},
        cache_miss: {},
      },
      batch_stats: [{
        batch_size: "1",
        compute_input: asProto(b.compute_input),
        compute_infer: asProto(b.compute_infer),
        compute_output: asProto(b.compute_output),
      }],
    }],
  });
  assert.deepEqual(grpc.version, grpc.one);
  assert.deepEqual(grpc.all.model_stats.map((x) => x.name), EXAMPLE_MODELS);
  assert.deepEqual(grpc.unknown, [
    "StatusCode.INVALID_ARGUMENT",
    "Cannot get the statistics of 'nope': requested model 'nope' is not available",
  ]);
});

Deno.test("4 concurrent requests to a dynamic batcher count as 4 inferences in 1 execution of batch size 4", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_metrics_" });
  try {
    await Deno.mkdir(`${repo}/b/1`, { recursive: true });
    await Deno.copyFile(`${FIXTURES}/no_config_dynamic/1/model.onnx`, `${repo}/b/1/model.onnx`);
    // A full batch leaves at once; the long delay only guarantees that no smaller batch leaves first.
    await Deno.writeTextFile(
      `${repo}/b/config.pbtxt`,
      `name: "b"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 10000000 }
`,
    );
    await using s = await startTestServer([`--model-repository=${repo}`]);
    const send = (i: number) =>
      inferJson(s.url, "b", { inputs: [{ name: "x", datatype: "FP32", shape: [1, 3], data: [i, i, i] }] });
    const first = [0, 1, 2].map(send);
    // Wait on the server's own gauge until the three wait in the queue.
    for (;;) {
      const pending = metric(await scrape(s), "nv_inference_pending_request_count", { model: "b" });
      if (pending === 3) break;
      await new Promise((r) => setTimeout(r, 5));
    }
    const answers = await Promise.all([...first, send(3)]);
    assert.deepEqual(answers.map((a) => a.status), [200, 200, 200, 200]);

    const [st] = await stats(s, "/v2/models/b/stats");
    assert.ok(st);
    const is = st.inference_stats;
    assert.deepEqual(
      [st.inference_count, st.execution_count, is.success!.count, is.queue!.count, is.compute_infer!.count],
      [4, 1, 4, 4, 4],
    );
    assert.deepEqual(
      st.batch_stats.map((
        b,
      ) => [b.batch_size, b.compute_input.count, b.compute_infer.count, b.compute_output.count]),
      [[4, 1, 1, 1]],
    );
    // Each of the 4 requests is charged the one execution's phases.
    const b = st.batch_stats[0]!;
    assert.equal(is.compute_input!.ns, 4 * b.compute_input.ns);
    assert.equal(is.compute_infer!.ns, 4 * b.compute_infer.ns);
    assert.equal(is.compute_output!.ns, 4 * b.compute_output.ns);
    assert.ok(
      is.queue!.ns + is.compute_input!.ns + is.compute_infer!.ns + is.compute_output!.ns <= is.success!.ns,
    );

    const m = await scrape(s);
    const labels = { model: "b", version: "1" };
    assert.deepEqual(
      [
        metric(m, "nv_inference_request_success", labels),
        metric(m, "nv_inference_count", labels),
        metric(m, "nv_inference_exec_count", labels),
        metric(m, "nv_inference_pending_request_count", labels),
      ],
      [4, 4, 1, 0],
    );
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});

Deno.test("--allow-metrics=false serves no metrics port; --allow-cpu-metrics=false drops the nv_cpu_* metrics", async () => {
  {
    await using s = await startTestServer(["--allow-metrics=false"]);
    assert.equal(s.server.metricsAddr, undefined);
    // Statistics stay available.
    assert.equal((await stats(s, "/v2/models/simple/stats")).length, 1);
  }
  await using s = await startTestServer(["--allow-cpu-metrics=false"]);
  const m = await scrape(s);
  assert.deepEqual(m.samples.filter((x) => x.name.startsWith("nv_cpu_")), []);
  assert.deepEqual([...m.types.keys()].filter((n) => n.startsWith("nv_cpu_")), []);
  assert.equal(metric(m, "nv_inference_count", { model: "simple", version: "1" }), 0);
  const notFound = await fetch(`http://127.0.0.1:${s.server.metricsAddr!.port}/other`);
  assert.equal(notFound.status, 404);
  await notFound.body?.cancel();
});

Deno.test("--metrics-config: latency summaries and the first-response histogram count every request; counters can go", async () => {
  await using s = await startTestServer([
    "--metrics-config=summary_latencies=true",
    "--metrics-config=histogram_latencies=true",
    "--metrics-config=counter_latencies=false",
    "--metrics-config=summary_quantiles=0.5:0.05,0.99:0.001",
  ]);
  for (let i = 0; i < 3; i++) assert.equal((await inferJson(s.url, "simple", SIMPLE_REQUEST)).status, 200);
  const m = await scrape(s);
  const labels = { model: "simple", version: "1" };
  for (
    const name of [
      "nv_inference_request_summary_us",
      "nv_inference_queue_summary_us",
      "nv_inference_compute_input_summary_us",
      "nv_inference_compute_infer_summary_us",
      "nv_inference_compute_output_summary_us",
    ]
  ) {
    assert.equal(m.types.get(name), "summary", name);
    assert.equal(metric(m, `${name}_count`, labels), 3, name);
    assert.ok(metric(m, `${name}_sum`, labels) > 0, name);
    assert.deepEqual(
      m.samples.filter((x) => x.name === name && x.labels.model === "simple").map((x) => x.labels.quantile),
      ["0.5", "0.99"],
    );
  }
  assert.equal(m.types.get("nv_inference_first_response_histogram_ms"), "histogram");
  assert.equal(metric(m, "nv_inference_first_response_histogram_ms_count", labels), 3);
  assert.deepEqual([...m.types.keys()].filter((n) => n.endsWith("_duration_us")), []);
  assert.equal(metric(m, "nv_inference_request_success", labels), 3);
});

Deno.test("the latency series of a model that unloads leave /metrics at the next scrape", async () => {
  await using s = await startTestServer([
    "--metrics-config=summary_latencies=true",
    "--metrics-config=histogram_latencies=true",
    "--model-control-mode=explicit",
    "--load-model=simple",
  ]);
  assert.equal((await inferJson(s.url, "simple", SIMPLE_REQUEST)).status, 200);
  const series = (m: Awaited<ReturnType<typeof scrape>>) =>
    m.samples.filter((x) => x.labels.model === "simple" && /(summary_us|histogram_ms)/.test(x.name)).length;
  assert.ok(series(await scrape(s)) > 0);
  assert.equal((await fetch(`${s.url}/v2/repository/models/simple/unload`, { method: "POST" })).status, 200);
  assert.equal(series(await scrape(s)), 0);
  // Loaded again, it starts anew.
  assert.equal((await fetch(`${s.url}/v2/repository/models/simple/load`, { method: "POST" })).status, 200);
  assert.equal((await inferJson(s.url, "simple", SIMPLE_REQUEST)).status, 200);
  assert.equal(
    metric(await scrape(s), "nv_inference_request_summary_us_count", { model: "simple", version: "1" }),
    1,
  );
});

Deno.test("a bad --metrics-config stops the start with one line naming it, before the models load", async () => {
  await assert.rejects(
    () => startTestServer(["--metrics-config=summary_latencies=maybe"]),
    { message: "Bad --metrics-config 'summary_latencies=maybe': expected true or false" },
  );
  // Checked first, also with metrics off (it was read only when the metrics started, after the models loaded).
  await assert.rejects(
    () => startTestServer(["--allow-metrics=false", "--metrics-config=colour=blue"]),
    { message: "Bad --metrics-config 'colour=blue': unknown setting 'colour'" },
  );
});

Deno.test("CPU gauges report the last sample of --metrics-interval-ms, not a reading at each scrape", async () => {
  await using s = await startTestServer(["--metrics-interval-ms=3600000"]);
  const first = await scrape(s);
  // Memory moves all the time; an hour-long interval keeps the one sample taken at start-up.
  await new Promise((r) => setTimeout(r, 20));
  const second = await scrape(s);
  for (const name of ["nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes"]) {
    assert.equal(second.types.get(name), "gauge", name);
    assert.equal(metric(second, name), metric(first, name), name);
  }
  assert.equal(metric(first, "nv_cpu_memory_total_bytes"), Deno.systemMemoryInfo().total);
});

const shim = await mockShim();
/** The mock device's UUID: the bytes of "dinfer-mock-dev" and the device index. */
const MOCK_UUID = ["GPU-64696e66-6572-2d6d-6f63-6b2d64657600", "GPU-64696e66-6572-2d6d-6f63-6b2d64657601"];
const GPU_GAUGES = ["nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes"];
const POWER_METRICS = ["nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption"];

/** Runs `fn` with environment variables set (the mock shim reads its devices from them at each call). */
async function withEnv(env: Record<string, string>, fn: () => Promise<void>): Promise<void> {
  const previous = Object.fromEntries(Object.keys(env).map((k) => [k, Deno.env.get(k)]));
  for (const [k, v] of Object.entries(env)) Deno.env.set(k, v);
  try {
    await fn();
  } finally {
    for (const [k, v] of Object.entries(previous)) {
      if (v === undefined) Deno.env.delete(k);
      else Deno.env.set(k, v);
    }
  }
}

/** The GPU samples of a scrape, as `name{gpu_uuid} value` lines, sorted. */
function gpuSamples(m: Scrape): string[] {
  return m.samples
    .filter((x) => x.name.startsWith("nv_gpu_") || x.name === "nv_energy_consumption")
    .map((x) => `${x.name}{${JSON.stringify(x.labels)}} ${x.value}`)
    .sort();
}

Deno.test({
  name: "GPU gauges report each mock device by gpu_uuid: utilization, total and used memory, sampled",
  ignore: shim === undefined,
}, async () => {
  await withEnv({ TRTSHIM_MOCK_DEVICE_COUNT: "2", TRTSHIM_MOCK_MEMORY: String(1 << 30) }, async () => {
    const lib = openTrtShim(shim!);
    using _onDevice1 = lib.mallocDevice(1, 3 << 20);
    await using s = await startTestServer([
      `--backend-config=tensorrt,shim-path=${shim}`,
      "--metrics-interval-ms=3600000",
    ]);
    const expected = [
      `nv_gpu_memory_total_bytes{{"gpu_uuid":"${MOCK_UUID[0]}"}} ${1 << 30}`,
      `nv_gpu_memory_total_bytes{{"gpu_uuid":"${MOCK_UUID[1]}"}} ${1 << 30}`,
      `nv_gpu_memory_used_bytes{{"gpu_uuid":"${MOCK_UUID[0]}"}} 0`,
      `nv_gpu_memory_used_bytes{{"gpu_uuid":"${MOCK_UUID[1]}"}} ${3 << 20}`,
      `nv_gpu_utilization{{"gpu_uuid":"${MOCK_UUID[0]}"}} 0`,
      `nv_gpu_utilization{{"gpu_uuid":"${MOCK_UUID[1]}"}} 0`,
    ];
    const m = await scrape(s);
    assert.deepEqual(gpuSamples(m), expected);
    for (const name of GPU_GAUGES) assert.equal(m.types.get(name), "gauge", name);
    // The mock devices were given no power reading: none of the three series, not zeros.
    for (const name of POWER_METRICS) {
      assert.equal(m.samples.some((x) => x.name === name), false, name);
    }
    // An allocation after the sample shows only at the next one (an hour away).
    using _onDevice0 = lib.mallocDevice(0, 1 << 20);
    assert.deepEqual(gpuSamples(await scrape(s)), expected);
  });
});

Deno.test({
  name: "with --metrics-interval-ms=10 the GPU gauges follow the device at the next sample",
  ignore: shim === undefined,
}, async () => {
  await withEnv({ TRTSHIM_MOCK_DEVICE_COUNT: "1", TRTSHIM_MOCK_MEMORY: String(1 << 30) }, async () => {
    await using s = await startTestServer([
      `--backend-config=tensorrt,shim-path=${shim}`,
      "--metrics-interval-ms=10",
    ]);
    const used = async () => metric(await scrape(s), "nv_gpu_memory_used_bytes", { gpu_uuid: MOCK_UUID[0]! });
    assert.equal(await used(), 0);
    using _buffer = openTrtShim(shim!).mallocDevice(0, 5 << 20);
    // Wait (without asserting on time) for a sample taken after the allocation.
    let value = await used();
    for (let i = 0; i < 500 && value !== 5 << 20; i++) {
      await new Promise((r) => setTimeout(r, 10));
      value = await used();
    }
    assert.equal(value, 5 << 20);
  });
});

Deno.test({
  name:
    "power usage and limit in watts and energy in joules since the start, per gpu_uuid; none without the reading",
  ignore: shim === undefined,
}, async () => {
  const env = {
    TRTSHIM_MOCK_DEVICE_COUNT: "2",
    TRTSHIM_MOCK_MEMORY: String(1 << 30),
    // Device 1 has no power entry: it reports none of the three.
    TRTSHIM_MOCK_POWER_MW: "123456,",
    TRTSHIM_MOCK_POWER_LIMIT_MW: "300000",
    TRTSHIM_MOCK_ENERGY_MJ: "5000000",
  };
  await withEnv(env, async () => {
    await using s = await startTestServer([
      `--backend-config=tensorrt,shim-path=${shim}`,
      "--metrics-interval-ms=10",
    ]);
    const power = (m: Scrape) =>
      gpuSamples(m).filter((line) => POWER_METRICS.some((n) => line.startsWith(`${n}{`)));
    const first = await scrape(s);
    assert.deepEqual(power(first), [
      // Triton counts the joules since the server started, not since the driver loaded.
      `nv_energy_consumption{{"gpu_uuid":"${MOCK_UUID[0]}"}} 0`,
      `nv_gpu_power_limit{{"gpu_uuid":"${MOCK_UUID[0]}"}} 300`,
      `nv_gpu_power_usage{{"gpu_uuid":"${MOCK_UUID[0]}"}} 123.456`,
    ]);
    assert.equal(first.types.get("nv_gpu_power_usage"), "gauge");
    assert.equal(first.types.get("nv_gpu_power_limit"), "gauge");
    assert.equal(first.types.get("nv_energy_consumption"), "counter");
    // Device 1 still reports utilization and memory.
    assert.equal(metric(first, "nv_gpu_memory_total_bytes", { gpu_uuid: MOCK_UUID[1]! }), 1 << 30);

    // The device draws more and its energy counter grows by 12.345 J: the next sample shows both.
    Deno.env.set("TRTSHIM_MOCK_POWER_MW", "250000,");
    Deno.env.set("TRTSHIM_MOCK_ENERGY_MJ", "5012345");
    const expected = [
      `nv_energy_consumption{{"gpu_uuid":"${MOCK_UUID[0]}"}} 12.345`,
      `nv_gpu_power_limit{{"gpu_uuid":"${MOCK_UUID[0]}"}} 300`,
      `nv_gpu_power_usage{{"gpu_uuid":"${MOCK_UUID[0]}"}} 250`,
    ];
    let lines = power(await scrape(s));
    for (let i = 0; i < 500 && JSON.stringify(lines) !== JSON.stringify(expected); i++) {
      await new Promise((r) => setTimeout(r, 10));
      lines = power(await scrape(s));
    }
    assert.deepEqual(lines, expected);
    // A driver reload restarts the device's counter at 0: the new millijoules add up, the total never falls.
    Deno.env.set("TRTSHIM_MOCK_ENERGY_MJ", "1000");
    let energy = metric(await scrape(s), "nv_energy_consumption", { gpu_uuid: MOCK_UUID[0]! });
    for (let i = 0; i < 500 && energy !== 13.345; i++) {
      await new Promise((r) => setTimeout(r, 10));
      energy = metric(await scrape(s), "nv_energy_consumption", { gpu_uuid: MOCK_UUID[0]! });
    }
    assert.equal(energy, 13.345);
  });
});

Deno.test({
  name: "no GPU series without a GPU: --allow-gpu-metrics=false, 0 devices, no library, or a mock not chosen",
  ignore: shim === undefined,
}, async () => {
  const none = async (flags: string[], env: Record<string, string> = {}) => {
    await withEnv(env, async () => {
      await using s = await startTestServer(flags);
      const m = await scrape(s);
      assert.deepEqual(gpuSamples(m), [], flags.join(" "));
      assert.deepEqual(
        [...m.types.keys()].filter((n) => n.startsWith("nv_gpu_") || n === "nv_energy_consumption"),
        [],
        flags.join(" "),
      );
    });
  };
  await none([`--backend-config=tensorrt,shim-path=${shim}`, "--allow-gpu-metrics=false"], {
    TRTSHIM_MOCK_POWER_MW: "1",
    TRTSHIM_MOCK_POWER_LIMIT_MW: "2",
    TRTSHIM_MOCK_ENERGY_MJ: "3",
  });
  await none([`--backend-config=tensorrt,shim-path=${shim}`], { TRTSHIM_MOCK_DEVICE_COUNT: "0" });
  await none(["--backend-config=tensorrt,shim-path=/nonexistent/libtrtshim.so"]);
  // The default path (build/shim/libtrtshim.so) is the mock on a machine without CUDA: not a GPU.
  if (Deno.env.get("DINFER_TRTSHIM") === undefined) await none([]);
});
