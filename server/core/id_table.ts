/**
 * IdTable: what is kept for each call in flight, by the call's id.
 * @module
 */

/**
 * Values by integer id, for ids handed out in increasing order and let go in about the same order, a few at a
 * time (the calls in flight to a process, the answers waiting for their turn): a ring of slots indexed by the id's low bits. A new id whose slot is
 * taken by an older one still kept doubles the ring when it is half full, and otherwise (one call outlives many
 * later ones) goes to a Map beside it.
 *
 * A Map alone does the same job, but one that takes a new key and drops an old one with every call rebuilds its
 * hash table every few calls (the deleted entries fill it). Held in such a Map, a Python stub's calls had every
 * request's objects promoted to the old generation (add_sub_py over HTTP at 8 connections, 2 cores: 2.3-2.8 KB a
 * request, scavenges 4-5% of the main thread's time, and the full collections that followed); held in this
 * table, none (scavenges 0.3-0.9%).
 */
export class IdTable<V> {
  /** The id in each slot, -1 where the slot is empty. */
  #ids: Float64Array;
  #values: (V | undefined)[];
  #mask: number;
  #inSlots = 0;
  /** Ids whose slot was taken when they came. */
  #others: Map<number, V> | undefined;

  /** @param capacity the slots to start with (rounded up to a power of two) */
  constructor(capacity = 16) {
    let n = 1;
    while (n < capacity) n *= 2;
    this.#ids = new Float64Array(n).fill(-1);
    this.#values = new Array<V | undefined>(n).fill(undefined);
    this.#mask = n - 1;
  }

  /** How many values are kept. */
  get size(): number {
    return this.#inSlots + (this.#others?.size ?? 0);
  }

  /** The value kept for `id` (a non-negative safe integer), if any. */
  get(id: number): V | undefined {
    const i = id & this.#mask;
    return this.#ids[i] === id ? this.#values[i] : this.#others?.get(id);
  }

  /** Whether a value is kept for `id`. */
  has(id: number): boolean {
    return this.#ids[id & this.#mask] === id || (this.#others?.has(id) ?? false);
  }

  /** Keeps `value` for `id`, replacing what was kept for it. */
  set(id: number, value: V): void {
    let i = id & this.#mask;
    if (this.#ids[i] !== -1 && this.#ids[i] !== id && this.#inSlots * 2 >= this.#ids.length) {
      this.#grow();
      i = id & this.#mask;
    }
    if (this.#ids[i] === id) this.#values[i] = value;
    else if (this.#ids[i] === -1 && !this.#others?.has(id)) {
      this.#ids[i] = id;
      this.#values[i] = value;
      this.#inSlots++;
    } else (this.#others ??= new Map()).set(id, value);
  }

  /** Lets go of the value kept for `id`; whether there was one. */
  delete(id: number): boolean {
    const i = id & this.#mask;
    if (this.#ids[i] !== id) return this.#others?.delete(id) ?? false;
    this.#ids[i] = -1;
    this.#values[i] = undefined;
    this.#inSlots--;
    return true;
  }

  /** The values kept: those in slots in slot order, then the others. */
  values(): V[] {
    const out: V[] = [];
    for (let i = 0; i < this.#ids.length; i++) if (this.#ids[i] !== -1) out.push(this.#values[i]!);
    if (this.#others) out.push(...this.#others.values());
    return out;
  }

  /** Lets go of every value. */
  clear(): void {
    this.#ids.fill(-1);
    this.#values.fill(undefined);
    this.#inSlots = 0;
    this.#others = undefined;
  }

  /** Twice the slots, each kept value moved to its slot there, then the others where their slot is free. */
  #grow(): void {
    const ids = this.#ids, values = this.#values, others = this.#others;
    const n = ids.length * 2;
    this.#ids = new Float64Array(n).fill(-1);
    this.#values = new Array<V | undefined>(n).fill(undefined);
    this.#mask = n - 1;
    this.#inSlots = 0;
    this.#others = undefined;
    // Two ids in different slots differ in their low bits, so they stay apart.
    for (let i = 0; i < ids.length; i++) {
      if (ids[i] === -1) continue;
      const j = ids[i]! & this.#mask;
      this.#ids[j] = ids[i]!;
      this.#values[j] = values[i];
      this.#inSlots++;
    }
    if (others) { for (const [id, v] of others) this.set(id, v); }
  }
}
