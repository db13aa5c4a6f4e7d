/**
 * The ONNX Runtime backend (`platform: "onnxruntime_onnx"`, `backend: "onnxruntime"`) over
 * `npm:onnxruntime-node`: one InferenceSession per model instance.
 * @module
 */

import { BytesTensor } from "../core/bytes_tensor.ts";
import * as ort from "onnxruntime-node";
import {
  bytesOf,
  type Datatype,
  elementCount,
  elementSize,
  toConfigType,
  typedView,
} from "../core/dtypes.ts";
import { internal, invalidArg, ServerError, unsupported } from "../core/errors.ts";
import {
  completeBatching,
  type ModelConfig,
  type ModelInputConfig,
  type ModelOutputConfig,
  sequenceTensorNames,
} from "../core/model_config.ts";
import { setBytes } from "../core/shared_copy.ts";
import type { Tensor } from "../core/types.ts";
import type { Backend, BackendInstance, InstanceContext } from "./backend.ts";
import { initializerTypes } from "./onnx_proto.ts";
import { nativeSessionClass } from "./onnxruntime_binding.ts";
import { ONNX_ELEMENT_TYPES, sameNames, ShimSession } from "./onnxruntime_shim.ts";
import { openOrtShim } from "../../ffi/ortshim.ts";
import type { WorkerReply, WorkerRequest, WorkerRuntime, WorkerValueMetadata } from "./onnxruntime_worker.ts";
import { settleWithin } from "../core/clock.ts";
import {
  align8,
  ARENA_MAX_BYTES,
  ARENA_TYPE_CODES,
  ARENA_TYPES,
  CTL,
  CTL_WORDS,
  ensureBytes,
  growableShared,
  HEADER_BYTES,
  KIND,
  reached,
  readMessage,
  type SharedBlocks,
  slotOf,
  SLOTS,
  slotWord,
  STATUS,
} from "./onnxruntime_shm.ts";

const TO_ORT: Partial<Record<Datatype, ort.Tensor.Type>> = {
  BOOL: "bool",
  UINT8: "uint8",
  UINT16: "uint16",
  UINT32: "uint32",
  UINT64: "uint64",
  INT8: "int8",
  INT16: "int16",
  INT32: "int32",
  INT64: "int64",
  FP16: "float16",
  FP32: "float32",
  FP64: "float64",
  BYTES: "string",
  // onnxruntime-node does not name bfloat16; only libortshim's runners carry it (SessionRunner.carriesBf16).
  BF16: "bfloat16" as ort.Tensor.Type,
};

const FROM_ORT: Record<string, Datatype> = Object.fromEntries(
  Object.entries(TO_ORT).map(([k, v]) => [v, k as Datatype]),
);

/** Triton's default max_batch_size for auto-completed models whose first dimension is dynamic. */
export const DEFAULT_MAX_BATCH_SIZE = 4;

/** Triton's `optimization { graph { level } }` for ONNX Runtime; any other level enables all optimizations. */
const GRAPH_LEVELS: Record<number, "disabled" | "basic" | "extended" | "all"> = {
  [-1]: "basic",
  1: "extended",
  2: "disabled",
};

function dimsOf(shape: ReadonlyArray<number | string>): number[] {
  return shape.map((d) => (typeof d === "number" && d >= 0 ? d : -1));
}

function modelPathOf(ctx: InstanceContext): string {
  return ctx.modelPath;
}

/** The error of a model file that does not load, whichever way it was opened. */
function cannotLoad(path: string, err: unknown): ServerError {
  const msg = err instanceof Error ? err.message : String(err);
  return new ServerError("INVALID_ARG", `Cannot load ONNX model '${path}': ${msg}`);
}

async function openSession(
  path: string,
  options: ort.InferenceSession.SessionOptions,
): Promise<ort.InferenceSession> {
  try {
    return await ort.InferenceSession.create(path, options);
  } catch (err) {
    throw cannotLoad(path, err);
  }
}

function intParameter(config: ModelConfig, key: string): number | undefined {
  const v = config.parameters?.[key]?.string_value;
  if (v === undefined || v === "") return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) {
    throw invalidArg(
      `Cannot load '${config.name}': parameter '${key}' is '${v}', expected a non-negative integer`,
    );
  }
  return n;
}

/**
 * ONNX Runtime session config entries the server sets unless a config parameter of the same key says
 * otherwise: the thread pools sleep when they run out of work instead of spinning. ONNX Runtime's default
 * (spinning) suits a process that does nothing but run models; here the same cores answer HTTP and gRPC
 * between runs, and a spinning pool thread takes them away (bench/mlp_bench.ts on 2 cores: about 13k
 * inferences/s and 135 µs of server CPU per inference with spinning, 16k and 86 µs without).
 */
export const DEFAULT_SESSION_ENTRIES: Readonly<Record<string, string>> = {
  "session.intra_op.allow_spinning": "0",
  "session.inter_op.allow_spinning": "0",
};

/**
 * The ONNX Runtime session options a config asks for: parameters `intra_op_thread_count`,
 * `inter_op_thread_count`, `execution_mode` (0 sequential, 1 parallel), `enable_mem_arena`, and
 * `optimization { graph { level } }` (as Triton: -1 basic, 1 extended, 2 disabled, otherwise all). Parameters
 * whose key starts with `session.` are ONNX Runtime session config entries, passed as they are (for example
 * `session.intra_op.allow_spinning: "1"` lets the intra-op threads spin again, see DEFAULT_SESSION_ENTRIES).
 * @param config the model config
 */
export function sessionOptions(config: ModelConfig): ort.InferenceSession.SessionOptions {
  const opts: ort.InferenceSession.SessionOptions = { logSeverityLevel: 3 };
  const entries: Record<string, string> = { ...DEFAULT_SESSION_ENTRIES };
  for (const [key, value] of Object.entries(config.parameters ?? {})) {
    if (key.startsWith("session.") && value.string_value !== undefined) entries[key] = value.string_value;
  }
  opts.extra = entries;
  const intra = intParameter(config, "intra_op_thread_count");
  if (intra !== undefined && intra > 0) opts.intraOpNumThreads = intra;
  const inter = intParameter(config, "inter_op_thread_count");
  if (inter !== undefined && inter > 0) opts.interOpNumThreads = inter;
  const mode = intParameter(config, "execution_mode");
  if (mode !== undefined) opts.executionMode = mode === 1 ? "parallel" : "sequential";
  const arena = intParameter(config, "enable_mem_arena");
  if (arena !== undefined) opts.enableCpuMemArena = arena !== 0;
  const optimization = config.optimization as { graph?: { level?: number } } | undefined;
  const level = optimization?.graph?.level ?? 0;
  opts.graphOptimizationLevel = GRAPH_LEVELS[level] ?? "all";
  return opts;
}

function fromOrt(meta: ort.InferenceSession.ValueMetadata, config: ModelConfig): Datatype {
  if (!meta.isTensor) {
    throw unsupported(
      `Cannot load '${config.name}': '${meta.name}' is not a tensor (sequences and maps are not supported)`,
    );
  }
  const dt = FROM_ORT[meta.type];
  if (!dt) {
    throw unsupported(
      `Cannot load '${config.name}': '${meta.name}' has ONNX type '${meta.type}', which is not supported`,
    );
  }
  return dt;
}

/**
 * Completes a config from the ONNX model as Triton does: missing inputs and outputs with their datatypes and
 * dims; when max_batch_size is 0 and every input and output has a dynamic first dimension, max_batch_size 4
 * and dynamic batching.
 */
async function autoComplete(config: ModelConfig, ctx: InstanceContext): Promise<void> {
  const { inputMetadata: ins, outputMetadata: outs } = await readModelIo(modelPathOf(ctx));
  const all = [...ins, ...outs];
  const hasIo = config.input.length > 0 || config.output.length > 0;
  if (config.max_batch_size === 0 && !hasIo && all.length > 0) {
    const batchable = all.every((m) => m.isTensor && m.shape.length > 0 && dimsOf(m.shape)[0] === -1);
    if (batchable) completeBatching(config, DEFAULT_MAX_BATCH_SIZE);
  }
  const strip = config.max_batch_size > 0 ? 1 : 0;
  // Control inputs and implicit state of the sequence batcher are filled by the server, not declared.
  const internalNames = sequenceTensorNames(config);
  const complete = <T extends ModelInputConfig | ModelOutputConfig>(
    list: T[],
    metas: readonly ort.InferenceSession.ValueMetadata[],
  ) => {
    for (const meta of metas) {
      if (internalNames.has(meta.name)) continue;
      const dt = fromOrt(meta, config);
      const dims = meta.isTensor ? dimsOf(meta.shape).slice(strip) : [];
      const existing = list.find((e) => e.name === meta.name);
      if (!existing) {
        list.push({ name: meta.name, data_type: toConfigType(dt), dims } as T);
        continue;
      }
      if (!existing.data_type || existing.data_type === "TYPE_INVALID") {
        existing.data_type = toConfigType(dt);
      }
      if (existing.dims.length === 0 && !existing.reshape && dims.length > 0) existing.dims = dims;
    }
  };
  complete(config.input, ins);
  complete(config.output, outs);
}

/**
 * The inputs and outputs a model file declares, read by a session without optimizations: through libortshim
 * where it loads (it reads every element type, BF16 included), else onnxruntime-node's API.
 * @param path the model file
 */
async function readModelIo(path: string): Promise<ModelIo> {
  const options: ort.InferenceSession.SessionOptions = {
    logSeverityLevel: 3,
    graphOptimizationLevel: "disabled",
  };
  const shim = openOrtShim();
  if (shim) {
    let session;
    try {
      session = shim.open(path, { logSeverity: 3, graphOptimization: 0 });
    } catch (err) {
      throw cannotLoad(path, err);
    }
    session.close();
    return {
      inputMetadata: session.inputs.map(fromNativeMetadata),
      outputMetadata: session.outputs.map(fromNativeMetadata),
    };
  }
  // The native binding describes element types by number, BF16 included (the public API refuses BF16).
  const native = await openNativeSession(path, options);
  if (native) {
    try {
      return {
        inputMetadata: native.inputMetadata.map(fromNativeMetadata),
        outputMetadata: native.outputMetadata.map(fromNativeMetadata),
      };
    } finally {
      native.dispose();
    }
  }
  const session = await openSession(path, options);
  try {
    return { inputMetadata: session.inputMetadata, outputMetadata: session.outputMetadata };
  } finally {
    await session.release();
  }
}

/** A model's inputs and outputs as ONNX Runtime describes them (from the instance's own session). */
interface ModelIo {
  readonly inputMetadata: readonly ort.InferenceSession.ValueMetadata[];
  readonly outputMetadata: readonly ort.InferenceSession.ValueMetadata[];
}

function shapeText(dims: readonly number[]): string {
  return `[${dims.join(",")}]`;
}

function namesText(list: readonly { name: string }[]): string {
  return list.length > 0 ? list.map((m) => m.name).join(", ") : "none";
}

/**
 * Checks a config's inputs and outputs against the ONNX model's, as Triton's onnxruntime backend does at load:
 * every config input is a model input (or an optional one that a model initializer backs) and every model input
 * is in the config (sequence control and state tensors aside); every config output is a model output; datatypes
 * match; and the dims are compatible: the model's first dimension is the batch dimension, dynamic, when
 * max_batch_size > 0, and the rest match the config's dims (its reshape where it has one) where both sides are
 * fixed.
 * @param config the config
 * @param io the model's inputs and outputs
 * @param modelPath the model file, read for its initializers only when an optional config input is not a model
 *   input
 */
async function checkModelIo(config: ModelConfig, io: ModelIo, modelPath: string): Promise<void> {
  const fail = (why: string) => invalidArg(`Cannot load '${config.name}': ${why}`);
  const batched = config.max_batch_size > 0;
  const checkType = (kind: string, spec: ModelInputConfig | ModelOutputConfig, modelType: Datatype) => {
    if (spec.data_type === toConfigType(modelType)) return;
    const configText = spec.data_type.replace(/^TYPE_/, "");
    const modelText = toConfigType(modelType).replace(/^TYPE_/, "");
    throw fail(
      `${kind} '${spec.name}' has datatype ${configText} in the config but ${modelText} in the model`,
    );
  };
  const checkTensor = (
    kind: "input" | "output",
    spec: ModelInputConfig | ModelOutputConfig,
    meta: ort.InferenceSession.ValueMetadata,
  ) => {
    checkType(kind, spec, fromOrt(meta, config));
    if (!meta.isTensor || spec.is_shape_tensor || (spec as ModelInputConfig).allow_ragged_batch) return;
    const model = dimsOf(meta.shape);
    // ONNX Runtime describes an output it could infer no shape for as [], like a scalar: nothing to compare.
    if (kind === "output" && model.length === 0) return;
    const tensor = `${kind} '${spec.name}'`;
    if (batched && model[0] !== -1) {
      throw fail(
        `${tensor} has shape ${shapeText(model)} in the model, but max_batch_size ${config.max_batch_size} ` +
          "needs a first dimension of -1 (dynamic) for the batch; use max_batch_size 0 for a model that " +
          "does not batch",
      );
    }
    const inner = batched ? model.slice(1) : model;
    const expected = spec.reshape ? spec.reshape.shape : spec.dims;
    const compatible = inner.length === expected.length &&
      inner.every((d, i) => d === -1 || expected[i] === -1 || d === expected[i]);
    if (compatible) return;
    const configSide = `${spec.reshape ? "reshape" : "dims"} ${shapeText(expected)}`;
    const whole = batched ? ` (shape ${shapeText(model)} with the batch dimension)` : "";
    throw fail(`${tensor} has ${configSide} in the config but ${shapeText(inner)} in the model${whole}`);
  };

  const modelInputs = new Map(io.inputMetadata.map((m) => [m.name, m]));
  let initializers: Map<string, number> | undefined;
  for (const input of config.input) {
    const meta = modelInputs.get(input.name);
    if (meta) {
      checkTensor("input", input, meta);
      continue;
    }
    // An optional input the model backs with an initializer: ONNX Runtime uses the initializer's value.
    if (input.optional) {
      initializers ??= await initializerTypes(modelPath);
      const type = initializers.get(input.name);
      if (type !== undefined) {
        const ortType = ONNX_ELEMENT_TYPES[type] ?? `ONNX type ${type}`;
        const init = { name: input.name, isTensor: true, type: ortType, shape: [] };
        checkType("input", input, fromOrt(init as ort.InferenceSession.ValueMetadata, config));
        continue;
      }
    }
    const inputs = namesText(io.inputMetadata);
    throw fail(`config input '${input.name}' is not an input of the model (its inputs: ${inputs})`);
  }
  const declared = new Set(config.input.map((i) => i.name));
  const internalNames = sequenceTensorNames(config);
  for (const meta of io.inputMetadata) {
    if (declared.has(meta.name) || internalNames.has(meta.name)) continue;
    throw fail(`model input '${meta.name}' is not in the config (config inputs: ${namesText(config.input)})`);
  }
  const modelOutputs = new Map(io.outputMetadata.map((m) => [m.name, m]));
  for (const output of config.output) {
    const meta = modelOutputs.get(output.name);
    if (meta) {
      checkTensor("output", output, meta);
      continue;
    }
    const outputs = namesText(io.outputMetadata);
    throw fail(`config output '${output.name}' is not an output of the model (its outputs: ${outputs})`);
  }
}

/** A tensor as it crosses to and from ONNX Runtime. */
interface OrtValue {
  name: string;
  type: ort.Tensor.Type;
  data: ArrayBufferView | string[];
  dims: number[];
}

/** Runs a session: in this thread, or on a worker thread of its own. */
interface SessionRunner extends ModelIo {
  readonly inputNames: readonly string[];
  /** Lends a buffer for a batched input (see BackendInstance.inputBuffer), where the runner reuses them. */
  inputBuffer?(name: string, byteLength: number): Uint8Array;
  /** Runs it takes before the first is answered (see BackendInstance.pipelineDepth); 1 when absent. */
  readonly pipelineDepth?: number;
  /** Whether runs carry BF16 tensors (libortshim does; onnxruntime-node's binding cannot make them). */
  readonly carriesBf16?: boolean;
  /** Where and through what the session runs, for the instance's description. */
  readonly where: string;
  /**
   * Whether runs take numeric inputs as their bytes (aligned), not as typed arrays of their element type, and
   * BYTES inputs as their length-prefixed elements, not as strings.
   */
  readonly takesBytes?: boolean;
  run(feeds: OrtValue[], fetches: readonly string[]): Promise<OrtValue[]>;
  /** Runs on the caller's thread and returns the outputs at once, where the runner can (see NativeRunner). */
  runSync?(feeds: OrtValue[], fetches: readonly string[]): OrtValue[];
  close(): Promise<void>;
}

function toOrtTensor(f: OrtValue): ort.Tensor {
  const tensor = new ort.Tensor(f.type, f.data as ort.Tensor.DataType, f.dims);
  // onnxruntime-common turns a Uint16Array into a Float16Array where the runtime has one (Deno does), and
  // the native binding then reads no bytes; handing it back the bit patterns keeps FP16 working.
  if (f.type === "float16") (tensor as unknown as { cpuData: unknown }).cpuData = f.data;
  return tensor;
}

/** A session run on the server's thread (ONNX Runtime's own thread pool still parallelizes each run). */
class InlineRunner implements SessionRunner {
  readonly where = "the server's thread, through onnxruntime-node's API";
  #session: ort.InferenceSession;
  constructor(session: ort.InferenceSession) {
    this.#session = session;
  }
  get inputNames(): readonly string[] {
    return this.#session.inputNames;
  }
  get inputMetadata(): readonly ort.InferenceSession.ValueMetadata[] {
    return this.#session.inputMetadata;
  }
  get outputMetadata(): readonly ort.InferenceSession.ValueMetadata[] {
    return this.#session.outputMetadata;
  }
  async run(feeds: OrtValue[], fetches: readonly string[]): Promise<OrtValue[]> {
    const input: Record<string, ort.Tensor> = {};
    for (const f of feeds) input[f.name] = toOrtTensor(f);
    const results = await this.#session.run(input, fetches as string[]);
    return fetches.map((name) => {
      const v = results[name] as ort.Tensor | undefined;
      if (!v) throw new Error(`no output '${name}'`);
      return { name, type: v.type, data: v.data as ArrayBufferView | string[], dims: v.dims.map(Number) };
    });
  }
  async close(): Promise<void> {
    await this.#session.release();
  }
}

/**
 * A tensor as the native binding reads it: its `type`, `dims`, `location` and `data` (what an `ort.Tensor`
 * exposes, without the checks and conversions of its constructor, which the server's validation already did).
 */
interface NativeTensor {
  type: ort.Tensor.Type;
  dims: readonly number[];
  location: "cpu";
  data: ArrayBufferView | string[];
}

/** What a reused feed object holds between runs (see NativeRunner). */
const NO_DATA = new Uint8Array(0);

/** The run options the native binding reads (none set). */
const RUN_OPTIONS: Record<string, unknown> = {};

/** The native session class of onnxruntime-node's binding (what its public InferenceSession wraps). */
interface NativeSession {
  loadModel(path: string, options: ort.InferenceSession.SessionOptions): void;
  run(
    feeds: Record<string, NativeTensor>,
    fetches: Record<string, null>,
    options: Record<string, unknown>,
  ): Record<string, ort.Tensor>;
  readonly inputMetadata: readonly NativeValueMetadata[];
  readonly outputMetadata: readonly NativeValueMetadata[];
  dispose(): void;
}

/** An input or output as the native binding describes it: the element type by number, -1 for dynamic dims. */
interface NativeValueMetadata {
  name: string;
  isTensor: boolean;
  type: number;
  shape: number[];
}

function fromNativeMetadata(m: NativeValueMetadata): ort.InferenceSession.ValueMetadata {
  if (!m.isTensor) return { name: m.name, isTensor: false };
  const type = (ONNX_ELEMENT_TYPES[m.type] ?? `ONNX type ${m.type}`) as ort.Tensor.Type;
  return { name: m.name, isTensor: true, type, shape: [...m.shape] };
}

let nativeSession: Promise<(new () => NativeSession) | undefined> | undefined;

/** The native session class (see onnxruntime_binding.ts), loaded once. */
function loadNativeSession(): Promise<(new () => NativeSession) | undefined> {
  return nativeSession ??= nativeSessionClass<NativeSession>();
}

/**
 * A model loaded through the native binding; undefined where the binding cannot be loaded this way.
 * @throws ServerError INVALID_ARG when the model does not load
 */
async function openNativeSession(
  path: string,
  options: ort.InferenceSession.SessionOptions,
): Promise<NativeSession | undefined> {
  const Native = await loadNativeSession();
  if (!Native) return undefined;
  const session = new Native();
  try {
    session.loadModel(path, options);
  } catch (err) {
    throw cannotLoad(path, err);
  }
  return session;
}

/**
 * A session run synchronously on the server's thread; `run` is the same run as a promise, settled when made.
 * Batches are concatenated into buffers the runner lends and takes back after the run.
 */
abstract class SyncRunner {
  protected readonly buffers = new InputBuffers();
  readonly carriesBf16: boolean = false;
  readonly inputNames: readonly string[];
  readonly inputMetadata: readonly ort.InferenceSession.ValueMetadata[];
  readonly outputMetadata: readonly ort.InferenceSession.ValueMetadata[];
  /** @param io the model's inputs and outputs as the native binding (or libortshim) describes them */
  constructor(
    io: { inputMetadata: readonly NativeValueMetadata[]; outputMetadata: readonly NativeValueMetadata[] },
  ) {
    this.inputNames = io.inputMetadata.map((m) => m.name);
    this.inputMetadata = io.inputMetadata.map(fromNativeMetadata);
    this.outputMetadata = io.outputMetadata.map(fromNativeMetadata);
  }
  inputBuffer(name: string, byteLength: number): Uint8Array {
    return this.buffers.take(name, byteLength);
  }
  run(feeds: OrtValue[], fetches: readonly string[]): Promise<OrtValue[]> {
    try {
      return Promise.resolve(this.runSync(feeds, fetches));
    } catch (err) {
      return Promise.reject(err);
    }
  }
  abstract runSync(feeds: OrtValue[], fetches: readonly string[]): OrtValue[];
}

/** A session run synchronously through the native binding on the server's thread. */
class NativeRunner extends SyncRunner implements SessionRunner {
  readonly where = "the server's thread, through onnxruntime-node's binding";
  #session: NativeSession;
  #feedNames: string[] = [];
  #feedRecord: Record<string, NativeTensor> = {};
  #fetchNames: string[] = [];
  #fetchRecord: Record<string, null> = {};
  constructor(session: NativeSession) {
    super(session);
    this.#session = session;
  }
  runSync(feeds: OrtValue[], fetches: readonly string[]): OrtValue[] {
    const input = this.#feedsFor(feeds);
    let results: Record<string, ort.Tensor>;
    try {
      results = this.#session.run(input, this.#fetchesFor(fetches), RUN_OPTIONS);
    } finally {
      // The run is over (it is synchronous): the reused feed objects let go of the request's data, and the
      // batch's input buffers serve the next batch.
      for (const name in input) input[name]!.data = NO_DATA;
      this.buffers.takeBack(feeds);
    }
    const out: OrtValue[] = new Array(fetches.length);
    for (let i = 0; i < fetches.length; i++) {
      const name = fetches[i]!;
      const v = results[name];
      if (!v) throw new Error(`no output '${name}'`);
      // The binding gives dims as numbers, in an array of their own.
      out[i] = { name, type: v.type, data: v.data as ArrayBufferView | string[], dims: v.dims as number[] };
    }
    return out;
  }
  /**
   * The feeds as the binding reads them, in objects kept from the previous run when it fed the same inputs in
   * the same order (a run is synchronous, so nothing else uses them meanwhile).
   */
  #feedsFor(feeds: readonly OrtValue[]): Record<string, NativeTensor> {
    const names = this.#feedNames;
    let same = names.length === feeds.length;
    for (let i = 0; same && i < feeds.length; i++) same = names[i] === feeds[i]!.name;
    let input = this.#feedRecord;
    if (!same) {
      input = {};
      for (const f of feeds) input[f.name] = { type: f.type, dims: f.dims, location: "cpu", data: NO_DATA };
      this.#feedRecord = input;
      this.#feedNames = feeds.map((f) => f.name);
    }
    for (const f of feeds) {
      const t = input[f.name]!;
      t.type = f.type;
      t.dims = f.dims;
      t.data = f.data;
    }
    return input;
  }
  /** The fetches as the binding reads them, kept from the previous run when it asked for the same outputs. */
  #fetchesFor(fetches: readonly string[]): Record<string, null> {
    if (!sameNames(this.#fetchNames, fetches)) {
      const want: Record<string, null> = {};
      for (const name of fetches) want[name] = null;
      this.#fetchRecord = want;
      this.#fetchNames = [...fetches];
    }
    return this.#fetchRecord;
  }
  close(): Promise<void> {
    this.#session.dispose();
    return Promise.resolve();
  }
}

/**
 * Buffers for one instance's batched inputs, by input name: the scheduler concatenates a batch straight into one
 * (BackendInstance.inputBuffer) and gets it back for a later batch once the run is over, so that a batch
 * allocates nothing for its inputs.
 */
class InputBuffers {
  /** Free buffers kept per input: one being filled while one runs. */
  static readonly KEEP = 2;
  #free = new Map<string, ArrayBuffer[]>();
  #lent = new WeakSet<ArrayBuffer>();

  /** A view of exactly `byteLength` bytes at the start of a free buffer (or a new one). */
  take(name: string, byteLength: number): Uint8Array {
    const list = this.#free.get(name);
    let buffer: ArrayBuffer | undefined;
    if (list) {
      const i = list.findIndex((b) => b.byteLength >= byteLength);
      if (i >= 0) buffer = list.splice(i, 1)[0];
    }
    buffer ??= new ArrayBuffer(byteLength);
    this.#lent.add(buffer);
    return new Uint8Array(buffer, 0, byteLength);
  }

  /** Whether a view lies in a buffer this pool lent (and may be handed on without a copy). */
  owns(view: ArrayBufferView): boolean {
    return this.#lent.has(view.buffer as ArrayBuffer);
  }

  /** Takes back the buffers of a run's feeds that this pool lent. */
  takeBack(feeds: readonly OrtValue[]): void {
    for (const f of feeds) {
      if (ArrayBuffer.isView(f.data) && this.owns(f.data)) this.give(f.name, f.data.buffer as ArrayBuffer);
    }
  }

  /**
   * Takes a buffer back (one it lent, or what a worker gave back for one: a new object over the same memory);
   * the largest ones are kept.
   */
  give(name: string, buffer: ArrayBuffer): void {
    if (buffer.detached) return;
    const list = this.#free.get(name) ?? [];
    list.push(buffer);
    list.sort((a, b) => b.byteLength - a.byteLength);
    if (list.length > InputBuffers.KEEP) list.length = InputBuffers.KEEP;
    this.#free.set(name, list);
  }
}

/**
 * A session run synchronously on the server's thread through libortshim (see onnxruntime_shim.ts): `simple`
 * runs in 5 µs a run this way against 11 µs through the native binding, which reads every feed's properties
 * and builds every output as JavaScript objects.
 */
class ShimRunner extends SyncRunner implements SessionRunner {
  readonly where = "the server's thread, through libortshim";
  #session: ShimSession;
  override readonly carriesBf16 = true;
  readonly takesBytes = true;
  constructor(session: ShimSession) {
    super(session);
    this.#session = session;
  }
  runSync(feeds: OrtValue[], fetches: readonly string[]): OrtValue[] {
    try {
      return this.#session.run(feeds, fetches);
    } finally {
      // The run is over (it is synchronous): the batch's input buffers serve the next batch.
      this.buffers.takeBack(feeds);
    }
  }
  close(): Promise<void> {
    this.#session.close();
    return Promise.resolve();
  }
}

/** A run of a WorkerRunner: waiting for its turn, or on the worker. */
interface WorkerJob {
  feeds: OrtValue[];
  fetches: readonly string[];
  resolve: (v: OrtValue[]) => void;
  reject: (e: Error) => void;
  /** Its request number, once started. */
  seq: number;
  /** Whether it went through a slot (else it was posted). */
  shared: boolean;
}

/** How long closing waits for the runs in flight, and then for the worker to dispose of its session. */
const WORKER_CLOSE_WAIT_MS = 2000;

/**
 * A session on a worker thread of its own: the main thread goes on reading and answering requests while the
 * worker runs a batch, and instances of a model run truly at the same time. Runs go in order.
 *
 * With libortshim or the native binding (synchronous runs), runs cross in shared memory (onnxruntime_shm.ts) through two slots in turn: the
 * scheduler concatenates a batch straight into the next slot's input arena (inputBuffer lends views of it while
 * that slot is free), the slot's header says what to run, and `Atomics.notify` wakes the worker, blocked in
 * `Atomics.wait` when it has nothing to do; the main thread awaits `Atomics.waitAsync` and copies the outputs out
 * of the slot's output arena (so that the slot's next run may overwrite them). With a run on the worker, the
 * next one goes into the other slot at once (the instance's pipeline depth is 2): the worker starts it as soon
 * as it finishes the one before, while the main thread takes that one's answer. A wake-up this way costs a
 * fraction of a postMessage's to an idle worker, which a lone request pays each time.
 * Runs the arenas cannot carry (strings, oversize tensors) are posted, one at a time with nothing else on the
 * worker: their inputs cross in buffers of InputBuffers, transferred (not copied) and given back with the reply,
 * and their outputs are transferred back.
 */
class WorkerRunner implements SessionRunner {
  #worker: Worker;
  #inputNames: string[] = [];
  #inputMetadata: ort.InferenceSession.ValueMetadata[] = [];
  #outputMetadata: ort.InferenceSession.ValueMetadata[] = [];
  #inputIndex = new Map<string, number>();
  #outputIndex = new Map<string, number>();
  /** What the worker runs its session through. */
  #via: WorkerRuntime = "onnxruntime-node's API";
  get carriesBf16(): boolean {
    return this.#via === "libortshim";
  }
  get where(): string {
    return `a thread of its own, through ${this.#via}`;
  }
  /** The shared blocks, once the worker said it takes runs through them. */
  #blocks: SharedBlocks | undefined;
  #ctl: Int32Array | undefined;
  /** The number of the last request to the worker. */
  #seq = 0;
  /** Per slot, the input arena's bytes lent since the slot's last run that used lent views: copies go past. */
  #lent: number[] = new Array<number>(SLOTS).fill(0);
  /** The runs on the worker, oldest first: up to SLOTS of them through the slots, or one posted. */
  #running: WorkerJob[] = [];
  #queue: WorkerJob[] = [];
  /** Runs whose reply comes as a posted message, by request number, and replies that came before their run. */
  #posted = new Map<number, { job: WorkerJob; names: string[] }>();
  #early = new Map<number, Extract<WorkerReply, { op: "result" | "error" }>>();
  #closing = false;
  #dead = false;
  #closed: (() => void) | undefined;
  #idle: (() => void) | undefined;
  #buffers = new InputBuffers();

  private constructor(worker: Worker) {
    this.#worker = worker;
  }

  /** Whether no run is in flight or queued. */
  get idle(): boolean {
    return this.#running.length === 0 && this.#queue.length === 0 && this.#posted.size === 0;
  }

  /** Batches the scheduler may hand over before the first is answered: one per slot (see the class). */
  get pipelineDepth(): number {
    return this.#blocks ? SLOTS : 1;
  }

  static open(path: string, options: ort.InferenceSession.SessionOptions): Promise<WorkerRunner> {
    const worker = new Worker(new URL("./onnxruntime_worker.ts", import.meta.url).href, { type: "module" });
    const runner = new WorkerRunner(worker);
    const shared: SharedBlocks = {
      control: new SharedArrayBuffer(CTL_WORDS * 4),
      slots: Array.from({ length: SLOTS }, () => ({
        header: new SharedArrayBuffer(HEADER_BYTES),
        input: growableShared(64 * 1024),
        output: growableShared(64 * 1024),
      })),
    };
    return new Promise((resolve, reject) => {
      worker.onerror = (e) => {
        e.preventDefault();
        runner.#fail(new Error(e.message));
        reject(new Error(e.message));
      };
      worker.onmessage = (e: MessageEvent<WorkerReply>) => {
        const msg = e.data;
        if (msg.op === "opened") {
          runner.#inputNames = msg.inputMetadata.map((m) => m.name);
          runner.#inputMetadata = msg.inputMetadata.map(fromWorkerMetadata);
          runner.#outputMetadata = msg.outputMetadata.map(fromWorkerMetadata);
          runner.#inputIndex = new Map(runner.#inputNames.map((n, i) => [n, i]));
          runner.#outputIndex = new Map(msg.outputMetadata.map((m, i) => [m.name, i]));
          runner.#via = msg.via;
          if (msg.shared) {
            runner.#blocks = shared;
            runner.#ctl = new Int32Array(shared.control);
          }
          resolve(runner);
        } else if (msg.op === "error" && msg.id === -1) {
          worker.terminate();
          reject(new Error(msg.message));
        } else if (msg.op === "result" || msg.op === "error") {
          runner.#reply(msg);
        } else if (msg.op === "closed") {
          runner.#closed?.();
        }
      };
      worker.postMessage({ op: "open", path, options, shared } satisfies WorkerRequest);
    });
  }

  get inputNames(): readonly string[] {
    return this.#inputNames;
  }

  get inputMetadata(): readonly ort.InferenceSession.ValueMetadata[] {
    return this.#inputMetadata;
  }

  get outputMetadata(): readonly ort.InferenceSession.ValueMetadata[] {
    return this.#outputMetadata;
  }

  /** Whether the runs on the worker leave a slot for one more: fewer than SLOTS, none of them posted. */
  #slotsOpen(): boolean {
    return this.#running.length < SLOTS && this.#running.every((j) => j.shared);
  }

  /** Whether a run may go through the next slot now: it is free and nothing is waiting to go before. */
  #slotFree(): boolean {
    return this.#blocks !== undefined && !this.#closing && this.#queue.length === 0 && this.#slotsOpen();
  }

  /**
   * A view of the next slot's input arena while that slot is free (the batch it is for runs next, where it
   * lies); else, or past the arena's limit, a buffer of InputBuffers.
   */
  inputBuffer(name: string, byteLength: number): Uint8Array {
    const slot = slotOf((this.#seq + 1) | 0);
    const offset = align8(this.#lent[slot]!);
    if (!this.#slotFree() || offset + byteLength > ARENA_MAX_BYTES) {
      return this.#buffers.take(name, byteLength);
    }
    const input = this.#blocks!.slots[slot]!.input;
    ensureBytes(input, offset + byteLength);
    this.#lent[slot] = offset + byteLength;
    return new Uint8Array(input, offset, byteLength);
  }

  run(feeds: OrtValue[], fetches: readonly string[]): Promise<OrtValue[]> {
    return new Promise((resolve, reject) => {
      if (this.#closing || this.#dead) {
        reject(new Error("the instance is closing"));
        return;
      }
      this.#queue.push({ feeds, fetches, resolve, reject, seq: 0, shared: false });
      this.#kick();
    });
  }

  /** Starts the queued runs that may start: into a free slot, or posted when nothing else is on the worker. */
  #kick(): void {
    while (this.#queue.length > 0 && !this.#dead) {
      const job = this.#queue[0]!;
      const alone = this.#running.length === 0 && this.#posted.size === 0;
      if (!alone && !this.#slotsOpen()) return;
      const seq = (this.#seq + 1) | 0;
      if (this.#ctl && this.#place(job, slotOf(seq))) {
        this.#queue.shift();
        this.#seq = seq;
        job.seq = seq;
        job.shared = true;
        this.#running.push(job);
        const ctl = this.#ctl;
        Atomics.store(ctl, slotWord(CTL.KIND, slotOf(seq)), KIND.RUN);
        Atomics.store(ctl, CTL.SEQ, seq);
        Atomics.notify(ctl, CTL.SEQ);
        this.#waitDone(seq).then(() => this.#collect());
        continue;
      }
      // A run the slots cannot carry goes alone.
      if (!alone) return;
      this.#queue.shift();
      this.#seq = seq;
      job.seq = seq;
      this.#running.push(job);
      this.#post(job, seq);
    }
  }

  /** Waits until the worker has answered request `seq` (or is gone). */
  async #waitDone(seq: number): Promise<void> {
    const ctl = this.#ctl!;
    for (;;) {
      const done = Atomics.load(ctl, CTL.DONE);
      if (reached(done, seq) || this.#dead) return;
      const wait = Atomics.waitAsync(ctl, CTL.DONE, done);
      if (wait.async) await wait.value;
    }
  }

  /**
   * Lays out a run in slot `slot`: its input arena and header. Lent views of that arena stay where they are,
   * other inputs (a request's own buffer, a view of the other slot's arena) are copied past every lent byte.
   * False (nothing written) where the run must be posted instead.
   */
  #place(job: WorkerJob, slot: number): boolean {
    const blocks = this.#blocks!.slots[slot]!;
    let words = 2 + job.fetches.length;
    let end = this.#lent[slot]!;
    let usesLent = false;
    for (const f of job.feeds) {
      if (!ArrayBuffer.isView(f.data) || !ARENA_TYPE_CODES.has(f.type) || !this.#inputIndex.has(f.name)) {
        return false;
      }
      words += 5 + f.dims.length;
      if (f.data.buffer === blocks.input) {
        end = Math.max(end, f.data.byteOffset + f.data.byteLength);
        usesLent = true;
      }
    }
    for (const name of job.fetches) {
      const i = this.#outputIndex.get(name);
      const meta = i === undefined ? undefined : this.#outputMetadata[i];
      if (!meta?.isTensor || meta.type === "string") return false;
    }
    if (words * 8 > HEADER_BYTES) return false;
    const offsets: number[] = [];
    for (const f of job.feeds) {
      const data = f.data as ArrayBufferView;
      if (data.buffer === blocks.input) {
        offsets.push(data.byteOffset);
        continue;
      }
      end = align8(end);
      offsets.push(end);
      end += data.byteLength;
    }
    if (end > ARENA_MAX_BYTES) return false;
    ensureBytes(blocks.input, end);
    const h = new Float64Array(blocks.header);
    let p = 0;
    h[p++] = job.feeds.length;
    job.feeds.forEach((f, k) => {
      const data = f.data as ArrayBufferView;
      if (data.buffer !== blocks.input) {
        setBytes(
          new Uint8Array(blocks.input, offsets[k], data.byteLength),
          new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
        );
      }
      h[p++] = this.#inputIndex.get(f.name)!;
      h[p++] = ARENA_TYPE_CODES.get(f.type)!;
      h[p++] = offsets[k]!;
      h[p++] = data.byteLength;
      h[p++] = f.dims.length;
      for (const d of f.dims) h[p++] = d;
    });
    h[p++] = job.fetches.length;
    for (const name of job.fetches) h[p++] = this.#outputIndex.get(name)!;
    // The lent bytes now belong to this run; what is lent for the slot after it starts again at 0.
    if (usesLent) this.#lent[slot] = 0;
    return true;
  }

  /** Takes the answers of the runs the worker finished through the slots, oldest first. */
  #collect(): void {
    const ctl = this.#ctl!;
    while (this.#running.length > 0 && this.#running[0]!.shared) {
      const job = this.#running[0]!;
      if (this.#dead) return;
      if (!reached(Atomics.load(ctl, CTL.DONE), job.seq)) return;
      this.#running.shift();
      this.#finishShared(job);
    }
    this.#kick();
    if (this.idle) this.#idle?.();
  }

  /** Takes the answer of a run the worker ran through its slot. */
  #finishShared(job: WorkerJob): void {
    const slot = slotOf(job.seq);
    const blocks = this.#blocks!.slots[slot]!;
    const status = Atomics.load(this.#ctl!, slotWord(CTL.STATUS, slot));
    if (status === STATUS.ERROR) {
      job.reject(new Error(readMessage(blocks.header)));
    } else if (status === STATUS.POSTED) {
      this.#posted.set(job.seq, { job, names: [] });
      const early = this.#early.get(job.seq);
      if (early) {
        this.#early.delete(job.seq);
        this.#reply(early);
      }
    } else {
      const h = new Float64Array(blocks.header);
      let p = 1;
      const outputs: OrtValue[] = job.fetches.map((name) => {
        const type = ARENA_TYPES[h[p++]!]!, offset = h[p++]!, byteLength = h[p++]!;
        const dims: number[] = [];
        for (let d = h[p++]!; d > 0; d--) dims.push(h[p++]!);
        // Copied out: the slot's next run writes its outputs over these bytes.
        return {
          name,
          type: type as ort.Tensor.Type,
          dims,
          data: new Uint8Array(blocks.output, offset, byteLength).slice(),
        };
      });
      job.resolve(outputs);
    }
  }

  /** Posts a run the arenas cannot carry (its inputs copied into InputBuffers unless they come from there). */
  #post(job: WorkerJob, id: number): void {
    const transfer: ArrayBuffer[] = [];
    const sent = job.feeds.map((f) => {
      if (!ArrayBuffer.isView(f.data)) return f;
      let data = f.data;
      // A buffer the scheduler filled from InputBuffers crosses as it is; anything else (a request's own
      // buffer, a view of an input arena) is copied into one first and stays untouched.
      if (!this.#buffers.owns(data)) {
        const bytes = this.#buffers.take(f.name, data.byteLength);
        bytes.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
        const ctor = data.constructor as new (
          b: ArrayBuffer,
          offset: number,
          length: number,
        ) => ArrayBufferView;
        const per = (data as unknown as { BYTES_PER_ELEMENT?: number }).BYTES_PER_ELEMENT ?? 1;
        data = new ctor(bytes.buffer as ArrayBuffer, 0, data.byteLength / per);
      }
      if (!transfer.includes(data.buffer as ArrayBuffer)) transfer.push(data.buffer as ArrayBuffer);
      return { ...f, data };
    });
    this.#posted.set(id, { job, names: job.feeds.map((f) => f.name) });
    this.#worker.postMessage(
      { op: "run", id, feeds: sent, fetches: [...job.fetches] } satisfies WorkerRequest,
      transfer,
    );
    const ctl = this.#ctl;
    if (ctl) {
      // The worker waits on the control block: send it back to its event loop to read the message.
      Atomics.store(ctl, slotWord(CTL.KIND, slotOf(id)), KIND.MESSAGE);
      Atomics.store(ctl, CTL.SEQ, id);
      Atomics.notify(ctl, CTL.SEQ);
    }
  }

  /** A posted reply: the result or error of a posted run (or of a slot's run whose outputs were posted). */
  #reply(msg: Extract<WorkerReply, { op: "result" | "error" }>): void {
    const p = this.#posted.get(msg.id);
    if (!p) {
      this.#early.set(msg.id, msg);
      return;
    }
    this.#posted.delete(msg.id);
    msg.buffers.forEach((b, i) => b && this.#buffers.give(p.names[i]!, b));
    const job = p.job;
    if (msg.op === "result") job.resolve(msg.outputs as OrtValue[]);
    else job.reject(new Error(msg.message));
    const i = this.#running.indexOf(job);
    if (i >= 0) this.#running.splice(i, 1);
    this.#kick();
    if (this.idle) this.#idle?.();
  }

  /** Rejects every run: the worker failed or is gone. */
  #fail(err: Error): void {
    this.#dead = true;
    for (const job of this.#queue.splice(0)) job.reject(err);
    for (const { job } of this.#posted.values()) job.reject(err);
    this.#posted.clear();
    for (const job of this.#running.splice(0)) job.reject(err);
    // Wake a wait for DONE that the worker will not answer.
    if (this.#ctl) Atomics.notify(this.#ctl, CTL.DONE);
  }

  async close(): Promise<void> {
    if (this.#closing) return;
    this.#closing = true;
    const closing = new Error("the instance is closing");
    for (const job of this.#queue.splice(0)) job.reject(closing);
    const wait = (done: Promise<void>) => settleWithin(done, WORKER_CLOSE_WAIT_MS);
    // The runs in flight finish first: a native run cannot be interrupted.
    if (!this.idle && !this.#dead) await wait(new Promise<void>((r) => (this.#idle = r)));
    if (!this.#dead) {
      const closed = new Promise<void>((r) => (this.#closed = r));
      const ctl = this.#ctl;
      if (ctl) {
        const seq = this.#seq = (this.#seq + 1) | 0;
        Atomics.store(ctl, slotWord(CTL.KIND, slotOf(seq)), KIND.EXIT);
        Atomics.store(ctl, CTL.SEQ, seq);
        Atomics.notify(ctl, CTL.SEQ);
      } else {
        this.#worker.postMessage({ op: "close" } satisfies WorkerRequest);
      }
      await wait(closed);
    }
    this.#worker.terminate();
    this.#fail(new Error("the instance closed before the run finished"));
  }
}

/**
 * How long after the worker's last run a lone request still goes to the worker (ms): a gap in a stream of
 * batches is not a lone request, and running it on the server's thread would hold up the reading and answering
 * of the requests that follow (bench/mlp_bench.ts, 64 connections: 20 to 60 such runs a second, 20 to 40 ms of
 * the server's thread).
 */
export const LONE_QUIET_MS = 20;

/**
 * A worker instance that also holds a session on the server's thread, for the lone request: a run of one
 * request's own buffers (not a batch the scheduler concatenated into the worker's arena) while the worker is
 * idle and has run nothing for LONE_QUIET_MS runs on the server's thread, as fast as an instance there;
 * batches, and anything that arrives while the worker runs or shortly after, go to the worker (in order), so
 * that the server's thread goes on reading and answering requests under load. The price is the model's weights
 * held twice (see LONE_ON_MAIN_MAX_MODEL_BYTES).
 */
class LoneOnMainRunner implements SessionRunner {
  #main: SyncRunner & SessionRunner;
  #worker: WorkerRunner;
  /** When the worker's last run ended (performance.now()). */
  #workerEnd = -Infinity;
  constructor(main: SyncRunner & SessionRunner, worker: WorkerRunner) {
    this.#main = main;
    this.#worker = worker;
  }
  get inputNames(): readonly string[] {
    return this.#worker.inputNames;
  }
  get inputMetadata(): readonly ort.InferenceSession.ValueMetadata[] {
    return this.#worker.inputMetadata;
  }
  get outputMetadata(): readonly ort.InferenceSession.ValueMetadata[] {
    return this.#worker.outputMetadata;
  }
  inputBuffer(name: string, byteLength: number): Uint8Array {
    return this.#worker.inputBuffer(name, byteLength);
  }
  get pipelineDepth(): number {
    return this.#worker.pipelineDepth;
  }
  get carriesBf16(): boolean {
    return this.#main.carriesBf16 && this.#worker.carriesBf16;
  }
  get where(): string {
    return `${this.#worker.where}; a lone request on ${this.#main.where}`;
  }
  run(feeds: OrtValue[], fetches: readonly string[]): Promise<OrtValue[]> {
    const batch = feeds.some((f) => ArrayBuffer.isView(f.data) && f.data.buffer instanceof SharedArrayBuffer);
    if (!batch && this.#worker.idle && performance.now() - this.#workerEnd >= LONE_QUIET_MS) {
      return this.#main.run(feeds, fetches);
    }
    const ended = () => (this.#workerEnd = performance.now());
    const run = this.#worker.run(feeds, fetches);
    run.then(ended, ended);
    return run;
  }
  async close(): Promise<void> {
    await Promise.all([this.#main.close(), this.#worker.close()]);
  }
}

/** Metadata from the worker: libortshim's or the native binding's (element types by number), or the public API's. */
function fromWorkerMetadata(m: WorkerValueMetadata): ort.InferenceSession.ValueMetadata {
  if (typeof m.type === "number" || !m.isTensor) return fromNativeMetadata(m as NativeValueMetadata);
  return m as ort.InferenceSession.ValueMetadata;
}

class OrtInstance implements BackendInstance {
  #runner: SessionRunner;
  #config: ModelConfig;
  #batched: boolean;
  #inputs: Map<string, ModelInputConfig>;
  #outputSpecs: Map<string, ModelOutputConfig>;
  readonly inputBuffer?: (name: string, byteLength: number) => Uint8Array;
  readonly pipelineDepth: number;

  get runsOn(): string {
    return this.#runner.where;
  }

  constructor(runner: SessionRunner, config: ModelConfig) {
    this.#runner = runner;
    this.pipelineDepth = runner.pipelineDepth ?? 1;
    if (runner.inputBuffer) this.inputBuffer = (name, byteLength) => runner.inputBuffer!(name, byteLength);
    this.#config = config;
    this.#batched = config.max_batch_size > 0;
    this.#inputs = new Map(config.input.map((i) => [i.name, i]));
    this.#outputSpecs = new Map(config.output.map((o) => [o.name, o]));
    if (runner.runSync) this.executeSync = (inputs, outputNames) => this.#executeSync(inputs, outputNames);
  }

  /** Runs on the server's thread and returns the outputs at once: present where the runner can (SyncRunner). */
  readonly executeSync?: (inputs: Map<string, Tensor>, outputNames: readonly string[]) => Map<string, Tensor>;

  /** Runs the inputs (a runner that can run synchronously has done so when the returned promise is made). */
  execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>> {
    if (this.executeSync) {
      try {
        return Promise.resolve(this.executeSync(inputs, outputNames));
      } catch (err) {
        return Promise.reject(err);
      }
    }
    let feeds: OrtValue[];
    try {
      feeds = this.#feeds(inputs);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.#runner.run(feeds, outputNames).then(
      (results) => this.#outputsOf(results),
      (err) => Promise.reject(this.#runFailed(err)),
    );
  }

  #executeSync(inputs: Map<string, Tensor>, outputNames: readonly string[]): Map<string, Tensor> {
    const feeds = this.#feeds(inputs);
    let results: OrtValue[];
    try {
      results = this.#runner.runSync!(feeds, outputNames);
    } catch (err) {
      throw this.#runFailed(err);
    }
    return this.#outputsOf(results);
  }

  #runFailed(err: unknown): Error {
    const msg = err instanceof Error ? err.message : String(err);
    return internal(`Cannot run '${this.#config.name}' in ONNX Runtime: ${msg}`);
  }

  /** The inputs as ONNX Runtime takes them (reshaped where the config says so). */
  #feeds(inputs: Map<string, Tensor>): OrtValue[] {
    const feeds: OrtValue[] = [];
    for (const [name, t] of inputs) {
      if (!this.#runner.inputNames.includes(name)) {
        throw unsupported(
          `Cannot run '${this.#config.name}': input '${name}' is an initializer of the ONNX model, which onnxruntime-node cannot override; leave it out to use the model's value`,
        );
      }
      const type = TO_ORT[t.datatype];
      if (!type) {
        throw unsupported(
          `Cannot run '${this.#config.name}': datatype ${t.datatype} is not supported by ONNX Runtime`,
        );
      }
      const reshape = this.#inputs.get(name)?.reshape?.shape;
      const dims = reshape ? resolveShape(t.shape, reshape, this.#batched) : t.shape;
      const bytes = t.data as Uint8Array;
      const data = t.datatype === "BYTES"
        ? (this.#runner.takesBytes ? (t.data as BytesTensor).data : (t.data as BytesTensor).strings())
        : this.#runner.takesBytes && bytes.byteOffset % elementSize(t.datatype) === 0
        ? bytes
        : typedView(t.datatype, bytes);
      feeds.push({ name, type, data, dims });
    }
    return feeds;
  }

  /** ONNX Runtime's outputs as tensors (reshaped back where the config says so). */
  #outputsOf(results: OrtValue[]): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    for (const v of results) {
      const name = v.name;
      const dt = FROM_ORT[v.type];
      if (!dt) {
        throw unsupported(
          `Cannot run '${this.#config.name}': output '${name}' has unsupported type '${v.type}'`,
        );
      }
      const spec = this.#outputSpecs.get(name);
      let shape = v.dims;
      if (spec?.reshape) shape = resolveShape(shape, spec.dims, this.#batched);
      const data = dt === "BYTES"
        ? (v.data instanceof Uint8Array
          // libortshim's length-prefixed elements, as many as the shape holds.
          ? BytesTensor.fromWire(v.data, elementCount(shape), `output '${name}'`)
          : BytesTensor.fromStrings(v.data as string[], `output '${name}'`))
        : v.data instanceof Uint8Array
        ? v.data
        : bytesOf(v.data as ArrayBufferView);
      out.set(name, { name, datatype: dt, shape, data });
    }
    return out;
  }

  async close(): Promise<void> {
    await this.#runner.close();
  }
}

/**
 * The smallest model file whose dynamic-batching instances run on a worker thread by default: below it a run
 * costs less than the hop to a worker and back, even over shared memory. `simple` (a few hundred bytes, 2 cores,
 * `./dinfer bench --peers-only --quick`, the same machine): on the worker 5.2k-6.2k infer/s at 1 connection
 * and 9.5k-22k at 16, 124-133 µs of server CPU per request at 1; on the main thread 8.5k-8.7k and 19.5k-21.8k,
 * 64-66 µs. The MLP of bench/models/mlp (4 MB, bench/mlp_rounds.ts): about as fast on the worker as on the
 * main thread for a lone request and 1.6× at 64 connections.
 */
export const WORKER_MIN_MODEL_BYTES = 1 << 20;

/**
 * The largest model file whose default worker instances also open a session on the server's thread for lone
 * requests (LoneOnMainRunner): the weights are held twice, which matters little below this size. An
 * `instance_thread: "worker"` set in the config or on the command line gets the worker alone.
 */
export const LONE_ON_MAIN_MAX_MODEL_BYTES = 256 << 20;

/**
 * Where a model's instances run: `main` (the server's thread: no thread hop, best for a lone request to a small
 * model) or `worker` (a thread per instance: the server's thread goes on reading and answering requests while a
 * batch runs, and instances run at the same time): the config parameter `instance_thread`, else
 * `--backend-config=onnxruntime,instance-thread=...`, else `worker` for a model with dynamic batching (many
 * requests in flight are what it is for) whose file has at least WORKER_MIN_MODEL_BYTES, and `main` for the
 * others.
 * @param config the model config
 * @param backendConfig the server-wide settings
 * @param modelBytes the size of the model file (Infinity where unknown, a folder for example)
 */
export function instanceThread(
  config: ModelConfig,
  backendConfig: Record<string, string>,
  modelBytes = 0,
): "main" | "worker" {
  const batching = config.dynamic_batching !== undefined && config.max_batch_size > 1;
  const byDefault = batching && modelBytes >= WORKER_MIN_MODEL_BYTES ? "worker" : "main";
  const v = config.parameters?.instance_thread?.string_value || backendConfig["instance-thread"] || byDefault;
  if (v !== "main" && v !== "worker") {
    throw invalidArg(`Cannot load '${config.name}': instance_thread is '${v}', expected 'main' or 'worker'`);
  }
  return v;
}

/**
 * The config parameter `thread_copy_max_bytes`: for this model, what `--backend-config=onnxruntime,
 * thread-copy-max-bytes=N` says for all (the listener threads copy a version whose folder holds under N bytes,
 * see frontends/http/replicas.ts); undefined where the config does not set it. Checked when the model loads.
 * @param config the model config
 */
export function threadCopyParameter(config: ModelConfig): number | undefined {
  const v = config.parameters?.thread_copy_max_bytes?.string_value;
  if (v === undefined || v === "") return undefined;
  if (!/^\d{1,15}$/.test(v)) {
    throw invalidArg(
      `Cannot load '${config.name}': thread_copy_max_bytes is '${v}', expected a number of bytes`,
    );
  }
  return Number(v);
}

/**
 * Maps a shape onto target dims of the same element count (config `reshape`), keeping the batch dim and
 * resolving one -1.
 */
function resolveShape(shape: readonly number[], target: readonly number[], batched: boolean): number[] {
  const batch = batched ? [shape[0] ?? 1] : [];
  const total = elementCount(batched ? shape.slice(1) : shape);
  const known = target.filter((d) => d >= 0).reduce((a, b) => a * b, 1);
  const dims = target.map((d) => (d >= 0 ? d : known === 0 ? 0 : total / known));
  return [...batch, ...dims];
}

/** The size of a model file; Infinity for a folder or a file that cannot be read (opening it will say why). */
async function fileBytes(path: string): Promise<number> {
  try {
    const info = await Deno.stat(path);
    return info.isFile ? info.size : Infinity;
  } catch {
    return Infinity;
  }
}

/**
 * The intra-op threads of a worker instance's session where the config does not set `intra_op_thread_count`:
 * one per core but one, the server's thread keeping a core for reading and answering requests while the worker
 * runs (ONNX Runtime's own default, one per physical core, has its pool threads and the server's thread take
 * turns on the same cores). bench/mlp_rounds.ts on 2 cores: with one thread instead of two, the worker's CPU
 * per inference fell from 39 to 34 µs.
 * @param cores the machine's logical cores (navigator.hardwareConcurrency)
 */
export function workerIntraOpThreads(cores: number): number {
  return Math.max(1, Math.floor(cores) - 1);
}

/** Session options with `threads` intra-op threads where the config sets no `intra_op_thread_count`. */
function withIntraOpThreads(
  options: ort.InferenceSession.SessionOptions,
  threads: number,
): ort.InferenceSession.SessionOptions {
  return options.intraOpNumThreads !== undefined ? options : { ...options, intraOpNumThreads: threads };
}

/** The session options of a worker instance: as sessionOptions, with workerIntraOpThreads by default. */
function workerSessionOptions(
  options: ort.InferenceSession.SessionOptions,
): ort.InferenceSession.SessionOptions {
  return withIntraOpThreads(options, workerIntraOpThreads(navigator.hardwareConcurrency || 1));
}

/**
 * The session options of an instance on the server's thread: as sessionOptions, and where the config does not
 * set `intra_op_thread_count`, one intra-op thread for a model file under WORKER_MIN_MODEL_BYTES and one per core
 * the process may use for a bigger one. A run of a small model takes microseconds, less than waking a pool
 * thread costs (the pool threads sleep between runs, see DEFAULT_SESSION_ENTRIES): `simple` with Triton's own
 * config on 2 cores took 68 µs of server CPU per request at 1 connection with ONNX Runtime's default threads,
 * 56 µs with one thread. The count is always set because without one ONNX Runtime starts a thread per physical
 * core of the machine and pins each to its core, past the cores the process was given (taskset, a container's
 * cpuset).
 * @param options the config's session options
 * @param modelBytes the model file's size
 * @param cores the cores the process may use (navigator.hardwareConcurrency follows its CPU affinity)
 */
export function mainSessionOptions(
  options: ort.InferenceSession.SessionOptions,
  modelBytes: number,
  cores: number = navigator.hardwareConcurrency || 1,
): ort.InferenceSession.SessionOptions {
  return withIntraOpThreads(
    options,
    modelBytes >= WORKER_MIN_MODEL_BYTES ? Math.max(1, Math.floor(cores)) : 1,
  );
}

/** Opens the session of one instance: on a worker thread or the server's, through libortshim, the native binding or the public API. */
async function openRunner(config: ModelConfig, ctx: InstanceContext): Promise<SessionRunner> {
  const options = sessionOptions(config);
  // A listener thread's copy runs where the thread reads its requests, as the other threads' copies do theirs.
  if (ctx.copy) return await openMainRunner(modelPathOf(ctx), withIntraOpThreads(options, 1));
  const bytes = await fileBytes(modelPathOf(ctx));
  if (instanceThread(config, ctx.backendConfig, bytes) === "worker") {
    let worker: WorkerRunner;
    try {
      worker = await WorkerRunner.open(modelPathOf(ctx), workerSessionOptions(options));
    } catch (err) {
      throw cannotLoad(modelPathOf(ctx), err);
    }
    const chosen = config.parameters?.instance_thread?.string_value || ctx.backendConfig["instance-thread"];
    if (chosen || bytes > LONE_ON_MAIN_MAX_MODEL_BYTES) return worker;
    let main: SessionRunner;
    try {
      main = await openMainRunner(modelPathOf(ctx), mainSessionOptions(options, bytes));
    } catch (err) {
      await worker.close();
      throw err;
    }
    return main instanceof SyncRunner ? new LoneOnMainRunner(main, worker) : (await main.close(), worker);
  }
  return await openMainRunner(modelPathOf(ctx), mainSessionOptions(options, bytes));
}

/** Opens a session on the server's thread: through libortshim, the native binding, or the public API. */
async function openMainRunner(
  path: string,
  options: ort.InferenceSession.SessionOptions,
): Promise<SessionRunner> {
  let shim: ShimSession | undefined;
  try {
    shim = ShimSession.open(path, options);
  } catch (err) {
    throw cannotLoad(path, err);
  }
  if (shim) return new ShimRunner(shim);
  const native = await openNativeSession(path, options);
  if (native) return new NativeRunner(native);
  return new InlineRunner(await openSession(path, options));
}

/** The ONNX Runtime backend. */
export const onnxRuntimeBackend: Backend = {
  name: "onnxruntime",
  defaultModelFilename: "model.onnx",
  autoComplete,
  async createInstance(config: ModelConfig, ctx: InstanceContext): Promise<BackendInstance> {
    if (ctx.kind === "KIND_GPU") {
      throw unsupported(
        `Cannot load '${config.name}': instance group kind KIND_GPU is not supported by the CPU build of ONNX Runtime, use KIND_CPU`,
      );
    }
    threadCopyParameter(config);
    const runner = await openRunner(config, ctx);
    try {
      await checkModelIo(config, runner, modelPathOf(ctx));
      const bf16 = [...config.input, ...config.output].find((t) => t.data_type === "TYPE_BF16");
      if (bf16 && !runner.carriesBf16) {
        throw unsupported(
          `Cannot load '${config.name}': '${bf16.name}' is BF16, which needs libortshim (build/shim/libortshim.so); this server runs the model through onnxruntime-node, which cannot make BF16 tensors`,
        );
      }
    } catch (err) {
      await runner.close();
      throw err;
    }
    return new OrtInstance(runner, config);
  },
};
