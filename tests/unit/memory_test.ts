import assert from "node:assert/strict";
import { MAX_BACKOFF_LOOKS, MemoryReclaimer, reclaimMemory } from "../../server/core/memory.ts";

const MB = 2 ** 20;

function fake(rss: number[], afterStart = false) {
  let arrivals = 0;
  let reclaimed = 0;
  const state = { rss: rss[0]!, arrive: () => arrivals++, reclaimed: () => reclaimed };
  const reclaimer = new MemoryReclaimer({
    afterStart,
    growthBytes: 16 * MB,
    rss: () => state.rss,
    arrivals: () => arrivals,
    reclaim: () => {
      reclaimed++;
      state.rss = rss[reclaimed] ?? state.rss;
    },
  });
  return { reclaimer, state };
}

Deno.test("memory reclaimer reclaims at the first idle look once RSS grew past the threshold", () => {
  const { reclaimer, state } = fake([100 * MB, 110 * MB]);
  state.arrive();
  state.rss = 300 * MB;
  assert.equal(reclaimer.check(), false); // requests arrived since the last look
  assert.equal(reclaimer.check(), true);
  assert.equal(state.rss, 110 * MB);
  assert.equal(reclaimer.reclaims, 1);
  // Nothing grew since: no second reclaim.
  assert.equal(reclaimer.check(), false);
  assert.equal(reclaimer.reclaims, 1);
});

Deno.test("with afterStart the first idle look reclaims whatever the growth, and its result is the level", () => {
  const { reclaimer, state } = fake([130 * MB, 116 * MB], true);
  state.arrive();
  assert.equal(reclaimer.check(), false); // requests arrived since the start: not idle yet
  assert.equal(reclaimer.check(), true); // idle: the start's garbage goes, though it did not grow
  assert.equal(state.rss, 116 * MB);
  assert.equal(reclaimer.reclaims, 1);
  assert.equal(reclaimer.check(), false); // once only
  // Growth is measured from the level after that reclaim: 116 + 16 MB.
  state.rss = 140 * MB;
  assert.equal(reclaimer.check(), true);
  assert.equal(reclaimer.reclaims, 2);
});

Deno.test("memory reclaimer leaves growth under the threshold alone", () => {
  const { reclaimer, state } = fake([100 * MB]);
  state.rss = 115 * MB;
  assert.equal(reclaimer.check(), false);
  assert.equal(reclaimer.reclaims, 0);
});

Deno.test("memory still in use at a reclaim (connections held open) is given back at a later look", () => {
  // The first reclaim finds the memory in use; by the second, the connections have closed.
  const { reclaimer, state } = fake([100 * MB, 170 * MB, 110 * MB]);
  state.rss = 170 * MB;
  assert.equal(reclaimer.check(), true);
  assert.equal(state.rss, 170 * MB);
  assert.equal(reclaimer.check(), false); // waits one look
  assert.equal(reclaimer.check(), true);
  assert.equal(state.rss, 110 * MB);
  assert.equal(reclaimer.check(), false);
  assert.equal(reclaimer.reclaims, 2);
});

Deno.test("memory that stays after reclaims backed off to the longest wait is the new level", () => {
  // A model loaded since: every reclaim leaves 200 MB. Reclaims at looks 1, 3, 6, 11, 20, 37, 70, 135
  // (waits of 1, 2, 4, ... 64 looks), then 200 MB is the level and growth is measured from it.
  const { reclaimer, state } = fake([100 * MB]);
  state.rss = 200 * MB;
  const at: number[] = [];
  for (let look = 1; look <= 300; look++) if (reclaimer.check()) at.push(look);
  assert.equal(MAX_BACKOFF_LOOKS, 64);
  assert.deepEqual(at, [1, 3, 6, 11, 20, 37, 70, 135]);
  state.rss = 217 * MB;
  assert.equal(reclaimer.check(), true);
});

Deno.test("a reclaim finished elsewhere (listener threads) is judged by the RSS once it settles", async () => {
  // The threads' collections bring the RSS down only after the reclaim returns: read at once, it would look
  // like memory still in use, and the next reclaim would wait.
  let arrivals = 0;
  let rss = 100 * MB;
  let finish = () => {};
  const reclaimer = new MemoryReclaimer({
    growthBytes: 16 * MB,
    rss: () => rss,
    arrivals: () => arrivals,
    reclaim: () =>
      new Promise<void>((resolve) => {
        finish = () => {
          rss = 105 * MB;
          resolve();
        };
      }),
  });
  rss = 180 * MB;
  assert.equal(reclaimer.check(), true);
  // The threads have not answered: no second reclaim meanwhile, however many looks.
  assert.equal(reclaimer.check(), false);
  assert.equal(reclaimer.check(), false);
  assert.equal(reclaimer.check(), false);
  assert.equal(reclaimer.reclaims, 1);
  finish();
  await Promise.resolve();
  await Promise.resolve();
  await Promise.resolve();
  // Judged at 105 MB: the level, and no wait before the next growth's reclaim.
  arrivals++;
  rss = 150 * MB;
  assert.equal(reclaimer.check(), false); // busy
  assert.equal(reclaimer.check(), true); // idle, 45 MB above 105: reclaims at once
  assert.equal(reclaimer.reclaims, 2);
});

Deno.test("reclaimMemory runs a full garbage collection and malloc_trim here", () => {
  assert.deepEqual(reclaimMemory(), { gc: true, trim: true });
});
