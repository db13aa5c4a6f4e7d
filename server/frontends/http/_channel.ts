/**
 * The shared-memory channel between an HTTP listener thread and the main thread: a pool of fixed-size slots
 * in one SharedArrayBuffer. The listener writes a request frame into a free slot and rings a doorbell; the
 * main thread, waiting on the doorbell with `Atomics.waitAsync`, takes the slot, runs the request and writes
 * the response frame into the same slot; the listener, waiting on the slot's state, reads it and frees the
 * slot. A round trip costs about a tenth of a `postMessage` pair (whose structured clone and wake-ups cost
 * 80–150 µs a round trip on a 2-core machine), which is what makes listener threads pay off for small models.
 * Frames larger than a slot, and requests whose parameters JSON cannot carry (64-bit integers), go by
 * `postMessage` instead.
 *
 * A frame: 4 bytes little-endian length of a JSON header, 4 bytes unused, the header, then the tensors' bytes in
 * header order (BYTES tensors as 4-byte length-prefixed elements), each starting at a multiple of 8 bytes from
 * the slot's start. V8 copies between a SharedArrayBuffer and another buffer word by word only where both sides
 * have the same alignment to 8 bytes, and byte by byte, several times slower, otherwise; so the header and the
 * tensors lie aligned, tensors are written through `setBytes` (which aligns a source that is not) and read into
 * views of a slab (aligned, and without a buffer of their own, which costs more than the copy).
 * @module
 */

import { BytesTensor } from "../../core/bytes_tensor.ts";
import type { Datatype } from "../../core/dtypes.ts";
import type { ErrorCode } from "../../core/errors.ts";
import { setBytes } from "../../core/shared_copy.ts";
import { Slab } from "../../core/slab.ts";
import type { InferRequest, InferResponse, ParamValue, RequestedOutput, Tensor } from "../../core/types.ts";

/** Slots per listener thread: the most requests one thread has in flight through the channel. */
export const SLOTS = 128;
/** Bytes per slot: the largest frame the channel carries. */
export const SLOT_BYTES = 16 * 1024;

/**
 * The index in a channel's `control` of the answers' doorbell, rung after every answer: the listener waits on it
 * alone, not on each slot, so that answers given while it is awake cost no wake-up each.
 */
export const ANSWERS = 1 + 2 * SLOTS;

/** Slot states. */
export const FREE = 0;
export const REQUEST = 1;
export const TAKEN = 2;
export const RESPONSE = 3;

/** The shared memory of one channel. */
export interface ChannelMemory {
  /**
   * [0]: the requests' doorbell (a counter the listener increments); [1 + s]: the state of slot s; then the
   * frames' lengths; last, the answers' doorbell (a counter the main thread increments, see `ANSWERS`).
   */
  control: SharedArrayBuffer;
  /** The slots' bytes. */
  data: SharedArrayBuffer;
}

/** Views over a channel's memory. */
export class Channel {
  readonly control: Int32Array;
  readonly data: Uint8Array;

  constructor(memory: ChannelMemory) {
    this.control = new Int32Array(memory.control);
    this.data = new Uint8Array(memory.data);
  }

  /** Allocates the memory of a channel. */
  static allocate(): ChannelMemory {
    return {
      control: new SharedArrayBuffer(4 * (2 + 2 * SLOTS)),
      data: new SharedArrayBuffer(SLOTS * SLOT_BYTES),
    };
  }

  /** The index in `control` of slot s's state. */
  stateIndex(slot: number): number {
    return 1 + slot;
  }

  /** The index in `control` of slot s's frame length. */
  lengthIndex(slot: number): number {
    return 1 + SLOTS + slot;
  }

  /** Writes a frame into a slot; false when it does not fit. */
  write(slot: number, frame: Frame): boolean {
    const base = slot * SLOT_BYTES;
    // The header is encoded straight into the slot (TextEncoder.encode would make a buffer of its own).
    const { read, written } = ENCODER.encodeInto(
      frame.header,
      this.data.subarray(base + HEADER_AT, base + SLOT_BYTES),
    );
    if (read < frame.header.length) return false;
    let total = HEADER_AT + written;
    for (const b of frame.bodies) total = align8(total) + b.byteLength;
    if (total > SLOT_BYTES) return false;
    new DataView(this.data.buffer, base, 4).setUint32(0, written, true);
    let off = HEADER_AT + written;
    for (const b of frame.bodies) {
      off = align8(off);
      setBytes(this.data, b, base + off);
      off += b.byteLength;
    }
    Atomics.store(this.control, this.lengthIndex(slot), total);
    return true;
  }

  /**
   * Reads a slot's frame: its header, and a copy of its bodies' bytes in which each body starts at a multiple of
   * 8 bytes (`tensorsOf` finds them there).
   */
  read(slot: number): { header: unknown; bytes: Uint8Array } {
    const base = slot * SLOT_BYTES;
    const total = Atomics.load(this.control, this.lengthIndex(slot));
    const headerLength = new DataView(this.data.buffer, base, 4).getUint32(0, true);
    // TextDecoder does not read shared memory: the header goes through a plain buffer kept for it.
    const plain = headerBuffer.subarray(0, headerLength);
    plain.set(this.data.subarray(base + HEADER_AT, base + HEADER_AT + headerLength));
    const header = JSON.parse(DECODER.decode(plain));
    const from = align8(HEADER_AT + headerLength);
    const bytes = total > from ? READ_SLAB.take(total - from) : new Uint8Array(0);
    bytes.set(this.data.subarray(base + from, base + total));
    return { header, bytes };
  }
}

/** Where a frame's header starts in its slot (after its length and 4 unused bytes). */
const HEADER_AT = 8;
/** The plain buffer a header is decoded from (no header is larger than a slot). */
const headerBuffer = new Uint8Array(SLOT_BYTES);
/**
 * Where the bodies of the frames read are copied: slabs of one slot's size, so that a view held long (an
 * answer a slow client reads) keeps no more memory than a frame of its own would at most; a body over a quarter
 * of it is a buffer of its own.
 */
const READ_SLAB = new Slab(SLOT_BYTES);

function align8(n: number): number {
  return (n + 7) & ~7;
}

const ENCODER = new TextEncoder();
const DECODER = new TextDecoder();

/** A frame to write: its JSON header and the tensors' bytes. */
export interface Frame {
  header: string;
  bodies: Uint8Array[];
}

interface TensorHeader {
  n: string;
  d: Datatype;
  s: number[];
  /** Bytes in the frame; for BYTES, the element count is the product of s. */
  b: number;
}

function tensorBodies(tensors: readonly Tensor[]): { heads: TensorHeader[]; bodies: Uint8Array[] } {
  const heads: TensorHeader[] = [];
  const bodies: Uint8Array[] = [];
  for (const t of tensors) {
    const bytes = t.data instanceof Uint8Array ? t.data : t.data.data;
    heads.push({ n: t.name, d: t.datatype, s: t.shape, b: bytes.byteLength });
    bodies.push(bytes);
  }
  return { heads, bodies };
}

function tensorsOf(heads: readonly TensorHeader[], bytes: Uint8Array): Tensor[] {
  let off = 0;
  return heads.map((h) => {
    off = align8(off);
    const part = bytes.subarray(off, off + h.b);
    off += h.b;
    const data = h.d === "BYTES"
      ? BytesTensor.fromWire(part, h.s.reduce((a, b) => a * b, 1), `tensor '${h.n}'`)
      : part;
    return { name: h.n, datatype: h.d, shape: h.s, data };
  });
}

/** A request as it crosses the channel, with when the listener read it. */
export interface RequestFrame {
  request: InferRequest;
  recvStart: number;
  recvEnd: number;
  /** The request came over gRPC (ModelInfer) rather than HTTP. */
  grpc?: boolean;
}

/**
 * Encodes a request frame; undefined when JSON cannot carry its parameters (64-bit integers as bigint).
 */
export function encodeRequest(f: RequestFrame): Frame | undefined {
  const { heads, bodies } = tensorBodies(f.request.inputs);
  let header: string;
  try {
    header = JSON.stringify({
      m: f.request.model,
      v: f.request.version,
      id: f.request.id,
      p: f.request.parameters,
      o: f.request.outputs,
      i: heads,
      rs: f.recvStart,
      re: f.recvEnd,
      g: f.grpc ? 1 : undefined,
    });
  } catch {
    return undefined;
  }
  return { header, bodies };
}

/** Decodes a request frame. */
export function decodeRequest(header: unknown, bytes: Uint8Array): RequestFrame {
  const h = header as {
    m: string;
    v: string;
    id: string;
    p: Record<string, ParamValue>;
    o: RequestedOutput[];
    i: TensorHeader[];
    rs: number;
    re: number;
    g?: 1;
  };
  return {
    request: {
      model: h.m,
      version: h.v,
      id: h.id,
      parameters: h.p,
      outputs: h.o,
      inputs: tensorsOf(h.i, bytes),
    },
    recvStart: h.rs,
    recvEnd: h.re,
    grpc: h.g === 1,
  };
}

/** An answer as it crosses the channel. */
export type Answer = { response: InferResponse } | { error: { code: ErrorCode; message: string } };

/** Encodes an answer frame; undefined when JSON cannot carry its parameters. */
export function encodeAnswer(answer: Answer): Frame | undefined {
  if ("error" in answer) return { header: JSON.stringify({ e: answer.error }), bodies: [] };
  const r = answer.response;
  const { heads, bodies } = tensorBodies(r.outputs);
  try {
    return {
      header: JSON.stringify({ m: r.model, v: r.version, id: r.id, p: r.parameters, o: heads }),
      bodies,
    };
  } catch {
    return undefined;
  }
}

/** Decodes an answer frame. */
export function decodeAnswer(header: unknown, bytes: Uint8Array): Answer {
  const h = header as {
    e?: { code: ErrorCode; message: string };
    m: string;
    v: string;
    id: string;
    p: Record<string, ParamValue>;
    o: TensorHeader[];
  };
  if (h.e) return { error: h.e };
  return {
    response: { model: h.m, version: h.v, id: h.id, parameters: h.p, outputs: tensorsOf(h.o, bytes) },
  };
}
