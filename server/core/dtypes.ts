/**
 * Tensor datatypes: the wire names of the KServe v2 protocol, the model-config names, element sizes and the
 * conversions between bytes, typed arrays and JSON values.
 * @module
 */

import { BytesTensor } from "./bytes_tensor.ts";
import { invalidArg } from "./errors.ts";

/** The datatypes of the KServe v2 protocol. */
export const DATATYPES = [
  "BOOL",
  "UINT8",
  "UINT16",
  "UINT32",
  "UINT64",
  "INT8",
  "INT16",
  "INT32",
  "INT64",
  "FP16",
  "BF16",
  "FP32",
  "FP64",
  "BYTES",
] as const;

/** A datatype of the KServe v2 protocol. */
export type Datatype = typeof DATATYPES[number];

const ELEMENT_SIZE: Record<Datatype, number> = {
  BOOL: 1,
  UINT8: 1,
  UINT16: 2,
  UINT32: 4,
  UINT64: 8,
  INT8: 1,
  INT16: 2,
  INT32: 4,
  INT64: 8,
  FP16: 2,
  BF16: 2,
  FP32: 4,
  FP64: 8,
  BYTES: 0,
};

/**
 * Whether a string names a protocol datatype.
 * @param s the candidate
 */
export function isDatatype(s: unknown): s is Datatype {
  return typeof s === "string" && (DATATYPES as readonly string[]).includes(s);
}

/**
 * The size of one element in bytes; 0 for BYTES, whose elements vary.
 * @param dt the datatype
 */
export function elementSize(dt: Datatype): number {
  return ELEMENT_SIZE[dt];
}

/**
 * The protocol datatype for a model-config `data_type` (`TYPE_FP32` -> `FP32`, `TYPE_STRING` -> `BYTES`).
 * @param configType the config enum name
 * @returns the datatype, or undefined for TYPE_INVALID and unknown names
 */
export function fromConfigType(configType: string): Datatype | undefined {
  if (configType === "TYPE_STRING") return "BYTES";
  const dt = configType.startsWith("TYPE_") ? configType.slice(5) : "";
  return isDatatype(dt) && dt !== "BYTES" ? dt : undefined;
}

/**
 * The model-config `data_type` name for a protocol datatype.
 * @param dt the datatype
 */
export function toConfigType(dt: Datatype): string {
  return dt === "BYTES" ? "TYPE_STRING" : `TYPE_${dt}`;
}

/**
 * The number of elements of a shape (1 for a scalar shape []).
 * @param shape the dims, all non-negative
 */
export function elementCount(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

/**
 * Tensor contents: raw little-endian bytes for fixed-size types; for BYTES, the elements length-prefixed in one
 * buffer.
 */
export type TensorData = Uint8Array | BytesTensor;

type Typed =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | BigUint64Array
  | BigInt64Array
  | Float32Array
  | Float64Array;

const TYPED_CTOR = {
  BOOL: Uint8Array,
  UINT8: Uint8Array,
  UINT16: Uint16Array,
  UINT32: Uint32Array,
  UINT64: BigUint64Array,
  INT8: Int8Array,
  INT16: Int16Array,
  INT32: Int32Array,
  INT64: BigInt64Array,
  FP16: Uint16Array,
  BF16: Uint16Array,
  FP32: Float32Array,
  FP64: Float64Array,
} as const;

/**
 * A typed-array view of fixed-size tensor bytes; copies only when the bytes are not aligned for the type.
 * FP16 and BF16 come back as Uint16Array of their bit patterns.
 * @param dt a fixed-size datatype
 * @param bytes the raw little-endian bytes
 */
export function typedView(dt: Exclude<Datatype, "BYTES">, bytes: Uint8Array): Typed {
  const ctor = TYPED_CTOR[dt];
  const size = ctor.BYTES_PER_ELEMENT;
  // Uint8Array.prototype.slice copies even for node Buffers, whose own slice() is a view.
  if (bytes.byteOffset % size !== 0) bytes = Uint8Array.prototype.slice.call(bytes);
  return new ctor(bytes.buffer as ArrayBuffer, bytes.byteOffset, bytes.byteLength / size);
}

/**
 * The bytes of a typed array, without copying.
 * @param a the typed array
 */
export function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/**
 * The float32 bits of a number rounded to odd (an inexact result keeps its truncation with the lowest bit
 * set), so that rounding those bits once more to FP16 or BF16 gives the correctly rounded result.
 */
function f32BitsRoundedToOdd(v: number): number {
  f32[0] = v;
  let x = u32[0]!;
  if (v === v && f32[0] !== v) {
    if (Math.abs(f32[0]!) > Math.abs(v)) x--;
    x |= 1;
  }
  return x >>> 0;
}

/** IEEE half-precision bits to a number. */
export function halfToNumber(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** A number to IEEE half-precision bits, rounding to nearest even. */
export function numberToHalf(v: number): number {
  const x = f32BitsRoundedToOdd(v);
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  let e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (half & 1))) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1))) half++;
  if ((half >> 10) >= 31) {
    e = 31;
    return sign | 0x7c00;
  }
  return sign | half;
}

/** bfloat16 bits to a number. */
export function bf16ToNumber(h: number): number {
  u32[0] = h << 16;
  return f32[0]!;
}

/** A number to bfloat16 bits, rounding to nearest even. */
export function numberToBf16(v: number): number {
  const x = f32BitsRoundedToOdd(v);
  if ((x & 0x7f800000) === 0x7f800000 && (x & 0x7fffff)) return (x >>> 16) | 0x40;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

/**
 * The most elements of a BYTES tensor the server makes up itself (a warmup sample, a sequence's initial state):
 * each is an object on the JavaScript heap, which the process cannot survive running out of. A tensor of a
 * fixed-size datatype is one buffer, whose allocation fails cleanly when too large.
 */
export const MAX_MADE_BYTES_ELEMENTS = 1 << 22;

/**
 * Checks the size of a BYTES tensor the server makes up from a config (a warmup sample, a sequence's initial
 * state): a config, a load request's too, must not exhaust the JavaScript heap.
 * @param datatype the tensor's datatype
 * @param count its element count
 * @param what the start of the error message
 * @throws ServerError INVALID_ARG when it is too large
 */
export function checkMadeTensor(datatype: Datatype, count: number, what: string): void {
  if (datatype === "BYTES" && count > MAX_MADE_BYTES_ELEMENTS) {
    throw invalidArg(
      `${what} has ${count} elements, more than the ${MAX_MADE_BYTES_ELEMENTS} of a BYTES tensor the server makes`,
    );
  }
}

/**
 * Parses JSON text; integer literals beyond 2^53 become bigint, so that INT64 and UINT64 values keep every
 * digit (JSON.parse alone rounds them to the nearest double).
 * @param text the JSON text
 */
export function parseJsonExact(text: string): unknown {
  // Most bodies hold no 16-digit run: parse them without a reviver (faster).
  if (!/[0-9]{16}/.test(text)) return JSON.parse(text);
  return JSON.parse(text, (_key, value, context?: { source?: string }) => {
    if (typeof value === "number" && !Number.isSafeInteger(value)) {
      const source = context?.source;
      if (source !== undefined && /^-?[0-9]+$/.test(source)) return BigInt(source);
    }
    return value;
  });
}

/** `JSON.rawJSON` (V8 has it; TypeScript's lib does not declare it yet): text JSON.stringify writes as it is. */
export const rawJSON = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON;

/**
 * `JSON.stringify` that writes a bigint (an integer parseJsonExact kept, e.g. a uint64 sequence_id beyond 2^53)
 * as its exact digits, where JSON.stringify alone throws.
 * @param value the value
 */
export function stringifyExact(value: unknown): string {
  return JSON.stringify(value, (_key, v) => (typeof v === "bigint" ? rawJSON(v.toString()) : v));
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Decodes UTF-8 bytes (invalid sequences become U+FFFD). */
export function utf8Decode(b: Uint8Array): string {
  return decoder.decode(b);
}

/** Encodes a string as UTF-8. */
export function utf8Encode(s: string): Uint8Array {
  return encoder.encode(s);
}

const INT_RANGE: Partial<Record<Datatype, [number, number]>> = {
  UINT8: [0, 255],
  UINT16: [0, 65535],
  UINT32: [0, 4294967295],
  INT8: [-128, 127],
  INT16: [-32768, 32767],
  INT32: [-2147483648, 2147483647],
};

/** Refuses element `i` of JSON values converted to `dt` (see fromJsonValues). */
function badElement(
  dt: Datatype,
  values: readonly unknown[],
  what: string,
  i: number,
  expected: string,
): never {
  const v = values[i];
  throw invalidArg(
    `Cannot read ${what}: element ${i} is ${
      typeof v === "bigint" ? String(v) : JSON.stringify(v)
    }, expected ${expected} for ${dt}`,
  );
}

/**
 * Converts flat JSON values to tensor bytes, checking each element's type and range.
 * @param dt the datatype
 * @param values flat JSON values
 * @param what names the tensor in error messages, e.g. `input 'INPUT0'`
 * @returns the tensor contents
 */
export function fromJsonValues(dt: Datatype, values: readonly unknown[], what: string): TensorData {
  const n = values.length;
  // The numeric types fill a typed array over an ArrayBuffer made first: a small typed array made alone lives
  // in the JavaScript heap, and the bytes view of it (its .buffer) then moves it out into a buffer of its own,
  // a second allocation.
  if (dt === "BYTES") {
    for (let i = 0; i < n; i++) {
      if (typeof values[i] !== "string") badElement(dt, values, what, i, "a string");
    }
    return BytesTensor.fromStrings(values, what);
  }
  if (dt === "BOOL") {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (typeof v !== "boolean") badElement(dt, values, what, i, "true or false");
      out[i] = v ? 1 : 0;
    }
    return out;
  }
  if (dt === "INT64" || dt === "UINT64") {
    const buffer = new ArrayBuffer(n * 8);
    const out = dt === "INT64" ? new BigInt64Array(buffer) : new BigUint64Array(buffer);
    const [lo, hi] = dt === "INT64" ? [-(2n ** 63n), 2n ** 63n - 1n] : [0n, 2n ** 64n - 1n];
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (typeof v !== "bigint" && (typeof v !== "number" || !Number.isInteger(v))) {
        badElement(dt, values, what, i, "an integer");
      }
      const b = BigInt(v as number | bigint);
      if (b < lo || b > hi) badElement(dt, values, what, i, "an integer in range");
      out[i] = b;
    }
    return new Uint8Array(buffer);
  }
  const range = INT_RANGE[dt];
  if (range) {
    const ctor = TYPED_CTOR[dt as "INT32"];
    const buffer = new ArrayBuffer(n * ctor.BYTES_PER_ELEMENT);
    const out = new ctor(buffer);
    const lo = range[0];
    const hi = range[1];
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (typeof v !== "number" || !Number.isInteger(v)) {
        if (typeof v === "bigint") badElement(dt, values, what, i, `an integer in [${lo}, ${hi}]`);
        badElement(dt, values, what, i, "an integer");
      }
      if (v < lo || v > hi) badElement(dt, values, what, i, `an integer in [${lo}, ${hi}]`);
      out[i] = v;
    }
    return new Uint8Array(buffer);
  }
  // Floating point types.
  const buffer = new ArrayBuffer(n * (dt === "FP64" ? 8 : dt === "FP32" ? 4 : 2));
  const out = dt === "FP64"
    ? new Float64Array(buffer)
    : dt === "FP32"
    ? new Float32Array(buffer)
    : new Uint16Array(buffer);
  for (let i = 0; i < n; i++) {
    // Integer literals beyond 2^53 arrive as bigint (see parseJsonExact); as floats they are plain numbers.
    const v = typeof values[i] === "bigint" ? Number(values[i]) : values[i];
    if (typeof v !== "number") badElement(dt, values, what, i, "a number");
    const x = dt === "FP16"
      ? numberToHalf(v as number)
      : dt === "BF16"
      ? numberToBf16(v as number)
      : (v as number);
    // A literal too large for the type (1e400 parses as Infinity; 1e39 overflows FP32) is refused, not stored
    // as infinity.
    const overflow = !Number.isFinite(v) ||
      (dt === "FP32" && !Number.isFinite(Math.fround(v as number))) ||
      (dt === "FP16" && (x & 0x7c00) === 0x7c00) ||
      (dt === "BF16" && (x & 0x7f80) === 0x7f80);
    if (overflow) {
      throw invalidArg(
        `Cannot read ${what}: element ${i} is out of the range of ${dt}${
          Number.isFinite(v) ? ` (${v})` : ""
        }`,
      );
    }
    out[i] = x;
  }
  return new Uint8Array(buffer);
}

/**
 * Converts tensor contents to flat JSON values: numbers, booleans, or strings for BYTES.
 * INT64 and UINT64 values beyond 2^53 become raw JSON numbers (`JSON.rawJSON`), so that `JSON.stringify`
 * writes them exactly, as Triton does.
 * @param dt the datatype
 * @param data the tensor contents
 */
export function toJsonValues(dt: Datatype, data: TensorData): unknown[] {
  if (dt === "BYTES") return (data as BytesTensor).strings();
  const bytes = data as Uint8Array;
  if (dt === "BOOL") return Array.from(bytes, (b) => b !== 0);
  const view = typedView(dt, bytes);
  // JSON.stringify writes -0 as 0; Triton writes -0.0.
  const signed = (x: number): unknown => (x === 0 && 1 / x < 0 ? rawJSON("-0.0") : x);
  if (dt === "FP16") return Array.from(view as Uint16Array, (h) => signed(halfToNumber(h)));
  if (dt === "BF16") return Array.from(view as Uint16Array, (h) => signed(bf16ToNumber(h)));
  if (dt === "FP32" || dt === "FP64") return Array.from(view as Float32Array, signed);
  if (dt === "INT64" || dt === "UINT64") {
    return Array.from(view as BigInt64Array, (b) => {
      const n = Number(b);
      return Number.isSafeInteger(n) ? n : rawJSON(String(b));
    });
  }
  return Array.from(view as Int32Array);
}

/**
 * Tensor contents as the text of a flat JSON array, the same text `JSON.stringify(toJsonValues(...))` gives,
 * written straight from the typed array where the values allow it (the hot path of JSON responses).
 * @param dt the datatype
 * @param data the tensor contents
 */
export function toJsonText(dt: Datatype, data: TensorData): string {
  if (
    dt === "BYTES" || dt === "BOOL" || dt === "FP16" || dt === "BF16" || dt === "INT64" || dt === "UINT64"
  ) {
    return JSON.stringify(toJsonValues(dt, data));
  }
  const view = typedView(dt, data as Uint8Array) as Int32Array | Float32Array;
  if (dt === "FP32" || dt === "FP64") {
    for (let i = 0; i < view.length; i++) {
      const x = view[i]!;
      // Non-finite values and -0 need toJsonValues' handling.
      if (!Number.isFinite(x) || (x === 0 && 1 / x < 0)) return JSON.stringify(toJsonValues(dt, data));
    }
  }
  return `[${view.join(",")}]`;
}

/** The byte size of tensor contents (BYTES counted as serialized, with 4-byte length prefixes). */
export function dataByteSize(data: TensorData): number {
  return data.byteLength;
}
