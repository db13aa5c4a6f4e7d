/**
 * Model configuration: reading `config.pbtxt`, normalizing it to the full ModelConfig with Triton's
 * defaults, and validating it.
 * @module
 */

import { join, posix } from "node:path";
import * as protobuf from "protobufjs";
import { fromConfigType } from "../core/dtypes.ts";
import { invalidArg, unsupported } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import { modelConfigType } from "../core/protos.ts";
import { parseTextFormat, TextFormatError } from "./text_format.ts";

/** What a platform or backend name resolves to. */
export interface BackendChoice {
  /** The backend name (`onnxruntime`, `tensorrt`, `python`, `pytorch`, `ensemble`). */
  backend: string;
  /** The platform name reported in metadata ("" where the backend has none). */
  platform: string;
}

const PLATFORMS: Record<string, string> = {
  onnxruntime_onnx: "onnxruntime",
  tensorrt_plan: "tensorrt",
  pytorch_libtorch: "pytorch",
  ensemble: "ensemble",
};

const BACKEND_PLATFORM: Record<string, string> = {
  onnxruntime: "onnxruntime_onnx",
  tensorrt: "tensorrt_plan",
  python: "",
  pytorch: "pytorch_libtorch",
};

/** Triton platforms and backends that dinfer knows of but does not run. */
const FOREIGN = new Set([
  "tensorflow_graphdef",
  "tensorflow_savedmodel",
  "tensorflow",
  "openvino",
  "dali",
  "fil",
  "vllm",
  "tensorrtllm",
]);

/** Default model file names and their backends, in the order they are looked for (those dinfer runs first). */
const MODEL_FILE_EXTENSIONS: Record<string, string> = {
  "model.onnx": "onnxruntime",
  "model.plan": "tensorrt",
  "model.py": "python",
  "model.pt": "pytorch",
  "model.savedmodel": "tensorflow",
  "model.graphdef": "tensorflow",
};

/**
 * Reads a model's `config.pbtxt` as a plain object (only what the file says); an empty object when the
 * folder has none.
 * @param modelDir the model folder
 * @param name the model name, for messages
 */
export async function readConfigFile(modelDir: string, name: string): Promise<Record<string, unknown>> {
  const path = join(modelDir, "config.pbtxt");
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return {};
    throw invalidArg(`Cannot read the config of '${name}': ${(err as Error).message}`);
  }
  try {
    return parseTextFormat(text, modelConfigType(), { filename: "config.pbtxt" });
  } catch (err) {
    if (err instanceof TextFormatError) throw invalidArg(`Cannot load '${name}': ${err.message}`);
    throw err;
  }
}

/** Drops the nulls protobufjs writes for unset messages and orders keys as the schema declares them. */
function tidy(v: unknown, type: protobuf.Type | undefined): unknown {
  if (Array.isArray(v)) return v.map((x) => tidy(x, type));
  if (!v || typeof v !== "object" || v instanceof Uint8Array) return v;
  const obj = v as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  const fields = type ? type.fieldsArray.map((f) => f.name) : Object.keys(obj);
  for (const k of fields) {
    const x = obj[k];
    if (x === null || x === undefined) continue;
    const field = type?.fields[k];
    const sub = field?.resolvedType instanceof protobuf.Type ? field.resolvedType : undefined;
    if (field?.map && x && typeof x === "object") {
      out[k] = Object.fromEntries(Object.entries(x).map(([mk, mv]) => [mk, tidy(mv, sub)]));
    } else {
      out[k] = tidy(x, sub);
    }
  }
  return out;
}

/**
 * Turns a partial config object (from text format or JSON) into a full ModelConfig with proto defaults:
 * every scalar and list present, unset messages left out, enums as names, 64-bit integers as numbers.
 * @param obj the partial config
 * @param name the model name, for messages
 */
export function toModelConfig(obj: Record<string, unknown>, name: string): ModelConfig {
  const type = modelConfigType();
  let message;
  try {
    message = type.fromObject(obj);
  } catch (err) {
    throw invalidArg(
      `Cannot load '${name}': the config is not a valid ModelConfig: ${(err as Error).message}`,
    );
  }
  const full = type.toObject(message, {
    enums: String,
    longs: Number,
    defaults: true,
    arrays: true,
    objects: true,
  });
  return tidy(full, type) as ModelConfig;
}

/**
 * Decides the backend of a model from its config's `platform` and `backend`, or from its files.
 * @param config the config (platform and backend filled in place)
 * @param files names found in the model's version folders, for configs that name neither
 */
export function resolveBackend(config: ModelConfig, files: readonly string[]): BackendChoice {
  const name = config.name;
  let { platform, backend } = config;
  if (!platform && !backend) {
    const found = Object.entries(MODEL_FILE_EXTENSIONS).find(([f]) => files.includes(f))?.[1];
    if (!found) {
      throw invalidArg(
        `Cannot load '${name}': the config names no platform or backend and no version folder holds a model file (model.onnx, model.plan, model.py, model.pt)`,
      );
    }
    backend = found;
  }
  for (const n of [platform, backend]) {
    if (n && FOREIGN.has(n)) {
      throw unsupported(`Cannot load '${name}': '${n}' models are not supported by dinfer`);
    }
  }
  if (platform && !(platform in PLATFORMS)) {
    throw invalidArg(`Cannot load '${name}': unknown platform '${platform}'`);
  }
  if (backend && !(backend in BACKEND_PLATFORM) && backend !== "ensemble") {
    throw invalidArg(`Cannot load '${name}': unknown backend '${backend}'`);
  }
  const fromPlatform = platform ? PLATFORMS[platform]! : "";
  if (fromPlatform && backend && fromPlatform !== backend) {
    throw invalidArg(`Cannot load '${name}': platform '${platform}' does not match backend '${backend}'`);
  }
  backend = backend || fromPlatform;
  platform = platform || (BACKEND_PLATFORM[backend] ?? "");
  config.backend = backend === "ensemble" ? "" : backend;
  config.platform = platform;
  return { backend, platform };
}

/**
 * Fills Triton's defaults that depend on the model: version policy latest 1, the default model file name,
 * instance groups (one KIND_CPU group of 2 for ONNX Runtime, 1 otherwise; KIND_GPU for TensorRT, whose plans
 * run only on GPUs) with their names.
 * @param config the config, changed in place
 * @param defaultModelFilename the backend's default file name
 */
export function applyDefaults(config: ModelConfig, defaultModelFilename: string): void {
  if (!config.version_policy || Object.keys(config.version_policy).length === 0) {
    config.version_policy = { latest: { num_versions: 1 } };
  }
  if (!config.default_model_filename) config.default_model_filename = defaultModelFilename;
  if (config.platform === "ensemble") {
    config.instance_group = [];
    return;
  }
  // As Triton fills them: the optimization block's defaults, and the sequence batcher's idle time and the
  // oldest strategy's preferred batch size.
  const optimization = (config.optimization ?? {}) as Record<string, unknown>;
  optimization.priority ??= "PRIORITY_DEFAULT";
  optimization.input_pinned_memory ??= { enable: true };
  optimization.output_pinned_memory ??= { enable: true };
  optimization.gather_kernel_buffer_threshold ??= 0;
  optimization.eager_batching ??= false;
  config.optimization = optimization;
  const sequence = config.sequence_batching as
    | { max_sequence_idle_microseconds?: number; oldest?: { preferred_batch_size?: number[] } }
    | undefined;
  if (sequence) {
    if (!sequence.max_sequence_idle_microseconds) sequence.max_sequence_idle_microseconds = 1_000_000;
    if (sequence.oldest && !sequence.oldest.preferred_batch_size?.length && config.max_batch_size > 0) {
      sequence.oldest.preferred_batch_size = [config.max_batch_size];
    }
  }
  const defaultKind = config.backend === "tensorrt" ? "KIND_GPU" : "KIND_CPU";
  // As Triton: the group made when the config has none is named after the model; unnamed groups of the
  // config are named `<model>_<index>`.
  if (config.instance_group.length === 0) {
    config.instance_group = [{ name: config.name, kind: defaultKind, count: 0, gpus: [] }];
  }
  config.instance_group.forEach((g, i) => {
    if (!g.name) g.name = `${config.name}_${i}`;
    if (g.kind === "KIND_AUTO") g.kind = defaultKind;
    if (!g.count) g.count = g.kind === "KIND_CPU" && config.backend === "onnxruntime" ? 2 : 1;
  });
}

/**
 * Checks that every file a config names stays inside its folder: `default_model_filename` and the values of
 * `cc_model_filenames` inside the version folder, each output's `label_filename` inside the model folder. A
 * name must be relative and must not lead out of its folder once resolved (`a/../b` is fine, `../x` and
 * `/etc/x` are not). The check looks at the names only, before any file is opened, so a name outside answers
 * the same whether or not that path exists. Symbolic links inside the repository are followed: the repository
 * on disk is trusted, a load request's files are written as plain files.
 * @param config the config (normalized)
 * @param folderName the model folder's name, for messages
 * @throws ServerError INVALID_ARG naming the field and the name
 */
export function checkFileNames(config: ModelConfig, folderName: string): void {
  const names: [string, string, string][] = [];
  if (config.default_model_filename) {
    names.push(["default_model_filename", config.default_model_filename, "version"]);
  }
  for (const [cc, file] of Object.entries(config.cc_model_filenames ?? {})) {
    names.push([`cc_model_filenames['${cc}']`, String(file), "version"]);
  }
  for (const o of config.output) {
    if (o.label_filename) names.push([`output '${o.name}' label_filename`, o.label_filename, "model"]);
  }
  // The files of warmup samples and of sequences' initial states, in their folders of the model folder.
  const warmup = (config.model_warmup ?? []) as { name?: string; inputs?: Record<string, unknown> }[];
  for (const sample of warmup) {
    for (const [input, spec] of Object.entries(sample?.inputs ?? {})) {
      const file = (spec as { input_data_file?: unknown } | null)?.input_data_file;
      if (file !== undefined && file !== "") {
        names.push([
          `model_warmup '${sample.name ?? ""}' input '${input}' input_data_file`,
          String(file),
          "warmup",
        ]);
      }
    }
  }
  type State = { input_name?: string; initial_state?: { data_file?: unknown }[] };
  for (const state of ((config.sequence_batching?.state ?? []) as State[])) {
    for (const init of state?.initial_state ?? []) {
      const file = init?.data_file;
      if (file !== undefined && file !== "") {
        names.push([
          `state '${state.input_name ?? ""}' initial_state data_file`,
          String(file),
          "initial_state",
        ]);
      }
    }
  }
  for (const [field, name, folder] of names) {
    const normal = posix.normalize(name);
    if (
      name.includes("\0") || posix.isAbsolute(name) || normal === ".." || normal.startsWith("../") ||
      normal === "." || normal === "./"
    ) {
      throw invalidArg(
        `Cannot load '${folderName}': ${field} '${name}' is not a file name inside the ${folder} folder`,
      );
    }
  }
}

/** The most priority levels a dynamic batcher may have. */
export const MAX_PRIORITY_LEVELS = 10_000;

/**
 * Checks a normalized config as Triton does; every problem is an INVALID_ARG error naming the field.
 * @param config the normalized config
 * @param folderName the model folder's name
 * @param modelDir the model folder, for label files
 */
export async function validateConfig(
  config: ModelConfig,
  folderName: string,
  modelDir: string,
): Promise<void> {
  const fail = (reason: string): never => {
    throw invalidArg(`Cannot load '${folderName}': ${reason}`);
  };
  checkFileNames(config, folderName);
  if (config.name !== folderName) {
    fail(`the config's name '${config.name}' does not match the model folder '${folderName}'`);
  }
  if (config.max_batch_size < 0) fail(`max_batch_size is ${config.max_batch_size}, expected 0 or more`);
  // Ragged batching's extra inputs and scattered outputs are not made: such a model would run without them.
  for (const key of ["batch_input", "batch_output"] as const) {
    if (((config as Record<string, unknown>)[key] as unknown[] | undefined)?.length) {
      throw unsupported(`Cannot load '${folderName}': ${key} (ragged batching) is not supported by dinfer`);
    }
  }
  if (config.platform !== "ensemble") {
    // As Triton: a Python model may take no inputs (its config is all there is to check it against).
    if (config.input.length === 0 && config.backend !== "python") fail("the config has no inputs");
    if (config.output.length === 0) fail("the config has no outputs");
  }
  for (const [kind, list] of [["input", config.input], ["output", config.output]] as const) {
    const seen = new Set<string>();
    for (const io of list) {
      if (!io.name) fail(`an ${kind} has no name`);
      if (seen.has(io.name)) fail(`${kind} '${io.name}' is declared more than once`);
      seen.add(io.name);
      if (!fromConfigType(io.data_type)) {
        fail(`${kind} '${io.name}' has no valid data_type (got '${io.data_type}')`);
      }
      if (io.dims.length === 0 && !(io.reshape && config.max_batch_size > 0)) {
        fail(`${kind} '${io.name}' has no dims`);
      }
      for (const d of io.dims) {
        if (d === 0 || d < -1) {
          fail(
            `${kind} '${io.name}' has dim ${d} in dims [${
              io.dims.join(",")
            }], expected -1 or a positive size`,
          );
        }
      }
      if (io.reshape) {
        const count = (ds: number[]) => (ds.some((d) => d === -1) ? -1 : ds.reduce((a, b) => a * b, 1));
        const a = count(io.dims), b = count(io.reshape.shape);
        if (a !== -1 && b !== -1 && a !== b) {
          fail(
            `${kind} '${io.name}' has dims [${io.dims.join(",")}] and reshape [${
              io.reshape.shape.join(",")
            }] of different sizes`,
          );
        }
      }
    }
  }
  for (const o of config.output) {
    if (o.label_filename) {
      try {
        await Deno.stat(join(modelDir, o.label_filename));
      } catch {
        fail(
          `output '${o.name}' names label file '${o.label_filename}', which does not exist in the model folder`,
        );
      }
    }
  }
  const db = config.dynamic_batching as { preferred_batch_size?: number[] } | undefined;
  for (const p of db?.preferred_batch_size ?? []) {
    if (p < 1 || (config.max_batch_size > 0 && p > config.max_batch_size)) {
      fail(
        `dynamic_batching preferred_batch_size ${p} must be between 1 and max_batch_size ${config.max_batch_size}`,
      );
    }
  }
  const levels = (config.dynamic_batching as { priority_levels?: number } | undefined)?.priority_levels ?? 0;
  const defaultLevel = (config.dynamic_batching as { default_priority_level?: number } | undefined)
    ?.default_priority_level ?? 0;
  // Each level has queues of its own, made at load: a config (a load request's too) must not make millions.
  if (levels > MAX_PRIORITY_LEVELS) {
    fail(
      `dynamic_batching priority_levels ${levels} is more than the ${MAX_PRIORITY_LEVELS} dinfer supports`,
    );
  }
  if (levels > 0 && (defaultLevel < 1 || defaultLevel > levels)) {
    fail(
      `dynamic_batching default_priority_level ${defaultLevel} must be between 1 and priority_levels ${levels}`,
    );
  }
  const vp = config.version_policy;
  if (vp?.latest && vp.latest.num_versions < 1) fail("version_policy latest num_versions must be at least 1");
  for (const g of config.instance_group) {
    if (g.count < 1) fail(`instance group '${g.name}' has count ${g.count}, expected at least 1`);
  }
  // As Triton: the response cache serves neither sequences nor decoupled models (Triton's wording).
  if ((config.response_cache as { enable?: boolean } | undefined)?.enable === true) {
    if (config.sequence_batching) {
      fail(
        `Response Cache does not currently support model ${config.name} with sequence batching scheduler. Please disable the response cache`,
      );
    }
    if ((config.model_transaction_policy as { decoupled?: boolean } | undefined)?.decoupled === true) {
      fail(
        `Response Cache does not currently support model ${config.name} with 'decoupled' transaction policy. Please disable the response cache`,
      );
    }
  }
}

/**
 * Reads the labels of a label file, one per line.
 * @param modelDir the model folder
 * @param file the file name from the config
 */
export async function readLabels(modelDir: string, file: string): Promise<string[]> {
  const text = await Deno.readTextFile(join(modelDir, file));
  const lines = text.split(/\r?\n/);
  if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
  return lines;
}
