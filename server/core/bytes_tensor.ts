/**
 * The contents of a BYTES tensor: all its elements in one buffer, each a 4-byte little-endian length followed
 * by its bytes. This is the layout the binary extension, gRPC raw contents and shared memory carry, so a
 * request's bytes are kept as they arrive and a response's are written as they are; no object is made per
 * element unless something asks for one.
 * @module
 */

import { invalidArg } from "./errors.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Names an inference input in the messages of BytesTensor.fromWire, in Triton's wording. */
export interface InputNames {
  /** The input's name. */
  input: string;
  /** The model's name. */
  model: string;
}

/** The elements of a BYTES tensor, length-prefixed in one buffer. */
export class BytesTensor {
  /** The elements, each a 4-byte little-endian length followed by its bytes, end to end. */
  readonly data: Uint8Array;
  /** The number of elements. */
  readonly count: number;
  /** Where each element's bytes start (after its length prefix), made on the first `at`. */
  #starts: Float64Array | undefined;

  /**
   * Wraps length-prefixed elements as they are; the caller vouches that `data` holds exactly `count` of them
   * (BytesTensor.fromWire checks instead).
   * @param data the length-prefixed elements
   * @param count how many there are
   */
  constructor(data: Uint8Array, count: number) {
    this.data = data;
    this.count = count;
  }

  /**
   * Checks length-prefixed elements (as they come off the wire, from shared memory or from a backend) and wraps
   * them without a copy.
   * @param buf the serialized elements
   * @param count the expected element count
   * @param what names the tensor in error messages
   * @param names for an inference input: a wrong element count is told in Triton's wording (clients match it)
   */
  static fromWire(buf: Uint8Array, count: number, what: string, names?: InputNames): BytesTensor {
    const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    const size = buf.byteLength;
    let off = 0;
    for (let i = 0; i < count; i++) {
      if (off + 4 > size && names) {
        throw invalidArg(
          `Cannot read ${what}: expected ${count} string elements for inference input '${names.input}' for model '${names.model}', got ${i}`,
        );
      }
      if (off + 4 > size) {
        throw invalidArg(
          `Cannot read ${what}: BYTES data holds ${i} elements, expected ${count} (length prefix of element ${i} is missing)`,
        );
      }
      const len = dv.getUint32(off, true);
      off += 4;
      if (off + len > size) {
        throw invalidArg(
          `Cannot read ${what}: BYTES element ${i} claims ${len} bytes but only ${size - off} remain`,
        );
      }
      off += len;
    }
    if (off !== size && names) {
      throw invalidArg(
        `Cannot read ${what}: unexpected number of string elements ${
          count + 1
        } for inference input '${names.input}' for model '${names.model}', expecting ${count}`,
      );
    }
    if (off !== size) {
      throw invalidArg(
        `Cannot read ${what}: BYTES data has ${size - off} bytes after the ${count} expected elements`,
      );
    }
    return new BytesTensor(buf, count);
  }

  /**
   * Serializes elements into one buffer.
   * @param elements the elements' bytes, in order
   */
  static of(elements: readonly Uint8Array[]): BytesTensor {
    let total = 0;
    for (const e of elements) total += 4 + e.byteLength;
    const out = new Uint8Array(total);
    const dv = new DataView(out.buffer);
    let off = 0;
    for (const e of elements) {
      dv.setUint32(off, e.byteLength, true);
      out.set(e, off + 4);
      off += 4 + e.byteLength;
    }
    return new BytesTensor(out, elements.length);
  }

  /**
   * Encodes strings as UTF-8, length-prefixed into one buffer.
   * @param strings the values; each must be a string
   * @param what names the tensor in error messages, e.g. `input 'INPUT0'`
   */
  static fromStrings(strings: readonly unknown[], what = "the tensor"): BytesTensor {
    const n = strings.length;
    let size = 0;
    for (let i = 0; i < n; i++) {
      const s = strings[i];
      if (typeof s !== "string") {
        throw invalidArg(
          `Cannot read ${what}: element ${i} is ${JSON.stringify(s)}, expected a string for BYTES`,
        );
      }
      size += 4 + s.length;
    }
    // One byte per UTF-16 unit fits ASCII; the buffer grows for the rest.
    let buf = new Uint8Array(size + 16);
    let off = 0;
    for (let i = 0; i < n; i++) {
      const s = strings[i] as string;
      for (;;) {
        if (off + 4 <= buf.byteLength) {
          const r = encoder.encodeInto(s, buf.subarray(off + 4));
          if (r.read === s.length) {
            buf[off] = r.written & 0xff;
            buf[off + 1] = (r.written >>> 8) & 0xff;
            buf[off + 2] = (r.written >>> 16) & 0xff;
            buf[off + 3] = r.written >>> 24;
            off += 4 + r.written;
            break;
          }
        }
        // At most 3 bytes per UTF-16 unit are still to come for this string, after its prefix.
        const grown = new Uint8Array(Math.max(buf.byteLength * 2, off + 4 + 3 * s.length + 16));
        grown.set(buf.subarray(0, off));
        buf = grown;
      }
    }
    return new BytesTensor(buf.subarray(0, off), n);
  }

  /**
   * Joins tensors' elements in order (a batch's inputs).
   * @param parts the tensors
   */
  static concat(parts: readonly BytesTensor[]): BytesTensor {
    let total = 0;
    let count = 0;
    for (const p of parts) {
      total += p.data.byteLength;
      count += p.count;
    }
    const out = new Uint8Array(total);
    let off = 0;
    for (const p of parts) {
      out.set(p.data, off);
      off += p.data.byteLength;
    }
    return new BytesTensor(out, count);
  }

  /** The serialized size in bytes, length prefixes included. */
  get byteLength(): number {
    return this.data.byteLength;
  }

  /**
   * The bytes of element `i` (a view, no copy).
   * @param i the element index, 0 <= i < count
   */
  at(i: number): Uint8Array {
    if (!Number.isInteger(i) || i < 0 || i >= this.count) {
      throw new RangeError(`Cannot read BYTES element ${i}: the tensor has ${this.count} elements`);
    }
    const starts = this.#starts ??= this.#index();
    const start = starts[i]!;
    return this.data.subarray(start, start + this.#length(start - 4));
  }

  /** The elements' bytes in order, each a view. */
  *[Symbol.iterator](): IterableIterator<Uint8Array> {
    const data = this.data;
    let off = 0;
    for (let i = 0; i < this.count; i++) {
      const len = this.#length(off);
      yield data.subarray(off + 4, off + 4 + len);
      off += 4 + len;
    }
  }

  /** The elements as views, in an array. */
  elements(): Uint8Array[] {
    return [...this];
  }

  /** The elements decoded as UTF-8 text (malformed sequences become U+FFFD). */
  strings(): string[] {
    const out = new Array<string>(this.count);
    const data = this.data;
    let off = 0;
    for (let i = 0; i < this.count; i++) {
      const len = this.#length(off);
      out[i] = decoder.decode(data.subarray(off + 4, off + 4 + len));
      off += 4 + len;
    }
    return out;
  }

  /**
   * Elements `start` to `end` (exclusive), sharing this buffer.
   * @param start the first element
   * @param end one past the last element
   */
  slice(start: number, end: number): BytesTensor {
    if (!Number.isInteger(start) || !Number.isInteger(end) || start < 0 || end < start || end > this.count) {
      throw new RangeError(
        `Cannot slice BYTES elements ${start} to ${end}: the tensor has ${this.count} elements`,
      );
    }
    let off = 0;
    let i = 0;
    for (; i < start; i++) off += 4 + this.#length(off);
    const from = off;
    for (; i < end; i++) off += 4 + this.#length(off);
    return new BytesTensor(this.data.subarray(from, off), end - start);
  }

  /** A copy that owns its buffer. */
  copy(): BytesTensor {
    return new BytesTensor(this.data.slice(), this.count);
  }

  #length(off: number): number {
    const d = this.data;
    return (d[off]! | (d[off + 1]! << 8) | (d[off + 2]! << 16) | (d[off + 3]! << 24)) >>> 0;
  }

  #index(): Float64Array {
    const starts = new Float64Array(this.count);
    let off = 0;
    for (let i = 0; i < this.count; i++) {
      starts[i] = off + 4;
      off += 4 + this.#length(off);
    }
    return starts;
  }
}

/**
 * Gives BYTES contents that crossed a thread (structured cloning keeps `data` and `count` but not the class)
 * their class back; other contents are left as they are.
 * @param tensors tensors received from another thread, changed in place
 */
export function reviveBytes(tensors: readonly { datatype: string; data: unknown }[]): void {
  for (const t of tensors) {
    if (t.datatype !== "BYTES" || t.data instanceof BytesTensor) continue;
    const d = t.data as { data: Uint8Array; count: number };
    t.data = new BytesTensor(d.data, d.count);
  }
}
