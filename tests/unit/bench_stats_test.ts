/**
 * The benchmarks' medians (bench/stats.ts): the two conventions their reports use.
 * @module
 */

import { assertEquals } from "../assert.ts";
import { median, upperMedian } from "../../bench/stats.ts";

Deno.test("median averages the two middle values of an even count, upperMedian takes the higher", () => {
  const even = [40, 10, 30, 20];
  assertEquals([median(even), upperMedian(even)], [25, 30]);
  assertEquals(even, [40, 10, 30, 20]);
  assertEquals([median([3, 1, 2]), upperMedian([3, 1, 2])], [2, 2]);
  assertEquals([median([7]), upperMedian([7])], [7, 7]);
});

Deno.test("the medians leave out values that are not finite, and are NaN without any", () => {
  assertEquals([median([NaN, 5, 1, Infinity]), upperMedian([NaN, 5, 1, Infinity])], [3, 5]);
  assertEquals([median([]), upperMedian([NaN])], [NaN, NaN]);
});
