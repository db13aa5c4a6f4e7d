/**
 * SmallCache: values come back until it is full; a new key then empties it, a kept key is replaced in place.
 * @module
 */

import { assertEquals } from "../assert.ts";
import { SmallCache } from "../../server/core/small_cache.ts";

Deno.test("a small cache keeps up to its size, then a new key empties it first", () => {
  const c = new SmallCache<string, number>(2);
  c.set("a", 1);
  c.set("b", 2);
  assertEquals([c.get("a"), c.get("b"), c.size], [1, 2, 2]);
  // A kept key is replaced without emptying.
  c.set("a", 3);
  assertEquals([c.get("a"), c.get("b"), c.size], [3, 2, 2]);
  // A new key when full: the cache starts over with it alone.
  c.set("c", 4);
  assertEquals([c.get("a"), c.get("b"), c.get("c"), c.size], [undefined, undefined, 4, 1]);
});
