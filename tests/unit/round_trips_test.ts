import { strict as assert } from "node:assert";
import { LONE_WAIT_AVG_MS, ROUND_TRIP_WEIGHT, RoundTrips } from "../../server/frontends/http/_channel.ts";

Deno.test("a lone request may block while the channel's recent round trips averaged under half a millisecond", () => {
  assert.deepEqual([LONE_WAIT_AVG_MS, ROUND_TRIP_WEIGHT], [0.5, 0.25]);
  const trips = new RoundTrips();
  const seen: [number, boolean][] = [[trips.averageMs, trips.loneMayBlock()]];
  // Short trips, one batch's long wait, then short trips again until the average falls under the limit.
  for (const ms of [0.125, 0.125, 4, 0.125, 0.125, 0.125]) {
    trips.record(ms);
    seen.push([trips.averageMs, trips.loneMayBlock()]);
  }
  assert.deepEqual(seen, [
    [0, true],
    [0.03125, true],
    [0.0546875, true],
    [1.041015625, false],
    [0.81201171875, false],
    [0.6402587890625, false],
    [0.511444091796875, false],
  ]);
  trips.record(0.125);
  assert.deepEqual([trips.averageMs, trips.loneMayBlock()], [0.41483306884765625, true]);
});
