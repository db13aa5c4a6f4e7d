/**
 * The latency summaries as Triton keeps them: its default quantiles, and quantiles over a sliding window of a
 * minute while the count and sum keep growing.
 * @module
 */

import assert from "node:assert/strict";
import type client from "prom-client";
import { createMetrics, parseMetricsConfig } from "../../server/metrics/prometheus.ts";
import { setLatencyObserver } from "../../server/metrics/stats.ts";
import type { ModelRegistry } from "../../server/models/registry.ts";

Deno.test("the summaries' default quantiles are Triton's", () => {
  assert.deepEqual(parseMetricsConfig([]).quantiles, [0.5, 0.9, 0.95, 0.99, 0.999]);
  assert.deepEqual(parseMetricsConfig(["summary_quantiles=0.5:0.05,0.99:0.001"]).quantiles, [0.5, 0.99]);
});

Deno.test("a summary's quantiles cover the last minute; its count and sum every observation", async () => {
  const models = { readyVersions: () => [] } as unknown as ModelRegistry;
  const registry = createMetrics(models, { config: ["summary_latencies=true"] });
  const realNow = Date.now;
  let now = 1_000_000_000;
  Date.now = () => now;
  try {
    const summary = registry.getSingleMetric("nv_inference_queue_summary_us") as client.Summary<
      "model" | "version"
    >;
    const labels = { model: "m", version: "1" };
    const read = async () => {
      const values = (await summary.get()).values;
      const q = values.filter((v) => (v.labels as Record<string, unknown>).quantile === 0.5).map((v) =>
        v.value
      );
      const count = values.find((v) => v.metricName === "nv_inference_queue_summary_us_count")?.value;
      const sum = values.find((v) => v.metricName === "nv_inference_queue_summary_us_sum")?.value;
      return { median: q[0], count, sum };
    };
    for (let i = 0; i < 5; i++) summary.observe(labels, 100);
    assert.deepEqual(await read(), { median: 100, count: 5, sum: 500 });
    // Past the window, the old observations leave the quantiles, not the count and sum.
    now += 61_000;
    for (let i = 0; i < 5; i++) summary.observe(labels, 20);
    assert.deepEqual(await read(), { median: 20, count: 10, sum: 600 });
  } finally {
    Date.now = realNow;
    setLatencyObserver(undefined);
  }
});
