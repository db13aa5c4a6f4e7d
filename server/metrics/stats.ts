/**
 * Per model-version inference statistics, in the shape of the statistics extension: counts and cumulative
 * nanoseconds recorded at the points Triton defines (queue, compute input, compute infer, compute output,
 * request), plus per-batch-size execution statistics. Prometheus metrics are read from the same numbers.
 * @module
 */

import { nowNs } from "../core/clock.ts";

/** A count and a cumulative duration. */
export interface Duration {
  count: number;
  ns: number;
}

/**
 * Why a request fails, as the `reason` label of nv_inference_request_failure, in the order of the shared
 * statistics cells (see CELL.failures).
 */
export const FAILURE_REASONS = ["REJECTED", "CANCELED", "BACKEND", "OTHER"] as const;
/** One of FAILURE_REASONS. */
export type FailureReason = typeof FAILURE_REASONS[number];

/** Per-batch-size execution statistics. */
export interface BatchStats {
  batch_size: number;
  compute_input: Duration;
  compute_infer: Duration;
  compute_output: Duration;
}

/** The timestamps of one batch execution, in nanoseconds of one monotonic clock. */
export interface ExecutionTimes {
  /** The total batch size executed. */
  batchSize: number;
  /** When the batch was taken from the queue. */
  start: number;
  /** When the inputs were ready. */
  inputEnd: number;
  /** When the backend returned. */
  inferEnd: number;
  /** When the responses were built. */
  outputEnd: number;
}

function zero(): Duration {
  return { count: 0, ns: 0 };
}

/** The durations of one successful request, in nanoseconds. */
export interface RequestLatencies {
  request: number;
  queue: number;
  computeInput: number;
  computeInfer: number;
  computeOutput: number;
  /** Whether the model is decoupled: its first response is timed apart (see recordResponse). */
  decoupled?: boolean;
}

/** Called for every successful request when latency summaries or histograms are on. */
export type LatencyObserver = (model: string, version: string, latencies: RequestLatencies) => void;

let latencyObserver: LatencyObserver | undefined;

/**
 * Sets (or clears) the observer of per-request latencies (the metrics' summaries and histograms).
 * @param observer the observer, or undefined
 */
export function setLatencyObserver(observer: LatencyObserver | undefined): void {
  latencyObserver = observer;
}

/**
 * Called for every response of a decoupled model's request when latency histograms are on: nanoseconds since
 * the request arrived, and since the request's previous response (undefined for its first).
 */
export type ResponseObserver = (
  model: string,
  version: string,
  sinceRequest: number,
  sincePrevious: number | undefined,
) => void;

let responseObserver: ResponseObserver | undefined;

/**
 * Sets (or clears) the observer of decoupled models' responses (the metrics' response histograms).
 * @param observer the observer, or undefined
 */
export function setResponseObserver(observer: ResponseObserver | undefined): void {
  responseObserver = observer;
}

/** Whether the latency observer is set (summaries or histograms are on): every request must reach it. */
export function observesLatencies(): boolean {
  return latencyObserver !== undefined || responseObserver !== undefined;
}

/**
 * The layout of the cells in which another thread keeps its own statistics of a model version (cumulative
 * values, one writer; see SharedVersionStats), which the version's VersionStats folds into its own.
 */
const CELL = {
  inference: 0,
  execution: 1,
  last: 2,
  /** count, ns pairs */
  success: 3,
  fail: 5,
  queue: 7,
  computeInput: 9,
  computeInfer: 11,
  computeOutput: 13,
  failures: 15,
  /** Per batch size b ≥ 1, 6 cells from `batches` + 6·(b − 1): compute input, infer, output (count, ns). */
  batches: 19,
} as const;
const DURATIONS = ["success", "fail", "queue", "computeInput", "computeInfer", "computeOutput"] as const;
const BATCH_DURATIONS = ["compute_input", "compute_infer", "compute_output"] as const;

/**
 * The number of cells for a model version's shared statistics.
 * @param maxBatchSize the config's max_batch_size (0: batches of 1)
 */
export function statsCellCount(maxBatchSize: number): number {
  return CELL.batches + 6 * Math.max(1, maxBatchSize);
}

/** Statistics of one model version. */
export class VersionStats {
  /** The model name and version, for the latency observer ("" when unnamed). */
  readonly model: string;
  readonly version: string;
  /** Cells other threads record into, with the values already folded in. */
  #shared: { cells: Float64Array; seen: Float64Array }[] = [];

  /**
   * Creates empty statistics.
   * @param model the model name
   * @param version the version
   */
  constructor(model = "", version = "") {
    this.model = model;
    this.version = version;
  }

  /** Milliseconds since the epoch of the last completed inference; 0 before any. */
  lastInference = 0;
  /** Inferences (batch items) that succeeded. */
  inferenceCount = 0;
  /** Batch executions. */
  executionCount = 0;
  /** Request outcomes and phases. */
  readonly success: Duration = zero();
  readonly fail: Duration = zero();
  readonly queue: Duration = zero();
  readonly computeInput: Duration = zero();
  readonly computeInfer: Duration = zero();
  readonly computeOutput: Duration = zero();
  /** Failures by reason. */
  readonly failures = Object.fromEntries(FAILURE_REASONS.map((r) => [r, 0])) as Record<FailureReason, number>;
  /** Execution statistics by batch size. */
  readonly batches: Map<number, BatchStats> = new Map();
  /** Seconds the version took to load. */
  loadSeconds = 0;
  /** Whether the model is decoupled (set by its ModelVersion). */
  decoupled = false;
  /** Responses sent by a decoupled model (errors included, a final flag alone not). */
  responseCount = 0;

  /**
   * Records one response of a decoupled model's request.
   * @param sinceRequest nanoseconds since the request arrived
   * @param sincePrevious nanoseconds since the request's previous response; undefined for its first
   */
  recordResponse(sinceRequest: number, sincePrevious: number | undefined): void {
    this.responseCount++;
    if (responseObserver && this.model) {
      responseObserver(this.model, this.version, sinceRequest, sincePrevious);
    }
  }

  /** Response cache hits (lookup time) and misses (lookup and insertion time). */
  readonly cacheHit: Duration = zero();
  readonly cacheMiss: Duration = zero();

  /**
   * Records one batch execution (once per batch, not per request).
   * @param t the execution's timestamps
   */
  recordExecution(t: ExecutionTimes): void {
    this.executionCount++;
    let b = this.batches.get(t.batchSize);
    if (!b) {
      b = { batch_size: t.batchSize, compute_input: zero(), compute_infer: zero(), compute_output: zero() };
      this.batches.set(t.batchSize, b);
    }
    add(b.compute_input, t.inputEnd - t.start);
    add(b.compute_infer, t.inferEnd - t.inputEnd);
    add(b.compute_output, t.outputEnd - t.inferEnd);
  }

  /**
   * Records a request that succeeded.
   * @param batchSize its batch size
   * @param received when it arrived
   * @param t the timestamps of the execution it was part of
   * @param end when it was answered (nowNs); now by default (the requests of one batch share one reading)
   */
  recordSuccess(batchSize: number, received: number, t: ExecutionTimes, end: number = nowNs()): void {
    this.inferenceCount += batchSize;
    this.lastInference = Date.now();
    add(this.success, end - received);
    add(this.queue, t.start - received);
    add(this.computeInput, t.inputEnd - t.start);
    add(this.computeInfer, t.inferEnd - t.inputEnd);
    add(this.computeOutput, t.outputEnd - t.inferEnd);
    if (latencyObserver && this.model) {
      latencyObserver(this.model, this.version, {
        request: end - received,
        queue: t.start - received,
        computeInput: t.inputEnd - t.start,
        computeInfer: t.inferEnd - t.inputEnd,
        computeOutput: t.outputEnd - t.inferEnd,
        decoupled: this.decoupled,
      });
    }
  }

  /**
   * Records a request answered from the response cache: a success whose queue time runs from arrival to the
   * lookup; nothing executed, so no inference, execution or compute time is counted.
   * @param received when it arrived
   * @param lookupStart when the lookup started
   * @param lookupEnd when it ended
   */
  recordCacheHit(received: number, lookupStart: number, lookupEnd: number): void {
    this.lastInference = Date.now();
    add(this.success, nowNs() - received);
    add(this.queue, lookupStart - received);
    add(this.cacheHit, lookupEnd - lookupStart);
  }

  /**
   * Records a response cache miss of a request that succeeded: the lookup and insertion time, which is also
   * added to the request's duration.
   * @param ns the lookup and insertion time
   */
  recordCacheMiss(ns: number): void {
    add(this.cacheMiss, ns);
    this.success.ns += Math.max(0, ns);
  }

  /**
   * Records a request that failed.
   * @param received when it arrived
   * @param reason why it failed
   */
  recordFailure(received: number, reason: FailureReason): void {
    add(this.fail, nowNs() - received);
    this.failures[reason]++;
    this.lastInference = Date.now();
  }

  /**
   * Counts what another thread records into `cells` (a SharedVersionStats over them) as this version's
   * statistics, from the next `absorb` on.
   * @param cells statsCellCount cells
   */
  share(cells: Float64Array): void {
    this.#shared.push({ cells, seen: new Float64Array(cells.length) });
  }

  /**
   * Folds what the other thread recorded into `cells` in, and stops reading them.
   * @param cells cells given to `share`
   */
  unshare(cells: Float64Array): void {
    this.absorb();
    this.#shared = this.#shared.filter((s) => s.cells !== cells);
  }

  /** Folds in what other threads recorded since the last call (see `share`); readers call it first. */
  absorb(): void {
    for (const { cells, seen } of this.#shared) {
      const delta = (i: number) => {
        const v = cells[i]!;
        const d = v - seen[i]!;
        seen[i] = v;
        return d;
      };
      this.inferenceCount += delta(CELL.inference);
      this.executionCount += delta(CELL.execution);
      this.lastInference = Math.max(this.lastInference, cells[CELL.last]!);
      for (const name of DURATIONS) {
        const d = this[name];
        d.count += delta(CELL[name]);
        d.ns += delta(CELL[name] + 1);
      }
      FAILURE_REASONS.forEach((r, k) => (this.failures[r] += delta(CELL.failures + k)));
      for (let b = 1, at = CELL.batches; at + 6 <= cells.length; b++, at += 6) {
        if (
          cells[at]! === seen[at]! && cells[at + 2]! === seen[at + 2]! && cells[at + 4]! === seen[at + 4]!
        ) continue;
        let stats = this.batches.get(b);
        if (!stats) {
          stats = { batch_size: b, compute_input: zero(), compute_infer: zero(), compute_output: zero() };
          this.batches.set(b, stats);
        }
        BATCH_DURATIONS.forEach((name, k) => {
          stats[name].count += delta(at + 2 * k);
          stats[name].ns += delta(at + 2 * k + 1);
        });
      }
    }
  }
}

/**
 * Statistics recorded on another thread (an HTTP listener thread running its own copy of a model): as
 * VersionStats, and written through to shared cells that the version's statistics on the main thread fold in.
 */
export class SharedVersionStats extends VersionStats {
  readonly #cells: Float64Array;

  /**
   * @param cells statsCellCount cells, written by this object alone
   * @param model the model name
   * @param version the version
   */
  constructor(cells: Float64Array, model: string, version: string) {
    super(model, version);
    this.#cells = cells;
  }

  override recordExecution(t: ExecutionTimes): void {
    super.recordExecution(t);
    const c = this.#cells;
    c[CELL.execution] = this.executionCount;
    const b = this.batches.get(t.batchSize);
    const at = CELL.batches + 6 * (t.batchSize - 1);
    if (b && t.batchSize >= 1 && at + 6 <= c.length) {
      BATCH_DURATIONS.forEach((name, k) => {
        c[at + 2 * k] = b[name].count;
        c[at + 2 * k + 1] = b[name].ns;
      });
    }
  }

  override recordSuccess(batchSize: number, received: number, t: ExecutionTimes, end?: number): void {
    super.recordSuccess(batchSize, received, t, end);
    this.#write();
  }

  override recordFailure(received: number, reason: FailureReason): void {
    super.recordFailure(received, reason);
    this.#write();
  }

  #write(): void {
    const c = this.#cells;
    c[CELL.inference] = this.inferenceCount;
    c[CELL.last] = this.lastInference;
    for (const name of DURATIONS) {
      c[CELL[name]] = this[name].count;
      c[CELL[name] + 1] = this[name].ns;
    }
    FAILURE_REASONS.forEach((r, k) => (c[CELL.failures + k] = this.failures[r]));
  }
}

function add(d: Duration, ns: number): void {
  d.count++;
  d.ns += Math.max(0, ns);
}

/** One entry of the statistics extension's `model_stats`. */
export interface ModelStatistics {
  name: string;
  version: string;
  last_inference: number;
  inference_count: number;
  execution_count: number;
  inference_stats: Record<
    | "success"
    | "fail"
    | "queue"
    | "compute_input"
    | "compute_infer"
    | "compute_output"
    | "cache_hit"
    | "cache_miss",
    Duration
  >;
  /** Per-response statistics of decoupled models, by response index (empty: not collected). */
  response_stats: Record<string, never>;
  batch_stats: BatchStats[];
  /** Memory the model version holds, by kind (empty: not tracked). */
  memory_usage: never[];
}

/**
 * The statistics extension's entry for one model version.
 * @param name the model name
 * @param version the version
 * @param s its statistics
 */
export function modelStatistics(name: string, version: string, s: VersionStats): ModelStatistics {
  s.absorb();
  const copy = (d: Duration): Duration => ({ count: d.count, ns: d.ns });
  return {
    name,
    version,
    last_inference: s.lastInference,
    inference_count: s.inferenceCount,
    execution_count: s.executionCount,
    inference_stats: {
      success: copy(s.success),
      fail: copy(s.fail),
      queue: copy(s.queue),
      compute_input: copy(s.computeInput),
      compute_infer: copy(s.computeInfer),
      compute_output: copy(s.computeOutput),
      cache_hit: copy(s.cacheHit),
      cache_miss: copy(s.cacheMiss),
    },
    response_stats: {},
    batch_stats: [...s.batches.values()].sort((a, b) => a.batch_size - b.batch_size).map((b) => ({
      batch_size: b.batch_size,
      compute_input: copy(b.compute_input),
      compute_infer: copy(b.compute_infer),
      compute_output: copy(b.compute_output),
    })),
    memory_usage: [],
  };
}
