/**
 * Waiting for the event loop in tests.
 * @module
 */

import { setImmediate } from "node:timers";

/**
 * Waits for `n` event-loop turns: `n` setImmediate callbacks one after the other, so that what the code under
 * test queued for the coming turns (with setImmediate, or process.nextTick and microtasks) has run.
 * @param n how many turns; 1 unless given
 */
export async function turns(n = 1): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}
