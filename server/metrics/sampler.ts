/**
 * The "per interval" metrics: CPU utilization and memory and the GPU readings are sampled every
 * `--metrics-interval-ms` (as Triton polls them), and the gauges report the last sample.
 * @module
 */

import type { GpuReader, GpuSample } from "./gpu.ts";

/** One CPU reading. */
export interface CpuSample {
  /** Busy share of all CPU time since the previous sample, 0 to 1. */
  utilization: number;
  /** Total memory (RAM) in bytes. */
  memoryTotalBytes: number;
  /** Used memory (total less available) in bytes. */
  memoryUsedBytes: number;
}

/** What the sampler reads. */
export interface SamplerOptions {
  /** Milliseconds between samples (`--metrics-interval-ms`). */
  intervalMs: number;
  /** Sample the CPU (`--allow-cpu-metrics`). */
  cpu: boolean;
  /** The GPUs to sample, if any (`--allow-gpu-metrics` and a GPU seen through the shim). */
  gpu?: GpuReader;
}

/** CPU time from /proc/stat: busy and total jiffies since boot, or undefined where there is none. */
function readCpuTimes(): { busy: number; total: number } | undefined {
  try {
    const line = Deno.readTextFileSync("/proc/stat").split("\n")[0] ?? "";
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    const total = v.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return undefined;
  }
}

/**
 * Samples CPU and GPU gauges on a timer. The first sample is taken by start(); the timer does not keep the
 * process alive and stop() ends it.
 *
 * @example
 * ```ts
 * const sampler = new SystemSampler({ intervalMs: 2000, cpu: true });
 * sampler.start();
 * sampler.cpu?.memoryUsedBytes;
 * sampler.stop();
 * ```
 */
export class SystemSampler {
  readonly #options: SamplerOptions;
  #timer: ReturnType<typeof setInterval> | undefined;
  #lastCpuTimes = readCpuTimes();
  #cpu: CpuSample | undefined;
  #gpus: GpuSample[] = [];

  /**
   * Creates a sampler; nothing is read until start().
   * @param options the interval and what to read
   */
  constructor(options: SamplerOptions) {
    this.#options = options;
  }

  /** Whether CPU gauges are reported. */
  get cpuEnabled(): boolean {
    return this.#options.cpu;
  }

  /** Whether GPU gauges are reported (a GPU was seen). */
  get gpuEnabled(): boolean {
    return this.#options.gpu !== undefined;
  }

  /** The last CPU sample (undefined before the first). */
  get cpu(): CpuSample | undefined {
    return this.#cpu;
  }

  /** The last GPU samples, one per device. */
  get gpus(): readonly GpuSample[] {
    return this.#gpus;
  }

  /** Takes a sample now and then every interval, until stop(). */
  start(): void {
    if (this.#timer !== undefined) return;
    this.sample();
    const timer = setInterval(() => this.sample(), this.#options.intervalMs);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /** Takes one sample. */
  sample(): void {
    if (this.#options.cpu) {
      const now = readCpuTimes();
      const last = this.#lastCpuTimes;
      this.#lastCpuTimes = now;
      const utilization = !now || !last || now.total === last.total
        ? 0
        : (now.busy - last.busy) / (now.total - last.total);
      const m = Deno.systemMemoryInfo();
      this.#cpu = { utilization, memoryTotalBytes: m.total, memoryUsedBytes: m.total - m.available };
    }
    if (this.#options.gpu) this.#gpus = this.#options.gpu();
  }

  /** Stops the timer (the last sample stays readable). */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }
}
