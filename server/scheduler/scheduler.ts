/**
 * Schedulers: the default one (one request per execution) and the dynamic batcher, both over a pool of
 * model instances that execute concurrently; a request waits for a free instance. The dynamic batcher has
 * Triton's priority levels, queue policies (timeouts with REJECT or DELAY, queue sizes) and ordering.
 * @module
 */

import { setImmediate } from "node:timers";
import { invalidArg, toServerError, unavailable } from "../core/errors.ts";
import type { ArrivalCounter } from "../core/arrivals.ts";
import type { InferResponse, ParamValue } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import type { BackendInstance } from "../backends/backend.ts";
import { nowNs } from "../core/clock.ts";
import type { VersionStats } from "../metrics/stats.ts";
import { batchCompatible, type BatchModel, executeBatch, executeBatchSync, isModelError } from "./batch.ts";
import { type PendingRequest, QueueingScheduler, recordFailedExecution } from "./pending.ts";
import { IdTable } from "../core/id_table.ts";

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

/** A queue policy (`ModelQueuePolicy`). */
export interface QueuePolicy {
  /**
   * REJECT answers an expired request with an error; DELAY moves it behind the requests of its priority level
   * that have not expired (still ahead of lower levels).
   */
  timeoutAction: "REJECT" | "DELAY";
  /** The default timeout in microseconds; 0 for none. */
  defaultTimeoutMicroseconds: number;
  /** Whether a request's `timeout` parameter may shorten the default (never lengthen it). */
  allowTimeoutOverride: boolean;
  /** The most requests queued at this level; 0 for no limit. */
  maxQueueSize: number;
}

/** How requests are combined. */
export interface BatchingOptions {
  /** The largest batch to form; 0 or 1 runs one request per execution. */
  maxBatchSize: number;
  /** Batch sizes to prefer (`preferred_batch_size`). */
  preferredBatchSizes: number[];
  /** How long the oldest request may wait for a batch to fill (`max_queue_delay_microseconds`). */
  maxQueueDelayMicroseconds: number;
  /** Whether responses leave in the order the requests came (`preserve_ordering`). */
  preserveOrdering: boolean;
  /** The number of priority levels; 0 for one level (`priority_levels`). */
  priorityLevels: number;
  /** The level of requests without a priority (`default_priority_level`). */
  defaultPriorityLevel: number;
  /** The policy of levels without their own (`default_queue_policy`). */
  defaultQueuePolicy: QueuePolicy;
  /** Policies by level (`priority_queue_policy`). */
  priorityQueuePolicy: Map<number, QueuePolicy>;
  /**
   * Holds every request until this many are queued, then schedules normally (0: no hold). For tests that
   * assert exact batches; the server takes it from the environment variable `DINFER_DELAY_SCHEDULER`.
   */
  delayUntilQueued: number;
  /**
   * The server's count of arriving inference requests, which tells whether requests are arriving together;
   * without one every request counts as arriving alone.
   */
  arrivals: Pick<ArrivalCounter, "together"> | undefined;
}

/** The `DINFER_DELAY_SCHEDULER` hold (see BatchingOptions.delayUntilQueued); 0 when unset or invalid. */
export function delayFromEnvironment(): number {
  let v: string | undefined;
  try {
    v = Deno.env.get("DINFER_DELAY_SCHEDULER");
  } catch {
    return 0; // no permission to read the environment
  }
  const n = Number(v ?? "0");
  return Number.isSafeInteger(n) && n > 0 ? n : 0;
}

/** A policy that never times out and never fills up. */
export const OPEN_POLICY: QueuePolicy = {
  timeoutAction: "REJECT",
  defaultTimeoutMicroseconds: 0,
  allowTimeoutOverride: false,
  maxQueueSize: 0,
};

interface Pending extends PendingRequest {
  /** performance.now() deadline; Infinity for none. */
  deadline: number;
  /** The arrival order, for preserve_ordering. */
  seq: number;
}

function intParam(v: ParamValue | undefined, name: string, model: string): number | undefined {
  if (v === undefined) return undefined;
  const n = typeof v === "bigint" ? Number(v) : v;
  if (typeof n !== "number" || !Number.isInteger(n) || n < 0) {
    throw invalidArg(`Cannot infer '${model}': parameter '${name}' must be a non-negative integer`);
  }
  return n;
}

/**
 * A scheduler over a pool of instances; with `maxBatchSize` above 1 it is the dynamic batcher.
 */
export class PoolScheduler extends QueueingScheduler implements Scheduler {
  #model: BatchModel;
  #free: BackendInstance[];
  /**
   * Batches each instance holds, where one takes several at a time (a pipeline depth above 1; undefined
   * otherwise): a batch goes to the free instance holding the fewest (see #takeInstance).
   */
  #held: Map<BackendInstance, number> | undefined;
  /**
   * Two FIFOs per priority level, highest priority (level 1) first: at `2 * (level - 1)` the requests in time,
   * right after it the level's delayed (expired, DELAY) requests.
   */
  #levels: Pending[][];
  #options: BatchingOptions;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;
  #stats: VersionStats | undefined;
  #seq = 0;
  #pumpScheduled = false;
  /** preserve_ordering: the next sequence number to deliver and the finished ones waiting for it. */
  #nextOut = 0;
  #finished = new IdTable<() => void>();
  /**
   * Whether requests arriving together wait one event-loop turn before they run (see #pumpSoon): the dynamic
   * batcher without a queue delay, to batch them; a model without batching whose instances run on this thread,
   * to run them back to back before answering any.
   */
  #holdTogether: boolean;

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
    super();
    this.#model = model;
    this.#stats = stats;
    // An instance with a pipeline depth of N is free N times over (see BackendInstance.pipelineDepth). Under
    // the rate limiter it takes one batch at a time: a batch handed over early would hold its resources while
    // it waits in the instance, where another model's instance could have run.
    const depth = (i: BackendInstance) => model.gate ? 1 : Math.max(1, i.pipelineDepth ?? 1);
    this.#free = instances.flatMap((i) => Array<BackendInstance>(depth(i)).fill(i));
    if (instances.length > 1 && instances.some((i) => depth(i) > 1)) {
      this.#held = new Map(instances.map((i) => [i, 0]));
    }
    const levels = Math.max(1, options?.priorityLevels ?? 0);
    this.#options = {
      maxBatchSize: options?.maxBatchSize ?? 0,
      preferredBatchSizes: [...(options?.preferredBatchSizes ?? [])].sort((a, b) => a - b),
      maxQueueDelayMicroseconds: options?.maxQueueDelayMicroseconds ?? 0,
      preserveOrdering: options?.preserveOrdering ?? false,
      priorityLevels: options?.priorityLevels ?? 0,
      defaultPriorityLevel: options?.defaultPriorityLevel || Math.ceil(levels / 2) || 1,
      defaultQueuePolicy: options?.defaultQueuePolicy ?? OPEN_POLICY,
      priorityQueuePolicy: options?.priorityQueuePolicy ?? new Map(),
      delayUntilQueued: options?.delayUntilQueued ?? delayFromEnvironment(),
      arrivals: options?.arrivals,
    };
    this.#levels = Array.from({ length: 2 * levels }, () => []);
    const batcher = this.#options.maxBatchSize > 1;
    this.#holdTogether = batcher
      ? this.#options.maxQueueDelayMicroseconds === 0
      : !model.gate && instances.length > 0 && instances.every((i) => i.executeSync !== undefined);
    // Asking once makes the counter tell event-loop turns apart from now on (see ArrivalCounter).
    if (this.#holdTogether) this.#options.arrivals?.together();
  }

  #policy(level: number): QueuePolicy {
    return this.#options.priorityQueuePolicy.get(level) ?? this.#options.defaultQueuePolicy;
  }

  enqueue(request: ValidatedRequest, received: number = nowNs()): Promise<InferResponse> {
    const name = this.#model.name;
    let level: number;
    let deadline = Infinity;
    try {
      if (this.stopping) {
        throw unavailable(`Cannot infer '${name}': the model version is unloading`);
      }
      const params = request.request.parameters;
      const levels = Math.max(1, this.#options.priorityLevels);
      // Priorities only mean something where the config has priority levels; elsewhere they are ignored.
      const priority = this.#options.priorityLevels > 0
        ? intParam(params.priority, "priority", name) ?? 0
        : 0;
      level = priority === 0 ? this.#options.defaultPriorityLevel : priority;
      if (level > levels) {
        throw invalidArg(
          `Cannot infer '${name}': priority ${priority} is out of range, the model has ${levels} priority levels`,
        );
      }
      const policy = this.#policy(level);
      // A request's timeout may shorten the default, never lengthen it; 0 means none was given.
      const timeout = intParam(params.timeout, "timeout", name) ?? 0;
      let us = policy.defaultTimeoutMicroseconds;
      if (policy.allowTimeoutOverride && timeout > 0 && (us === 0 || timeout < us)) us = timeout;
      if (us > 0) deadline = performance.now() + us / 1000;
      const queued = this.#levels[2 * (level - 1)]!.length + this.#levels[2 * level - 1]!.length;
      if (policy.maxQueueSize > 0 && queued >= policy.maxQueueSize) {
        throw unavailable(`Cannot infer '${name}': exceeds maximum queue size ${policy.maxQueueSize}`);
      }
    } catch (err) {
      this.#stats?.recordFailure(received, "REJECTED");
      return Promise.reject(err);
    }
    request.request.trace?.mark("QUEUE_START");
    return new Promise((resolve, reject) => {
      const pending: Pending = {
        request,
        resolve,
        reject,
        // Read when it joins the queue (a request that runs at once never waits for a batch).
        enqueuedAt: 0,
        received,
        deadline,
        seq: this.#seq++,
      };
      const options = this.#options;
      // Requests arriving together wait one event-loop turn (#holdTogether); a request that arrives alone runs
      // at once.
      const together = this.#holdTogether && options.arrivals?.together() === true;
      if (
        !together && this.queued === 0 && this.#free.length > 0 && options.delayUntilQueued === 0 &&
        (options.maxBatchSize <= 1 || options.maxQueueDelayMicroseconds === 0)
      ) {
        // Nothing queued, an instance free and nothing to wait for: the batch is this request alone, as
        // #take would form it, without passing through the queue.
        this.#start(this.#takeInstance(), [pending]);
        this.#maybeDrained();
        return;
      }
      // The arrival's clock reading (nowNs is performance.now() in ns), read µs before: each reading of the
      // clock costs about 0.4 µs on a virtual machine, and every queued request would pay one more.
      pending.enqueuedAt = received / 1e6;
      this.#levels[2 * (level - 1)]!.push(pending);
      this.queued++;
      if (deadline !== Infinity) this.#arm(deadline - performance.now());
      if (together) this.#pumpSoon();
      else this.#pump();
    });
  }

  /**
   * Requests arriving together are scheduled one event-loop turn later (setImmediate, a few µs): without a
   * configured queue delay, the dynamic batcher then runs those whose bodies were read in the same turn as one
   * batch instead of one execution each; a model without batching whose instances run on this thread runs them
   * back to back, then answers them (see #runNow).
   */
  #pumpSoon(): void {
    if (this.#pumpScheduled) return;
    this.#pumpScheduled = true;
    setImmediate(() => {
      this.#pumpScheduled = false;
      this.#pump();
    });
  }

  /**
   * A free instance: the rate limiter's pick where the model has one, else the last one freed; where instances
   * take several batches at a time, the last freed of those holding the fewest, so that a batch does not wait
   * in a busy instance's pipeline while another instance is idle (with two Python instances, two requests at
   * once both went to one stub and took twice as long).
   */
  #takeInstance(): BackendInstance {
    const gate = this.#model.gate;
    if (gate) return this.#free.splice(gate.pick(this.#free), 1)[0]!;
    const held = this.#held;
    if (!held) return this.#free.pop()!;
    const free = this.#free;
    let at = free.length - 1;
    let fewest = held.get(free[at]!)!;
    for (let i = at - 1; i >= 0 && fewest > 0; i--) {
      const n = held.get(free[i]!)!;
      if (n < fewest) {
        fewest = n;
        at = i;
      }
    }
    const instance = at === free.length - 1 ? free.pop()! : free.splice(at, 1)[0]!;
    held.set(instance, fewest + 1);
    return instance;
  }

  /** An instance has finished a batch: one more free slot of it. */
  #giveBack(instance: BackendInstance): void {
    this.#free.push(instance);
    const held = this.#held;
    if (held) held.set(instance, held.get(instance)! - 1);
  }

  /** Handles expired requests: REJECT answers them, DELAY moves them to their level's delayed queue. */
  #expire(now: number): void {
    for (let l = 0; l < this.#levels.length; l += 2) {
      const q = this.#levels[l]!;
      const delayed = this.#levels[l + 1]!;
      if (!q.some((p) => p.deadline <= now)) continue;
      const keep: Pending[] = [];
      for (const p of q) {
        if (p.deadline > now) {
          keep.push(p);
          continue;
        }
        const policy = this.#policy(l / 2 + 1);
        if (policy.timeoutAction === "DELAY") {
          p.deadline = Infinity;
          delayed.push(p);
        } else {
          this.queued--;
          this.#stats?.recordFailure(p.received, "REJECTED");
          this.#deliver(
            p.seq,
            () => p.reject(unavailable(`Cannot infer '${this.#model.name}': request timeout expired`)),
          );
        }
      }
      this.#levels[l] = keep;
    }
  }

  /** The queued requests in scheduling order (priority, then arrival), lazily. */
  *#order(): Generator<Pending> {
    for (const q of this.#levels) yield* q;
  }

  /** The first queued request in scheduling order (there is one). */
  #first(): Pending {
    for (const q of this.#levels) if (q.length > 0) return q[0]!;
    throw new Error("the queue is empty");
  }

  #remove(batch: Pending[]): void {
    // A batch is consecutive requests in scheduling order: most often the head of one level's queue (always
    // with one priority level), taken without a Set.
    const n = batch.length;
    for (let l = 0; l < this.#levels.length; l++) {
      const q = this.#levels[l]!;
      if (q[0] !== batch[0]) continue;
      if (q.length < n || q[n - 1] !== batch[n - 1]) break;
      if (n === 1) q.shift();
      else this.#levels[l] = q.length === n ? [] : q.slice(n);
      this.queued -= n;
      return;
    }
    const taken = new Set(batch);
    for (let l = 0; l < this.#levels.length; l++) {
      const q = this.#levels[l]!;
      if (q.length > 0 && taken.has(q[0]!)) {
        let k = 0;
        while (k < q.length && taken.has(q[k]!)) k++;
        this.#levels[l] = k === q.length ? [] : q.slice(k);
      }
    }
    this.queued -= batch.length;
  }

  #pump(): void {
    if (this.#options.delayUntilQueued > 0) {
      if (this.queued < this.#options.delayUntilQueued) return;
      this.#options.delayUntilQueued = 0; // the hold is released once, then scheduling is normal
    }
    // Nothing queued (the common case after a lone request): no clock reading, nothing to expire or take.
    if (this.queued === 0) {
      this.#maybeDrained();
      return;
    }
    const now = performance.now();
    this.#expire(now);
    while (this.#free.length > 0 && this.queued > 0) {
      const batch = this.#take(now);
      if (!batch) break;
      this.#remove(batch);
      this.#start(this.#takeInstance(), batch);
    }
    // Instances that run on this thread may have emptied the queue: no #release follows to clear the timer.
    this.#disarmIfEmpty();
    this.#maybeDrained();
  }

  /** Forms the next batch, or schedules a later try and returns undefined while it should wait. */
  #take(now: number): Pending[] | undefined {
    const max = this.#options.maxBatchSize;
    if (max <= 1) return [this.#first()];
    const order = this.#order();
    const first = order.next().value as Pending;
    // Consecutive compatible requests in scheduling order, up to max_batch_size.
    const batch: Pending[] = [first];
    let size = first.request.batchSize;
    const sizes = [size];
    let full = size >= max;
    for (const p of order) {
      if (full) break;
      if (size + p.request.batchSize > max || !batchCompatible(first.request, p.request)) {
        full = true; // nothing later may jump ahead of this request
        break;
      }
      batch.push(p);
      size += p.request.batchSize;
      sizes.push(size);
      if (size >= max) full = true;
    }
    const preferred = this.#options.preferredBatchSizes;
    const delayMs = this.#options.maxQueueDelayMicroseconds / 1000;
    const waited = now - first.enqueuedAt;
    const reachedPreferred = preferred.some((p) => sizes.includes(p));
    if (!full && !reachedPreferred && delayMs > 0 && waited < delayMs) {
      this.#arm(delayMs - waited);
      return undefined;
    }
    // The largest preferred size reached wins, even over a full batch (Triton's documented choice).
    if (preferred.length > 0) {
      for (let i = preferred.length - 1; i >= 0; i--) {
        const k = sizes.indexOf(preferred[i]!);
        if (k >= 0) return batch.slice(0, k + 1);
      }
    }
    return batch;
  }

  #arm(ms: number): void {
    const at = performance.now() + Math.max(0, ms);
    if (this.#timer !== undefined && this.#timerAt <= at) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timerAt = at;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#timerAt = Infinity;
      this.#pump();
      this.#rearmDeadlines();
    }, Math.max(0, ms));
  }

  /** Keeps a timer for the earliest queued deadline, so expired requests are answered without new traffic. */
  #rearmDeadlines(): void {
    let next = Infinity;
    for (const p of this.#order()) if (p.deadline < next) next = p.deadline;
    if (next !== Infinity) this.#arm(next - performance.now());
  }

  /** Calls `fn` now, or (with preserve_ordering) once every earlier request has been answered. */
  #deliver(seq: number, fn: () => void): void {
    if (!this.#options.preserveOrdering) {
      fn();
      return;
    }
    this.#finished.set(seq, fn);
    while (this.#finished.has(this.#nextOut)) {
      const f = this.#finished.get(this.#nextOut)!;
      this.#finished.delete(this.#nextOut++);
      f();
    }
  }

  /** Executes a batch on an instance: at once where it runs on this thread (see #runNow), else #run. */
  #start(instance: BackendInstance, batch: Pending[]): void {
    if (instance.executeSync && !this.#model.gate) this.#runNow(instance, batch);
    else this.#run(instance, batch);
  }

  /**
   * Executes a batch on an instance that runs on this thread and answers its requests; the instance is free
   * again when it returns. The callers resume in later microtasks, so a pump over requests queued together
   * runs them all before any is encoded and written: a small model's run is faster with the runtime's code
   * and data still in the cache from the run before than after the reading and answering of a request.
   */
  #runNow(instance: BackendInstance, batch: Pending[]): void {
    this.executing += batch.length;
    let done: ReturnType<typeof executeBatchSync>;
    try {
      done = executeBatchSync(this.#model, instance, batch.map((p) => p.request));
    } catch (err) {
      this.executing -= batch.length;
      this.#giveBack(instance);
      // Recorded as an execution of no time: its start was not kept, to read the clock once less per run.
      this.#failed(batch, nowNs(), err);
      return;
    }
    this.executing -= batch.length;
    this.#giveBack(instance);
    try {
      // Answered as soon as its outputs are made: their time is the end of the requests.
      this.#answer(batch, done, done.times.outputEnd);
    } catch (err) {
      this.#failed(batch, done.times.start, err);
    }
  }

  /**
   * Executes a batch on an instance and answers its requests; the instance is free again afterwards. A plain
   * promise chain: a lone request on an idle instance reaches the backend synchronously.
   */
  #run(instance: BackendInstance, batch: Pending[]): void {
    this.executing += batch.length;
    const started = nowNs();
    let execution: ReturnType<typeof executeBatch>;
    try {
      execution = executeBatch(this.#model, instance, batch.map((p) => p.request));
    } catch (err) {
      execution = Promise.reject(err);
    }
    // The instance is released in the same turn as the answers (inflightCount is 0 when a caller resumes).
    execution.then((done) => {
      try {
        this.#answer(batch, done);
      } catch (err) {
        this.#failed(batch, started, err);
      } finally {
        this.#release(instance, batch.length);
      }
    }, (err) => {
      try {
        this.#failed(batch, started, err);
      } finally {
        this.#release(instance, batch.length);
      }
    });
  }

  /** A batch whose execution failed: every request of it fails. */
  #failed(batch: Pending[], started: number, err: unknown): void {
    const e = toServerError(err);
    recordFailedExecution(this.#stats, batch, started);
    for (const p of batch) this.#deliver(p.seq, () => p.reject(e));
  }

  /**
   * Records a batch's execution and answers each of its requests.
   * @param end when they are answered, where the caller knows (else the clock is read)
   */
  #answer(
    batch: Pending[],
    { responses, times }: Awaited<ReturnType<typeof executeBatch>>,
    end?: number,
  ): void {
    const stats = this.#stats;
    stats?.recordExecution(times);
    // One clock reading for the whole batch: its requests are answered together.
    end ??= stats ? nowNs() : 0;
    for (let i = 0; i < batch.length; i++) {
      const p = batch[i]!;
      const res = responses[i]!;
      if (res instanceof Error) {
        if (isModelError(res)) stats?.recordSuccess(p.request.batchSize, p.received, times, end);
        else stats?.recordFailure(p.received, "BACKEND");
        this.#deliver(p.seq, () => p.reject(res));
        continue;
      }
      stats?.recordSuccess(p.request.batchSize, p.received, times, end);
      if (this.#options.preserveOrdering) this.#deliver(p.seq, () => p.resolve(res));
      else p.resolve(res);
    }
  }

  /** An execution is over: its instance is free for the next batch. */
  #release(instance: BackendInstance, count: number): void {
    this.executing -= count;
    this.#giveBack(instance);
    this.#disarmIfEmpty();
    this.#pump();
  }

  /** Clears the timer once nothing is queued (a queue delay or a deadline it was armed for is gone). */
  #disarmIfEmpty(): void {
    if (this.#timer === undefined || this.queued !== 0) return;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
  }

  #maybeDrained(): void {
    this.settle();
  }
}
