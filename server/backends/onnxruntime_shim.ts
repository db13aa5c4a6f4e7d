/**
 * ONNX Runtime through libortshim (ffi/ortshim.ts) for the ONNX Runtime backend, on the server's thread and on
 * instance threads alike: a session opened with onnxruntime-node's session options, run with tensors named and
 * typed as onnxruntime-node names them. A run is a few direct calls into ONNX Runtime's C API; the native
 * binding instead reads every feed's properties and builds every output as JavaScript objects. String tensors
 * cross as BYTES' length-prefixed elements, so their bytes need not be UTF-8.
 * @module
 */

import type * as ort from "onnxruntime-node";
import { BytesTensor } from "../core/bytes_tensor.ts";
import {
  openOrtShim,
  type OrtShimFeed,
  type OrtShimOptions,
  type OrtShimSession,
} from "../../ffi/ortshim.ts";

/**
 * ONNX's tensor element types by their number (TensorProto.DataType), named as onnxruntime-node names them
 * where it supports them.
 */
export const ONNX_ELEMENT_TYPES: readonly (string | undefined)[] = [
  undefined,
  "float32",
  "uint8",
  "int8",
  "uint16",
  "int16",
  "int32",
  "int64",
  "string",
  "bool",
  "float16",
  "float64",
  "uint32",
  "uint64",
  "complex64",
  "complex128",
  "bfloat16",
  "float8e4m3fn",
  "float8e4m3fnuz",
  "float8e5m2",
  "float8e5m2fnuz",
  "uint4",
  "int4",
  "float4e2m1",
];

/** ONNX element types by name (ONNX_ELEMENT_TYPES reversed). */
const ONNX_TYPE_NUMBERS: ReadonlyMap<string, number> = new Map(
  ONNX_ELEMENT_TYPES.flatMap((t, i) => (t === undefined ? [] : [[t, i] as const])),
);

/** A tensor as onnxruntime-node names its type. */
export interface NamedTensor {
  name: string;
  type: ort.Tensor.Type;
  data: ArrayBufferView | string[];
  dims: number[];
}

/** An input or output of the model as the native binding describes it (element type by number). */
export interface ShimValueMetadata {
  name: string;
  isTensor: boolean;
  type: number;
  shape: number[];
}

/** The session options libortshim takes (see shimOptions); a session with any other runs through the binding. */
const SHIM_OPTIONS = new Set([
  "logSeverityLevel",
  "extra",
  "intraOpNumThreads",
  "interOpNumThreads",
  "executionMode",
  "enableCpuMemArena",
  "graphOptimizationLevel",
]);

/** onnxruntime-node's session options as libortshim takes them. */
function shimOptions(o: ort.InferenceSession.SessionOptions): OrtShimOptions {
  const levels: Record<string, number> = { disabled: 0, basic: 1, extended: 2, all: 99 };
  return {
    intraOpThreads: o.intraOpNumThreads,
    interOpThreads: o.interOpNumThreads,
    executionMode: o.executionMode === undefined ? undefined : o.executionMode === "parallel" ? 1 : 0,
    cpuMemArena: o.enableCpuMemArena,
    graphOptimization: o.graphOptimizationLevel === undefined ? undefined : levels[o.graphOptimizationLevel],
    logSeverity: o.logSeverityLevel,
    entries: o.extra as Record<string, string> | undefined,
  };
}

/** A model opened through libortshim; runs on the calling thread, one at a time. */
export class ShimSession {
  #session: OrtShimSession;
  readonly inputMetadata: readonly ShimValueMetadata[];
  readonly outputMetadata: readonly ShimValueMetadata[];
  #inputIndex: Map<string, number>;
  #outputIndex: Map<string, number>;
  /** The last run's feeds and fetches, kept for the next run (a run is synchronous). */
  #feeds: OrtShimFeed[] = [];
  #fetchNames: readonly string[] = [];
  #fetches: number[] = [];

  private constructor(session: OrtShimSession) {
    this.#session = session;
    this.inputMetadata = session.inputs;
    this.outputMetadata = session.outputs;
    this.#inputIndex = new Map(session.inputs.map((m, i) => [m.name, i]));
    this.#outputIndex = new Map(session.outputs.map((m, i) => [m.name, i]));
  }

  /**
   * Opens a model through libortshim.
   * @param path the model file
   * @param options onnxruntime-node's session options
   * @returns the session; undefined where libortshim is not available, an option is not one it takes, or the
   *   model has inputs or outputs that are not tensors (sequences, maps)
   * @throws Error with ONNX Runtime's message when the model does not load
   */
  static open(path: string, options: ort.InferenceSession.SessionOptions): ShimSession | undefined {
    const shim = openOrtShim();
    if (!shim) return undefined;
    for (const [key, value] of Object.entries(options)) {
      if (value !== undefined && !SHIM_OPTIONS.has(key)) return undefined;
    }
    const session = shim.open(path, shimOptions(options));
    const carried = [...session.inputs, ...session.outputs].every((m) => m.isTensor);
    if (carried) return new ShimSession(session);
    session.close();
    return undefined;
  }

  /**
   * Runs the model.
   * @param feeds the inputs (views of any memory, shared included; borrowed for the run only): a string input's
   *   data is either its strings or BYTES' length-prefixed elements
   * @param fetches the outputs to compute
   * @returns the outputs in the order of `fetches`, each in a buffer of its own (a string output's as BYTES'
   *   length-prefixed elements)
   * @throws Error with ONNX Runtime's message
   */
  run(feeds: readonly NamedTensor[], fetches: readonly string[]): NamedTensor[] {
    const shimFeeds = this.#feeds;
    shimFeeds.length = feeds.length;
    let results;
    try {
      for (let i = 0; i < feeds.length; i++) {
        const f = feeds[i]!;
        const index = this.#inputIndex.get(f.name);
        const type = ONNX_TYPE_NUMBERS.get(f.type);
        const data = Array.isArray(f.data)
          ? BytesTensor.fromStrings(f.data, `input '${f.name}'`).data
          : f.data;
        if (index === undefined || type === undefined || !ArrayBuffer.isView(data)) {
          throw new Error(`input '${f.name}' (${f.type}) is not one of the model's tensor inputs`);
        }
        const feed = shimFeeds[i] ??= { index, type, data, dims: f.dims };
        feed.index = index;
        feed.type = type;
        feed.data = data;
        feed.dims = f.dims;
      }
      results = this.#session.run(shimFeeds, this.#fetchesFor(fetches));
    } finally {
      // The feeds let go of the request's data.
      for (const feed of shimFeeds) feed.data = NO_DATA;
    }
    const out: NamedTensor[] = new Array(fetches.length);
    for (let i = 0; i < fetches.length; i++) {
      const r = results[i]!;
      const type = (ONNX_ELEMENT_TYPES[r.type] ?? `ONNX type ${r.type}`) as ort.Tensor.Type;
      out[i] = { name: fetches[i]!, type, data: r.data, dims: r.dims };
    }
    return out;
  }

  /** The outputs' indexes, kept from the previous run when it asked for the same outputs. */
  #fetchesFor(fetches: readonly string[]): number[] {
    if (sameNames(this.#fetchNames, fetches)) return this.#fetches;
    const indexes = fetches.map((name) => {
      const index = this.#outputIndex.get(name);
      if (index === undefined) throw new Error(`no output '${name}'`);
      return index;
    });
    this.#fetchNames = [...fetches];
    this.#fetches = indexes;
    return indexes;
  }

  /** Releases the model. */
  close(): void {
    this.#session.close();
  }
}

/**
 * Whether a run names the same inputs or outputs, in the same order, as the one before it (whose objects made
 * for them then serve again: a run is synchronous).
 */
export function sameNames(last: readonly string[], names: readonly string[]): boolean {
  if (last.length !== names.length) return false;
  for (let i = 0; i < names.length; i++) if (last[i] !== names[i]) return false;
  return true;
}

/** What a kept feed holds between runs. */
const NO_DATA = new Uint8Array(0);
