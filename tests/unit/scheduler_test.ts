/**
 * PoolScheduler against a fake instance that records every batch, can be held until released and can be made
 * to fail: one request per execution, instance pools, dynamic batching (max and preferred sizes, queue delay,
 * shapes), queue sizes, priorities, timeouts (REJECT, DELAY, override), ordering, failures, stop, statistics.
 * @module
 */

import { assertEquals, assertRejects } from "../assert.ts";
import { turns } from "../turns.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { InferResponse, ParamValue, Tensor } from "../../server/core/types.ts";
import type { ValidatedRequest } from "../../server/core/validate.ts";
import type { BackendInstance } from "../../server/backends/backend.ts";
import { modelStatistics, VersionStats } from "../../server/metrics/stats.ts";
import { ArrivalCounter } from "../../server/core/arrivals.ts";
import type { BatchModel } from "../../server/scheduler/batch.ts";
import {
  type BatchingOptions,
  delayFromEnvironment,
  OPEN_POLICY,
  PoolScheduler,
  type QueuePolicy,
} from "../../server/scheduler/scheduler.ts";

const MODEL: BatchModel = {
  name: "fake",
  version: "1",
  batched: true,
  outputs: new Map([["Y", {
    name: "Y",
    datatype: "INT32",
    dims: [-1],
    modelDims: [-1],
    optional: false,
    labels: undefined,
  }]]),
};

/** An instance computing Y = 2 * X (INT32) that records each batch's rows of X. */
class FakeInstance implements BackendInstance {
  /** The X rows of every batch, in execution order. */
  readonly batches: number[][][] = [];
  /** Hold every execution until `release()`. */
  hold: boolean;
  /** Make the next execution fail with this error. */
  failNext: Error | undefined;
  #held: (() => void)[] = [];

  constructor(hold = false) {
    this.hold = hold;
  }

  async execute(inputs: Map<string, Tensor>, names: readonly string[]): Promise<Map<string, Tensor>> {
    const x = this.record(inputs, names);
    if (this.hold) await new Promise<void>((resolve) => this.#held.push(resolve));
    return this.output(x);
  }

  /** Checks the outputs asked for, records the batch's X rows and returns X. */
  protected record(inputs: Map<string, Tensor>, names: readonly string[]): Tensor {
    assertEquals(names, ["Y"]);
    const x = inputs.get("X")!;
    const values = [...new Int32Array((x.data as Uint8Array).slice().buffer)];
    const cols = x.shape[1]!;
    this.batches.push(
      Array.from({ length: x.shape[0]! }, (_, r) => values.slice(r * cols, (r + 1) * cols)),
    );
    return x;
  }

  /** Y = 2 * X, or the failure `failNext` asked for. */
  protected output(x: Tensor): Map<string, Tensor> {
    const fail = this.failNext;
    this.failNext = undefined;
    if (fail) throw fail;
    const y = new Int32Array((x.data as Uint8Array).slice().buffer).map((v) => 2 * v);
    return new Map([["Y", {
      name: "Y",
      datatype: "INT32",
      shape: [...x.shape],
      data: new Uint8Array(y.buffer),
    }]]);
  }

  /** Lets the oldest held execution finish. */
  release(): void {
    this.#held.shift()?.();
  }

  /** Executions waiting for `release()`. */
  get heldCount(): number {
    return this.#held.length;
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

/** A request with X = rows (INT32, shape [rows, cols]) and optional parameters. */
function request(rows: number[][], parameters: Record<string, ParamValue> = {}): ValidatedRequest {
  const data = new Uint8Array(new Int32Array(rows.flat()).buffer);
  const x: Tensor = { name: "X", datatype: "INT32", shape: [rows.length, rows[0]!.length], data };
  return {
    request: { model: "fake", version: "", id: "", inputs: [x], outputs: [], parameters },
    batchSize: rows.length,
    inputs: new Map([["X", x]]),
    outputs: [{ name: "Y", classification: 0, parameters: {} }],
  };
}

/** The Y rows of a response. */
function rowsOf(response: InferResponse): number[][] {
  const y = response.outputs[0]!;
  const values = [...new Int32Array((y.data as Uint8Array).slice().buffer)];
  const cols = y.shape[1]!;
  return Array.from({ length: y.shape[0]! }, (_, r) => values.slice(r * cols, (r + 1) * cols));
}

/** Lets every pending promise callback and zero-delay timer run. */
async function settle(): Promise<void> {
  // The batcher dispatches from a setImmediate callback: an immediate queued now runs after it (FIFO), and a
  // timer then lets the microtasks of the dispatch and of any execution that finished run too.
  await turns();
  await new Promise((resolve) => setTimeout(resolve, 0));
}

/** Waits `ms` milliseconds (only to let a timer of the scheduler pass, never as a pass criterion). */
function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The batches of an instance as the first element of each row, e.g. [[1, 2], [3]]. */
function firsts(instance: FakeInstance): number[][] {
  return instance.batches.map((b) => b.map((row) => row[0]!));
}

function policy(p: Partial<QueuePolicy>): QueuePolicy {
  return { ...OPEN_POLICY, ...p };
}

function scheduler(
  instances: FakeInstance[],
  options: Partial<BatchingOptions> = {},
  stats?: VersionStats,
): PoolScheduler {
  // Requests count as arriving together (the batcher gathers them for one turn) unless a test says otherwise.
  return new PoolScheduler(
    MODEL,
    instances,
    { delayUntilQueued: 0, arrivals: { together: () => true }, ...options },
    stats,
  );
}

/** Holds a single held instance busy with request [[0]] and returns its promise. */
/** Occupies the instance with a request (dispatched once the test lets the event loop turn: `await settle()`). */
function occupy(s: PoolScheduler): Promise<InferResponse> {
  return s.enqueue(request([[0]]));
}

Deno.test("the default scheduler runs one request per execution", async () => {
  const inst = new FakeInstance();
  const s = scheduler([inst]);
  const answers = await Promise.all([
    s.enqueue(request([[1]])),
    s.enqueue(request([[2], [3]])),
    s.enqueue(request([[4]])),
  ]);
  assertEquals(inst.batches, [[[1]], [[2], [3]], [[4]]]);
  assertEquals(answers.map(rowsOf), [[[2]], [[4], [6]], [[8]]]);
  assertEquals(answers.map((a) => [a.model, a.version]), [["fake", "1"], ["fake", "1"], ["fake", "1"]]);
  assertEquals(s.inflightCount(), 0);
});

Deno.test("instances run concurrently and a request waits for a free instance", async () => {
  const a = new FakeInstance(true);
  const b = new FakeInstance(true);
  const s = scheduler([a, b]);
  const p1 = s.enqueue(request([[1]]));
  const p2 = s.enqueue(request([[2]]));
  const p3 = s.enqueue(request([[3]]));
  // Both instances execute at once; the third request waits.
  assertEquals([a.heldCount + b.heldCount, s.inflightCount(), s.queuedCount()], [2, 3, 1]);
  assertEquals([...firsts(a), ...firsts(b)].flat().sort(), [1, 2]);
  const first = firsts(a)[0]![0] === 1 ? a : b;
  first.release();
  await settle();
  // The instance that finished takes the waiting request.
  assertEquals(firsts(first).length, 2);
  assertEquals(firsts(first)[1], [3]);
  assertEquals(s.queuedCount(), 0);
  a.release();
  b.release();
  await settle();
  a.release();
  b.release();
  assertEquals((await Promise.all([p1, p2, p3])).map(rowsOf), [[[2]], [[4]], [[6]]]);
});

Deno.test("dynamic batcher combines queued requests up to max_batch_size", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 4 });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const ps = [1, 2, 3, 4, 5, 6].map((v) => s.enqueue(request([[v, -v]])));
  assertEquals(s.queuedCount(), 6);
  inst.release();
  await settle();
  assertEquals(firsts(inst), [[0], [1, 2, 3, 4]]);
  inst.release();
  await settle();
  assertEquals(firsts(inst), [[0], [1, 2, 3, 4], [5, 6]]);
  inst.release();
  await busy;
  const answers = await Promise.all(ps);
  assertEquals(answers.map(rowsOf), [1, 2, 3, 4, 5, 6].map((v) => [[2 * v, -2 * v]]));
});

Deno.test("a batch is concatenated straight into the buffer its instance lends", async () => {
  const inst = new FakeInstance();
  const lent: Uint8Array[] = [];
  const seen: ArrayBufferLike[] = [];
  const lending = Object.assign(inst, {
    inputBuffer(name: string, byteLength: number): Uint8Array {
      assertEquals(name, "X");
      const buffer = new Uint8Array(byteLength + 8).subarray(0, byteLength);
      lent.push(buffer);
      return buffer;
    },
  });
  const execute = inst.execute.bind(inst);
  lending.execute = (inputs, names) => {
    seen.push((inputs.get("X")!.data as Uint8Array).buffer);
    return execute(inputs, names);
  };
  const s = scheduler([lending], { maxBatchSize: 4 });
  const answers = await Promise.all([s.enqueue(request([[1, 2]])), s.enqueue(request([[3, 4], [5, 6]]))]);
  assertEquals(firsts(inst), [[1, 3, 5]]);
  assertEquals(answers.map(rowsOf), [[[2, 4]], [[6, 8], [10, 12]]]);
  // One buffer of the batch's 3 rows x 2 INT32, and it is what the instance executed.
  assertEquals(lent.map((b) => b.byteLength), [24]);
  assertEquals(seen, [lent[0]!.buffer]);
});

Deno.test("dynamic batcher cuts at the largest preferred batch size reached", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 8, preferredBatchSizes: [4, 2] });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  // Seven queued: 4 (preferred), then 2 (preferred), then the 1 left.
  const ps = [1, 2, 3, 4, 5, 6, 7].map((v) => s.enqueue(request([[v]])));
  for (let i = 0; i < 4; i++) {
    inst.release();
    await settle();
  }
  await busy;
  assertEquals(firsts(inst), [[0], [1, 2, 3, 4], [5, 6], [7]]);
  assertEquals((await Promise.all(ps)).map(rowsOf), [1, 2, 3, 4, 5, 6, 7].map((v) => [[2 * v]]));
});

Deno.test("dynamic batcher prefers a preferred size to a full batch that is not one", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 8, preferredBatchSizes: [2, 4] });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const ps = [1, 2, 3, 4, 5, 6, 7, 8].map((v) => s.enqueue(request([[v]])));
  for (let i = 0; i < 3; i++) {
    inst.release();
    await settle();
  }
  await Promise.all([busy, ...ps]);
  assertEquals(firsts(inst), [[0], [1, 2, 3, 4], [5, 6, 7, 8]]);
});

Deno.test("max_queue_delay waits for a preferred batch, then dispatches what it has", async () => {
  const inst = new FakeInstance();
  const s = scheduler([inst], {
    maxBatchSize: 8,
    preferredBatchSizes: [4],
    maxQueueDelayMicroseconds: 60_000,
  });
  const first = [1, 2, 3].map((v) => s.enqueue(request([[v]])));
  // Below the preferred size the batcher waits for more.
  assertEquals(inst.batches.length, 0);
  const fourth = s.enqueue(request([[4]]));
  // The fourth request completes a preferred batch, which leaves at once.
  assertEquals(firsts(inst), [[1, 2, 3, 4]]);
  const late = [5, 6].map((v) => s.enqueue(request([[v]])));
  await settle();
  assertEquals(firsts(inst), [[1, 2, 3, 4]]);
  // Once the delay is over the two waiting requests leave as they are.
  const answers = await Promise.all([...first, fourth, ...late]);
  assertEquals(firsts(inst), [[1, 2, 3, 4], [5, 6]]);
  assertEquals(answers.map(rowsOf), [1, 2, 3, 4, 5, 6].map((v) => [[2 * v]]));
});

Deno.test("max_queue_delay without preferred sizes dispatches a full batch at once", async () => {
  const inst = new FakeInstance();
  const s = scheduler([inst], { maxBatchSize: 3, maxQueueDelayMicroseconds: 60_000 });
  const ps = [1, 2, 3, 4, 5].map((v) => s.enqueue(request([[v]])));
  assertEquals(firsts(inst), [[1, 2, 3]]);
  await Promise.all(ps);
  assertEquals(firsts(inst), [[1, 2, 3], [4, 5]]);
});

Deno.test("requests with different non-batch shapes never share a batch", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 8 });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const a = s.enqueue(request([[1, 1]]));
  const b = s.enqueue(request([[2, 2, 2]]));
  const c = s.enqueue(request([[3, 3]]));
  const d = s.enqueue(request([[4, 4]]));
  for (let i = 0; i < 4; i++) {
    inst.release();
    await settle();
  }
  await busy;
  // b cannot join a, and c and d may not jump ahead of b.
  assertEquals(inst.batches, [[[0]], [[1, 1]], [[2, 2, 2]], [[3, 3], [4, 4]]]);
  assertEquals((await Promise.all([a, b, c, d])).map(rowsOf), [[[2, 2]], [[4, 4, 4]], [[6, 6]], [[8, 8]]]);
});

Deno.test("requests with batch sizes above 1 combine and get exactly their rows back", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 6 });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const a = s.enqueue(request([[1, 10], [2, 20]]));
  const b = s.enqueue(request([[3, 30], [4, 40], [5, 50]]));
  const c = s.enqueue(request([[6, 60]]));
  const d = s.enqueue(request([[7, 70], [8, 80]])); // would make 8 rows: next batch
  for (let i = 0; i < 3; i++) {
    inst.release();
    await settle();
  }
  await busy;
  assertEquals(inst.batches.map((batch) => batch.length), [1, 6, 2]);
  assertEquals(inst.batches[1], [[1, 10], [2, 20], [3, 30], [4, 40], [5, 50], [6, 60]]);
  const answers = await Promise.all([a, b, c, d]);
  assertEquals(answers.map(rowsOf), [
    [[2, 20], [4, 40]],
    [[6, 60], [8, 80], [10, 100]],
    [[12, 120]],
    [[14, 140], [16, 160]],
  ]);
  assertEquals(answers.map((r) => r.outputs[0]!.shape), [[2, 2], [3, 2], [1, 2], [2, 2]]);
});

Deno.test("a full queue answers UNAVAILABLE at once", async () => {
  const inst = new FakeInstance(true);
  const stats = new VersionStats();
  const s = scheduler([inst], { maxBatchSize: 4, defaultQueuePolicy: policy({ maxQueueSize: 2 }) }, stats);
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue // executing: not in the queue
  const queued = [s.enqueue(request([[1]])), s.enqueue(request([[2]]))];
  await assertRejects(() => s.enqueue(request([[3]])), ServerError, {
    message: "Cannot infer 'fake': exceeds maximum queue size 2",
    code: "UNAVAILABLE",
  });
  assertEquals([s.queuedCount(), stats.failures.REJECTED], [2, 1]);
  inst.release();
  await settle();
  inst.release();
  await busy;
  assertEquals((await Promise.all(queued)).map(rowsOf), [[[2]], [[4]]]);
  assertEquals(firsts(inst), [[0], [1, 2]]);
});

Deno.test("a higher priority request runs before lower priority requests queued earlier", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 1, priorityLevels: 2, defaultPriorityLevel: 2 });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const order: number[] = [];
  const track = (v: number, params: Record<string, ParamValue>) =>
    s.enqueue(request([[v]], params)).then((r) => order.push(rowsOf(r)[0]![0]! / 2));
  const ps = [track(1, {}), track(2, { priority: 2 }), track(3, { priority: 1 }), track(4, { priority: 0 })];
  for (let i = 0; i < 5; i++) {
    inst.release();
    await settle();
  }
  await Promise.all([busy, ...ps]);
  assertEquals(firsts(inst), [[0], [3], [1], [2], [4]]);
  assertEquals(order, [3, 1, 2, 4]);
});

Deno.test("priorities batch within a level in arrival order", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 2, priorityLevels: 3 }); // default level: 2
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const ps = [
    s.enqueue(request([[1]], { priority: 3 })),
    s.enqueue(request([[2]])),
    s.enqueue(request([[3]], { priority: 1 })),
    s.enqueue(request([[4]], { priority: 3 })),
  ];
  for (let i = 0; i < 3; i++) {
    inst.release();
    await settle();
  }
  await Promise.all([busy, ...ps]);
  assertEquals(firsts(inst), [[0], [3, 2], [1, 4]]);
});

Deno.test("a priority out of range or malformed is INVALID_ARG; without levels it is ignored", async () => {
  const inst = new FakeInstance();
  const stats = new VersionStats();
  const s = scheduler([inst], { maxBatchSize: 4, priorityLevels: 2, defaultPriorityLevel: 1 }, stats);
  await assertRejects(() => s.enqueue(request([[1]], { priority: 3 })), ServerError, {
    message: "Cannot infer 'fake': priority 3 is out of range, the model has 2 priority levels",
    code: "INVALID_ARG",
  });
  await assertRejects(() => s.enqueue(request([[1]], { priority: -1 })), ServerError, {
    message: "Cannot infer 'fake': parameter 'priority' must be a non-negative integer",
    code: "INVALID_ARG",
  });
  await assertRejects(() => s.enqueue(request([[1]], { priority: "high" })), ServerError, {
    message: "Cannot infer 'fake': parameter 'priority' must be a non-negative integer",
    code: "INVALID_ARG",
  });
  assertEquals(rowsOf(await s.enqueue(request([[5]], { priority: 2n }))), [[10]]);
  assertEquals(inst.batches, [[[5]]]);
  assertEquals([stats.failures.REJECTED, s.inflightCount()], [3, 0]);
  const plain = scheduler([new FakeInstance()], { maxBatchSize: 4 });
  assertEquals(rowsOf(await plain.enqueue(request([[6]], { priority: 9 }))), [[12]]);
});

Deno.test("REJECT answers a request whose timeout expires in the queue while the instance is busy", async () => {
  const inst = new FakeInstance(true);
  const stats = new VersionStats();
  const s = scheduler(
    [inst],
    { maxBatchSize: 4, defaultQueuePolicy: policy({ defaultTimeoutMicroseconds: 20_000 }) },
    stats,
  );
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue // executing requests do not time out
  await assertRejects(() => s.enqueue(request([[1]])), ServerError, {
    message: "Cannot infer 'fake': request timeout expired",
    code: "UNAVAILABLE",
  });
  // Answered by the scheduler's timer, while the instance still runs the first request.
  assertEquals([inst.heldCount, s.queuedCount(), stats.failures.REJECTED], [1, 0, 1]);
  inst.release();
  assertEquals(rowsOf(await busy), [[0]]);
  assertEquals(inst.batches, [[[0]]]);
});

Deno.test("the timeout parameter shortens the default only where allow_timeout_override is set", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], {
    maxBatchSize: 4,
    priorityLevels: 3,
    defaultPriorityLevel: 1,
    priorityQueuePolicy: new Map([
      [1, policy({ defaultTimeoutMicroseconds: 0, allowTimeoutOverride: false })],
      [2, policy({ defaultTimeoutMicroseconds: 0, allowTimeoutOverride: true })],
      [3, policy({ defaultTimeoutMicroseconds: 30_000, allowTimeoutOverride: true })],
    ]),
  });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const outcomes: string[] = [];
  const track = (name: string, params: Record<string, ParamValue>) =>
    s.enqueue(request([[1]], params)).then(
      () => outcomes.push(`${name} ran`),
      (e: ServerError) => outcomes.push(`${name} ${e.code}: ${e.message}`),
    );
  const ps = [
    track("ignored", { priority: 1, timeout: 10_000 }), // no override: never expires
    track("override", { priority: 2, timeout: 10_000 }), // sets a timeout where the default has none
    track("longer", { priority: 3, timeout: 60_000_000 }), // cannot lengthen the 30 ms default
    track("zero", { priority: 3, timeout: 0 }), // 0 is no override: the default applies
  ];
  await sleep(80);
  inst.release();
  await settle();
  inst.release();
  await Promise.all([busy, ...ps]);
  assertEquals(outcomes, [
    "override UNAVAILABLE: Cannot infer 'fake': request timeout expired",
    "longer UNAVAILABLE: Cannot infer 'fake': request timeout expired",
    "zero UNAVAILABLE: Cannot infer 'fake': request timeout expired",
    "ignored ran",
  ]);
  await assertRejects(() => s.enqueue(request([[1]], { timeout: 1.5 })), ServerError, {
    message: "Cannot infer 'fake': parameter 'timeout' must be a non-negative integer",
    code: "INVALID_ARG",
  });
});

Deno.test("DELAY moves expired requests behind the others of their level instead of failing", async () => {
  const inst = new FakeInstance(true);
  const delay = policy({ timeoutAction: "DELAY", allowTimeoutOverride: true });
  const s = scheduler([inst], {
    maxBatchSize: 1,
    priorityLevels: 2,
    defaultPriorityLevel: 1,
    defaultQueuePolicy: delay,
  });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const ps = [
    s.enqueue(request([[1]], { timeout: 10_000 })), // expires: behind 2 and 3, ahead of level 2
    s.enqueue(request([[2]])),
    s.enqueue(request([[3]], { timeout: 60_000_000 })),
    s.enqueue(request([[4]], { priority: 2 })),
  ];
  await sleep(40);
  assertEquals(s.queuedCount(), 4);
  for (let i = 0; i < 5; i++) {
    inst.release();
    await settle();
  }
  const answers = await Promise.all([busy, ...ps]);
  assertEquals(firsts(inst), [[0], [2], [3], [1], [4]]);
  assertEquals(answers.map(rowsOf), [[[0]], [[2]], [[4]], [[6]], [[8]]]);
});

Deno.test("preserve_ordering answers in arrival order when a later batch finishes first", async () => {
  for (const preserveOrdering of [true, false]) {
    const a = new FakeInstance(true);
    const b = new FakeInstance(true);
    const s = scheduler([a, b], { maxBatchSize: 4, preserveOrdering });
    const order: number[] = [];
    const ps: Promise<number>[] = [];
    for (const v of [1, 2]) {
      ps.push(s.enqueue(request([[v]])).then((r) => order.push(rowsOf(r)[0]![0]! / 2)));
      await settle(); // dispatched alone, on its own instance
    }
    const second = firsts(a)[0]?.[0] === 2 ? a : b;
    const first = second === a ? b : a;
    second.release();
    await settle();
    assertEquals(order, preserveOrdering ? [] : [2]);
    first.release();
    await Promise.all(ps);
    assertEquals(order, preserveOrdering ? [1, 2] : [2, 1]);
  }
});

Deno.test("a backend error fails every request of its batch and the next batch still runs", async () => {
  const inst = new FakeInstance(true);
  const stats = new VersionStats();
  const s = scheduler([inst], { maxBatchSize: 2 }, stats);
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const failing = [s.enqueue(request([[1]])), s.enqueue(request([[2]]))];
  const next = s.enqueue(request([[3]]));
  inst.release(); // the first request succeeds
  await busy;
  inst.failNext = new Error("Cannot run 'fake': out of memory");
  inst.release();
  for (const p of failing) {
    await assertRejects(() => p, ServerError, {
      message: "Cannot run 'fake': out of memory",
      code: "INTERNAL",
    });
  }
  await settle();
  inst.release();
  assertEquals(rowsOf(await next), [[6]]);
  assertEquals(firsts(inst), [[0], [1, 2], [3]]);
  // As Triton: the failed execution counts as an execution.
  assertEquals([stats.failures.BACKEND, stats.fail.count, stats.success.count, stats.executionCount], [
    2,
    2,
    2,
    3,
  ]);
});

Deno.test("stop() waits for queued and executing requests, then refuses new ones", async () => {
  const inst = new FakeInstance(true);
  const s = scheduler([inst], { maxBatchSize: 1 });
  const busy = occupy(s);
  await settle(); // the batcher dispatches one event-loop turn after enqueue
  const queued = s.enqueue(request([[1]]));
  let stopped = false;
  const stopping = s.stop().then(() => (stopped = true));
  await assertRejects(() => s.enqueue(request([[2]])), ServerError, {
    message: "Cannot infer 'fake': the model version is unloading",
    code: "UNAVAILABLE",
  });
  inst.release();
  await settle();
  assertEquals([stopped, s.inflightCount()], [false, 1]);
  inst.release();
  await stopping;
  assertEquals(stopped, true);
  assertEquals((await Promise.all([busy, queued])).map(rowsOf), [[[0]], [[2]]]);
  assertEquals(firsts(inst), [[0], [1]]);
  await s.stop(); // already idle: resolves at once
});

Deno.test("statistics count inferences, executions, batch sizes and outcomes exactly", async () => {
  const inst = new FakeInstance(true);
  const stats = new VersionStats();
  const s = scheduler([inst], { maxBatchSize: 4, defaultQueuePolicy: policy({ maxQueueSize: 3 }) }, stats);
  const busy = occupy(s);
  await settle(); // dispatched one event-loop turn after enqueue: a batch of 1
  const batch = [s.enqueue(request([[1]])), s.enqueue(request([[2], [3]])), s.enqueue(request([[4]]))];
  await assertRejects(() => s.enqueue(request([[5]])), ServerError, {
    message: "Cannot infer 'fake': exceeds maximum queue size 3",
    code: "UNAVAILABLE",
  });
  inst.release();
  await settle();
  inst.release(); // batch of 4 (1 + 2 + 1)
  await Promise.all([busy, ...batch]);
  const failing = s.enqueue(request([[6], [7]])); // batch of 2, fails
  await settle();
  inst.failNext = new Error("boom");
  inst.release();
  await assertRejects(() => failing, ServerError, { message: "boom", code: "INTERNAL" });
  const m = modelStatistics("fake", "1", stats);
  // As Triton: the failed execution (batch of 2) counts as an execution, not as inferences.
  assertEquals([m.inference_count, m.execution_count], [5, 3]);
  assertEquals(m.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]), [[1, 1], [2, 1], [4, 1]]);
  assertEquals(
    [m.inference_stats.success.count, m.inference_stats.fail.count, m.inference_stats.queue.count],
    [4, 2, 4],
  );
  assertEquals(stats.failures, { REJECTED: 1, CANCELED: 0, BACKEND: 1, OTHER: 0 });
});

Deno.test("without a queue delay, requests arriving together wait one turn and run as one batch", async () => {
  const a = new FakeInstance();
  const b = new FakeInstance();
  let together = false;
  const s = scheduler([a, b], { maxBatchSize: 8, arrivals: { together: () => together } });
  // Arriving alone: it leaves at once.
  const lone = s.enqueue(request([[1]]));
  assertEquals([...firsts(a), ...firsts(b)], [[1]]);
  await lone;
  // Arriving together: they wait one event-loop turn, then leave as one batch.
  together = true;
  const ps = [2, 3, 4].map((v) => s.enqueue(request([[v]])));
  assertEquals([...firsts(a), ...firsts(b)], [[1]]);
  const answers = await Promise.all(ps);
  assertEquals([...firsts(a), ...firsts(b)].sort((x, y) => x[0]! - y[0]!), [[1], [2, 3, 4]]);
  assertEquals(answers.map(rowsOf), [[[4]], [[6]], [[8]]]);
});

Deno.test("DINFER_DELAY_SCHEDULER-style hold: nothing runs until N requests are queued, then exact batches", async () => {
  const inst = new FakeInstance();
  const s = scheduler([inst], { maxBatchSize: 4, delayUntilQueued: 6 });
  const ps = [1, 2, 3, 4, 5].map((v) => s.enqueue(request([[v]])));
  await settle();
  assertEquals(inst.batches.length, 0);
  ps.push(s.enqueue(request([[6]])));
  await Promise.all(ps);
  assertEquals(firsts(inst), [[1, 2, 3, 4], [5, 6]]);
});

Deno.test("the hold comes from DINFER_DELAY_SCHEDULER when the options leave it out", () => {
  Deno.env.set("DINFER_DELAY_SCHEDULER", "3");
  try {
    assertEquals(delayFromEnvironment(), 3);
    Deno.env.set("DINFER_DELAY_SCHEDULER", "x");
    assertEquals(delayFromEnvironment(), 0);
  } finally {
    Deno.env.delete("DINFER_DELAY_SCHEDULER");
  }
  assertEquals(delayFromEnvironment(), 0);
});

/** A FakeInstance that takes four batches before the first is answered (as a Python stub does). */
class PipelinedInstance extends FakeInstance {
  readonly pipelineDepth = 4;
}

Deno.test("a batch goes to the pipelined instance holding the fewest, not behind another's in its pipeline", async () => {
  const a = new PipelinedInstance(true);
  const b = new PipelinedInstance(true);
  const s = scheduler([a, b], { arrivals: { together: () => false } });
  const answers = [1, 2, 3, 4].map((v) => s.enqueue(request([[v]])));
  await settle();
  // Taken in turn: the last instance freed first (b), then whichever holds fewer.
  assertEquals([firsts(a), firsts(b)], [[[2], [4]], [[1], [3]]]);
  // b finishes one: it holds one to a's two, so the next request is b's.
  b.release();
  await settle();
  answers.push(s.enqueue(request([[5]])));
  await settle();
  assertEquals([firsts(a), firsts(b)], [[[2], [4]], [[1], [3], [5]]]);
  // Equal holdings: the last one freed (b) takes the next.
  answers.push(s.enqueue(request([[6]])));
  a.release();
  await settle();
  answers.push(s.enqueue(request([[7]])));
  await settle();
  assertEquals([firsts(a), firsts(b)], [[[2], [4], [7]], [[1], [3], [5], [6]]]);
  for (let i = 0; i < 4; i++) {
    a.release();
    b.release();
    await settle();
  }
  assertEquals((await Promise.all(answers)).map(rowsOf), [1, 2, 3, 4, 5, 6, 7].map((v) => [[2 * v]]));
  assertEquals(s.inflightCount(), 0);
});

Deno.test("an arrival counter counts per event-loop turn: one alone is not 'together', two are", async () => {
  const arrivals = new ArrivalCounter();
  // A known start whatever ran before: a turn with one arrival.
  await turns();
  arrivals.arrived();
  await turns();
  assertEquals(arrivals.together(), false);
  arrivals.arrived();
  assertEquals(arrivals.together(), false);
  arrivals.arrived();
  assertEquals(arrivals.together(), true);
  await turns();
  // The last turn with arrivals had two: the next arrival still counts as together.
  assertEquals(arrivals.together(), true);
  arrivals.arrived();
  assertEquals(arrivals.together(), true);
  await turns();
  // That turn had one: a lone arrival now runs at once.
  arrivals.arrived();
  assertEquals(arrivals.together(), false);
  await turns();
});

Deno.test("an arrival counter tells requests arriving one at a time from ones that overlap", () => {
  const arrivals = new ArrivalCounter();
  // A known start whatever ran before: nothing counted yet, then requests one after the other.
  assertEquals(arrivals.alone(), true);
  for (let i = 0; i < 3; i++) {
    arrivals.started();
    assertEquals(arrivals.alone(), true);
    arrivals.finished();
  }
  // A second request while the first is inside: not alone, now and for the next lone requests, until the
  // average of requests inside at each start (1.125 after this one, the latest weighing 1/8) falls under 1.05:
  // seven requests.
  arrivals.started();
  arrivals.started();
  assertEquals(arrivals.alone(), false);
  arrivals.finished();
  assertEquals(arrivals.alone(), false, "the average still remembers the overlap");
  arrivals.finished();
  const seen: boolean[] = [];
  for (let i = 0; i < 7; i++) {
    arrivals.started();
    seen.push(arrivals.alone());
    arrivals.finished();
  }
  assertEquals(seen, [false, false, false, false, false, false, true]);
  // Arrivals and event-loop turns change nothing.
  arrivals.arrived();
  arrivals.arrived();
  assertEquals(arrivals.alone(), true);
});

/** A FakeInstance that also runs synchronously (as an ONNX Runtime instance on the server's thread does). */
class SyncInstance extends FakeInstance {
  /** What happened, in order: "run N" for each execution of the request whose X starts with N. */
  readonly events: string[];
  constructor(events: string[]) {
    super();
    this.events = events;
  }
  executeSync(inputs: Map<string, Tensor>, names: readonly string[]): Map<string, Tensor> {
    const x = this.record(inputs, names);
    this.events.push(`run ${this.batches.at(-1)![0]![0]}`);
    return this.output(x);
  }
}

Deno.test("without batching, requests arriving together for a synchronous instance all run before any is answered", async () => {
  const events: string[] = [];
  const inst = new SyncInstance(events);
  let together = false;
  const s = scheduler([inst], { arrivals: { together: () => together } });
  // Alone: it runs inside enqueue, and its caller resumes afterwards.
  const lone = s.enqueue(request([[1]])).then((r) => events.push(`answer ${rowsOf(r)[0]![0]}`));
  assertEquals(events, ["run 1"]);
  await lone;
  // Together: they wait one event-loop turn, then run one execution each, back to back, then resume.
  together = true;
  events.length = 0;
  const ps = [2, 3, 4].map((v) =>
    s.enqueue(request([[v]])).then((r) => events.push(`answer ${rowsOf(r)[0]![0]}`))
  );
  assertEquals(events, []);
  assertEquals(s.queuedCount(), 3);
  await Promise.all(ps);
  assertEquals(events, ["run 2", "run 3", "run 4", "answer 4", "answer 6", "answer 8"]);
  assertEquals(s.inflightCount(), 0);
});

Deno.test("a synchronous execution that fails answers its request with the error, and the next runs", async () => {
  const inst = new SyncInstance([]);
  const stats = new VersionStats();
  const s = scheduler([inst], {}, stats);
  inst.failNext = new ServerError("INTERNAL", "Cannot run 'fake': it broke");
  const failed = s.enqueue(request([[1]]));
  const next = s.enqueue(request([[2]]));
  await assertRejects(() => failed, ServerError, {
    code: "INTERNAL",
    message: "Cannot run 'fake': it broke",
  });
  assertEquals(rowsOf(await next), [[4]]);
  assertEquals(firsts(inst), [[1], [2]]);
  assertEquals([stats.failures.BACKEND, stats.executionCount, s.inflightCount()], [1, 2, 0]);
});
