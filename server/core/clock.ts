/**
 * The server's clock: every timestamp of statistics and traces is read from it.
 * @module
 */

/**
 * Waits for a promise to settle (a rejection counts), but at most `ms` milliseconds; the timer goes when the
 * promise wins.
 * @param promise what to wait for
 * @param ms the longest wait
 * @param options `unref`: the timer does not keep the process alive
 */
export function settleWithin(
  promise: Promise<unknown>,
  ms: number,
  options: { unref?: boolean } = {},
): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    if (options.unref) Deno.unrefTimer(t);
    timer = t;
  });
  return Promise.race([promise.then(() => {}, () => {}), late]).finally(() => clearTimeout(timer));
}

/** Nanoseconds since performance.timeOrigin (monotonic). */
export function nowNs(): number {
  return Math.round(performance.now() * 1e6);
}
