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
