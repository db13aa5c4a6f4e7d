/**
 * The medians the benchmarks report. Two conventions, each kept by the reports that use it: `median` takes the
 * mean of the two middle values of an even count; `upperMedian` takes the higher of them, a value that was
 * measured (the reports that name one round's rate).
 * @module
 */

function sortedFinite(values: readonly number[]): number[] {
  return values.filter(Number.isFinite).sort((a, b) => a - b);
}

/**
 * The median of the finite values: the middle one, or the mean of the two middle ones.
 * @param values the values, in any order (not changed)
 * @returns the median, NaN when no value is finite
 */
export function median(values: readonly number[]): number {
  const s = sortedFinite(values);
  if (s.length === 0) return NaN;
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * The upper median of the finite values: the middle one, or the higher of the two middle ones.
 * @param values the values, in any order (not changed)
 * @returns the median, NaN when no value is finite
 */
export function upperMedian(values: readonly number[]): number {
  const s = sortedFinite(values);
  return s.length === 0 ? NaN : s[s.length >> 1]!;
}
