/**
 * The shared-memory hand-off between the server's thread and an ONNX Runtime instance on a worker thread: what
 * both sides agree on. Requests to the worker are numbered (SEQ) and go through two slots in turn (request `seq`
 * uses slot `seq & 1`), so that the server's thread can hand over the next batch while the worker runs one: the
 * worker, done with a run, finds the next one waiting and starts it at once, without going to sleep and without
 * waiting for the server's thread to take the answer of the one before. A slot is
 *
 * - the input arena (growable, grown by the server's thread): the batch's inputs, concatenated there by the
 *   scheduler (the instance lends views of it) or copied there;
 * - the output arena (growable, grown by the worker): the outputs, which the server's thread copies out before
 *   the slot's next run can overwrite them;
 * - a header (Float64Array over a fixed buffer): the feeds (input index, type, place, dims) and the fetched
 *   outputs going in; the outputs (type, place, dims) or an error message coming back;
 *
 * and both share the control block (Int32Array words): the server's thread writes the slot's kind, sets SEQ to
 * the request's number and notifies it; the worker, blocked in `Atomics.wait` on SEQ while it has nothing to do,
 * takes the requests after the last one it answered in order, writes each one's STATUS, sets DONE to its number
 * and notifies DONE, on which the server's thread awaits `Atomics.waitAsync`.
 * @module
 */

/** The slots requests go through in turn: one running, the next one waiting. */
export const SLOTS = 2;

/** Words of the control block; KIND and STATUS are slot 0's, slot `s`'s are `2 * s` words further. */
export const CTL = {
  /** The number of the latest request to the worker (each one more than the one before). */
  SEQ: 0,
  /** Set by the worker to the number of the request it finished last. */
  DONE: 1,
  /** What the slot's request is: one of KIND. */
  KIND: 2,
  /** How the slot's request ended: one of STATUS. */
  STATUS: 3,
} as const;

/** The number of Int32 words of the control block. */
export const CTL_WORDS = 2 + 2 * SLOTS;

/** The slot of request number `seq`. */
export function slotOf(seq: number): number {
  return seq & 1;
}

/** The control word `word` (CTL.KIND or CTL.STATUS) of slot `slot`. */
export function slotWord(word: number, slot: number): number {
  return word + 2 * slot;
}

/**
 * Whether request `done` is request `seq` or a later one (request numbers are Int32 values that wrap around).
 */
export function reached(done: number, seq: number): boolean {
  return ((done - seq) | 0) >= 0;
}

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
 * takes for each (FP16 as its bit patterns; BF16, which only libortshim runs, likewise); an element type's code
 * is its place in this list.
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
  bfloat16: Uint16Array,
} as const satisfies Record<string, TypedCtor & { BYTES_PER_ELEMENT: number }>;

/** An element type the arenas carry. */
export type ArenaType = keyof typeof ARENA_TYPED;

/** The element types the arenas carry, by code. */
export const ARENA_TYPES: readonly ArenaType[] = Object.keys(ARENA_TYPED) as ArenaType[];

/** The code of each element type the arenas carry. */
export const ARENA_TYPE_CODES: ReadonlyMap<string, number> = new Map(ARENA_TYPES.map((t, i) => [t, i]));

/** The buffers of one slot. */
export interface SlotBlocks {
  header: SharedArrayBuffer;
  input: SharedArrayBuffer;
  output: SharedArrayBuffer;
}

/** The shared buffers of one worker instance, as the open message carries them. */
export interface SharedBlocks {
  control: SharedArrayBuffer;
  /** SLOTS of them. */
  slots: SlotBlocks[];
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
