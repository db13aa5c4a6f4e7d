/**
 * The ONNX Runtime backend (`platform: "onnxruntime_onnx"`, `backend: "onnxruntime"`) over
 * `npm:onnxruntime-node`: one InferenceSession per model instance.
 * @module
 */

import * as ort from "onnxruntime-node";
import {
  bytesOf,
  type Datatype,
  elementCount,
  toConfigType,
  typedView,
  utf8Decode,
  utf8Encode,
} from "../core/dtypes.ts";
import { internal, invalidArg, ServerError, unsupported } from "../core/errors.ts";
import type { ModelConfig, ModelInputConfig, ModelOutputConfig } from "../core/model_config.ts";
import type { Tensor } from "../core/types.ts";
import { sequenceTensorNames } from "../scheduler/sequence.ts";
import type { Backend, BackendInstance, InstanceContext } from "./backend.ts";

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

async function openSession(
  path: string,
  options: ort.InferenceSession.SessionOptions,
): Promise<ort.InferenceSession> {
  try {
    return await ort.InferenceSession.create(path, options);
  } catch (err) {
    const msg = err instanceof Error ? err.message : String(err);
    throw new ServerError("INVALID_ARG", `Cannot load ONNX model '${path}': ${msg}`);
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
 * The ONNX Runtime session options a config asks for: parameters `intra_op_thread_count`,
 * `inter_op_thread_count`, `execution_mode` (0 sequential, 1 parallel), `enable_mem_arena`, and
 * `optimization { graph { level } }` (as Triton: -1 basic, 1 extended, 2 disabled, otherwise all).
 * @param config the model config
 */
export function sessionOptions(config: ModelConfig): ort.InferenceSession.SessionOptions {
  const opts: ort.InferenceSession.SessionOptions = { logSeverityLevel: 3 };
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
  const session = await openSession(modelPathOf(ctx), {
    logSeverityLevel: 3,
    graphOptimizationLevel: "disabled",
  });
  try {
    const ins = session.inputMetadata;
    const outs = session.outputMetadata;
    const all = [...ins, ...outs];
    const hasIo = config.input.length > 0 || config.output.length > 0;
    if (config.max_batch_size === 0 && !hasIo && all.length > 0) {
      const batchable = all.every((m) => m.isTensor && m.shape.length > 0 && dimsOf(m.shape)[0] === -1);
      if (batchable) {
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE;
        if (!config.dynamic_batching && !config.sequence_batching && !config.ensemble_scheduling) {
          config.dynamic_batching = {};
        }
      }
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
  } finally {
    await session.release();
  }
}

class OrtInstance implements BackendInstance {
  #session: ort.InferenceSession;
  #config: ModelConfig;
  #batched: boolean;
  #inputs: Map<string, ModelInputConfig>;
  #outputs: Map<string, ModelOutputConfig>;

  constructor(session: ort.InferenceSession, config: ModelConfig) {
    this.#session = session;
    this.#config = config;
    this.#batched = config.max_batch_size > 0;
    this.#inputs = new Map(config.input.map((i) => [i.name, i]));
    this.#outputs = new Map(config.output.map((o) => [o.name, o]));
  }

  async execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>> {
    const feeds: Record<string, ort.Tensor> = {};
    for (const [name, t] of inputs) {
      if (!this.#session.inputNames.includes(name)) {
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
      const shape = reshape ? resolveShape(t.shape, reshape, this.#batched) : t.shape;
      const data = t.datatype === "BYTES"
        ? (t.data as Uint8Array[]).map(utf8Decode)
        : typedView(t.datatype, t.data as Uint8Array);
      const tensor = new ort.Tensor(type, data as ort.Tensor.DataType, shape);
      // onnxruntime-common turns a Uint16Array into a Float16Array where the runtime has one (Deno does), and
      // the native binding then reads no bytes; handing it back the bit patterns keeps FP16 working.
      if (type === "float16") (tensor as unknown as { cpuData: unknown }).cpuData = data;
      feeds[name] = tensor;
    }
    let results: ort.InferenceSession.OnnxValueMapType;
    try {
      results = await this.#session.run(feeds, outputNames as string[]);
    } catch (err) {
      const msg = err instanceof Error ? err.message : String(err);
      throw internal(`Cannot run '${this.#config.name}' in ONNX Runtime: ${msg}`);
    }
    const out = new Map<string, Tensor>();
    for (const name of outputNames) {
      const v = results[name] as ort.Tensor | undefined;
      if (!v) throw internal(`Cannot run '${this.#config.name}': ONNX Runtime produced no output '${name}'`);
      const dt = FROM_ORT[v.type];
      if (!dt) {
        throw unsupported(
          `Cannot run '${this.#config.name}': output '${name}' has unsupported type '${v.type}'`,
        );
      }
      const spec = this.#outputs.get(name);
      let shape = v.dims.map(Number);
      if (spec?.reshape) shape = resolveShape(shape, spec.dims, this.#batched);
      const data = dt === "BYTES" ? (v.data as string[]).map(utf8Encode) : bytesOf(v.data as ArrayBufferView);
      out.set(name, { name, datatype: dt, shape, data });
    }
    for (const t of Object.values(results)) (t as ort.Tensor).dispose?.();
    return out;
  }

  async close(): Promise<void> {
    await this.#session.release();
  }
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
    const session = await openSession(modelPathOf(ctx), sessionOptions(config));
    return new OrtInstance(session, config);
  },
};
