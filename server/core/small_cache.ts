/**
 * SmallCache: a bounded memo for the hot path.
 * @module
 */

/**
 * A map of values computed from request or model data, bounded in size: when it holds `max` entries, adding a new
 * key empties it first (entries still in use come back at their next use). For the request path's memos: the
 * decoded JSON part of a binary request, the text that opens a model's JSON answer, a Python stub's result
 * header, where the keys may come from clients and nothing may grow without bound.
 */
export class SmallCache<K, V> {
  readonly #map = new Map<K, V>();
  readonly #max: number;

  /** @param max the most entries kept */
  constructor(max: number) {
    this.#max = max;
  }

  /** The value kept for `key`, if any. */
  get(key: K): V | undefined {
    return this.#map.get(key);
  }

  /** Keeps `value` for `key`, emptying the cache first when it is full and `key` is new. */
  set(key: K, value: V): void {
    if (this.#map.size >= this.#max && !this.#map.has(key)) this.#map.clear();
    this.#map.set(key, value);
  }

  /** How many entries are kept. */
  get size(): number {
    return this.#map.size;
  }
}
