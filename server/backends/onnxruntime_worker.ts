/**
 * The worker side of an ONNX Runtime instance that runs on its own thread: it opens one session and runs the
 * batches of the main thread, so that the main thread goes on reading and answering requests meanwhile. With
 * libortshim or the native binding (synchronous runs), the worker takes runs handed over in shared memory (see
 * onnxruntime_shm.ts) one after the other, waiting in `Atomics.wait` only when none is waiting, and goes back to
 * its event loop only for posted messages: runs the shared arenas cannot carry (strings, oversize tensors), and
 * closing. Posted runs bring their inputs in transferred buffers, which go
 * back with the reply; their outputs are transferred too.
 * @module
 */

/// <reference lib="deno.worker" />

import * as ort from "onnxruntime-node";
import { nativeSessionClass } from "./onnxruntime_binding.ts";
import { ShimSession } from "./onnxruntime_shim.ts";
import {
  align8,
  ARENA_MAX_BYTES,
  ARENA_TYPE_CODES,
  ARENA_TYPED,
  ARENA_TYPES,
  CTL,
  ensureBytes,
  HEADER_BYTES,
  KIND,
  type SharedBlocks,
  type SlotBlocks,
  slotOf,
  slotWord,
  STATUS,
  writeMessage,
} from "./onnxruntime_shm.ts";

/** One tensor as it crosses between the threads. */
export interface WorkerTensor {
  name: string;
  type: ort.Tensor.Type;
  data: ArrayBufferView | string[];
  dims: number[];
}

/** An input or output of the model: ONNX Runtime's metadata, its element type by number from libortshim or the binding. */
export interface WorkerValueMetadata {
  name: string;
  isTensor: boolean;
  /** The element type: ONNX's number (libortshim, native binding) or onnxruntime-node's name (public API). */
  type?: number | string;
  shape?: readonly (number | string)[];
}

/** What a worker runs its session through. */
export type WorkerRuntime = "libortshim" | "onnxruntime-node's binding" | "onnxruntime-node's API";

/** Messages from the main thread. */
export type WorkerRequest =
  | { op: "open"; path: string; options: ort.InferenceSession.SessionOptions; shared?: SharedBlocks }
  | { op: "run"; id: number; feeds: WorkerTensor[]; fetches: string[] }
  | { op: "close" };

/** Messages to the main thread. */
export type WorkerReply =
  | {
    op: "opened";
    inputMetadata: WorkerValueMetadata[];
    outputMetadata: WorkerValueMetadata[];
    /** Whether the worker takes runs through the shared blocks (it waits on them from now on). */
    shared: boolean;
    /** What runs go through: libortshim (which carries BF16 tensors), the native binding, or the public API. */
    via: WorkerRuntime;
  }
  | {
    op: "result";
    id: number;
    outputs: WorkerTensor[];
    /** The feeds' buffers, given back (null for BYTES feeds). */
    buffers: (ArrayBuffer | null)[];
  }
  | { op: "error"; id: number; message: string; buffers: (ArrayBuffer | null)[] }
  | { op: "closed" };

/** The native session of onnxruntime-node's binding (what its public InferenceSession wraps). */
interface NativeSession {
  loadModel(path: string, options: ort.InferenceSession.SessionOptions): void;
  run(
    feeds: Record<string, { type: string; dims: readonly number[]; location: "cpu"; data: unknown }>,
    fetches: Record<string, null>,
    options: Record<string, unknown>,
  ): Record<string, { type: ort.Tensor.Type; dims: readonly number[]; data: ArrayBufferView | string[] }>;
  readonly inputMetadata: WorkerValueMetadata[];
  readonly outputMetadata: WorkerValueMetadata[];
  dispose(): void;
}

/** Runs one batch: feeds in, the fetched outputs out. */
type Run = (feeds: WorkerTensor[], fetches: string[]) => WorkerTensor[] | Promise<WorkerTensor[]>;

let run: Run | undefined;
let close: (() => Promise<void> | void) | undefined;
/** The shared blocks, when runs come through them (libortshim or the native binding: their runs are synchronous). */
let shared: SharedBlocks | undefined;
let inputNames: string[] = [];
let outputNames: string[] = [];
/** The last request of the control block the worker answered. */
let lastSeq = 0;
/**
 * The worker's own copy of each input (by input index): the native binding reads no views of shared memory, so
 * its inputs are copied out of the input arena into these (on this thread, not the server's). Runs through
 * libortshim read the input arena itself.
 */
const scratch: ArrayBuffer[] = [];
/** Whether runs read their inputs in the input arena (libortshim) rather than in a copy. */
let readsShared = false;

/**
 * Opens the session: through libortshim (see onnxruntime_shim.ts), else the native binding (no per-run
 * setImmediate or re-validation), else the public API.
 */
async function open(path: string, options: ort.InferenceSession.SessionOptions): Promise<WorkerReply> {
  const direct = ShimSession.open(path, options);
  if (direct) {
    run = (feeds, fetches) => direct.run(feeds, fetches);
    close = () => direct.close();
    readsShared = true;
    inputNames = direct.inputMetadata.map((m) => m.name);
    outputNames = direct.outputMetadata.map((m) => m.name);
    return {
      op: "opened",
      inputMetadata: [...direct.inputMetadata],
      outputMetadata: [...direct.outputMetadata],
      shared: shared !== undefined,
      via: "libortshim",
    };
  }
  const Native = await nativeSessionClass<NativeSession>();
  if (Native) {
    const session = new Native();
    session.loadModel(path, options);
    run = (feeds, fetches) => {
      const input: Parameters<NativeSession["run"]>[0] = {};
      for (const f of feeds) input[f.name] = { type: f.type, dims: f.dims, location: "cpu", data: f.data };
      const want: Record<string, null> = {};
      for (const name of fetches) want[name] = null;
      const results = session.run(input, want, {});
      return fetches.map((name) => {
        const v = results[name];
        if (!v) throw new Error(`no output '${name}'`);
        return { name, type: v.type, data: v.data, dims: v.dims.map(Number) };
      });
    };
    close = () => session.dispose();
    inputNames = session.inputMetadata.map((m) => m.name);
    outputNames = session.outputMetadata.map((m) => m.name);
    return {
      op: "opened",
      inputMetadata: session.inputMetadata,
      outputMetadata: session.outputMetadata,
      shared: shared !== undefined,
      via: "onnxruntime-node's binding",
    };
  }
  const session = await ort.InferenceSession.create(path, options);
  run = async (feeds, fetches) => {
    const input: Record<string, ort.Tensor> = {};
    for (const f of feeds) {
      const t = new ort.Tensor(f.type, f.data as ort.Tensor.DataType, f.dims);
      // The bit patterns of FP16 must reach the binding as they are (see onnxruntime.ts).
      if (f.type === "float16") (t as unknown as { cpuData: unknown }).cpuData = f.data;
      input[f.name] = t;
    }
    const results = await session.run(input, fetches);
    return fetches.map((name) => {
      const v = results[name] as ort.Tensor;
      return { name, type: v.type, data: v.data as ArrayBufferView | string[], dims: v.dims.map(Number) };
    });
  };
  close = () => session.release();
  // The public API's runs are asynchronous: they cannot run from a thread blocked in Atomics.wait.
  shared = undefined;
  return {
    op: "opened",
    inputMetadata: session.inputMetadata.map((m) => ({ ...m })),
    outputMetadata: session.outputMetadata.map((m) => ({ ...m })),
    shared: false,
    via: "onnxruntime-node's API",
  };
}

/** The worker's copy of input `index`, at least `byteLength` bytes. */
function scratchFor(index: number, byteLength: number): ArrayBuffer {
  const have = scratch[index];
  if (have && have.byteLength >= byteLength) return have;
  const buffer = new ArrayBuffer(Math.max(byteLength, (have?.byteLength ?? 0) * 2));
  scratch[index] = buffer;
  return buffer;
}

/**
 * Reads the feeds and fetches of a run from the header: the inputs in the input arena, or in copies of them
 * where the runs cannot read shared memory.
 */
function readRequest(blocks: SlotBlocks): { feeds: WorkerTensor[]; fetches: string[] } {
  const h = new Float64Array(blocks.header);
  let p = 0;
  const feeds: WorkerTensor[] = [];
  for (let n = h[p++]!; n > 0; n--) {
    const index = h[p++]!, type = ARENA_TYPES[h[p++]!]!, offset = h[p++]!, byteLength = h[p++]!;
    const dims: number[] = [];
    for (let d = h[p++]!; d > 0; d--) dims.push(h[p++]!);
    const Typed = ARENA_TYPED[type];
    let data: ArrayBufferView;
    // libortshim takes the element type from the feed's type, and the bytes from any view.
    if (readsShared) data = new Uint8Array(blocks.input, offset, byteLength);
    else {
      const copy = scratchFor(index, byteLength);
      new Uint8Array(copy, 0, byteLength).set(new Uint8Array(blocks.input, offset, byteLength));
      data = new Typed(copy, 0, byteLength / Typed.BYTES_PER_ELEMENT);
    }
    // BF16 (which onnxruntime-node does not name) reaches libortshim only.
    feeds.push({ name: inputNames[index]!, type: type as ort.Tensor.Type, data, dims });
  }
  const fetches: string[] = [];
  for (let n = h[p++]!; n > 0; n--) fetches.push(outputNames[h[p++]!]!);
  return { feeds, fetches };
}

/**
 * Writes the outputs into the output arena (grown as needed) and the header; false where they do not fit
 * (strings, or beyond the arena's or the header's limit).
 */
function writeOutputs(blocks: SlotBlocks, outputs: WorkerTensor[]): boolean {
  let total = 0, words = 1;
  for (const o of outputs) {
    if (!ArrayBuffer.isView(o.data) || !ARENA_TYPE_CODES.has(o.type)) return false;
    total = align8(total) + o.data.byteLength;
    words += 4 + o.dims.length;
  }
  if (total > ARENA_MAX_BYTES || words * 8 > HEADER_BYTES) return false;
  ensureBytes(blocks.output, total);
  const h = new Float64Array(blocks.header);
  let p = 0, offset = 0;
  h[p++] = outputs.length;
  for (const o of outputs) {
    const data = o.data as ArrayBufferView;
    offset = align8(offset);
    new Uint8Array(blocks.output, offset, data.byteLength).set(
      new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
    );
    h[p++] = ARENA_TYPE_CODES.get(o.type)!;
    h[p++] = offset;
    h[p++] = data.byteLength;
    h[p++] = o.dims.length;
    for (const d of o.dims) h[p++] = d;
    offset += data.byteLength;
  }
  return true;
}

/**
 * Runs the batch the slot's header describes and leaves its outputs (or its error) in the slot for the main
 * thread.
 */
function runShared(blocks: SlotBlocks, ctl: Int32Array, seq: number, statusWord: number): void {
  try {
    const { feeds, fetches } = readRequest(blocks);
    const outputs = run!(feeds, fetches) as WorkerTensor[];
    if (writeOutputs(blocks, outputs)) {
      Atomics.store(ctl, statusWord, STATUS.OK);
      return;
    }
    const transfer = outputs.flatMap((
      o,
    ) => (ArrayBuffer.isView(o.data) ? [o.data.buffer as ArrayBuffer] : []));
    self.postMessage(
      { op: "result", id: seq, outputs, buffers: [] } satisfies WorkerReply,
      [...new Set(transfer)],
    );
    Atomics.store(ctl, statusWord, STATUS.POSTED);
  } catch (err) {
    writeMessage(blocks.header, err instanceof Error ? err.message : String(err));
    Atomics.store(ctl, statusWord, STATUS.ERROR);
  }
}

/**
 * Answers the requests of the control block in order, waiting only while none is there, until one asks the
 * worker to read a posted message (it returns to the event loop, whose handler comes back here) or to stop.
 */
function serve(blocks: SharedBlocks): void {
  const ctl = new Int32Array(blocks.control);
  for (;;) {
    // Returns at once when a request after the last one answered is there already.
    Atomics.wait(ctl, CTL.SEQ, lastSeq);
    if (Atomics.load(ctl, CTL.SEQ) === lastSeq) continue;
    const seq = (lastSeq + 1) | 0;
    const slot = slotOf(seq);
    const kind = Atomics.load(ctl, slotWord(CTL.KIND, slot));
    if (kind === KIND.RUN) runShared(blocks.slots[slot]!, ctl, seq, slotWord(CTL.STATUS, slot));
    else if (kind === KIND.EXIT) {
      close?.();
      run = close = shared = undefined;
    }
    lastSeq = seq;
    Atomics.store(ctl, CTL.DONE, seq);
    Atomics.notify(ctl, CTL.DONE);
    if (kind === KIND.EXIT) {
      self.postMessage({ op: "closed" } satisfies WorkerReply);
      return;
    }
    if (kind === KIND.MESSAGE) return;
  }
}

function buffersOf(feeds: WorkerTensor[]): (ArrayBuffer | null)[] {
  return feeds.map((f) => (ArrayBuffer.isView(f.data) ? f.data.buffer as ArrayBuffer : null));
}

self.onmessage = async (event: MessageEvent<WorkerRequest>) => {
  const msg = event.data;
  if (msg.op === "open") {
    try {
      shared = msg.shared;
      self.postMessage(await open(msg.path, msg.options));
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      self.postMessage({ op: "error", id: -1, message, buffers: [] } satisfies WorkerReply);
      return;
    }
    if (shared) serve(shared);
    return;
  }
  if (msg.op === "close") {
    await close?.();
    run = close = undefined;
    self.postMessage({ op: "closed" } satisfies WorkerReply);
    return;
  }
  const buffers = buffersOf(msg.feeds);
  const back = [...new Set(buffers.filter((b): b is ArrayBuffer => b !== null))];
  try {
    const outputs = await run!(msg.feeds, msg.fetches);
    const transfer = new Set<ArrayBuffer>(back);
    for (const o of outputs) if (ArrayBuffer.isView(o.data)) transfer.add(o.data.buffer as ArrayBuffer);
    self.postMessage({ op: "result", id: msg.id, outputs, buffers } satisfies WorkerReply, [...transfer]);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    self.postMessage({ op: "error", id: msg.id, message, buffers } satisfies WorkerReply, back);
  }
  if (shared) serve(shared);
};
