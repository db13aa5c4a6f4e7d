/**
 * The PyTorch backend (`platform: "pytorch_libtorch"` / `backend: "pytorch"`, `<version>/model.pt`): serves
 * TorchScript models as Triton's PyTorch backend does. Each instance is a Python backend stub
 * (server/backends/python.ts) running server/backends/pytorch/model.py, which loads the model with
 * `torch.jit.load` and maps the config's tensors onto `forward` (forward's argument names, `<name>__<index>`,
 * or config order; a single `Dict[str, Tensor]` argument). Batches are concatenated by the scheduler and run
 * as one forward call.
 *
 * The interpreter needs `torch`: `--backend-config=pytorch,python-executable=<python>`, else the
 * `DINFER_TORCH_PYTHON` environment variable (the launcher sets it to its torch environment), else the Python
 * backend's interpreter (`DINFER_PYTHON`, else `python3`). The config's own `python_executable` and
 * `EXECUTION_ENV_PATH` parameters are not used for PyTorch models.
 * @module
 */

import { fileURLToPath } from "node:url";
import { fromConfigType } from "../core/dtypes.ts";
import { invalidArg, ServerError, unavailable, unsupported } from "../core/errors.ts";
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

/** The PyTorch backend: TorchScript models run by torch in stub processes. */
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

  /** Starts a stub with torch for the instance and loads the TorchScript model in it. */
  async createInstance(config: ModelConfig, ctx: InstanceContext): Promise<BackendInstance> {
    checkConfig(config, ctx);
    try {
      await Deno.stat(ctx.modelPath);
    } catch {
      throw invalidArg(
        `Cannot load '${config.name}': version ${ctx.version} has no model file '${config.default_model_filename}'`,
      );
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
