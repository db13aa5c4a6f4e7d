/**
 * Prometheus metrics with Triton's names and labels, served on `--metrics-port` at `/metrics`. Inference
 * metrics are read from each model version's statistics at scrape time, so the hot path only updates plain
 * numbers; CPU and GPU gauges report the last sample of a SystemSampler (every `--metrics-interval-ms`).
 * @module
 */

import client from "prom-client";
import type { ModelRegistry } from "../models/registry.ts";
import { invalidArg } from "../core/errors.ts";
import type { GpuSample } from "./gpu.ts";
import type { SystemSampler } from "./sampler.ts";
import { FAILURE_REASONS, setLatencyObserver, setResponseObserver, type VersionStats } from "./stats.ts";

/** What the metrics endpoint reports. */
export interface MetricsOptions {
  /** `--metrics-config` entries: counter_latencies, summary_latencies, histogram_latencies, summary_quantiles. */
  config?: readonly string[];
  /**
   * The sampled CPU and GPU readings (`--metrics-interval-ms`): CPU gauges when it samples the CPU, GPU
   * gauges (label `gpu_uuid`) when it has GPUs. Without it neither is reported.
   */
  sampler?: SystemSampler;
}

/** The `--metrics-config` settings. */
export interface MetricsConfig {
  counterLatencies: boolean;
  summaryLatencies: boolean;
  histogramLatencies: boolean;
  /** Summary quantiles (Triton's `summary_quantiles=0.5:0.05,0.9:0.01,...`; the error part is accepted). */
  quantiles: number[];
}

/**
 * Reads `--metrics-config` entries.
 * @param entries `key=value` strings
 * @throws ServerError INVALID_ARG naming a bad entry
 */
export function parseMetricsConfig(entries: readonly string[]): MetricsConfig {
  const out: MetricsConfig = {
    counterLatencies: true,
    summaryLatencies: false,
    histogramLatencies: false,
    quantiles: [0.5, 0.9, 0.95, 0.99, 0.999],
  };
  const bool = (k: string, v: string) => {
    if (v !== "true" && v !== "false") {
      throw invalidArg(`Bad --metrics-config '${k}=${v}': expected true or false`);
    }
    return v === "true";
  };
  for (const entry of entries) {
    const i = entry.indexOf("=");
    const k = entry.slice(0, i), v = entry.slice(i + 1);
    if (k === "counter_latencies") out.counterLatencies = bool(k, v);
    else if (k === "summary_latencies") out.summaryLatencies = bool(k, v);
    else if (k === "histogram_latencies") out.histogramLatencies = bool(k, v);
    else if (k === "summary_quantiles") {
      out.quantiles = v.split(",").map((q) => {
        const n = Number(q.split(":")[0]);
        if (!(n > 0 && n < 1)) {
          throw invalidArg(`Bad --metrics-config '${entry}': quantile '${q}' is not in (0, 1)`);
        }
        return n;
      });
    } else throw invalidArg(`Bad --metrics-config '${entry}': unknown setting '${k}'`);
  }
  return out;
}

type Labels = { model: string; version: string };

/** The sliding window of the latency summaries' quantiles, in seconds, and the steps it moves in. */
const SUMMARY_WINDOW_S = 60;
const SUMMARY_WINDOW_STEPS = 5;

/**
 * Creates the metrics registry over the model registry.
 * @param models the model registry
 * @param options what to report
 * @returns the prom-client registry
 */
export function createMetrics(models: ModelRegistry, options: MetricsOptions): client.Registry {
  const registry = new client.Registry();
  const labelNames = ["model", "version"] as const;
  const mc = parseMetricsConfig(options.config ?? []);
  setLatencyObserver(undefined);
  setResponseObserver(undefined);
  if (mc.summaryLatencies || mc.histogramLatencies) {
    const names = [
      ["request", "nv_inference_request_summary_us", "Summary of inference request duration in microseconds"],
      ["queue", "nv_inference_queue_summary_us", "Summary of inference queuing duration in microseconds"],
      [
        "computeInput",
        "nv_inference_compute_input_summary_us",
        "Summary of compute input duration in microseconds",
      ],
      [
        "computeInfer",
        "nv_inference_compute_infer_summary_us",
        "Summary of compute inference duration in microseconds",
      ],
      [
        "computeOutput",
        "nv_inference_compute_output_summary_us",
        "Summary of compute output duration in microseconds",
      ],
    ] as const;
    // The series of a version that is no longer ready (unloaded, or replaced by a reload that dropped it) leave
    // at the next scrape, as the counters' do: their labels would otherwise stay for good, one set for every
    // model a client ever loaded.
    const pruned = () => {
      const seen = new Map<string, Labels>();
      return {
        seen,
        collect(this: { remove(labels: Labels): void }) {
          const ready = new Set(
            models.readyVersions().map((v) => keyOf({ model: v.name, version: String(v.version) })),
          );
          for (const [key, labels] of seen) {
            if (ready.has(key)) continue;
            this.remove(labels);
            seen.delete(key);
          }
        },
      };
    };
    const keyOf = (labels: Labels) => `${labels.model}\0${labels.version}`;
    const noted = (p: ReturnType<typeof pruned> | undefined, key: string, labels: Labels) =>
      p?.seen.set(key, labels);
    const summaries = mc.summaryLatencies
      ? names.map(([key, name, help]) => {
        const p = pruned();
        return [
          key,
          new client.Summary({
            name,
            help,
            labelNames,
            percentiles: mc.quantiles,
            // As Triton's: quantiles over a sliding window (the last minute, in 5 steps); count and sum since
            // the start.
            maxAgeSeconds: SUMMARY_WINDOW_S,
            ageBuckets: SUMMARY_WINDOW_STEPS,
            registers: [registry],
            collect: p.collect,
          }),
          p,
        ] as const;
      })
      : [];
    const firstPruned = mc.histogramLatencies ? pruned() : undefined;
    const intervalPruned = mc.histogramLatencies ? pruned() : undefined;
    const histogram = mc.histogramLatencies
      ? new client.Histogram({
        name: "nv_inference_first_response_histogram_ms",
        help: "Duration from request to first response in milliseconds",
        labelNames,
        buckets: [1, 5, 10, 50, 100, 500, 1000, 5000],
        registers: [registry],
        collect: firstPruned!.collect,
      })
      : undefined;
    // Between two responses of one request to a decoupled model (inter-token latency for LLMs).
    const interval = mc.histogramLatencies
      ? new client.Histogram({
        name: "nv_inference_response_interval_histogram_ms",
        help: "Duration between consecutive responses of a request to a decoupled model in milliseconds",
        labelNames,
        buckets: [1, 5, 10, 50, 100, 500, 1000, 5000],
        registers: [registry],
        collect: intervalPruned!.collect,
      })
      : undefined;
    setLatencyObserver((model, version, l) => {
      const labels = { model, version };
      const series = keyOf(labels);
      for (const [key, summary, p] of summaries) {
        summary.observe(labels, l[key] / 1000);
        noted(p, series, labels);
      }
      // A decoupled model's first response is timed when it is sent (below), not when execute returns.
      if (!l.decoupled && histogram) {
        histogram.observe(labels, l.request / 1e6);
        noted(firstPruned, series, labels);
      }
    });
    setResponseObserver((model, version, sinceRequest, sincePrevious) => {
      const labels = { model, version };
      if (sincePrevious === undefined) {
        histogram?.observe(labels, sinceRequest / 1e6);
        noted(firstPruned, keyOf(labels), labels);
      } else {
        interval?.observe(labels, sincePrevious / 1e6);
        noted(intervalPruned, keyOf(labels), labels);
      }
    });
  }
  const perVersion = (each: (stats: VersionStats) => number) =>
    function (this: client.Counter<"model" | "version"> | client.Gauge<"model" | "version">) {
      this.reset();
      for (const v of models.readyVersions()) {
        const labels: Labels = { model: v.name, version: String(v.version) };
        v.stats.absorb();
        const value = each(v.stats);
        if (this instanceof client.Counter) this.inc(labels, value);
        else this.set(labels, value);
      }
    };
  const counter = (name: string, help: string, each: (s: VersionStats) => number) =>
    new client.Counter({ name, help, labelNames, registers: [registry], collect: perVersion(each) });
  const usToNs = 1000;

  counter(
    "nv_inference_request_success",
    "Number of successful inference requests, all batch sizes",
    (s) => s.success.count,
  );
  new client.Counter({
    name: "nv_inference_request_failure",
    help: "Number of failed inference requests, all batch sizes",
    // Triton's order (its labels sorted by name): clients that match the text find the same lines.
    labelNames: ["model", "reason", "version"] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const v of models.readyVersions()) {
        v.stats.absorb();
        for (const reason of FAILURE_REASONS) {
          this.inc({ model: v.name, reason, version: String(v.version) }, v.stats.failures[reason]);
        }
      }
    },
  });
  counter(
    "nv_inference_count",
    "Number of inferences performed (does not include cached requests)",
    (s) => s.inferenceCount,
  );
  counter(
    "nv_inference_response_count",
    "Number of responses sent by decoupled models, errors included",
    (s) => s.responseCount,
  );
  counter(
    "nv_inference_exec_count",
    "Number of model executions performed (does not include cached requests)",
    (s) => s.executionCount,
  );
  if (mc.counterLatencies) {
    counter(
      "nv_inference_request_duration_us",
      "Cumulative inference request duration in microseconds (includes cached requests)",
      (s) => Math.round(s.success.ns / usToNs),
    );
    counter(
      "nv_inference_queue_duration_us",
      "Cumulative inference queuing duration in microseconds (includes cached requests)",
      (s) => Math.round(s.queue.ns / usToNs),
    );
    counter(
      "nv_inference_compute_input_duration_us",
      "Cumulative compute input duration in microseconds (does not include cached requests)",
      (s) => Math.round(s.computeInput.ns / usToNs),
    );
    counter(
      "nv_inference_compute_infer_duration_us",
      "Cumulative compute inference duration in microseconds (does not include cached requests)",
      (s) => Math.round(s.computeInfer.ns / usToNs),
    );
    counter(
      "nv_inference_compute_output_duration_us",
      "Cumulative inference compute output duration in microseconds (does not include cached requests)",
      (s) => Math.round(s.computeOutput.ns / usToNs),
    );
  }
  new client.Gauge({
    name: "nv_inference_pending_request_count",
    help: "Instantaneous number of pending requests awaiting execution per-model.",
    labelNames,
    registers: [registry],
    collect() {
      this.reset();
      for (const v of models.readyVersions()) {
        this.set({ model: v.name, version: String(v.version) }, v.pendingCount());
      }
    },
  });
  new client.Gauge({
    name: "nv_model_load_duration_secs",
    help: "Model load time in seconds",
    labelNames,
    registers: [registry],
    collect: perVersion((s) => s.loadSeconds),
  });
  // Triton reports its pinned (page-locked) host memory pool. dinfer keeps no such pool (host tensors are
  // ordinary memory), so both gauges are 0, as Triton reports with --pinned-memory-pool-byte-size=0.
  for (
    const [name, help] of [
      ["nv_pinned_memory_pool_total_bytes", "Pinned memory pool total memory size, in bytes"],
      ["nv_pinned_memory_pool_used_bytes", "Pinned memory pool used memory size, in bytes"],
    ]
  ) {
    new client.Gauge({ name: name!, help: help!, registers: [registry] }).set(0);
  }
  const sampler = options.sampler;
  if (sampler?.cpuEnabled) {
    const cpuGauge = (name: string, help: string, value: (c: NonNullable<SystemSampler["cpu"]>) => number) =>
      new client.Gauge({
        name,
        help,
        registers: [registry],
        collect() {
          this.reset();
          if (sampler.cpu) this.set(value(sampler.cpu));
        },
      });
    cpuGauge("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", (c) => c.utilization);
    cpuGauge("nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", (c) => c.memoryTotalBytes);
    cpuGauge("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", (c) => c.memoryUsedBytes);
  }
  if (sampler?.gpuEnabled) {
    const gpuGauge = (name: string, help: string, value: (g: GpuSample) => number | undefined) =>
      new client.Gauge({
        name,
        help,
        labelNames: ["gpu_uuid"] as const,
        registers: [registry],
        collect() {
          this.reset();
          for (const g of sampler.gpus) {
            const v = value(g);
            if (v !== undefined) this.set({ gpu_uuid: g.uuid }, v);
          }
        },
      });
    gpuGauge("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", (g) => g.utilization);
    gpuGauge("nv_gpu_memory_total_bytes", "GPU total memory, in bytes", (g) => g.memoryTotalBytes);
    gpuGauge("nv_gpu_memory_used_bytes", "GPU used memory, in bytes", (g) => g.memoryUsedBytes);
    gpuGauge("nv_gpu_power_usage", "GPU power usage in watts", (g) => g.powerUsageWatts);
    gpuGauge("nv_gpu_power_limit", "GPU power management limit in watts", (g) => g.powerLimitWatts);
    // A counter in Triton: the joules since the server started, growing with the device's energy counter.
    new client.Counter({
      name: "nv_energy_consumption",
      help: "GPU energy consumption in joules since the Triton Server started",
      labelNames: ["gpu_uuid"] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const g of sampler.gpus) {
          if (g.energyJoules !== undefined) this.inc({ gpu_uuid: g.uuid }, g.energyJoules);
        }
      },
    });
  }
  return registry;
}

/**
 * The handler of the metrics port: `GET /metrics` in Prometheus text format.
 * @param registry the metrics registry
 */
export function createMetricsHandler(registry: client.Registry): (request: Request) => Promise<Response> {
  return async (request: Request) => {
    const url = new URL(request.url);
    if (url.pathname !== "/metrics") return new Response("Not Found\n", { status: 404 });
    return new Response(await registry.metrics(), { headers: { "content-type": registry.contentType } });
  };
}
