/**
 * Slab: small buffers cut from larger ones.
 * @module
 */

/**
 * Cuts short-lived buffers (frames, answers) from slabs of a fixed size, so that each costs a view instead of a
 * buffer of its own: `room(n)` gives a view of n bytes, `keep(view, used)` takes its first `used` bytes for
 * good. Bytes kept are never handed out again; a slab without room is replaced by a new one, and freed once no
 * view of it is held. Buffers larger than a quarter of the slab are buffers of their own.
 */
export class Slab {
  readonly #size: number;
  #slab: Uint8Array;
  #at = 0;

  /** @param size the bytes of each slab */
  constructor(size: number) {
    this.#size = size;
    this.#slab = new Uint8Array(size);
  }

  /**
   * Room for `n` bytes, not yet taken: the next call gives the same bytes unless `keep` took them.
   * @param n the most bytes the caller will write
   */
  room(n: number): Uint8Array {
    if (n > this.#size / 4) return new Uint8Array(n);
    if (this.#at + n > this.#size) {
      this.#slab = new Uint8Array(this.#size);
      this.#at = 0;
    }
    return this.#slab.subarray(this.#at, this.#at + n);
  }

  /**
   * Takes the first `used` bytes of the last view `room` gave; the next view starts right after them, so that
   * views taken one after the other are contiguous. Nothing for a buffer of its own.
   * @param view the view `room` gave
   * @param used the bytes taken (may exceed the view up to the slab's end, to align the next view)
   */
  keep(view: Uint8Array, used: number): void {
    if (view.buffer === this.#slab.buffer) this.#at = view.byteOffset + used;
  }

  /**
   * `room(n)` kept whole, the next view starting at a multiple of 8 bytes.
   * @param n the view's length
   */
  take(n: number): Uint8Array {
    const out = this.room(n);
    this.keep(out, (n + 7) & ~7);
    return out;
  }
}
