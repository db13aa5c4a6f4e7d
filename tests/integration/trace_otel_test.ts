/**
 * The trace extension in opentelemetry mode (`--trace-config=mode=opentelemetry`): a small OTLP/HTTP
 * receiver (JSON, the encoding of @opentelemetry/exporter-trace-otlp-http) takes the exports, and the tests
 * check the spans exactly as Triton makes them: per traced request an `InferRequest` root span with the
 * frontend's timestamps, a span named after the model with the request's timestamps and Triton's
 * attributes, and a `compute` span with the compute timestamps; which requests are traced (trace_rate), the
 * batch span processor settings, the resource, and the settings refused at start-up.
 * @module
 */

import assert from "node:assert/strict";
import { startTestServer, type TestServer } from "../helpers.ts";
import { TraceManager } from "../../server/trace/trace.ts";
import { call, get, inferJson, SIMPLE_REQUEST } from "./_http.ts";

/** A span as the test compares it: ids replaced by the names of the spans they point at. */
interface SpanView {
  name: string;
  parent: string | undefined;
  kind: number;
  attributes: Record<string, unknown>;
  events: string[];
}

interface OtlpValue {
  stringValue?: string;
  intValue?: number | string;
  boolValue?: boolean;
  doubleValue?: number;
}

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: { key: string; value: OtlpValue }[];
  events: { name: string; timeUnixNano: string }[];
}

interface OtlpExport {
  resourceSpans: {
    resource: { attributes: { key: string; value: OtlpValue }[] };
    scopeSpans: { scope: { name: string }; spans: OtlpSpan[] }[];
  }[];
}

function value(v: OtlpValue): unknown {
  if (v.intValue !== undefined) return Number(v.intValue);
  return v.stringValue ?? v.boolValue ?? v.doubleValue;
}

function attributes(list: { key: string; value: OtlpValue }[]): Record<string, unknown> {
  return Object.fromEntries(list.map((a) => [a.key, value(a.value)]));
}

/** An OTLP/HTTP traces endpoint on a free port that keeps every export request it receives. */
class OtlpReceiver {
  readonly exports: OtlpExport[] = [];
  readonly paths: string[] = [];
  readonly #server: Deno.HttpServer<Deno.NetAddr>;
  #waiting: (() => void)[] = [];

  constructor() {
    this.#server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
      this.paths.push(`${req.method} ${new URL(req.url).pathname} ${req.headers.get("content-type")}`);
      this.exports.push(await req.json() as OtlpExport);
      for (const wake of this.#waiting.splice(0)) wake();
      return new Response("{}", { headers: { "content-type": "application/json" } });
    });
  }

  /** The traces endpoint. */
  get url(): string {
    return `http://127.0.0.1:${this.#server.addr.port}/v1/traces`;
  }

  /** Resolves once `n` export requests have arrived. */
  async received(n: number): Promise<void> {
    while (this.exports.length < n) await new Promise<void>((r) => this.#waiting.push(r));
  }

  /** Every span received, in order. */
  get spans(): OtlpSpan[] {
    return this.exports.flatMap((e) => e.resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
  }

  async close(): Promise<void> {
    await this.#server.shutdown();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** The spans grouped by OpenTelemetry trace, each as a SpanView, in the order of their Triton trace id. */
function traces(spans: OtlpSpan[]): SpanView[][] {
  const byTrace = new Map<string, OtlpSpan[]>();
  for (const s of spans) byTrace.set(s.traceId, [...(byTrace.get(s.traceId) ?? []), s]);
  const order = ["InferRequest", "simple", "compute"];
  const out = [...byTrace.values()].map((group) => {
    const byId = new Map(group.map((s) => [s.spanId, s]));
    return group
      .map((s): SpanView => ({
        name: s.name,
        parent: s.parentSpanId ? byId.get(s.parentSpanId)?.name ?? "(elsewhere)" : undefined,
        kind: s.kind,
        attributes: attributes(s.attributes),
        events: s.events.map((e) => e.name),
      }))
      .sort((a, b) => order.indexOf(a.name) - order.indexOf(b.name));
  });
  const tritonId = (t: SpanView[]) =>
    Number(t.find((s) => s.name === "simple")?.attributes["triton.trace_id"]);
  return out.sort((a, b) => tritonId(a) - tritonId(b));
}

/** The three spans Triton makes for an HTTP request to `simple` traced with the given ids. */
function expectedHttpTrace(traceId: number, requestId: string): SpanView[] {
  return [
    {
      name: "InferRequest",
      parent: undefined,
      kind: 2,
      attributes: {},
      events: ["HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"],
    },
    {
      name: "simple",
      parent: "InferRequest",
      kind: 2,
      attributes: {
        "triton.model_name": "simple",
        "triton.model_version": 1,
        "triton.trace_id": traceId,
        "triton.trace_parent_id": 0,
        "triton.request_id": requestId,
      },
      events: ["REQUEST_START", "QUEUE_START", "REQUEST_END"],
    },
    {
      name: "compute",
      parent: "simple",
      kind: 2,
      attributes: {},
      events: ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"],
    },
  ];
}

/** Each span starts at its first event and the model and compute spans end at their last one. */
function assertSpanTimes(spans: OtlpSpan[]): void {
  for (const s of spans) {
    const times = s.events.map((e) => BigInt(e.timeUnixNano));
    const [start, end] = [BigInt(s.startTimeUnixNano), BigInt(s.endTimeUnixNano)];
    assert.equal(start, times[0], `${s.name} starts at its first event`);
    for (let i = 1; i < times.length; i++) assert.ok(times[i - 1]! <= times[i]!, `${s.name} events in order`);
    if (s.name === "InferRequest") assert.ok(end >= times.at(-1)!, "the root span ends after its events");
    else assert.equal(end, times.at(-1), `${s.name} ends at its last event`);
  }
}

async function inferSimple(s: TestServer, id: string): Promise<void> {
  const a = await inferJson(s.url, "simple", { id, ...SIMPLE_REQUEST });
  assert.equal(a.status, 200, JSON.stringify(a.json));
}

Deno.test("opentelemetry mode with trace_rate 2 exports 3 spans for each second request, as Triton makes them", async () => {
  await using receiver = new OtlpReceiver();
  const s = await startTestServer([
    "--trace-config=mode=opentelemetry",
    `--trace-config=opentelemetry,url=${receiver.url}`,
    "--trace-config=opentelemetry,resource=deployment.environment=test",
    "--trace-config=opentelemetry,resource=service.version=7",
    "--trace-config=level=TIMESTAMPS",
    "--trace-config=rate=2",
  ]);
  try {
    assert.deepEqual((await get(s.url, "/v2/trace/setting")).json, {
      trace_level: ["TIMESTAMPS"],
      trace_rate: "2",
      trace_count: "-1",
      log_frequency: "0",
      trace_file: "",
      trace_mode: "opentelemetry",
    });
    for (let i = 1; i <= 5; i++) await inferSimple(s, `r${i}`);
    // The batch span processor waits bsp_schedule_delay (5 s) or a full batch: nothing is sent yet.
    assert.equal(receiver.exports.length, 0);
  } finally {
    // Shutting down exports what is queued.
    await s.close();
  }
  assert.deepEqual(receiver.paths, ["POST /v1/traces application/json"]);
  const [request] = receiver.exports;
  assert.equal(request!.resourceSpans.length, 1);
  const resource = attributes(request!.resourceSpans[0]!.resource.attributes);
  assert.deepEqual(
    [resource["service.name"], resource["service.version"], resource["deployment.environment"]],
    ["dinfer", "7", "test"],
  );
  assert.deepEqual(request!.resourceSpans[0]!.scopeSpans.map((x) => x.scope.name), ["dinfer"]);
  // Requests r2 and r4 are traced (trace ids 1 and 2): 6 spans in 2 OpenTelemetry traces.
  assert.equal(receiver.spans.length, 6);
  assert.deepEqual(traces(receiver.spans), [expectedHttpTrace(1, "r2"), expectedHttpTrace(2, "r4")]);
  assertSpanTimes(receiver.spans);
});

Deno.test("bsp_max_export_batch_size 3 sends each traced request's 3 spans at once, in one export each", async () => {
  await using receiver = new OtlpReceiver();
  await using s = await startTestServer([
    "--trace-config=mode=opentelemetry",
    `--trace-config=opentelemetry,url=${receiver.url}`,
    "--trace-config=opentelemetry,bsp_max_export_batch_size=3",
    "--trace-config=opentelemetry,bsp_max_queue_size=6",
    "--trace-config=opentelemetry,bsp_schedule_delay=600000",
    "--trace-config=level=TIMESTAMPS",
    "--trace-config=rate=1",
    "--trace-config=count=2",
  ]);
  await inferSimple(s, "a");
  await receiver.received(1);
  assert.deepEqual(traces(receiver.spans), [expectedHttpTrace(1, "a")]);
  await inferSimple(s, "b");
  await receiver.received(2);
  assert.equal(receiver.exports[1]!.resourceSpans[0]!.scopeSpans[0]!.spans.length, 3);
  assert.deepEqual(traces(receiver.spans), [expectedHttpTrace(1, "a"), expectedHttpTrace(2, "b")]);
  // trace_count 2 is used up: a third request is not traced.
  assert.equal((await get(s.url, "/v2/trace/setting")).json?.trace_count, "0");
  await inferSimple(s, "c");
  assertSpanTimes(receiver.spans);
  assert.equal(receiver.spans.length, 6);
});

Deno.test("a request refused by validation is not traced; one without an id has no triton.request_id", async () => {
  await using receiver = new OtlpReceiver();
  const s = await startTestServer([
    "--trace-config=mode=opentelemetry",
    `--trace-config=opentelemetry,url=${receiver.url}`,
    "--trace-config=level=TIMESTAMPS",
    "--trace-config=rate=1",
  ]);
  try {
    const bad = await inferJson(s.url, "simple", {
      inputs: [SIMPLE_REQUEST.inputs[0], { ...SIMPLE_REQUEST.inputs[1], shape: [1, 15], data: [] }],
    });
    assert.equal(bad.status, 400);
    const ok = await inferJson(s.url, "simple", SIMPLE_REQUEST);
    assert.equal(ok.status, 200);
  } finally {
    await s.close();
  }
  const got = traces(receiver.spans);
  const [, okRequest, okCompute] = expectedHttpTrace(0, "");
  delete okRequest!.attributes["triton.request_id"];
  // Only requests that reach the model are sampled; a request refused by validation is not.
  assert.deepEqual(got, [[
    expectedHttpTrace(1, "")[0]!,
    { ...okRequest!, attributes: { ...okRequest!.attributes, "triton.trace_id": 1 } },
    okCompute!,
  ]]);
});

Deno.test("a trace that ended before compute gives the root and model spans only, at the marks' times", async () => {
  await using receiver = new OtlpReceiver();
  const manager = new TraceManager([
    "mode=opentelemetry",
    `opentelemetry,url=${receiver.url}`,
    "level=TIMESTAMPS",
    "rate=1",
  ]);
  await manager.start();
  const t = manager.sample("simple", "3", "q")!;
  t.mark("GRPC_WAITREAD_END", 1_000);
  t.mark("REQUEST_START", 2_000);
  t.mark("QUEUE_START", 3_000);
  t.mark("REQUEST_END", 4_000);
  t.mark("GRPC_SEND_START", 5_000);
  t.end();
  await manager.close();
  const [root, model, ...rest] = traces(receiver.spans)[0]!;
  assert.deepEqual([root, model, rest], [
    {
      name: "InferRequest",
      parent: undefined,
      kind: 2,
      attributes: {},
      events: ["GRPC_WAITREAD_END", "GRPC_SEND_START"],
    },
    {
      name: "simple",
      parent: "InferRequest",
      kind: 2,
      attributes: {
        "triton.model_name": "simple",
        "triton.model_version": 3,
        "triton.trace_id": 1,
        "triton.trace_parent_id": 0,
        "triton.request_id": "q",
      },
      events: ["REQUEST_START", "QUEUE_START", "REQUEST_END"],
    },
    [],
  ]);
  // Times are the marks' (nanoseconds after performance.timeOrigin) on the wall clock.
  const span = receiver.spans.find((x) => x.name === "simple")!;
  const origin = BigInt(Math.round(performance.timeOrigin * 1e3)) * 1000n;
  const offsets = span.events.map((e) => BigInt(e.timeUnixNano) - origin);
  assert.deepEqual(offsets.map((o) => o - offsets[0]!), [0n, 1000n, 2000n]);
  assert.ok(
    offsets[0]! >= 1000n && offsets[0]! <= 3000n,
    `REQUEST_START at ${offsets[0]} ns after the origin`,
  );
  assertSpanTimes(receiver.spans);
});

Deno.test("opentelemetry mode: trace_level, trace_rate and trace_count change at run time, trace_file does not apply", async () => {
  await using receiver = new OtlpReceiver();
  await using s = await startTestServer([
    "--trace-config=mode=opentelemetry",
    `--trace-config=opentelemetry,url=${receiver.url}`,
  ]);
  const post = (body: unknown) =>
    call(`${s.url}/v2/trace/setting`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const a = await post({ trace_level: ["TIMESTAMPS"], trace_rate: "3", trace_count: "5" });
  assert.deepEqual([a.status, a.json], [200, {
    trace_level: ["TIMESTAMPS"],
    trace_rate: "3",
    trace_count: "5",
    log_frequency: "0",
    trace_file: "",
    trace_mode: "opentelemetry",
  }]);
  for (
    const [body, error] of [
      [
        { trace_file: "/tmp/x.json" },
        "Cannot update the trace settings: 'trace_file' does not apply to trace_mode 'opentelemetry'",
      ],
      [
        { log_frequency: "2" },
        "Cannot update the trace settings: 'log_frequency' does not apply to trace_mode 'opentelemetry'",
      ],
      [
        { trace_mode: "triton" },
        "Cannot update the trace settings: only trace_mode 'opentelemetry' is supported",
      ],
    ] as const
  ) {
    const r = await post(body);
    assert.deepEqual([r.status, r.json], [400, { error }], JSON.stringify(body));
  }
});

Deno.test("triton-mode file settings are ignored in opentelemetry mode and opentelemetry settings in triton mode", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer_otel_" });
  try {
    await using receiver = new OtlpReceiver();
    const s = await startTestServer([
      "--trace-config=mode=opentelemetry",
      `--trace-config=opentelemetry,url=${receiver.url}`,
      `--trace-config=triton,file=${dir}/t.json`,
      "--trace-config=triton,log-frequency=1",
      "--trace-config=level=TIMESTAMPS",
      "--trace-config=rate=1",
    ]);
    try {
      assert.deepEqual((await get(s.url, "/v2/trace/setting")).json?.trace_file, "");
      await inferSimple(s, "x");
    } finally {
      await s.close();
    }
    assert.equal(receiver.spans.length, 3);
    assert.deepEqual([...Deno.readDirSync(dir)], [], "no trace file");
    // Without mode=opentelemetry the mode stays triton (as in Triton) and the url is not used.
    await using t = await startTestServer([`--trace-config=opentelemetry,url=${receiver.url}`]);
    assert.equal((await get(t.url, "/v2/trace/setting")).json?.trace_mode, "triton");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("--trace-config levels add up as in Triton, and bad entries stop the start with one line naming them", async () => {
  {
    await using s = await startTestServer([
      "--trace-config=level=timestamps",
      "--trace-config=level=TENSORS",
      "--trace-config=mode=opentelemetry",
      "--trace-config=opentelemetry,url=http://127.0.0.1:9/v1/traces",
    ]);
    assert.deepEqual((await get(s.url, "/v2/trace/setting")).json?.trace_level, ["TIMESTAMPS", "TENSORS"]);
  }
  {
    await using s = await startTestServer(["--trace-config=level=TIMESTAMPS", "--trace-config=level=OFF"]);
    assert.deepEqual((await get(s.url, "/v2/trace/setting")).json?.trace_level, ["OFF"]);
  }
  const cases: [string[], string][] = [
    [
      ["--trace-config=mode=zipkin"],
      "Bad --trace-config 'mode=zipkin': unknown mode 'zipkin' (triton, opentelemetry)",
    ],
    [
      ["--trace-config=jaeger,url=x"],
      "Bad --trace-config 'jaeger,url=x': unknown mode 'jaeger' (triton, opentelemetry)",
    ],
    [
      ["--trace-config=opentelemetry,endpoint=x"],
      "Bad --trace-config 'opentelemetry,endpoint=x': unknown opentelemetry setting 'endpoint'",
    ],
    [
      ["--trace-config=opentelemetry,resource=novalue"],
      "Bad --trace-config 'opentelemetry,resource=novalue': expected resource=<key>=<value>",
    ],
    [
      ["--trace-config=opentelemetry,bsp_max_queue_size=-1"],
      "Bad --trace-config 'opentelemetry,bsp_max_queue_size=-1': expected an unsigned integer",
    ],
    [
      [
        "--trace-config=mode=opentelemetry",
        "--trace-config=opentelemetry,bsp_max_queue_size=10",
        "--trace-config=opentelemetry,bsp_max_export_batch_size=11",
      ],
      "Bad --trace-config: bsp_max_export_batch_size (11) must not exceed bsp_max_queue_size (10)",
    ],
    [
      ["--trace-config=mode=opentelemetry", "--trace-config=opentelemetry,url=localhost:4318"],
      "Bad --trace-config 'opentelemetry,url=localhost:4318': expected an http:// or https:// URL",
    ],
    [
      ["--trace-config=level=most"],
      "Bad --trace-config 'level=most': unknown level 'most' (OFF, TIMESTAMPS, TENSORS)",
    ],
    [
      ["--trace-config=rate=0"],
      "Cannot update the trace settings: 'trace_rate' is '0', expected an integer of at least 1",
    ],
    [["--trace-config=sample=1"], "Bad --trace-config 'sample=1': unknown setting 'sample'"],
  ];
  for (const [flags, message] of cases) {
    await assert.rejects(startTestServer(flags), { name: "StartupError", message }, flags.join(" "));
  }
});
