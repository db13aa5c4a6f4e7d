/**
 * The TensorRT backend (`platform: "tensorrt_plan"`, `backend: "tensorrt"`) over libtrtshim (ffi/trtshim.ts):
 * one engine and stream per model instance, with one execution context per optimisation profile the instance
 * group names (`profile: ["0", "1"]`; profile 0 when none). Instances run on GPUs only (KIND_GPU). The library
 * is opened only when a plan model loads; where it is missing, such a model is UNAVAILABLE with the reason.
 * @module
 */

import { join } from "node:path";
import { type Datatype, elementCount, elementSize, toConfigType } from "../core/dtypes.ts";
import { invalidArg, ServerError, unavailable, unsupported } from "../core/errors.ts";
import {
  completeBatching,
  type InstanceGroupConfig,
  type ModelConfig,
  type ModelInputConfig,
  type ModelOutputConfig,
} from "../core/model_config.ts";
import type { Tensor } from "../core/types.ts";
import {
  type DeviceBuffer,
  type Engine,
  type EngineTensor,
  type ExecutionContext,
  type HostBuffer,
  openTrtShim,
  type ProfileShapes,
  type Stream,
  type TrtShim,
  trtShimPath,
} from "../../ffi/trtshim.ts";
import type { Backend, BackendInstance, InstanceContext } from "./backend.ts";

function fail(config: ModelConfig, err: unknown): ServerError {
  const msg = err instanceof Error ? err.message : String(err);
  const code = err instanceof ServerError ? err.code : "INTERNAL";
  return new ServerError(code, `Cannot load '${config.name}': ${msg}`);
}

/**
 * Refuses instance groups of another kind than KIND_GPU: TensorRT plans run on GPUs only (a config without
 * instance_group gets one KIND_GPU group, see applyDefaults).
 * @param config the model config
 */
function checkGroupKinds(config: ModelConfig): void {
  for (const g of config.instance_group) {
    if (g.kind !== "KIND_GPU") {
      throw invalidArg(
        `Cannot load '${config.name}': instance group '${g.name}' has kind ${g.kind}: TensorRT plans run only on GPUs (use KIND_GPU, or leave instance_group out)`,
      );
    }
  }
}

/** The instance group an instance belongs to (instances are named `<group>_<index>`). */
function groupOf(config: ModelConfig, ctx: InstanceContext): InstanceGroupConfig | undefined {
  return config.instance_group.find((g) =>
    ctx.instanceName.startsWith(`${g.name}_`) && /^[0-9]+$/.test(ctx.instanceName.slice(g.name.length + 1))
  );
}

/**
 * The optimisation profiles an instance uses: its group's `profile` list as indices, `[0]` when empty.
 * @param group the instance group
 * @param count the engine's number of profiles
 */
function groupProfiles(group: InstanceGroupConfig | undefined, count: number): number[] {
  const given = Array.isArray(group?.profile) ? (group.profile as unknown[]).map(String) : [];
  if (given.length === 0) return [0];
  const profiles: number[] = [];
  const have = count === 1 ? "only profile 0" : `profiles 0 to ${count - 1}`;
  for (const p of given) {
    const index = /^[0-9]+$/.test(p) ? Number(p) : NaN;
    if (!(index < count)) {
      throw invalidArg(
        `instance group '${group!.name}' names optimisation profile '${p}': the plan has ${have}`,
      );
    }
    if (!profiles.includes(index)) profiles.push(index);
  }
  return profiles;
}

/**
 * Opens the shim and checks that it can run plans on `device`: a library, a device, and TensorRT (or the mock).
 * @param config the model config (for messages)
 * @param ctx the instance context (backend settings and device)
 */
function shimFor(config: ModelConfig, ctx: InstanceContext): TrtShim {
  let shim: TrtShim;
  try {
    shim = openTrtShim(trtShimPath(ctx.backendConfig));
  } catch (err) {
    throw fail(config, err);
  }
  const kind = shim.buildKind();
  if (kind === "cuda") {
    throw unavailable(
      `Cannot load '${config.name}': '${shim.path}' was built without TensorRT (rebuild with -DTRTSHIM_WITH_TENSORRT=ON where TensorRT is installed)`,
    );
  }
  const count = shim.deviceCount();
  if (count === 0) {
    throw unavailable(`Cannot load '${config.name}': no GPU found ('${shim.path}' is a ${kind} build)`);
  }
  if (ctx.deviceId < 0 || ctx.deviceId >= count) {
    throw unavailable(
      `Cannot load '${config.name}': GPU ${ctx.deviceId} does not exist (${count} device${
        count === 1 ? "" : "s"
      })`,
    );
  }
  return shim;
}

/**
 * The plan file for a device: `cc_model_filenames[<major.minor>]` when the config names one for the device's
 * compute capability, else the default model file (`default_model_filename`, `model.plan` by default), which
 * need not exist when every device has its own.
 * @param config the model config
 * @param ctx the instance context
 * @param computeCapability the device's compute capability, e.g. `8.6`
 */
export function planPath(config: ModelConfig, ctx: InstanceContext, computeCapability: string): string {
  const file = config.cc_model_filenames?.[computeCapability];
  return file ? join(ctx.versionDir, file) : ctx.modelPath;
}

async function loadEngine(shim: TrtShim, config: ModelConfig, ctx: InstanceContext): Promise<Engine> {
  const cc = shim.deviceProperties(ctx.deviceId).computeCapability;
  const path = planPath(config, ctx, cc);
  let bytes: Uint8Array;
  try {
    bytes = await Deno.readFile(path);
  } catch (err) {
    const ccFiles = Object.keys(config.cc_model_filenames ?? {});
    if (err instanceof Deno.errors.NotFound && path === ctx.modelPath && ccFiles.length > 0) {
      throw unavailable(
        `Cannot load '${config.name}': GPU ${ctx.deviceId} has compute capability ${cc}, which cc_model_filenames does not name (it names ${
          ccFiles.sort().join(", ")
        }), and the default plan '${path}' does not exist`,
      );
    }
    if (err instanceof Deno.errors.NotFound) {
      throw unavailable(`Cannot load '${config.name}': '${path}' does not exist`);
    }
    throw unavailable(`Cannot load '${config.name}': cannot read '${path}': ${(err as Error).message}`);
  }
  try {
    return await shim.deserialize(ctx.deviceId, bytes);
  } catch (err) {
    throw fail(config, err);
  }
}

function datatypeOf(config: ModelConfig, t: EngineTensor): Datatype {
  if (!t.datatype) {
    throw unsupported(`Cannot load '${config.name}': tensor '${t.name}' has a datatype the protocol lacks`);
  }
  return t.datatype;
}

/**
 * Completes a config from the shim and the engine: KIND_GPU groups without `gpus` get every visible GPU (as
 * Triton, `count` instances on each); inputs and outputs with datatypes and dims; when the config declares
 * none, max_batch_size 0 and every tensor's first dim dynamic, batching with max_batch_size the smallest
 * profile-0 max of the inputs' first dims, and dynamic batching.
 */
async function autoComplete(config: ModelConfig, ctx: InstanceContext): Promise<void> {
  checkGroupKinds(config);
  const shim = shimFor(config, ctx);
  const visible = Array.from({ length: shim.deviceCount() }, (_, i) => i);
  for (const g of config.instance_group) {
    if (!g.gpus || g.gpus.length === 0) g.gpus = [...visible];
  }
  using engine = await loadEngine(shim, config, ctx);
  const io = engine.io().filter((t) => t.mode !== "none");
  const hasIo = config.input.length > 0 || config.output.length > 0;
  if (config.max_batch_size === 0 && !hasIo && io.length > 0 && io.every((t) => t.dims[0] === -1)) {
    const maxima = io.filter((t) => t.mode === "input").map((t) =>
      engine.profileShapes(0, t.name).max[0] ?? 0
    );
    const max = maxima.length > 0 ? Math.min(...maxima) : 0;
    if (max > 0) completeBatching(config, max);
  }
  const strip = config.max_batch_size > 0 ? 1 : 0;
  const complete = <T extends ModelInputConfig | ModelOutputConfig>(list: T[], mode: "input" | "output") => {
    for (const t of io.filter((x) => x.mode === mode)) {
      const dt = toConfigType(datatypeOf(config, t));
      const dims = t.dims.slice(strip);
      const existing = list.find((e) => e.name === t.name);
      if (!existing) {
        list.push({ name: t.name, data_type: dt, dims } as T);
        continue;
      }
      if (!existing.data_type || existing.data_type === "TYPE_INVALID") existing.data_type = dt;
      if (existing.dims.length === 0 && !existing.reshape && dims.length > 0) existing.dims = dims;
    }
  };
  complete(config.input, "input");
  complete(config.output, "output");
}

/** A device buffer and its pinned host twin, grown as tensors need. */
class Staging {
  device: DeviceBuffer | undefined;
  host: HostBuffer | undefined;

  ensure(shim: TrtShim, deviceId: number, size: number): void {
    if (this.device && this.device.size >= size) return;
    this.close();
    const capacity = Math.max(256, 2 ** Math.ceil(Math.log2(Math.max(1, size))));
    this.device = shim.mallocDevice(deviceId, capacity);
    this.host = shim.mallocHost(capacity);
  }

  close(): void {
    this.device?.close();
    this.host?.close();
    this.device = undefined;
    this.host = undefined;
  }
}

/** An execution context of one optimisation profile, with the profile's shapes of every input. */
interface ProfileContext {
  index: number;
  context: ExecutionContext;
  shapes: Map<string, ProfileShapes>;
}

class TensorRtInstance implements BackendInstance {
  #shim: TrtShim;
  #config: ModelConfig;
  #deviceId: number;
  #engine: Engine;
  #stream: Stream;
  #profiles: ProfileContext[] = [];
  #io: EngineTensor[];
  #staging = new Map<string, Staging>();
  #running: Promise<unknown> = Promise.resolve();

  constructor(shim: TrtShim, config: ModelConfig, deviceId: number, engine: Engine, profiles: number[]) {
    this.#shim = shim;
    this.#config = config;
    this.#deviceId = deviceId;
    this.#engine = engine;
    this.#io = engine.io().filter((t) => t.mode !== "none");
    this.#stream = shim.createStream(deviceId);
    const inputs = this.#io.filter((t) => t.mode === "input");
    try {
      for (const index of profiles) {
        const shapes = new Map(inputs.map((t) => [t.name, engine.profileShapes(index, t.name)] as const));
        this.#profiles.push({ index, context: engine.createContext(index, this.#stream), shapes });
      }
    } catch (err) {
      for (const p of this.#profiles) p.context.close();
      this.#stream.close();
      throw err;
    }
    for (const t of this.#io) this.#staging.set(t.name, new Staging());
  }

  /**
   * The context for a batch: with one profile, that one (the shim reports shapes outside it); with several,
   * the one whose opt shapes are nearest among those whose ranges hold every input shape, as Triton does.
   */
  #select(inputs: Map<string, Tensor>): ExecutionContext {
    if (this.#profiles.length === 1) return this.#profiles[0]!.context;
    let best: ProfileContext | undefined;
    let bestDistance = Infinity;
    for (const p of this.#profiles) {
      let distance = 0;
      const fits = [...p.shapes].every(([name, { min, opt, max }]) => {
        const shape = inputs.get(name)?.shape;
        if (!shape) return true; // reported as missing by the caller
        if (shape.length !== min.length) return false;
        return shape.every((d, i) => {
          distance += Math.abs(d - opt[i]!);
          return d >= min[i]! && d <= max[i]!;
        });
      });
      if (fits && distance < bestDistance) {
        best = p;
        bestDistance = distance;
      }
    }
    if (best) return best.context;
    const reasons = this.#profiles.map((p) => {
      try {
        for (const [name] of p.shapes) {
          const tensor = inputs.get(name);
          if (tensor) p.context.setInputShape(name, tensor.shape);
        }
        return `profile ${p.index} fits`;
      } catch (err) {
        return (err as Error).message;
      }
    });
    throw invalidArg(
      `Cannot run '${this.#config.name}': the input shapes fit none of the instance's optimisation profiles ${
        this.#profiles.map((p) => p.index).join(", ")
      }: ${reasons.join("; ")}`,
    );
  }

  execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>> {
    // One execution at a time on the instance's context and buffers.
    const run = this.#running.then(() => this.#execute(inputs, outputNames));
    this.#running = run.catch(() => {});
    return run;
  }

  async #execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>> {
    const name = this.#config.name;
    const context = this.#select(inputs);
    for (const t of this.#io) {
      if (t.mode !== "input") continue;
      const tensor = inputs.get(t.name);
      if (!tensor) throw invalidArg(`Cannot run '${name}': input '${t.name}' is missing`);
      if (tensor.datatype !== t.datatype) {
        throw invalidArg(
          `Cannot run '${name}': input '${t.name}' is ${tensor.datatype}, the engine expects ${t.datatype}`,
        );
      }
      try {
        context.setInputShape(t.name, tensor.shape);
      } catch (err) {
        throw new ServerError(
          err instanceof ServerError ? err.code : "INTERNAL",
          `Cannot run '${name}': ${(err as Error).message}`,
        );
      }
      const data = tensor.data as Uint8Array;
      const stage = this.#staging.get(t.name)!;
      stage.ensure(this.#shim, this.#deviceId, data.byteLength);
      stage.host!.bytes.set(data);
      this.#stream.copyToDevice(stage.device!, stage.host!, data.byteLength);
      context.setTensorAddress(t.name, stage.device!);
    }
    const outputs: { t: EngineTensor; shape: number[]; size: number }[] = [];
    for (const t of this.#io) {
      if (t.mode !== "output") continue;
      const shape = context.tensorShape(t.name);
      if (shape.some((d) => d < 0)) {
        throw unsupported(
          `Cannot run '${name}': output '${t.name}' has a data-dependent shape [${shape.join(",")}]`,
        );
      }
      const size = elementCount(shape) * elementSize(t.datatype!);
      const stage = this.#staging.get(t.name)!;
      stage.ensure(this.#shim, this.#deviceId, size);
      context.setTensorAddress(t.name, stage.device!);
      outputs.push({ t, shape, size });
    }
    await context.enqueue();
    const wanted = new Set(outputNames);
    for (const o of outputs) {
      if (!wanted.has(o.t.name)) continue;
      const stage = this.#staging.get(o.t.name)!;
      this.#stream.copyToHost(stage.host!, stage.device!, o.size);
    }
    try {
      await this.#stream.synchronize();
    } catch (err) {
      throw new ServerError("INTERNAL", `Cannot run '${name}' in TensorRT: ${(err as Error).message}`);
    }
    const result = new Map<string, Tensor>();
    for (const o of outputs) {
      if (!wanted.has(o.t.name)) continue;
      const data = this.#staging.get(o.t.name)!.host!.bytes.slice(0, o.size);
      result.set(o.t.name, { name: o.t.name, datatype: o.t.datatype!, shape: o.shape, data });
    }
    return result;
  }

  async close(): Promise<void> {
    await this.#running;
    for (const p of this.#profiles) p.context.close();
    for (const s of this.#staging.values()) s.close();
    this.#stream.close();
    this.#engine.close();
  }
}

/** The TensorRT backend. */
export const tensorRtBackend: Backend = {
  name: "tensorrt",
  defaultModelFilename: "model.plan",
  autoComplete,
  async createInstance(config: ModelConfig, ctx: InstanceContext): Promise<BackendInstance> {
    // KIND_GPU instances only, on the device of instance_group.gpus; the mock build provides CPU "devices".
    checkGroupKinds(config);
    const shim = shimFor(config, ctx);
    const engine = await loadEngine(shim, config, ctx);
    try {
      const profiles = groupProfiles(groupOf(config, ctx), engine.profileCount());
      return new TensorRtInstance(shim, config, ctx.deviceId, engine, profiles);
    } catch (err) {
      engine.close();
      throw fail(config, err);
    }
  },
};
