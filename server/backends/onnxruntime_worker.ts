/**
 * The worker side of an ONNX Runtime instance that runs on its own thread: it opens one session and runs the
 * batches the main thread posts, so that the main thread goes on reading and answering requests meanwhile. The
 * inputs arrive in buffers the main thread transferred (no copy) and go back with the reply, for the main thread
 * to fill with a later batch; the outputs are transferred too.
 * @module
 */

/// <reference lib="deno.worker" />

import * as ort from "onnxruntime-node";

/** One tensor as it crosses between the threads. */
export interface WorkerTensor {
  name: string;
  type: ort.Tensor.Type;
  data: ArrayBufferView | string[];
  dims: number[];
}

/** An input or output of the model: ONNX Runtime's metadata, its element type by number from the binding. */
export interface WorkerValueMetadata {
  name: string;
  isTensor: boolean;
  /** The element type: ONNX's number (native binding) or onnxruntime-node's name (public API). */
  type?: number | string;
  shape?: readonly (number | string)[];
}

/** Messages from the main thread. */
export type WorkerRequest =
  | { op: "open"; path: string; options: ort.InferenceSession.SessionOptions }
  | { op: "run"; id: number; feeds: WorkerTensor[]; fetches: string[] }
  | { op: "close" };

/** Messages to the main thread. */
export type WorkerReply =
  | { op: "opened"; inputMetadata: WorkerValueMetadata[]; outputMetadata: WorkerValueMetadata[] }
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

async function nativeSessionClass(): Promise<(new () => NativeSession) | undefined> {
  try {
    const mod = await import("onnxruntime-node/dist/binding.js") as {
      binding: { InferenceSession: new () => NativeSession };
      initOrt: () => void;
    };
    mod.initOrt();
    return typeof mod.binding?.InferenceSession === "function" ? mod.binding.InferenceSession : undefined;
  } catch {
    return undefined;
  }
}

/** Opens the session: through the native binding (no per-run setImmediate or re-validation), else the public API. */
async function open(path: string, options: ort.InferenceSession.SessionOptions): Promise<WorkerReply> {
  const Native = await nativeSessionClass();
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
    return { op: "opened", inputMetadata: session.inputMetadata, outputMetadata: session.outputMetadata };
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
  return {
    op: "opened",
    inputMetadata: session.inputMetadata.map((m) => ({ ...m })),
    outputMetadata: session.outputMetadata.map((m) => ({ ...m })),
  };
}

function buffersOf(feeds: WorkerTensor[]): (ArrayBuffer | null)[] {
  return feeds.map((f) => (ArrayBuffer.isView(f.data) ? f.data.buffer as ArrayBuffer : null));
}

self.onmessage = async (event: MessageEvent<WorkerRequest>) => {
  const msg = event.data;
  if (msg.op === "open") {
    try {
      self.postMessage(await open(msg.path, msg.options));
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      self.postMessage({ op: "error", id: -1, message, buffers: [] } satisfies WorkerReply);
    }
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
};
