/**
 * Statistics recorded on another thread (SharedVersionStats) and folded into a version's own (VersionStats
 * share / absorb / unshare): exact counts and durations, batch sizes, failures, and nothing counted twice.
 * @module
 */

import assert from "node:assert/strict";
import { SharedVersionStats, statsCellCount, VersionStats } from "../../server/metrics/stats.ts";

const times = (batchSize: number, start: number) => ({
  batchSize,
  start,
  inputEnd: start + 10,
  inferEnd: start + 110,
  outputEnd: start + 115,
});

Deno.test("a version's statistics count what another thread records in shared cells, once", () => {
  const main = new VersionStats("m", "1");
  const cells = new Float64Array(new SharedArrayBuffer(8 * statsCellCount(4)));
  const other = new SharedVersionStats(cells, "m", "1");
  main.share(cells);

  // One request on the main thread, two executions on the other (batch 1 and batch 3), one failure there.
  main.recordExecution(times(1, 1000));
  main.recordSuccess(1, 900, times(1, 1000), 1200);
  other.recordExecution(times(1, 2000));
  other.recordSuccess(1, 1950, times(1, 2000), 2120);
  other.recordExecution(times(3, 3000));
  other.recordSuccess(3, 2990, times(3, 3000), 3130);
  other.recordFailure(4000, "BACKEND");

  main.absorb();
  main.absorb(); // nothing new: nothing added
  assert.equal(main.inferenceCount, 5);
  assert.equal(main.executionCount, 3);
  assert.deepEqual(main.success, { count: 3, ns: 300 + 170 + 140 });
  assert.deepEqual(main.queue, { count: 3, ns: 100 + 50 + 10 });
  assert.deepEqual(main.computeInput, { count: 3, ns: 30 });
  assert.deepEqual(main.computeInfer, { count: 3, ns: 300 });
  assert.deepEqual(main.computeOutput, { count: 3, ns: 15 });
  assert.equal(main.fail.count, 1);
  assert.deepEqual(main.failures, { REJECTED: 0, CANCELED: 0, BACKEND: 1, OTHER: 0 });
  assert.deepEqual(
    [...main.batches.values()].map((b) => [b.batch_size, b.compute_input.count, b.compute_infer.ns]),
    [[1, 2, 200], [3, 1, 100]],
  );
  assert.ok(main.lastInference >= other.lastInference && other.lastInference > 0);

  // What the other thread records after it stops being read is not counted.
  main.unshare(cells);
  other.recordExecution(times(1, 5000));
  other.recordSuccess(1, 4900, times(1, 5000), 5200);
  main.absorb();
  assert.equal(main.inferenceCount, 5);
  assert.equal(main.executionCount, 3);
});
