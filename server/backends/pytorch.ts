/**
 * The PyTorch backend (`platform: "pytorch_libtorch"` / `backend: "pytorch"`, `<version>/model.pt`): serves
 * TorchScript models as Triton's PyTorch backend does, mapping the config's tensors onto `forward` (forward's
 * argument names, `<name>__<index>`, or config order; a single `Dict[str, Tensor]` argument). Batches are
 * concatenated by the scheduler and run as one forward call.
 *
 * Two runtimes (`--backend-config=pytorch,runtime=native|stub`; by default native when libtorchshim is built):
 * - native: libtorch in the server's process through libtorchshim (torchshim/, ffi/torchshim.ts), forward in
 *   nonblocking FFI calls; `--backend-config=pytorch,shim-path=` (or `DINFER_TORCHSHIM`) names the library.
 * - stub: each instance is a Python backend stub (server/backends/python.ts) running
 *   server/backends/pytorch/model.py with torch. The interpreter: `--backend-config=pytorch,python-executable=`,
 *   else `DINFER_TORCH_PYTHON` (the launcher's torch environment), else the Python backend's (`DINFER_PYTHON`,
 *   else `python3`). The config's own `python_executable` and `EXECUTION_ENV_PATH` parameters are not used.
 * @module
 */

import { fileURLToPath } from "node:url";
import { type TorchModule, TorchShim, torchShimPath } from "../../ffi/torchshim.ts";
import { fromConfigType } from "../core/dtypes.ts";
import { internal, invalidArg, ServerError, unavailable, unsupported } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { Tensor } from "../core/types.ts";
import type { Backend, BackendInstance, InstanceContext } from "./backend.ts";
import { PythonBackend } from "./python.ts";

const RUNNER_PATH = fileURLToPath(new URL("./pytorch/model.py", import.meta.url));

/** Config datatypes a TorchScript tensor can hold (as Triton's PyTorch backend maps them). */
const TORCH_TYPES = new Set([
  "TYPE_BOOL",
  "TYPE_UINT8",
  "TYPE_INT8",
  "TYPE_INT16",
  "TYPE_INT32",
  "TYPE_INT64",
  "TYPE_FP16",
  "TYPE_FP32",
  "TYPE_FP64",
]);

/** Parameters that choose an interpreter for Python models; a PyTorch model's config does not. */
const INTERPRETER_PARAMETERS = ["python_executable", "EXECUTION_ENV_PATH"];

/**
 * The interpreter that runs a PyTorch model's instances (see the module doc for the order).
 * @param backendConfig `--backend-config=pytorch,...` settings
 * @returns the Python executable
 */
export function torchPython(backendConfig: Record<string, string>): string {
  return backendConfig["python-executable"] || Deno.env.get("DINFER_TORCH_PYTHON") ||
    Deno.env.get("DINFER_PYTHON") || "python3";
}

/** Checks what the backend can serve before an interpreter starts; every problem names the field. */
function checkConfig(config: ModelConfig, ctx: InstanceContext): void {
  const name = config.name;
  for (const [kind, list] of [["input", config.input], ["output", config.output]] as const) {
    for (const io of list) {
      if (io.data_type === "TYPE_STRING") {
        throw unsupported(
          `Cannot load '${name}': ${kind} '${io.name}' has data_type TYPE_STRING: the PyTorch backend serves tensors only, not BYTES`,
        );
      }
      if (!TORCH_TYPES.has(io.data_type) || !fromConfigType(io.data_type)) {
        throw unsupported(
          `Cannot load '${name}': ${kind} '${io.name}' has data_type ${io.data_type}, which TorchScript tensors do not hold`,
        );
      }
    }
  }
  const sb = config.sequence_batching as { state?: unknown[] } | undefined;
  if (sb?.state && sb.state.length > 0) {
    throw unsupported(
      `Cannot load '${name}': implicit sequence state is not supported by the PyTorch backend`,
    );
  }
  if ((config.model_transaction_policy as { decoupled?: boolean } | undefined)?.decoupled) {
    throw unsupported(`Cannot load '${name}': the PyTorch backend does not serve decoupled models`);
  }
  if (ctx.kind !== "KIND_CPU" && ctx.kind !== "KIND_GPU" && ctx.kind !== "KIND_MODEL") {
    throw unsupported(
      `Cannot load '${name}': instance group kind ${ctx.kind} is not supported by the PyTorch backend`,
    );
  }
}

/** A PyTorch instance: the stub's instance, driven with whole (concatenated) batches. */
class TorchInstance implements BackendInstance {
  #inner: BackendInstance;

  constructor(inner: BackendInstance) {
    this.#inner = inner;
  }

  execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>> {
    return this.#inner.execute(inputs, outputNames);
  }

  close(): Promise<void> {
    return this.#inner.close();
  }
}

/** A config parameter's string value ("" when unset). */
function param(config: ModelConfig, key: string): string {
  return config.parameters?.[key]?.string_value ?? "";
}

function boolParam(config: ModelConfig, key: string): boolean | undefined {
  const v = param(config, key).trim().toLowerCase();
  if (v === "") return undefined;
  if (["true", "1", "on", "yes"].includes(v)) return true;
  if (["false", "0", "off", "no"].includes(v)) return false;
  throw invalidArg(
    `Cannot load '${config.name}': parameter '${key}' is '${param(config, key)}', expected true or false`,
  );
}

function countParam(config: ModelConfig, key: string): number | undefined {
  const v = param(config, key);
  if (v === "") return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) {
    throw invalidArg(
      `Cannot load '${config.name}': parameter '${key}' is '${v}', expected a positive integer`,
    );
  }
  return n;
}

/** The `<name>__<index>` indices of the names, or undefined when one name does not follow the convention. */
function indexed(names: readonly string[]): number[] | undefined {
  const out: number[] = [];
  for (const n of names) {
    const m = /^.*?__(\d+)$/.exec(n);
    if (!m) return undefined;
    out.push(Number(m[1]));
  }
  return out;
}

/** A PyTorch instance in the server's process: libtorch through libtorchshim. */
class NativeTorchInstance implements BackendInstance {
  #name: string;
  #module: TorchModule;
  #inference: boolean;
  /** Input names in the order forward (or its dictionary) takes them. */
  #order: string[];
  #dict: boolean;
  #outputSlots: Map<string, number>;
  #outputTypes: Map<string, string>;

  constructor(config: ModelConfig, module: TorchModule, inference: boolean) {
    this.#name = config.name;
    this.#module = module;
    this.#inference = inference;
    const fail = (why: string): never => {
      throw invalidArg(`Cannot load '${config.name}': ${why}`);
    };
    const sb = config.sequence_batching as { control_input?: { name: string }[] } | undefined;
    const inputs = [...config.input.map((i) => i.name), ...(sb?.control_input ?? []).map((c) => c.name)];
    const args = module.signature();
    this.#dict = args.length === 1 && args[0]!.kind === "dict";
    if (this.#dict) {
      this.#order = inputs;
    } else {
      for (const a of args) {
        if (a.kind !== "tensor") {
          fail(
            `forward's argument '${a.name}' has type '${a.type}'; only Tensor arguments or a single Dict[str, Tensor] are supported`,
          );
        }
      }
      const names = args.map((a) => a.name);
      if (names.length !== inputs.length) {
        fail(
          `the config names ${inputs.length} input(s), forward takes ${names.length} (${names.join(", ")})`,
        );
      }
      const slots = inputs.every((n) => names.includes(n))
        ? inputs.map((n) => names.indexOf(n))
        : indexed(inputs) ?? inputs.map((_, i) => i);
      const order: string[] = new Array(names.length);
      inputs.forEach((n, i) => {
        const s = slots[i]!;
        if (s >= names.length) fail(`input '${n}' names argument ${s}; forward takes ${names.length}`);
        if (order[s] !== undefined) fail("two inputs name the same forward argument");
        order[s] = n;
      });
      this.#order = order;
    }
    const outputs = config.output.map((o) => o.name);
    const outSlots = indexed(outputs) ?? outputs.map((_, i) => i);
    this.#outputSlots = new Map(outputs.map((n, i) => [n, outSlots[i]!]));
    this.#outputTypes = new Map(config.output.map((o) => [o.name, fromConfigType(o.data_type)!]));
  }

  async execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>> {
    const fail = (why: string) => internal(`Cannot run '${this.#name}': PyTorch execute failure: ${why}`);
    const tensors = this.#order.map((n) => {
      const t = inputs.get(n);
      if (!t) throw fail(`input '${n}' is missing`);
      return t;
    });
    let results;
    try {
      results = await this.#module.forward(tensors, this.#dict ? this.#order : undefined, this.#inference);
    } catch (err) {
      if (err instanceof ServerError) throw err;
      throw fail((err as Error).message);
    }
    const out = new Map<string, Tensor>();
    for (const name of outputNames.length > 0 ? outputNames : [...this.#outputSlots.keys()]) {
      const slot = this.#outputSlots.get(name)!;
      const r = results[slot];
      if (!r) {
        throw fail(
          `output '${name}' refers to output ${slot}, the model returned ${results.length} output(s)`,
        );
      }
      const want = this.#outputTypes.get(name)!;
      if (r.datatype !== want) {
        throw fail(
          `the config gives output '${name}' TYPE_${want}, the model returned ${
            r.datatype ? `TYPE_${r.datatype}` : "a type without a Triton datatype"
          }`,
        );
      }
      out.set(name, { name, datatype: r.datatype, shape: r.shape, data: r.data });
    }
    return out;
  }

  close(): Promise<void> {
    this.#module.close();
    return Promise.resolve();
  }
}

/** Creates an in-process instance through libtorchshim. */
function createNativeInstance(shim: TorchShim, config: ModelConfig, ctx: InstanceContext): BackendInstance {
  const settings = {
    jitExecutor: boolParam(config, "ENABLE_JIT_EXECUTOR"),
    jitProfiling: boolParam(config, "ENABLE_JIT_PROFILING"),
    texprFuser: boolParam(config, "ENABLE_TENSOR_FUSER"),
    interThreads: countParam(config, "INTER_OP_THREAD_COUNT"),
  };
  const own = {
    // Set on every call, as Triton does: another model may have turned it off on the same thread.
    optimized: boolParam(config, "DISABLE_OPTIMIZED_EXECUTION") !== true,
    intraThreads: countParam(config, "INTRA_OP_THREAD_COUNT"),
  };
  const inference = boolParam(config, "INFERENCE_MODE") ?? true;
  boolParam(config, "DISABLE_CUDNN");
  boolParam(config, "ENABLE_CACHE_CLEANING");
  if (ctx.kind === "KIND_GPU") {
    throw unsupported(
      `Cannot load '${config.name}': KIND_GPU instances run in the stub runtime (--backend-config=pytorch,runtime=stub) with a CUDA build of torch`,
    );
  }
  shim.configure(settings);
  let module: TorchModule;
  try {
    module = shim.load(ctx.modelPath, ctx.kind === "KIND_MODEL" ? "" : "cpu", own);
  } catch (err) {
    throw invalidArg(
      `Cannot load '${config.name}': '${ctx.modelPath}' is not a TorchScript model: ${
        (err as Error).message
      }`,
    );
  }
  try {
    return new NativeTorchInstance(config, module, inference);
  } catch (err) {
    module.close();
    throw err;
  }
}

/** Which runtime runs a model's instances: `--backend-config=pytorch,runtime=native|stub`, else native when
 * libtorchshim is built, else stub. */
export function torchRuntime(backendConfig: Record<string, string>): "native" | "stub" {
  const r = backendConfig["runtime"] ?? "";
  if (r === "native" || r === "stub") return r;
  if (r !== "") {
    throw invalidArg(
      `Cannot load PyTorch models: --backend-config=pytorch,runtime='${r}', expected native or stub`,
    );
  }
  try {
    Deno.statSync(torchShimPath(backendConfig));
    return "native";
  } catch {
    return "stub";
  }
}

/** The PyTorch backend: TorchScript models run by libtorch in the server (native) or in stub processes. */
export class TorchBackend implements Backend {
  /** The backend name. */
  readonly name = "pytorch";
  /** The model file. */
  readonly defaultModelFilename = "model.pt";
  #python = new PythonBackend();

  /**
   * Completes nothing, as Triton's PyTorch backend: a TorchScript file does not record its tensors' names,
   * datatypes and shapes, so the config must give them.
   */
  autoComplete(_config: ModelConfig, _ctx: InstanceContext): Promise<void> {
    return Promise.resolve();
  }

  /** Loads the TorchScript model in the server (native runtime) or in a stub with torch. */
  async createInstance(config: ModelConfig, ctx: InstanceContext): Promise<BackendInstance> {
    checkConfig(config, ctx);
    try {
      await Deno.stat(ctx.modelPath);
    } catch {
      throw invalidArg(
        `Cannot load '${config.name}': version ${ctx.version} has no model file '${config.default_model_filename}'`,
      );
    }
    if (torchRuntime(ctx.backendConfig) === "native") {
      return createNativeInstance(TorchShim.open(torchShimPath(ctx.backendConfig)), config, ctx);
    }
    const parameters = { ...config.parameters };
    for (const p of INTERPRETER_PARAMETERS) delete parameters[p];
    const runnerConfig: ModelConfig = { ...config, parameters };
    const python = torchPython(ctx.backendConfig);
    try {
      const inner = await this.#python.createInstance(runnerConfig, {
        ...ctx,
        modelPath: RUNNER_PATH,
        backendConfig: { "python-executable": python },
      });
      return new TorchInstance(inner);
    } catch (err) {
      if (err instanceof ServerError && /ModuleNotFoundError: No module named 'torch'/.test(err.message)) {
        throw unavailable(
          `Cannot load '${config.name}': Python '${python}' has no torch; install it (./dinfer setup-torch) or name an interpreter that has it with --backend-config=pytorch,python-executable=<python>`,
        );
      }
      throw err;
    }
  }
}
