import assert from "node:assert/strict";
import { MemoryReclaimer, reclaimMemory } from "../../server/core/memory.ts";

const MB = 2 ** 20;

function fake(rss: number[]) {
  let arrivals = 0;
  let reclaimed = 0;
  const state = { rss: rss[0]!, arrive: () => arrivals++, reclaimed: () => reclaimed };
  const reclaimer = new MemoryReclaimer({
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

Deno.test("memory reclaimer leaves growth under the threshold alone and measures from the level after a reclaim", () => {
  const { reclaimer, state } = fake([100 * MB, 200 * MB]);
  state.rss = 115 * MB;
  assert.equal(reclaimer.check(), false);
  state.rss = 250 * MB;
  assert.equal(reclaimer.check(), true);
  assert.equal(state.rss, 200 * MB); // a model loaded meanwhile: 200 MB is the new level
  state.rss = 215 * MB;
  assert.equal(reclaimer.check(), false);
  state.rss = 217 * MB;
  assert.equal(reclaimer.check(), true);
  assert.equal(reclaimer.reclaims, 2);
});

Deno.test("reclaimMemory runs a full garbage collection and malloc_trim here", () => {
  assert.deepEqual(reclaimMemory(), { gc: true, trim: true });
});
