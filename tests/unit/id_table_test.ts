import { assert, assertEquals } from "../assert.ts";
import { IdTable } from "../../server/core/id_table.ts";

Deno.test("an id table keeps, finds, replaces and lets go of values by id", () => {
  const t = new IdTable<string>(4);
  t.set(1, "a");
  t.set(2, "b");
  t.set(1, "A");
  assertEquals([t.get(1), t.get(2), t.get(3), t.has(2), t.has(3), t.size], [
    "A",
    "b",
    undefined,
    true,
    false,
    2,
  ]);
  assertEquals([t.delete(1), t.delete(1), t.get(1), t.size], [true, false, undefined, 1]);
  t.clear();
  assertEquals([t.get(2), t.size, t.values()], [undefined, 0, []]);
});

Deno.test("ids that share a slot are both kept: the ring doubles when half full, else the newer id goes beside it", () => {
  const t = new IdTable<number>(4);
  // 1 and 5 share a slot of four; with one value kept, 5 goes beside the ring.
  t.set(1, 10);
  t.set(5, 50);
  assertEquals([t.get(1), t.get(5), t.size], [10, 50, 2]);
  t.set(2, 20);
  t.set(3, 30);
  // Three of four slots taken: 9 (slot 1, taken by 1) doubles the ring; 9 then has slot 1 of eight, still 1's.
  t.set(9, 90);
  assertEquals([1, 2, 3, 5, 9].map((id) => t.get(id)), [10, 20, 30, 50, 90]);
  assertEquals(t.values().sort((a, b) => a - b), [10, 20, 30, 50, 90]);
  assertEquals([t.delete(5), t.delete(9), t.get(5), t.get(9), t.size], [true, true, undefined, undefined, 3]);
});

Deno.test("calls answered in order, a few in flight, and one that outlives many later ones are all found", () => {
  const t = new IdTable<{ id: number }>(16);
  t.set(0, { id: 0 }); // never let go
  for (let id = 1; id <= 100_000; id++) {
    t.set(id, { id });
    if (id > 4) assert(t.delete(id - 4), `${id - 4}`);
  }
  assertEquals(t.size, 5);
  assertEquals(t.get(0), { id: 0 });
  assertEquals([99_997, 99_998, 99_999, 100_000].map((id) => t.get(id)?.id), [
    99_997,
    99_998,
    99_999,
    100_000,
  ]);
  assertEquals(t.values().map((v) => v.id).sort((a, b) => a - b), [0, 99_997, 99_998, 99_999, 100_000]);
});

Deno.test("ids past 2^32 are kept apart from those with the same low bits", () => {
  const t = new IdTable<string>(8);
  const big = 2 ** 32 + 3;
  t.set(3, "low");
  t.set(big, "high");
  t.set(2 ** 40 + 1, "higher");
  assertEquals([t.get(3), t.get(big), t.get(2 ** 40 + 1), t.get(2 ** 40 + 3)], [
    "low",
    "high",
    "higher",
    undefined,
  ]);
  assert(t.delete(big));
  assertEquals([t.get(3), t.get(big), t.size], ["low", undefined, 2]);
});
