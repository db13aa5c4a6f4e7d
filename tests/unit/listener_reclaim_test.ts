import assert from "node:assert/strict";
import { ListenerThreads } from "../../server/frontends/http/workers.ts";

/** Longer than any test may run: a reclaim that resolves did so because the threads answered. */
const NEVER_MS = 10 * 60 * 1000;

Deno.test("a reclaim of the listener threads resolves once every thread has collected, and at once after a stop", async () => {
  const threads = await ListenerThreads.start(2, {});
  try {
    await threads.reclaim(NEVER_MS);
    await threads.reclaim(NEVER_MS); // each reclaim waits for its own answers
    // Several at once: each thread answers them in order.
    await Promise.all([threads.reclaim(NEVER_MS), threads.reclaim(NEVER_MS), threads.reclaim(NEVER_MS)]);
  } finally {
    await threads.shutdown();
  }
  await threads.reclaim(NEVER_MS);
});

Deno.test("a reclaim waiting for threads that are ended at once resolves", async () => {
  const threads = await ListenerThreads.start(1, {});
  const waiting = threads.reclaim(NEVER_MS);
  threads.terminate();
  await waiting;
});

Deno.test("a listener thread that fails after its start is left out: a shutdown does not wait for it", async () => {
  const errors: string[] = [];
  const threads = await ListenerThreads.start(2, { onError: (m) => errors.push(m) });
  // A message the thread cannot handle: an uncaught error in its message handler.
  threads.post(0, { op: "inferred", id: 5, response: null } as unknown as Parameters<typeof threads.post>[1]);
  for (let i = 0; i < 200 && errors.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(errors.length, 1);
  assert.match(errors[0]!, /^Listener thread 1 failed: /);
  // The other thread still answers; the failed one is not waited for (each step bounded, so as to fail, not hang).
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<string>((r) => (timer = setTimeout(() => r("late"), 30_000)));
  try {
    assert.equal(await Promise.race([threads.reclaim(NEVER_MS).then(() => "reclaimed"), late]), "reclaimed");
    assert.equal(await Promise.race([threads.shutdown().then(() => "stopped"), late]), "stopped");
  } finally {
    clearTimeout(timer);
    threads.terminate();
  }
});
