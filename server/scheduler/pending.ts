/**
 * What the dynamic-batching and sequence schedulers share: a queued request with how to answer it, the counts of
 * requests in flight that stopping waits on, and the statistics of an execution that failed.
 * @module
 */

import type { InferResponse } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import { nowNs } from "../core/clock.ts";
import type { VersionStats } from "../metrics/stats.ts";

/** A request waiting in a scheduler's queue, with how to answer it. */
export interface PendingRequest {
  request: ValidatedRequest;
  resolve: (r: InferResponse) => void;
  reject: (e: unknown) => void;
  /** performance.now() at enqueue, for the queue delay. */
  enqueuedAt: number;
  /** nowNs() at arrival, for statistics. */
  received: number;
}

/**
 * What every queueing scheduler counts: its requests queued and executing, and its stop that refuses new requests
 * and waits for those in flight to finish.
 */
export abstract class QueueingScheduler {
  /** Requests waiting in queues. */
  protected queued = 0;
  /** Requests executing. */
  protected executing = 0;
  #stopping = false;
  #drained: (() => void) | undefined;

  /** Whether stop() was called: new requests are refused. */
  protected get stopping(): boolean {
    return this.#stopping;
  }

  /** Requests queued or executing. */
  inflightCount(): number {
    return this.queued + this.executing;
  }

  /** Requests queued, not yet executing. */
  queuedCount(): number {
    return this.queued;
  }

  /** Refuses new requests and resolves when every queued and executing one has finished. */
  stop(): Promise<void> {
    this.#stopping = true;
    if (this.inflightCount() === 0) return Promise.resolve();
    return new Promise((resolve) => (this.#drained = resolve));
  }

  /**
   * Resolves stop()'s promise once nothing is in flight.
   * @returns whether the scheduler is stopping with nothing in flight
   */
  protected settle(): boolean {
    if (!this.#stopping || this.inflightCount() !== 0) return false;
    this.#drained?.();
    return true;
  }
}

/**
 * Records a batch whose execution failed: as Triton, a failed execution is still an execution (of no time past its
 * start), and each of its requests a backend failure.
 * @param stats the version's statistics, if any
 * @param batch the batch's requests
 * @param started nowNs() when the execution started
 */
export function recordFailedExecution(
  stats: VersionStats | undefined,
  batch: readonly PendingRequest[],
  started: number,
): void {
  if (!stats) return;
  const end = nowNs();
  const batchSize = batch.reduce((n, p) => n + p.request.batchSize, 0);
  stats.recordExecution({ batchSize, start: started, inputEnd: started, inferEnd: end, outputEnd: end });
  for (const p of batch) stats.recordFailure(p.received, "BACKEND");
}
