/**
 * Schedulers: the default one (one request per execution) and the dynamic batcher, both over a pool of
 * model instances that execute concurrently; a request waits for a free instance.
 * @module
 */

import { toServerError, unavailable } from "../core/errors.ts";
import type { InferResponse } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import type { BackendInstance } from "../backends/backend.ts";
import { nowNs, type VersionStats } from "../metrics/stats.ts";
import { batchCompatible, type BatchModel, executeBatch } from "./batch.ts";

/** Queues requests of one model version and runs them on its instances. */
export interface Scheduler {
  /**
   * Queues a validated request.
   * @param request the validated request
   * @param received when it arrived (nowNs), for statistics
   * @returns its response, or rejects with a ServerError
   */
  enqueue(request: ValidatedRequest, received?: number): Promise<InferResponse>;
  /** Requests queued or executing. */
  inflightCount(): number;
  /** Requests queued, not yet executing. */
  queuedCount(): number;
  /** Refuses new requests and resolves when every queued and executing one has finished. */
  stop(): Promise<void>;
}

/** How requests are combined. */
export interface BatchingOptions {
  /** The largest batch to form; 0 or 1 runs one request per execution. */
  maxBatchSize: number;
  /** Batch sizes to prefer (`preferred_batch_size`). */
  preferredBatchSizes: number[];
  /** How long the oldest request may wait for a batch to fill (`max_queue_delay_microseconds`). */
  maxQueueDelayMicroseconds: number;
  /** The most requests queued at once; 0 for no limit (`default_queue_policy.max_queue_size`). */
  maxQueueSize: number;
}

interface Pending {
  request: ValidatedRequest;
  resolve: (r: InferResponse) => void;
  reject: (e: unknown) => void;
  enqueuedAt: number;
  received: number;
}

/**
 * A scheduler over a pool of instances; with `maxBatchSize` above 1 it is the dynamic batcher.
 */
export class PoolScheduler implements Scheduler {
  #model: BatchModel;
  #free: BackendInstance[];
  #queue: Pending[] = [];
  #head = 0;
  #executing = 0;
  #options: BatchingOptions;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #stopping = false;
  #drained: (() => void) | undefined;
  #stats: VersionStats | undefined;

  /**
   * Creates a scheduler.
   * @param model the model's batch facts
   * @param instances the instances to run on
   * @param options how to batch; defaults run one request at a time
   * @param stats where to record statistics
   */
  constructor(
    model: BatchModel,
    instances: BackendInstance[],
    options?: Partial<BatchingOptions>,
    stats?: VersionStats,
  ) {
    this.#model = model;
    this.#stats = stats;
    this.#free = [...instances];
    this.#options = {
      maxBatchSize: options?.maxBatchSize ?? 0,
      preferredBatchSizes: [...(options?.preferredBatchSizes ?? [])].sort((a, b) => a - b),
      maxQueueDelayMicroseconds: options?.maxQueueDelayMicroseconds ?? 0,
      maxQueueSize: options?.maxQueueSize ?? 0,
    };
  }

  enqueue(request: ValidatedRequest, received: number = nowNs()): Promise<InferResponse> {
    if (this.#stopping) {
      this.#stats?.recordFailure(received, "REJECTED");
      return Promise.reject(
        unavailable(`Cannot infer '${this.#model.name}': the model version is unloading`),
      );
    }
    const queued = this.#queue.length - this.#head;
    if (this.#options.maxQueueSize > 0 && queued >= this.#options.maxQueueSize) {
      this.#stats?.recordFailure(received, "REJECTED");
      return Promise.reject(
        unavailable(
          `Cannot infer '${this.#model.name}': exceeds maximum queue size ${this.#options.maxQueueSize}`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      this.#queue.push({ request, resolve, reject, enqueuedAt: performance.now(), received });
      this.#pump();
    });
  }

  inflightCount(): number {
    return this.#queue.length - this.#head + this.#executing;
  }

  queuedCount(): number {
    return this.#queue.length - this.#head;
  }

  stop(): Promise<void> {
    this.#stopping = true;
    if (this.inflightCount() === 0) return Promise.resolve();
    return new Promise((resolve) => (this.#drained = resolve));
  }

  #pump(): void {
    while (this.#free.length > 0 && this.#head < this.#queue.length) {
      const batch = this.#take();
      if (!batch) return;
      this.#run(this.#free.pop()!, batch);
    }
    if (this.#head > 1024 && this.#head * 2 > this.#queue.length) {
      this.#queue = this.#queue.slice(this.#head);
      this.#head = 0;
    }
  }

  /** Forms the next batch, or schedules a later try and returns undefined while it should wait. */
  #take(): Pending[] | undefined {
    const q = this.#queue;
    const first = q[this.#head]!;
    const max = this.#options.maxBatchSize;
    if (max <= 1) {
      q[this.#head++] = undefined as unknown as Pending;
      return [first];
    }
    // Contiguous compatible requests from the front, up to max_batch_size.
    let end = this.#head;
    let size = 0;
    const sizes: number[] = [];
    while (end < q.length) {
      const p = q[end]!;
      if (
        size + p.request.batchSize > max || (end > this.#head && !batchCompatible(first.request, p.request))
      ) {
        break;
      }
      size += p.request.batchSize;
      sizes.push(size);
      end++;
    }
    const preferred = this.#options.preferredBatchSizes;
    const full = size >= max || end < q.length; // nothing more can join this batch
    const delayMs = this.#options.maxQueueDelayMicroseconds / 1000;
    const waited = performance.now() - first.enqueuedAt;
    const reachedPreferred = preferred.some((p) => sizes.includes(p));
    if (!full && !reachedPreferred && delayMs > 0 && waited < delayMs) {
      this.#arm(delayMs - waited);
      return undefined;
    }
    if (preferred.length > 0 && !full) {
      // Cut at the largest preferred size reached, if any.
      for (let i = preferred.length - 1; i >= 0; i--) {
        const k = sizes.indexOf(preferred[i]!);
        if (k >= 0) {
          end = this.#head + k + 1;
          break;
        }
      }
    }
    const batch = q.slice(this.#head, end);
    for (let i = this.#head; i < end; i++) q[i] = undefined as unknown as Pending;
    this.#head = end;
    return batch;
  }

  #arm(ms: number): void {
    if (this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#pump();
    }, Math.max(0, ms));
  }

  async #run(instance: BackendInstance, batch: Pending[]): Promise<void> {
    this.#executing += batch.length;
    try {
      const { responses, times } = await executeBatch(this.#model, instance, batch.map((p) => p.request));
      this.#stats?.recordExecution(times);
      batch.forEach((p, i) => {
        this.#stats?.recordSuccess(p.request.batchSize, p.received, times);
        p.resolve(responses[i]!);
      });
    } catch (err) {
      const e = toServerError(err);
      for (const p of batch) {
        this.#stats?.recordFailure(p.received, "BACKEND");
        p.reject(e);
      }
    } finally {
      this.#executing -= batch.length;
      this.#free.push(instance);
      if (this.#timer !== undefined && this.#head >= this.#queue.length) {
        clearTimeout(this.#timer);
        this.#timer = undefined;
      }
      this.#pump();
      if (this.#stopping && this.inflightCount() === 0) this.#drained?.();
    }
  }
}
