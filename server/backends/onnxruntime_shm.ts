/**
 * The shared-memory hand-off between the server's thread and an ONNX Runtime instance on a worker thread: what
 * both sides agree on. A run goes through three SharedArrayBuffers of the instance:
 *
 * - the control block (Int32Array words): the server's thread writes the run's kind, bumps SEQ and notifies it;
 *   the worker, blocked in `Atomics.wait` on SEQ, does the work, writes STATUS, sets DONE to that SEQ and
 *   notifies DONE, on which the server's thread awaits `Atomics.waitAsync`;
 * - the input arena (growable, grown by the server's thread): the batch's inputs, concatenated there by the
 *   scheduler (the instance lends views of it) or copied there;
 * - the output arena (growable, grown by the worker): the outputs, which the server's thread copies out before
 *   the next run can overwrite them;
 *
 * and a header (Float64Array over a fixed buffer): the feeds (input index, type, place, dims) and the fetched
 * outputs going in; the outputs (type, place, dims) or an error message coming back.
 * @module
 */

/** Words of the control block. */
export const CTL = {
  /** Bumped by the server's thread for every request to the worker. */
  SEQ: 0,
  /** Set by the worker to the SEQ it finished. */
  DONE: 1,
  /** What the request is: one of KIND. */
  KIND: 2,
  /** How the request ended: one of STATUS. */
  STATUS: 3,
} as const;

/** The number of Int32 words of the control block. */
export const CTL_WORDS = 4;

/** What the server's thread asks of the worker. */
export const KIND = {
  /** Run the batch the header describes. */
  RUN: 1,
  /** Return to the event loop to read a posted message (a run the arenas cannot carry, or a close). */
  MESSAGE: 2,
  /** Dispose of the session and stop. */
  EXIT: 3,
} as const;

/** How a run ended. */
export const STATUS = {
  /** The outputs are in the output arena, described by the header. */
  OK: 0,
  /** The run failed: the header holds the message. */
  ERROR: 1,
  /** The outputs did not fit the output arena (or are strings): they come as a posted `result` message. */
  POSTED: 2,
} as const;

/** The size of the header in bytes. */
export const HEADER_BYTES = 64 * 1024;

/** The largest an arena grows; bigger batches cross by postMessage. */
export const ARENA_MAX_BYTES = 1 << 30;

type TypedCtor = new (buffer: ArrayBuffer, byteOffset: number, length: number) => ArrayBufferView;

/**
 * The element types the arenas carry (strings cross by postMessage), with the typed array the native binding
 * takes for each (FP16 as its bit patterns); an element type's code is its place in this list.
 */
export const ARENA_TYPED = {
  float32: Float32Array,
  uint8: Uint8Array,
  int8: Int8Array,
  uint16: Uint16Array,
  int16: Int16Array,
  int32: Int32Array,
  int64: BigInt64Array,
  bool: Uint8Array,
  float16: Uint16Array,
  float64: Float64Array,
  uint32: Uint32Array,
  uint64: BigUint64Array,
} as const satisfies Record<string, TypedCtor & { BYTES_PER_ELEMENT: number }>;

/** An element type the arenas carry. */
export type ArenaType = keyof typeof ARENA_TYPED;

/** The element types the arenas carry, by code. */
export const ARENA_TYPES: readonly ArenaType[] = Object.keys(ARENA_TYPED) as ArenaType[];

/** The code of each element type the arenas carry. */
export const ARENA_TYPE_CODES: ReadonlyMap<string, number> = new Map(ARENA_TYPES.map((t, i) => [t, i]));

/** The shared buffers of one worker instance, as the open message carries them. */
export interface SharedBlocks {
  control: SharedArrayBuffer;
  header: SharedArrayBuffer;
  input: SharedArrayBuffer;
  output: SharedArrayBuffer;
}

/** Rounds a byte offset up to 8, so that every typed view of the arenas is aligned. */
export function align8(n: number): number {
  return (n + 7) & ~7;
}

/** Makes a growable SharedArrayBuffer of `byteLength` bytes that grows up to ARENA_MAX_BYTES. */
export function growableShared(byteLength: number): SharedArrayBuffer {
  const Ctor = SharedArrayBuffer as unknown as new (
    n: number,
    o: { maxByteLength: number },
  ) => SharedArrayBuffer;
  return new Ctor(byteLength, { maxByteLength: ARENA_MAX_BYTES });
}

/**
 * Grows an arena to at least `byteLength` bytes (doubling, so that growth is rare).
 * @param arena the arena
 * @param byteLength the bytes needed, at most ARENA_MAX_BYTES
 */
export function ensureBytes(arena: SharedArrayBuffer, byteLength: number): void {
  const grow = arena as unknown as { byteLength: number; grow(n: number): void };
  if (grow.byteLength >= byteLength) return;
  grow.grow(Math.min(ARENA_MAX_BYTES, Math.max(byteLength, grow.byteLength * 2)));
}

/** Writes a UTF-8 error message into the header (its length in word 0, the bytes from byte 8). */
export function writeMessage(header: SharedArrayBuffer, message: string): void {
  const bytes = new Uint8Array(header, 8);
  const { written } = new TextEncoder().encodeInto(message, bytes);
  new Float64Array(header, 0, 1)[0] = written;
}

/** Reads the error message writeMessage wrote. */
export function readMessage(header: SharedArrayBuffer): string {
  const n = new Float64Array(header, 0, 1)[0]!;
  // TextDecoder does not read shared memory: copy the bytes out first.
  return new TextDecoder().decode(new Uint8Array(header, 8, n).slice());
}
