/**
 * A loaded model version: its config, signature, instances and scheduler, and its lifecycle state.
 * @module
 */

import { join } from "node:path";
import { type Datatype, fromConfigType } from "../core/dtypes.ts";
import { invalidArg, unavailable } from "../core/errors.ts";
import type { ArrivalCounter } from "../core/arrivals.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { InferRequest, InferResponse, TensorSpec } from "../core/types.ts";
import { type ModelSignature, type ValidatedRequest, validateRequest } from "../core/validate.ts";
import type { Backend, BackendInstance, InstanceContext } from "../backends/backend.ts";
import { readLabels } from "../repository/config.ts";
import { warmup } from "./warmup.ts";
import { nowNs } from "../core/clock.ts";
import { VersionStats } from "../metrics/stats.ts";
import { inferWithCache, type ResponseCache } from "../cache/response_cache.ts";
import {
  instanceGate,
  type InstanceLimits,
  type LimitedInstance,
  type RateLimiter,
  type ResourceNeed,
} from "../scheduler/rate_limiter.ts";
import {
  type BatchingOptions,
  OPEN_POLICY,
  PoolScheduler,
  type QueuePolicy,
  type Scheduler,
} from "../scheduler/scheduler.ts";
import { SequenceScheduler } from "../scheduler/sequence.ts";
import type { BatchModel } from "../scheduler/batch.ts";
import { checkEnsemble, EnsembleScheduler, type InferFn, type StepModel } from "../scheduler/ensemble.ts";

/** Triton's model version states. */
export type VersionState = "LOADING" | "READY" | "UNLOADING" | "UNAVAILABLE";

/** The tensor metadata of the model metadata endpoint. */
export interface TensorMetadata {
  name: string;
  datatype: Datatype;
  shape: number[];
}

/** What a loaded version's instances were made from: another thread makes its own copy from the same. */
export interface VersionSource {
  /** The backend's name. */
  backend: string;
  /** The instance context, less what is particular to one instance. */
  context: Pick<InstanceContext, "modelDir" | "versionDir" | "version" | "modelPath" | "backendConfig">;
  /**
   * The model file's size and modification time (ms), and the stamp of its whole version folder (see
   * folderStamp: ONNX Runtime reads external data files beside the model), taken before the instances loaded;
   * undefined where the model is not a file.
   */
  file: { size: number; mtime: number; folder: string | undefined } | undefined;
}

/** Keeps copies of model versions on other threads (the HTTP listener threads), which must drop them first. */
export interface ReplicaHost {
  /**
   * Called before a version unloads: resolves once no other thread runs requests on a copy of it any more.
   * @param version the version about to unload
   */
  withdraw(version: ModelVersion): Promise<void>;
  /** Called after the registry's models changed (loads, unloads): the copies follow. */
  changed(): void;
}

/** Counts the ModelVersion objects made, so that each load has its own response cache entries. */
let loads = 0;

/** One version of a model. */
export class ModelVersion {
  /** The model name. */
  readonly name: string;
  /** The version number. */
  readonly version: number;
  /** The normalized config. */
  readonly config: ModelConfig;
  /** The lifecycle state. */
  state: VersionState = "LOADING";
  /** Why the version is not READY ("" when it is). */
  reason = "";
  /** Whether the version was unloaded on purpose (it then does not count against readiness). */
  unloaded = false;
  #signature: ModelSignature | undefined;
  #scheduler: Scheduler | undefined;
  #instances: BackendInstance[] = [];
  /** Inference statistics. */
  readonly stats: VersionStats;
  /** The server's response cache where the config enables it (`response_cache { enable: true }`). */
  responseCache: ResponseCache | undefined;
  /** This load's number, which its response cache keys carry. */
  readonly #generation = ++loads;
  /** The server's rate limiter under `--rate-limit=execution_count`. */
  rateLimiter: RateLimiter | undefined;
  /** The server's count of arriving requests, which the dynamic batcher asks whether requests come together. */
  arrivals: ArrivalCounter | undefined;
  /** What the instances were made from, once the version loaded (not for ensembles). */
  source: VersionSource | undefined;
  /** Told before the version unloads, where other threads may run copies of it. */
  replicaHost: ReplicaHost | undefined;
  #limited: LimitedInstance[] = [];

  /**
   * Creates a version in state LOADING; `load` makes it READY or UNAVAILABLE.
   * @param config the validated config
   * @param version the version number
   */
  constructor(config: ModelConfig, version: number) {
    this.name = config.name;
    this.version = version;
    this.config = config;
    this.stats = new VersionStats(config.name, String(version));
    this.stats.decoupled = this.decoupled;
  }

  /** Whether the model is decoupled (`model_transaction_policy { decoupled: true }`): its requests stream. */
  get decoupled(): boolean {
    return (this.config.model_transaction_policy as { decoupled?: boolean } | undefined)?.decoupled === true;
  }

  /** The signature requests are validated against. */
  get signature(): ModelSignature {
    if (!this.#signature) throw unavailable(`Model '${this.name}' version ${this.version} is not loaded`);
    return this.#signature;
  }

  /**
   * Loads the version: reads labels, creates every instance of every instance group, then the scheduler.
   * Failures leave it UNAVAILABLE with the reason and free what was created.
   * @param backend the backend to create instances with
   * @param modelDir the model folder
   * @param backendConfig server-wide settings for the backend
   * @param signal cancels the load (it then fails with the signal's reason)
   */
  async load(
    backend: Backend,
    modelDir: string,
    backendConfig: Record<string, string>,
    signal?: AbortSignal,
  ): Promise<void> {
    const started = performance.now();
    try {
      signal?.throwIfAborted();
      this.#signature = await buildSignature(this.config, modelDir);
      const versionDir = join(modelDir, String(this.version));
      const modelPath = join(versionDir, this.config.default_model_filename || backend.defaultModelFilename);
      // With cc_model_filenames the backend picks the file by each GPU's compute capability (and says which
      // is missing): the default file need not exist.
      if (Object.keys(this.config.cc_model_filenames ?? {}).length === 0) {
        try {
          await Deno.stat(modelPath);
        } catch {
          throw unavailable(
            `Cannot load '${this.name}' version ${this.version}: '${modelPath}' does not exist`,
          );
        }
      }
      if (this.config.instance_group.every((g) => g.passive === true)) {
        throw invalidArg(
          `Cannot load '${this.name}': every instance group is passive, so no instance would serve`,
        );
      }
      // Stamped before the instances load: a file replaced while they load leaves a stamp that no longer matches
      // it, so that copies on other threads refuse it rather than open other weights than the main thread's.
      const file = await fileStamp(modelPath);
      const stamp = file && { ...file, folder: await folderStamp(versionDir) };
      const limits: InstanceLimits[] = [];
      // As Triton: the instances of a passive group load (and warm up) but take no requests from the scheduler.
      const serving: BackendInstance[] = [];
      for (const group of this.config.instance_group) {
        // As Triton: a KIND_GPU group has `count` instances on each of its GPUs.
        const total = group.kind === "KIND_GPU"
          ? group.count * Math.max(1, group.gpus?.length ?? 0)
          : group.count;
        for (let i = 0; i < total; i++) {
          const instance = await backend.createInstance(this.config, {
            modelDir,
            versionDir,
            version: this.version,
            modelPath,
            instanceName: `${group.name}_${i}`,
            kind: group.kind,
            deviceId: group.gpus?.[i % Math.max(1, group.gpus.length)] ?? 0,
            backendConfig,
            signal,
            arrivals: this.arrivals,
          });
          this.#instances.push(instance);
          if (group.passive !== true) {
            serving.push(instance);
            limits.push(instanceLimits(group, i));
          }
          signal?.throwIfAborted();
        }
      }
      await warmup(this.config, modelDir, this.#instances, signal);
      const batched = this.config.max_batch_size > 0;
      const batchModel: BatchModel = {
        name: this.name,
        version: String(this.version),
        batched,
        outputs: new Map(this.#signature.outputs.map((o) => [o.name, o])),
      };
      if (this.rateLimiter) {
        this.#limited = this.rateLimiter.register(this.name, limits);
        const handles = new Map(serving.map((inst, k) => [inst, this.#limited[k]!]));
        batchModel.gate = instanceGate(this.rateLimiter, handles);
      }
      this.#scheduler = this.config.sequence_batching
        ? await SequenceScheduler.create(batchModel, this.config, serving, modelDir, this.stats)
        : new PoolScheduler(
          batchModel,
          serving,
          { ...batchingOptions(this.config), arrivals: this.arrivals },
          this.stats,
        );
      this.source = {
        backend: backend.name,
        context: { modelDir, versionDir, version: this.version, modelPath, backendConfig },
        file: stamp,
      };
      this.#loaded(started);
    } catch (err) {
      await this.#closeInstances();
      this.#failed(err);
    }
  }

  /**
   * Loads an ensemble version: checks the step graph against the loaded composing models and creates the
   * ensemble scheduler. Failures leave it UNAVAILABLE with the reason.
   * @param modelDir the model folder
   * @param lookup the signature of a composing model, if loaded
   * @param infer runs a request on a composing model
   */
  async loadEnsemble(
    modelDir: string,
    lookup: (name: string, version: number) => StepModel | undefined,
    infer: InferFn,
  ): Promise<void> {
    const started = performance.now();
    try {
      this.#signature = await buildSignature(this.config, modelDir);
      const steps = checkEnsemble(this.config, lookup);
      this.#scheduler = new EnsembleScheduler(
        this.config,
        String(this.version),
        steps,
        infer,
        this.#signature.outputs,
        this.stats,
      );
      this.#loaded(started);
    } catch (err) {
      this.#failed(err);
    }
  }

  /**
   * Marks the version READY.
   * @param started performance.now() when its load began
   */
  #loaded(started: number): void {
    this.stats.loadSeconds = (performance.now() - started) / 1000;
    this.state = "READY";
    this.reason = "";
  }

  /**
   * Marks the version UNAVAILABLE with the reason its load failed.
   * @param err why it failed
   */
  #failed(err: unknown): void {
    this.state = "UNAVAILABLE";
    this.reason = err instanceof Error ? err.message : String(err);
  }

  /**
   * Validates and runs one request (the inference pipeline has resolved this version and applied the
   * decoupled rule: a request to a decoupled model carries its `stream`).
   * @param request the decoded request
   * @param validated the request as validateRequest returned it against this version's signature, when the
   *   caller validated it already (it is not validated twice)
   */
  infer(request: InferRequest, validated?: ValidatedRequest): Promise<InferResponse> {
    if (this.state !== "READY" || !this.#scheduler) {
      return Promise.reject(
        unavailable(`Cannot infer '${this.name}': version ${this.version} is ${this.state}`),
      );
    }
    const received = nowNs();
    try {
      const valid = validated ?? validateRequest(request, this.signature);
      const scheduler = this.#scheduler;
      if (this.responseCache) {
        return inferWithCache(
          this.responseCache,
          { name: this.name, version: String(this.version), stats: this.stats, generation: this.#generation },
          valid,
          {
            received,
            run: (r) => scheduler.enqueue(r, received),
          },
        );
      }
      return scheduler.enqueue(valid, received);
    } catch (err) {
      // As Triton: a request refused at validation never reached the model; its statistics do not count it.
      return Promise.reject(err);
    }
  }

  /** Requests waiting in the queue. */
  pendingCount(): number {
    return this.#scheduler?.queuedCount() ?? 0;
  }

  /** Requests queued or executing. */
  inflightCount(): number {
    return this.#scheduler?.inflightCount() ?? 0;
  }

  /** The inputs and outputs as the metadata endpoint reports them (batch dim -1 first when batching). */
  metadata(): { inputs: TensorMetadata[]; outputs: TensorMetadata[] } {
    const batch = this.config.max_batch_size > 0 ? [-1] : [];
    const sig = this.signature;
    const meta = (s: TensorSpec): TensorMetadata => ({
      name: s.name,
      datatype: s.datatype,
      shape: [...batch, ...s.dims],
    });
    return { inputs: sig.inputs.map(meta), outputs: sig.outputs.map(meta) };
  }

  /**
   * Stops accepting requests, here and on the listener threads that keep a copy (once for all callers); the
   * requests it holds still run (see unload).
   */
  stopTaking(): Promise<void> {
    return this.#stopping ??= (async () => {
      await this.replicaHost?.withdraw(this);
      this.unloaded = true;
      this.state = "UNLOADING";
    })();
  }

  #stopping: Promise<void> | undefined;

  /** Stops accepting requests, waits for queued and executing ones, then frees the instances. */
  async unload(): Promise<void> {
    await this.stopTaking();
    await this.#scheduler?.stop();
    await this.#closeInstances();
    this.state = "UNAVAILABLE";
    this.reason = "unloaded";
  }

  async #closeInstances(): Promise<void> {
    if (this.#limited.length > 0) this.rateLimiter?.unregister(this.#limited);
    this.#limited = [];
    const instances = this.#instances;
    this.#instances = [];
    await Promise.allSettled(instances.map((i) => i.close()));
  }
}

/**
 * A file's size and modification time (ms); undefined for a folder or what cannot be read.
 * @param path the file
 */
/**
 * The path, size and modification time of every file under a folder (links followed), sorted: it changes when any
 * file is replaced, added or removed. Undefined for a folder of more than `maxEntries` entries or deeper than 8.
 * @param dir the folder
 * @param maxEntries the most entries to look at
 */
export async function folderStamp(dir: string, maxEntries = 256): Promise<string | undefined> {
  const rows: string[] = [];
  let entries = 0;
  const walk = async (d: string, depth: number): Promise<void> => {
    if (depth > 8) throw new Error("too deep");
    for await (const e of Deno.readDir(d)) {
      if (++entries > maxEntries) throw new Error("too many entries");
      const path = join(d, e.name);
      const st = await Deno.stat(path);
      if (st.isDirectory) await walk(path, depth + 1);
      else rows.push(`${path}\t${st.size}\t${st.mtime?.getTime() ?? -1}`);
    }
  };
  try {
    await walk(dir, 0);
  } catch {
    return undefined;
  }
  return rows.sort().join("\n");
}

export async function fileStamp(path: string): Promise<{ size: number; mtime: number } | undefined> {
  try {
    const st = await Deno.stat(path);
    return st.isFile ? { size: st.size, mtime: st.mtime?.getTime() ?? -1 } : undefined;
  } catch {
    return undefined;
  }
}

async function buildSignature(config: ModelConfig, modelDir: string): Promise<ModelSignature> {
  const spec = async (
    io: {
      name: string;
      data_type: string;
      dims: number[];
      reshape?: { shape: number[] };
      optional?: boolean;
      label_filename?: string;
    },
  ): Promise<TensorSpec> => ({
    name: io.name,
    datatype: fromConfigType(io.data_type)!,
    dims: io.dims,
    modelDims: io.reshape?.shape ?? io.dims,
    optional: io.optional ?? false,
    labels: io.label_filename ? await readLabels(modelDir, io.label_filename) : undefined,
  });
  return {
    name: config.name,
    maxBatchSize: config.max_batch_size,
    inputs: await Promise.all(config.input.map(spec)),
    outputs: await Promise.all(config.output.map(spec)),
  };
}

/** What the `i`-th instance of a group asks of the rate limiter (`rate_limiter { resources priority }`). */
function instanceLimits(group: ModelConfig["instance_group"][number], i: number): InstanceLimits {
  const rl = group.rate_limiter as { resources?: Partial<ResourceNeed>[]; priority?: number } | undefined;
  return {
    resources: (rl?.resources ?? []).map((r) => ({
      name: r.name ?? "",
      global: r.global ?? false,
      count: r.count ?? 0,
    })),
    priority: rl?.priority ?? 0,
    device: group.kind === "KIND_GPU" ? group.gpus?.[i % Math.max(1, group.gpus.length)] ?? 0 : 0,
  };
}

interface QueuePolicyConfig {
  timeout_action?: string;
  default_timeout_microseconds?: number;
  allow_timeout_override?: boolean;
  max_queue_size?: number;
}

function queuePolicy(p: QueuePolicyConfig | undefined): QueuePolicy {
  if (!p) return OPEN_POLICY;
  return {
    timeoutAction: p.timeout_action === "DELAY" ? "DELAY" : "REJECT",
    defaultTimeoutMicroseconds: p.default_timeout_microseconds ?? 0,
    allowTimeoutOverride: p.allow_timeout_override ?? false,
    maxQueueSize: p.max_queue_size ?? 0,
  };
}

/**
 * The scheduler options of a config: the dynamic batcher's settings where `dynamic_batching` is set and the
 * model batches; one request per execution otherwise (queue policy and ordering still apply).
 * @param config the model config
 */
export function batchingOptions(config: ModelConfig): Partial<BatchingOptions> {
  const db = config.dynamic_batching as
    | {
      preferred_batch_size?: number[];
      max_queue_delay_microseconds?: number;
      preserve_ordering?: boolean;
      priority_levels?: number;
      default_priority_level?: number;
      default_queue_policy?: QueuePolicyConfig;
      priority_queue_policy?: Record<string, QueuePolicyConfig>;
    }
    | undefined;
  if (!db) return {};
  return {
    maxBatchSize: config.max_batch_size > 0 ? config.max_batch_size : 0,
    preferredBatchSizes: db.preferred_batch_size ?? [],
    maxQueueDelayMicroseconds: db.max_queue_delay_microseconds ?? 0,
    preserveOrdering: db.preserve_ordering ?? false,
    priorityLevels: db.priority_levels ?? 0,
    defaultPriorityLevel: db.default_priority_level ?? 0,
    defaultQueuePolicy: queuePolicy(db.default_queue_policy),
    priorityQueuePolicy: new Map(
      Object.entries(db.priority_queue_policy ?? {}).map(([k, v]) => [Number(k), queuePolicy(v)]),
    ),
  };
}
