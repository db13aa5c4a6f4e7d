/**
 * The server's clock: every timestamp of statistics and traces is read from it.
 * @module
 */

/** Nanoseconds since performance.timeOrigin (monotonic). */
export function nowNs(): number {
  return Math.round(performance.now() * 1e6);
}
