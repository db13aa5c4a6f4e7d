/**
 * The dynamic batcher through HTTP, on a temporary repository of copies of `no_config_dynamic` (y = 2x, FP32
 * [-1, 3]) with written configs: batches formed by concurrent requests (statistics and every response), a full
 * queue, priorities, timeouts, and the Prometheus counters of the same requests. Long queue delays make the
 * batches deterministic; the test only waits on the server's own pending-request gauge.
 * @module
 */

import assert from "node:assert/strict";
import { FIXTURES, startTestServer, type TestServer } from "../helpers.ts";
import { get, inferJson, outputsOf } from "./_http.ts";

/** A config over `no_config_dynamic` with one CPU instance and the given dynamic_batching body. */
function config(name: string, maxBatchSize: number, dynamicBatching: string): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: ${maxBatchSize}
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { ${dynamicBatching} }
`;
}

const MODELS: Record<string, string> = {
  // Batches of 4 leave at once; anything smaller waits 400 ms.
  m: config("m", 8, "preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 400000"),
  q: config("q", 8, "max_queue_delay_microseconds: 400000 default_queue_policy { max_queue_size: 2 }"),
  p: config("p", 4, "max_queue_delay_microseconds: 400000 priority_levels: 2 default_priority_level: 2"),
  t: config(
    "t",
    8,
    `max_queue_delay_microseconds: 300000
     default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 0 allow_timeout_override: true }`,
  ),
};

async function withServer(fn: (s: TestServer) => Promise<void>): Promise<void> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_batching_" });
  try {
    for (const [name, text] of Object.entries(MODELS)) {
      await Deno.mkdir(`${repo}/${name}/1`, { recursive: true });
      await Deno.copyFile(`${FIXTURES}/no_config_dynamic/1/model.onnx`, `${repo}/${name}/1/model.onnx`);
      await Deno.writeTextFile(`${repo}/${name}/config.pbtxt`, text);
    }
    await using s = await startTestServer([`--model-repository=${repo}`]);
    await fn(s);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
}

/** Rows of x for a request whose rows start at `first`: [[first, first + 0.5, -first - 1], ...]. */
function rows(first: number, batch: number): number[][] {
  return Array.from({ length: batch }, (_, i) => [first + i, first + i + 0.5, -(first + i) - 1]);
}

interface Outcome {
  status: number;
  /** y as rows, or the error message. */
  y: number[][] | string;
}

/** Sends x (rows) to a model with optional request parameters. */
async function infer(
  s: TestServer,
  model: string,
  x: number[][],
  parameters: Record<string, unknown> = {},
): Promise<Outcome> {
  const a = await inferJson(s.url, model, {
    inputs: [{ name: "x", datatype: "FP32", shape: [x.length, 3], data: x.flat() }],
    parameters,
  });
  if (a.status !== 200) return { status: a.status, y: String(a.json?.error) };
  const out = outputsOf(a)[0]!;
  assert.deepEqual([out.name, out.datatype, out.shape], ["y", "FP32", [x.length, 3]]);
  const flat = out.data as number[];
  return { status: 200, y: x.map((_, r) => flat.slice(r * 3, r * 3 + 3)) };
}

const doubled = (x: number[][]) => x.map((r) => r.map((v) => 2 * v));

/** The statistics of model version 1: counts and batch sizes. */
async function stats(s: TestServer, model: string) {
  const a = await get(s.url, `/v2/models/${model}/stats`);
  assert.equal(a.status, 200);
  const m = (a.json!.model_stats as Record<string, unknown>[])[0]!;
  const is = m.inference_stats as Record<string, { count: number }>;
  return {
    inference_count: m.inference_count,
    execution_count: m.execution_count,
    success: is.success!.count,
    fail: is.fail!.count,
    batches: (m.batch_stats as { batch_size: number; compute_infer: { count: number } }[]).map((
      b,
    ) => [b.batch_size, b.compute_infer.count]),
  };
}

/** One sample of the Prometheus endpoint for a model (version 1), by metric name and extra labels. */
async function metric(s: TestServer, name: string, model: string, extra = ""): Promise<number | undefined> {
  const res = await fetch(`http://127.0.0.1:${s.server.metricsAddr!.port}/metrics`);
  const text = await res.text();
  const want = `{model="${model}"${extra},version="1"}`;
  for (const line of text.split("\n")) {
    const [key, value] = line.split(" ");
    if (key === name + want) return Number(value);
  }
  return undefined;
}

/** Waits until a model has `n` requests pending in its queue (the nv_inference_pending_request_count gauge). */
async function pending(s: TestServer, model: string, n: number): Promise<void> {
  for (let i = 0; i < 500; i++) {
    if (await metric(s, "nv_inference_pending_request_count", model) === n) return;
    await new Promise((r) => setTimeout(r, 2));
  }
  assert.fail(`'${model}' never had ${n} pending requests`);
}

Deno.test("dynamic batching over HTTP: batches, queue size, priorities, timeouts and metrics", async (t) => {
  await withServer(async (s) => {
    await t.step("concurrent requests form preferred batches, the rest leave after the delay", async () => {
      // 8 requests of one row: two preferred batches of 4, whatever their arrival order.
      const xs = Array.from({ length: 8 }, (_, i) => rows(10 * i, 1));
      const outcomes = await Promise.all(xs.map((x) => infer(s, "m", x)));
      assert.deepEqual(outcomes, xs.map((x) => ({ status: 200, y: doubled(x) })));
      assert.deepEqual(await stats(s, "m"), {
        inference_count: 8,
        execution_count: 2,
        success: 8,
        fail: 0,
        batches: [[4, 2]],
      });
      // Rows 2 + 1: below the preferred size, one batch of 3 once the delay is over.
      const more = [rows(100, 2), rows(200, 1)];
      const later = await Promise.all(more.map((x) => infer(s, "m", x)));
      assert.deepEqual(later, more.map((x) => ({ status: 200, y: doubled(x) })));
      assert.deepEqual(await stats(s, "m"), {
        inference_count: 11,
        execution_count: 3,
        success: 10,
        fail: 0,
        batches: [[3, 1], [4, 2]],
      });
    });

    await t.step("a full queue answers 503 at once", async () => {
      const a = infer(s, "q", rows(1, 1));
      const b = infer(s, "q", rows(2, 1));
      await pending(s, "q", 2);
      assert.deepEqual(await infer(s, "q", rows(3, 1)), {
        status: 503,
        y: "Cannot infer 'q': exceeds maximum queue size 2",
      });
      assert.deepEqual(await Promise.all([a, b]), [
        { status: 200, y: doubled(rows(1, 1)) },
        { status: 200, y: doubled(rows(2, 1)) },
      ]);
      assert.deepEqual(await stats(s, "q"), {
        inference_count: 2,
        execution_count: 1,
        success: 2,
        fail: 1,
        batches: [[2, 1]],
      });
    });

    await t.step("a priority 1 request is batched ahead of level 2 requests queued before it", async () => {
      // Queued: low1 (2 rows), low2 (1 row), both level 2; then high (2 rows, level 1). In priority order
      // high + low1 fill max_batch_size 4 and leave at once; low2 leaves alone after the delay. (In arrival
      // order the batches would have been 3 and 2.)
      const low1 = infer(s, "p", rows(1, 2));
      await pending(s, "p", 1);
      const low2 = infer(s, "p", rows(5, 1), { priority: 2 });
      await pending(s, "p", 2);
      const high = infer(s, "p", rows(7, 2), { priority: 1 });
      assert.deepEqual(await Promise.all([low1, low2, high]), [
        { status: 200, y: doubled(rows(1, 2)) },
        { status: 200, y: doubled(rows(5, 1)) },
        { status: 200, y: doubled(rows(7, 2)) },
      ]);
      assert.deepEqual((await stats(s, "p")).batches, [[1, 1], [4, 1]]);
      assert.deepEqual(await infer(s, "p", rows(1, 1), { priority: 3 }), {
        status: 400,
        y: "Cannot infer 'p': priority 3 is out of range, the model has 2 priority levels",
      });
    });

    await t.step("a request timeout expires in the queue with 503; the others still run", async () => {
      const outcomes = await Promise.all([
        infer(s, "t", rows(1, 1), { timeout: 50000 }),
        infer(s, "t", rows(2, 1)),
      ]);
      assert.deepEqual(outcomes, [
        { status: 503, y: "Cannot infer 't': request timeout expired" },
        { status: 200, y: doubled(rows(2, 1)) },
      ]);
      assert.deepEqual(await stats(s, "t"), {
        inference_count: 1,
        execution_count: 1,
        success: 1,
        fail: 1,
        batches: [[1, 1]],
      });
    });

    await t.step("Prometheus counters match the requests", async () => {
      const counts = async (model: string) => [
        await metric(s, "nv_inference_count", model),
        await metric(s, "nv_inference_exec_count", model),
        await metric(s, "nv_inference_request_success", model),
        await metric(s, "nv_inference_request_failure", model, `,reason="REJECTED"`),
        await metric(s, "nv_inference_request_failure", model, `,reason="BACKEND"`),
        await metric(s, "nv_inference_pending_request_count", model),
      ];
      assert.deepEqual(await counts("m"), [11, 3, 10, 0, 0, 0]);
      assert.deepEqual(await counts("q"), [2, 1, 2, 1, 0, 0]);
      assert.deepEqual(await counts("p"), [5, 2, 3, 1, 0, 0]);
      assert.deepEqual(await counts("t"), [1, 1, 1, 1, 0, 0]);
    });
  });
});
