/**
 * The trace extension (triton mode): settings over HTTP and gRPC (tritonclient), `--trace-config`, and the
 * trace files themselves: which requests are sampled (rate, count, per-model overrides), when files are
 * written (every log_frequency traces, when trace_count runs out, at shutdown), and what a trace holds in
 * Triton's JSON trace format (a model entry, one entry per timestamp in time order, tensor entries at level
 * TENSORS). The opentelemetry mode has its own file (trace_otel_test.ts).
 * @module
 */

import assert from "node:assert/strict";
import { FIXTURES, startTestServer, type TestServer } from "../helpers.ts";
import { call, get, inferJson, SIMPLE_DIFF, SIMPLE_REQUEST, SIMPLE_SUM } from "./_http.ts";
import { pythonJson } from "./_python.ts";

const DEFAULTS = {
  trace_level: ["OFF"],
  trace_rate: "1000",
  trace_count: "-1",
  log_frequency: "0",
  trace_file: "",
  trace_mode: "triton",
};

/** The timestamps of an HTTP request, in the order they happen. */
const HTTP_TIMESTAMPS = [
  "HTTP_RECV_START",
  "HTTP_RECV_END",
  "REQUEST_START",
  "QUEUE_START",
  "COMPUTE_START",
  "COMPUTE_INPUT_END",
  "COMPUTE_OUTPUT_START",
  "COMPUTE_END",
  "REQUEST_END",
  "HTTP_SEND_START",
  "HTTP_SEND_END",
];

/** One trace read back from a trace file: the entries with its id, put together. */
interface TraceEntry {
  id: number;
  model_name: string;
  model_version: number;
  request_id?: string;
  timestamps: { name: string; ns: number }[];
  tensors: { activity: string; tensor: { name: string; data: string; shape: string; dtype: string } }[];
}

function setting(s: TestServer, body: unknown, model = "") {
  return call(`${s.url}/v2${model ? `/models/${model}` : ""}/trace/setting`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

async function inferSimple(s: TestServer, id: string): Promise<void> {
  const a = await inferJson(s.url, "simple", { id, ...SIMPLE_REQUEST });
  assert.equal(a.status, 200, JSON.stringify(a.json));
}

/**
 * Reads a trace file, checking that every entry has one of the shapes of Triton's JSON trace format: the
 * model entry (`id`, `model_name`, `model_version`, `request_id` when there is one) first, then entries
 * with one timestamp each (in time order) or one tensor each.
 */
async function readTraces(path: string): Promise<TraceEntry[]> {
  const entries = JSON.parse(await Deno.readTextFile(path)) as Record<string, unknown>[];
  assert.ok(Array.isArray(entries), "a trace file is a JSON array");
  const byId = new Map<number, TraceEntry>();
  for (const e of entries) {
    const keys = Object.keys(e).sort().join(",");
    const id = e.id as number;
    if ("model_name" in e) {
      assert.ok(
        keys === "id,model_name,model_version" || keys === "id,model_name,model_version,request_id",
        keys,
      );
      assert.equal(byId.has(id), false, `one model entry for trace ${id}`);
      byId.set(id, { ...(e as unknown as TraceEntry), timestamps: [], tensors: [] });
      continue;
    }
    const trace = byId.get(id);
    assert.ok(trace, `the model entry of trace ${id} comes before its other entries`);
    if ("timestamps" in e) {
      assert.equal(keys, "id,timestamps");
      const [t, ...more] = e.timestamps as { name: string; ns: number }[];
      assert.deepEqual([Object.keys(t!).sort(), more.length], [["name", "ns"], 0], "one timestamp per entry");
      const last = trace.timestamps.at(-1);
      assert.ok(!last || last.ns <= t!.ns, `${last?.name} before ${t!.name}`);
      trace.timestamps.push(t!);
    } else {
      assert.equal(keys, "activity,id,tensor");
      assert.deepEqual(Object.keys(e.tensor as object).sort(), ["data", "dtype", "name", "shape"]);
      trace.tensors.push(e as unknown as TraceEntry["tensors"][number]);
    }
  }
  return [...byId.values()];
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return false;
    throw err;
  }
}

/** Asserts a trace of an HTTP request to `simple`: its identity and every timestamp once, in order. */
function assertHttpTrace(t: TraceEntry, requestId: string): void {
  assert.deepEqual(
    [t.model_name, t.model_version, t.request_id, typeof t.id],
    ["simple", 1, requestId, "number"],
  );
  const names = t.timestamps.map((x) => x.name);
  assert.deepEqual([...names].sort(), [...HTTP_TIMESTAMPS].sort(), "each timestamp once");
  const at = new Map(t.timestamps.map((x) => [x.name, x.ns]));
  for (let i = 1; i < HTTP_TIMESTAMPS.length; i++) {
    const [a, b] = [HTTP_TIMESTAMPS[i - 1]!, HTTP_TIMESTAMPS[i]!];
    assert.ok(at.get(a)! <= at.get(b)!, `${a} ${at.get(a)} <= ${b} ${at.get(b)}`);
  }
  assert.ok(at.get("HTTP_SEND_END")! > at.get("HTTP_RECV_START")!, "the request took some time");
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer_trace_" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("trace settings default to Triton's, globally and for a model", async () => {
  await using s = await startTestServer();
  for (const path of ["/v2/trace/setting", "/v2/models/simple/trace/setting"]) {
    const a = await get(s.url, path);
    assert.deepEqual([a.status, a.json], [200, DEFAULTS], path);
  }
});

Deno.test("--trace-config with log-frequency 2 writes t.json.0 and t.json.1 of 2 traces each after 4 requests", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/t.json`;
    const s = await startTestServer([
      `--trace-config=triton,file=${file}`,
      "--trace-config=level=TIMESTAMPS",
      "--trace-config=rate=1",
      "--trace-config=log-frequency=2",
    ]);
    try {
      assert.deepEqual((await get(s.url, "/v2/trace/setting")).json, {
        ...DEFAULTS,
        trace_level: ["TIMESTAMPS"],
        trace_rate: "1",
        log_frequency: "2",
        trace_file: file,
      });
      await inferSimple(s, "r1");
      assert.equal(await exists(`${file}.0`), false, "one trace is not written yet");
      await inferSimple(s, "r2");
      await inferSimple(s, "r3");
      await inferSimple(s, "r4");
      const first = await readTraces(`${file}.0`);
      const second = await readTraces(`${file}.1`);
      assert.deepEqual([first.length, second.length], [2, 2]);
      first.forEach((t, i) => assertHttpTrace(t, `r${i + 1}`));
      second.forEach((t, i) => assertHttpTrace(t, `r${i + 3}`));
      assert.equal(new Set([...first, ...second].map((t) => t.id)).size, 4, "every trace has its own id");
    } finally {
      await s.close();
    }
    // Nothing was left to write at shutdown.
    assert.deepEqual(
      [await exists(`${file}.2`), await exists(file)],
      [false, false],
    );
  });
});

Deno.test("trace_rate 2 traces every second request; log_frequency 0 writes the file at shutdown", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/rate.json`;
    const s = await startTestServer([`--trace-config=triton,file=${file}`]);
    try {
      const a = await setting(s, { trace_level: ["TIMESTAMPS"], trace_rate: "2" });
      assert.deepEqual([a.status, a.json], [200, {
        ...DEFAULTS,
        trace_level: ["TIMESTAMPS"],
        trace_rate: "2",
        trace_file: file,
      }]);
      for (let i = 1; i <= 5; i++) await inferSimple(s, `r${i}`);
      assert.equal(await exists(file), false, "log_frequency 0 waits for shutdown");
    } finally {
      await s.close();
    }
    const traces = await readTraces(file);
    assert.deepEqual(traces.map((t) => t.request_id), ["r2", "r4"]);
    for (const t of traces) assertHttpTrace(t, t.request_id!);
  });
});

Deno.test("trace_count 1 stops after one trace, which is written at once", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/count.json`;
    await using s = await startTestServer([`--trace-config=triton,file=${file}`]);
    const a = await setting(s, { trace_level: ["TIMESTAMPS"], trace_rate: "1", trace_count: "1" });
    assert.equal(a.json?.trace_count, "1");
    for (let i = 1; i <= 3; i++) await inferSimple(s, `r${i}`);
    // trace_count is what remains; once it reaches 0 the collected traces go to an indexed file.
    assert.equal((await get(s.url, "/v2/trace/setting")).json?.trace_count, "0");
    assert.equal((await get(s.url, "/v2/models/simple/trace/setting")).json?.trace_count, "0");
    const traces = await readTraces(`${file}.0`);
    assert.deepEqual(traces.map((t) => t.request_id), ["r1"]);
    assert.equal(await exists(`${file}.1`), false);
    // A new count starts sampling again.
    assert.equal((await setting(s, { trace_count: "-1" })).json?.trace_count, "-1");
  });
});

Deno.test("the global trace_count is shared by the models that follow the global settings", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/shared.json`;
    await using s = await startTestServer([`--trace-config=triton,file=${file}`]);
    await setting(s, { trace_level: ["TIMESTAMPS"], trace_rate: "1", trace_count: "2" });
    await inferSimple(s, "r1");
    const str = await inferJson(s.url, "simple_string", {
      id: "s1",
      inputs: [
        {
          name: "INPUT0",
          datatype: "BYTES",
          shape: [1, 16],
          data: Array.from({ length: 16 }, (_, i) => `${i}`),
        },
        { name: "INPUT1", datatype: "BYTES", shape: [1, 16], data: Array.from({ length: 16 }, () => "1") },
      ],
    });
    assert.equal(str.status, 200, JSON.stringify(str.json));
    await inferSimple(s, "r2");
    assert.equal((await get(s.url, "/v2/trace/setting")).json?.trace_count, "0");
    const traces = await readTraces(`${file}.0`);
    assert.deepEqual(traces.map((t) => [t.model_name, t.request_id]), [["simple", "r1"], [
      "simple_string",
      "s1",
    ]]);
  });
});

Deno.test("per-model trace settings override the global ones and null clears an override", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/model.json`;
    await using s = await startTestServer([`--trace-config=triton,file=${file}`]);
    const global = { ...DEFAULTS, trace_file: file };
    const model = await setting(
      s,
      { trace_level: ["TIMESTAMPS"], trace_rate: "1", log_frequency: "1" },
      "simple",
    );
    const simpleSettings = { ...global, trace_level: ["TIMESTAMPS"], trace_rate: "1", log_frequency: "1" };
    assert.deepEqual([model.status, model.json], [200, simpleSettings]);
    assert.deepEqual((await get(s.url, "/v2/models/simple/trace/setting")).json, simpleSettings);
    assert.deepEqual((await get(s.url, "/v2/trace/setting")).json, global, "the global settings stay");
    assert.deepEqual((await get(s.url, "/v2/models/digits/trace/setting")).json, global);

    await inferSimple(s, "r1");
    assertHttpTrace((await readTraces(`${file}.0`))[0]!, "r1");
    // Settings the model does not override follow the global ones as they change.
    assert.equal((await setting(s, { trace_count: "7" })).status, 200);
    assert.equal((await get(s.url, "/v2/models/simple/trace/setting")).json?.trace_count, "7");
    assert.equal((await setting(s, { trace_count: "-1" })).status, 200);

    // Clearing the level falls back to the global OFF: nothing more is traced.
    const cleared = await setting(s, { trace_level: null }, "simple");
    assert.deepEqual(cleared.json, { ...simpleSettings, trace_level: ["OFF"] });
    await inferSimple(s, "r2");
    assert.equal(await exists(`${file}.1`), false);
    const all = await setting(s, { trace_rate: null, trace_file: null, log_frequency: null }, "simple");
    assert.deepEqual(all.json, global);
  });
});

Deno.test("trace level TENSORS records the input and output tensors with their values", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/tensors.json`;
    const s = await startTestServer([`--trace-config=triton,file=${file}`]);
    try {
      const a = await setting(s, { trace_level: ["TIMESTAMPS", "TENSORS"], trace_rate: "1" });
      assert.deepEqual(a.json?.trace_level, ["TIMESTAMPS", "TENSORS"]);
      await inferSimple(s, "t1");
    } finally {
      await s.close();
    }
    const [t, ...rest] = await readTraces(file);
    assert.equal(rest.length, 0);
    assertHttpTrace(t!, "t1");
    const csv = (values: readonly unknown[]) => values.join(",");
    assert.deepEqual(t!.tensors, [
      {
        id: t!.id,
        activity: "TENSOR_QUEUE_INPUT",
        tensor: { name: "INPUT0", data: csv(SIMPLE_REQUEST.inputs[0]!.data), shape: "1,16", dtype: "INT32" },
      },
      {
        id: t!.id,
        activity: "TENSOR_QUEUE_INPUT",
        tensor: { name: "INPUT1", data: csv(SIMPLE_REQUEST.inputs[1]!.data), shape: "1,16", dtype: "INT32" },
      },
      {
        id: t!.id,
        activity: "TENSOR_BACKEND_OUTPUT",
        tensor: { name: "OUTPUT0", data: csv(SIMPLE_SUM), shape: "1,16", dtype: "INT32" },
      },
      {
        id: t!.id,
        activity: "TENSOR_BACKEND_OUTPUT",
        tensor: { name: "OUTPUT1", data: csv(SIMPLE_DIFF), shape: "1,16", dtype: "INT32" },
      },
    ]);
  });
});

Deno.test("bad trace settings answer 400 with the reason and change nothing", async () => {
  await using s = await startTestServer();
  const cases: [unknown, string, string][] = [
    [
      { trace_rate: "0" },
      "",
      "Cannot update the trace settings: 'trace_rate' is '0', expected an integer of at least 1",
    ],
    [
      { trace_rate: "x" },
      "simple",
      "Cannot update the trace settings: 'trace_rate' is 'x', expected an integer of at least 1",
    ],
    [
      { trace_count: "-2" },
      "",
      "Cannot update the trace settings: 'trace_count' is '-2', expected an integer of at least -1",
    ],
    [
      { log_frequency: "1.5" },
      "",
      "Cannot update the trace settings: 'log_frequency' is '1.5', expected an integer of at least 0",
    ],
    [
      { trace_count: "99999999999999999999" },
      "",
      "Cannot update the trace settings: 'trace_count' is '99999999999999999999', expected an integer of at least -1",
    ],
    [{ trace_rate: ["1", "2"] }, "", "Cannot update the trace settings: 'trace_rate' must be one value"],
    // As Triton: values are strings, and tracing on in triton mode needs a trace file.
    [{ trace_rate: 5 }, "", "Cannot update the trace settings: 'trace_rate' is 5, expected a string"],
    [
      { trace_count: ["2"], log_frequency: 0 },
      "",
      "Cannot update the trace settings: 'log_frequency' is 0, expected a string",
    ],
    [
      { trace_level: ["TIMESTAMPS", "MAX"] },
      "",
      "Cannot update the trace settings: trace file name is not given for trace_level 'TIMESTAMPS'",
    ],
    [
      { trace_level: ["TENSORS"] },
      "simple",
      "Cannot update the trace settings: trace file name is not given for trace_level 'TENSORS'",
    ],
    [
      { trace_mode: "opentelemetry" },
      "",
      "Cannot update the trace settings: only trace_mode 'triton' is supported",
    ],
    [{ trace_rate: null }, "", "Cannot update the trace settings: 'trace_rate' cannot be cleared globally"],
    // Every value is checked before any takes effect.
    [
      { trace_level: ["TIMESTAMPS"], trace_rate: "-5" },
      "simple",
      "Cannot update the trace settings: 'trace_rate' is '-5', expected an integer of at least 1",
    ],
  ];
  for (const [body, model, error] of cases) {
    const a = await setting(s, body, model);
    assert.deepEqual([a.status, a.json], [400, { error }], JSON.stringify(body));
  }
  assert.deepEqual((await get(s.url, "/v2/trace/setting")).json, DEFAULTS);
  assert.deepEqual((await get(s.url, "/v2/models/simple/trace/setting")).json, DEFAULTS);
});

Deno.test("trace_file cannot be set over the network (501 / UNIMPLEMENTED), as Triton", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/start.json`;
    await using s = await startTestServer([`--trace-config=triton,file=${file}`, "--allow-grpc=true"]);
    const error =
      "Cannot update the trace settings: trace file location can not be updated through network protocol";
    for (const model of ["", "simple"]) {
      const a = await setting(s, { trace_file: `${dir}/elsewhere.json`, trace_rate: "3" }, model);
      assert.deepEqual([a.status, a.json], [501, { error }], model);
    }
    const grpc = await pythonJson(
      `
import json, os
import tritonclient.grpc as g
from tritonclient.utils import InferenceServerException
c = g.InferenceServerClient(os.environ["URL"])
try:
    c.update_trace_settings(settings={"trace_file": "/tmp/dinfer_elsewhere.json"})
    print(json.dumps(None))
except InferenceServerException as e:
    print(json.dumps([e.status(), e.message()]))
`,
      { URL: `127.0.0.1:${s.server.grpcPort}` },
    );
    assert.deepEqual(grpc, ["StatusCode.UNIMPLEMENTED", error]);
    // Nothing changed.
    assert.deepEqual((await get(s.url, "/v2/trace/setting")).json, { ...DEFAULTS, trace_file: file });
  });
});

Deno.test("trace settings ignore unknown settings and levels and refuse unknown models, as Triton", async () => {
  await using s = await startTestServer();
  // An unknown setting is ignored; an unknown level is skipped (here leaving none: OFF).
  const a = await setting(s, { trace_sample: "1", trace_level: ["MAX"], trace_rate: "7" });
  assert.deepEqual([a.status, a.json], [200, { ...DEFAULTS, trace_rate: "7" }]);
  for (const method of ["GET", "POST"]) {
    const r = await call(`${s.url}/v2/models/nope/trace/setting`, {
      method,
      body: method === "POST" ? JSON.stringify({ trace_rate: "3" }) : undefined,
    });
    assert.deepEqual(
      [r.status, r.json],
      [400, { error: "Request for unknown model: 'nope' is not found" }],
      method,
    );
  }
});

Deno.test("gRPC TraceSetting through tritonclient shows and changes the global and per-model settings", async () => {
  await using s = await startTestServer(["--allow-grpc=true"]);
  const out = await pythonJson(
    `
import json, os
import tritonclient.grpc as g
from tritonclient.utils import InferenceServerException
c = g.InferenceServerClient(os.environ["URL"])
out = {}
out["global"] = c.get_trace_settings(as_json=True)
out["update"] = c.update_trace_settings(settings={"trace_rate": "10", "trace_level": ["MAX"]}, as_json=True)
out["model"] = c.update_trace_settings("simple", {"trace_rate": "3", "log_frequency": "4"}, as_json=True)
out["model_get"] = c.get_trace_settings("simple", as_json=True)
out["cleared"] = c.update_trace_settings("simple", {"trace_rate": None}, as_json=True)
try:
    c.update_trace_settings(settings={"trace_rate": "0"})
    out["bad"] = None
except InferenceServerException as e:
    out["bad"] = [e.status(), e.message()]
for key, model, update in [
    ("no_file", "", {"trace_level": ["TIMESTAMPS"]}),
    ("unknown_model", "nope", {"trace_rate": "2"}),
]:
    try:
        c.update_trace_settings(model, update)
        out[key] = None
    except InferenceServerException as e:
        out[key] = [e.status(), e.message()]
print(json.dumps(out))
`,
    { URL: `127.0.0.1:${s.server.grpcPort}` },
  );
  const proto = (o: Record<string, string | string[]>) => ({
    settings: Object.fromEntries(
      Object.entries(o).map(([k, v]) => [k, { value: Array.isArray(v) ? v : [v] }]),
    ),
  });
  const updated = { ...DEFAULTS, trace_rate: "10" };
  assert.deepEqual(out, {
    global: proto(DEFAULTS),
    update: proto(updated),
    model: proto({ ...updated, trace_rate: "3", log_frequency: "4" }),
    model_get: proto({ ...updated, trace_rate: "3", log_frequency: "4" }),
    cleared: proto({ ...updated, log_frequency: "4" }),
    bad: [
      "StatusCode.INVALID_ARGUMENT",
      "Cannot update the trace settings: 'trace_rate' is '0', expected an integer of at least 1",
    ],
    no_file: [
      "StatusCode.INVALID_ARGUMENT",
      "Cannot update the trace settings: trace file name is not given for trace_level 'TIMESTAMPS'",
    ],
    unknown_model: ["StatusCode.INVALID_ARGUMENT", "Request for unknown model: 'nope' is not found"],
  });
  // HTTP sees the same settings.
  assert.deepEqual((await get(s.url, "/v2/trace/setting")).json, updated);
  assert.deepEqual((await get(s.url, "/v2/models/simple/trace/setting")).json, {
    ...updated,
    log_frequency: "4",
  });
});

Deno.test("traces held for log_frequency 0 are written early once they would take 64 MiB", async () => {
  await withTempDir(async (dir) => {
    const file = `${dir}/big.json`;
    await using s = await startTestServer([
      `--model-repository=${FIXTURES}`,
      "--strict-readiness=false",
      `--trace-config=triton,file=${file}`,
    ]);
    assert.equal((await setting(s, { trace_level: ["TENSORS"], trace_rate: "1" })).status, 200);
    // Each trace holds the 250,000 values of the input and of the output as text, a few MB: a bounded number of
    // requests goes past 64 MiB and is written to the first indexed file, while the server runs.
    const data = Array.from({ length: 250_000 }, (_, i) => i % 997);
    let sent = 0;
    while (!(await exists(`${file}.0`)) && sent < 60) {
      const a = await inferJson(s.url, "identity_fp32", {
        id: `big${sent}`,
        inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, data.length], data }],
      });
      assert.equal(a.status, 200);
      sent++;
    }
    assert.ok(await exists(`${file}.0`), "no early write after 60 large traces");
    assert.ok(sent >= 4 && sent < 60, `written after ${sent} requests`);
  });
});
