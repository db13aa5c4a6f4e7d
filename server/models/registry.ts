/**
 * The model registry: which models exist, their versions and states; resolves a request's model and version.
 * @module
 */

import { join } from "node:path";
import { invalidArg, notFound, ServerError, unavailable, unsupported } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import { ArrivalCounter } from "../core/arrivals.ts";
import type { Backend, InstanceContext, ModelMetrics, ServerAccess } from "../backends/backend.ts";
import { onnxRuntimeBackend } from "../backends/onnxruntime.ts";
import { tensorRtBackend } from "../backends/tensorrt.ts";
import { PythonBackend } from "../backends/python.ts";
import { TorchBackend } from "../backends/pytorch.ts";
import {
  applyDefaults,
  checkFileNames,
  readConfigFile,
  resolveBackend,
  toModelConfig,
  validateConfig,
} from "../repository/config.ts";
import {
  listVersions,
  type ModelLocation,
  scanRepositories,
  selectVersions,
  versionFileNames,
} from "../repository/repository.ts";
import { type ModelStatistics, modelStatistics } from "../metrics/stats.ts";
import { ensembleSteps, type StepModel } from "../scheduler/ensemble.ts";
import type { Logger } from "../logging.ts";
import { ModelVersion, type ReplicaHost, type TensorMetadata, type VersionState } from "./model_version.ts";
import type { ResponseCache } from "../cache/response_cache.ts";
import type { RateLimiter } from "../scheduler/rate_limiter.ts";

/** The server's response cache where the config enables it, else undefined. */
function cacheFor(config: ModelConfig, cache: ResponseCache | undefined): ResponseCache | undefined {
  return (config.response_cache as { enable?: boolean } | undefined)?.enable === true ? cache : undefined;
}

/** Model metadata as the protocol reports it. */
export interface ModelMetadata {
  name: string;
  versions: string[];
  platform: string;
  inputs: TensorMetadata[];
  outputs: TensorMetadata[];
}

/** How the registry finds and loads models. */
export interface RegistryOptions {
  /** Repository paths. */
  repositories: string[];
  /** Whether configs are completed from the models (`--disable-auto-complete-config` turns it off). */
  autoComplete: boolean;
  /** `--backend-config` settings by backend name. */
  backendConfig: Record<string, Record<string, string>>;
  /** Backends by name; defaults to the built-in ones. */
  backends?: Map<string, Backend>;
  /** The model control mode; the repository extension's load and unload need `explicit`. */
  controlMode?: "none" | "poll" | "explicit";
  /** The server log, where models' own log lines (pb_utils.Logger) go. */
  logger?: Logger;
  /** Where models' own metrics (pb_utils.MetricFamily) go. */
  metrics?: ModelMetrics;
  /** The response cache (`--cache-config`), used by models whose config enables it. */
  responseCache?: ResponseCache;
  /** The rate limiter (`--rate-limit=execution_count`); without it `rate_limiter` settings are ignored. */
  rateLimiter?: RateLimiter;
  /** Runs before the repositories are scanned for a load (brings cloud repositories' mirrors up to date). */
  beforeScan?: () => Promise<void>;
  /** The count of arriving requests the dynamic batchers read; a new one by default. */
  arrivals?: ArrivalCounter;
}

/** How models run requests of their own (ensemble steps, BLS): the inference pipeline, once connected. */
export type ModelRequests = Pick<ServerAccess, "infer" | "inferStream">;

/** Until a pipeline is connected, models cannot run requests of their own. */
const UNCONNECTED: ModelRequests = {
  infer: (r) =>
    Promise.reject(unavailable(`Cannot infer '${r.model}': no inference pipeline serves the models`)),
  inferStream: (r) =>
    Promise.reject(unavailable(`Cannot infer '${r.model}': no inference pipeline serves the models`)),
};

/** A model known to the registry. */
export interface ModelEntry {
  /** The model name. */
  name: string;
  /** Where it lives. */
  location: ModelLocation;
  /** Its config once read; undefined when the config could not be read. */
  config: ModelConfig | undefined;
  /** Its versions by number. */
  versions: Map<number, ModelVersion>;
  /** Why the model as a whole could not load ("" when it could). */
  reason: string;
  /** The model folder's files (paths, sizes, modification times) when it was loaded. */
  stamp?: string;
  /** Cancels the entry's load while it runs (see {@linkcode InstanceContext.signal}). */
  loading?: AbortController;
}

/** Options of a repository-extension load. */
export interface LoadOptions {
  /** A JSON ModelConfig that replaces the model's config.pbtxt. */
  config?: string;
  /** Model files by path inside the model folder (`<version>/<file>`). */
  files?: Map<string, Uint8Array>;
}

/**
 * Writes uploaded model files into a fresh folder `<tmp>/<name>/` and returns its location.
 * @param name the model name
 * @param files contents by relative path
 */
async function writeModelFiles(name: string, files: Map<string, Uint8Array>): Promise<ModelLocation> {
  // The name becomes a folder name: one path segment, so that nothing is written outside the folder.
  if (name === "" || name === "." || name === ".." || /[/\\\0]/.test(name)) {
    throw invalidArg(`Cannot load '${name}': a model name must be a folder name, without '/' or '..'`);
  }
  for (const path of files.keys()) {
    // Control characters (NUL above all) make no portable file name; the name is shown escaped.
    if ([...path].some((c) => c < " " || c === "\x7f")) {
      throw invalidArg(
        `Cannot load '${name}': file path ${JSON.stringify(path)} must not contain control characters`,
      );
    }
    const parts = path.split("/");
    if (path.startsWith("/") || parts.some((p) => p === ".." || p === "" || p === ".")) {
      throw invalidArg(`Cannot load '${name}': file path '${path}' must be relative, without '..'`);
    }
  }
  // Named with the process id: a later server removes what a crashed one left (server/cleanup.ts).
  const repository = await Deno.makeTempDir({ prefix: `dinfer-upload-${Deno.pid}-` });
  const dir = join(repository, name);
  for (const [path, bytes] of files) {
    try {
      const parts = path.split("/");
      await Deno.mkdir(join(dir, ...parts.slice(0, -1)), { recursive: true });
      await Deno.writeFile(join(dir, ...parts), bytes);
    } catch (err) {
      await Deno.remove(repository, { recursive: true }).catch(() => {});
      // The message names the file as the client did, not the server's temporary folder.
      throw invalidArg(`Cannot load '${name}': cannot write file '${path}': ${(err as Error).name}`);
    }
  }
  return { name, repository, dir };
}

/** The files of a model folder with their sizes and modification times: what tells that the folder changed. */
async function folderStamp(dir: string): Promise<string> {
  const rows: string[] = [];
  const walk = async (path: string): Promise<void> => {
    for await (const e of Deno.readDir(path)) {
      const child = join(path, e.name);
      if (e.isDirectory) await walk(child);
      else {
        const info = await Deno.stat(child).catch(() => undefined);
        rows.push(`${child}\t${info?.size}\t${info?.mtime?.getTime()}`);
      }
    }
  };
  await walk(dir).catch(() => {});
  return rows.sort().join("\n");
}

/**
 * Config parameters that name a program, an environment or a file the server opens by path: they may come from
 * the model repository on disk or the command line, never from a load request (which any client of the
 * repository API can send).
 */
const HOST_PARAMETERS = /^(python_executable|execution_env_path)$|^session\..*(file|path|dir)/i;

/**
 * Refuses a config override (the `config` parameter of a load request) that sets a parameter naming a program,
 * an environment or a file path.
 * @throws ServerError INVALID_ARG naming the parameter
 */
function refuseProgramParameters(name: string, override: Record<string, unknown>): void {
  refuseLargeCounts(name, override);
  const params = override.parameters;
  if (params === undefined || params === null || typeof params !== "object") return;
  for (const key of Object.keys(params)) {
    if (HOST_PARAMETERS.test(key)) {
      throw invalidArg(
        `Cannot load '${name}': parameter '${key}' of the 'config' override names a program or an environment; it may be set only in the model repository or on the command line`,
      );
    }
  }
}

/** The most instances a load request's config override may ask for, all groups together. */
export const MAX_OVERRIDE_INSTANCES = 64;
/** The most runs of one warmup sample a load request's config override may ask for. */
export const MAX_OVERRIDE_WARMUP_COUNT = 1000;

/**
 * Refuses a config override that asks for more instances or warmup runs than a load request may: each instance
 * can be a process (a Python stub) or a session of the model, and a warm-up holds the model's load (and an
 * unload waits for it). The model repository on disk may set any count.
 */
function refuseLargeCounts(name: string, override: Record<string, unknown>): void {
  const groups = Array.isArray(override.instance_group) ? override.instance_group : [];
  let instances = 0;
  for (const g of groups) {
    const count = Number((g as { count?: unknown } | null)?.count ?? 1);
    const gpus = (g as { gpus?: unknown } | null)?.gpus;
    instances += count * Math.max(1, Array.isArray(gpus) ? gpus.length : 1);
  }
  if (instances > MAX_OVERRIDE_INSTANCES) {
    throw invalidArg(
      `Cannot load '${name}': the 'config' override asks for ${instances} instances, more than the ${MAX_OVERRIDE_INSTANCES} a load request may; a larger count may be set in the model repository`,
    );
  }
  const warmup = Array.isArray(override.model_warmup) ? override.model_warmup : [];
  for (const sample of warmup) {
    const count = Number((sample as { count?: unknown } | null)?.count ?? 1);
    if (count > MAX_OVERRIDE_WARMUP_COUNT) {
      throw invalidArg(
        `Cannot load '${name}': the 'config' override asks for ${count} runs of a warmup sample, more than the ${MAX_OVERRIDE_WARMUP_COUNT} a load request may`,
      );
    }
  }
}

/** Whether a model folder's config says `platform: "ensemble"` (a cheap look before loading). */
async function isEnsemble(dir: string): Promise<boolean> {
  const text = await Deno.readTextFile(join(dir, "config.pbtxt")).catch(() => "");
  return /^\s*platform\s*:\s*["']ensemble["']/m.test(text);
}

/** Why a model or its versions are not READY: each distinct reason once (versions often share one). */
function reasonsOf(entry: ModelEntry): string[] {
  return [...new Set([entry.reason, ...[...entry.versions.values()].map((v) => v.reason)].filter((r) => r))];
}

/** The largest model version a request may name (a signed 64-bit integer, as Triton reads versions). */
const MAX_VERSION = 2n ** 63n - 1n;

/**
 * Reads the version a request names as Triton does: "" is the policy's choice (-1); otherwise leading
 * whitespace, an optional sign and the leading digits count (`"1a"` is 1), and a version that is not such a
 * number, does not fit in 64 bits, or is negative is refused.
 * @param name the model name (for the message)
 * @param version the version string
 * @returns the version number, -1 for ""
 * @throws ServerError INVALID_ARG with Triton's wording, which clients match on
 */
export function parseVersion(name: string, version: string): number {
  if (version === "") return -1;
  const m = /^\s*([+-]?[0-9]+)/.exec(version);
  if (!m || BigInt(m[1]!) > MAX_VERSION || BigInt(m[1]!) < -MAX_VERSION - 1n) {
    throw invalidArg(
      `Cannot resolve a version of '${name}': failed to get model version from specified version string '${version}', version should be an integral value > 0`,
    );
  }
  const n = BigInt(m[1]!);
  if (n < 0n) {
    throw invalidArg(
      `Cannot resolve a version of '${name}': invalid model version specified '${version}', version should be an integral value > 0`,
    );
  }
  return Number(n);
}

/** A row of the repository index. */
export interface IndexEntry {
  name: string;
  version: string;
  state: VersionState | "";
  reason: string;
}

/** The built-in backends. */
export function defaultBackends(): Map<string, Backend> {
  return new Map<string, Backend>([
    [onnxRuntimeBackend.name, onnxRuntimeBackend],
    [tensorRtBackend.name, tensorRtBackend],
    ["python", new PythonBackend()],
    ["pytorch", new TorchBackend()],
  ]);
}

/** The registry of models. */
export class ModelRegistry {
  #options: RegistryOptions;
  #backends: Map<string, Backend>;
  #models = new Map<string, ModelEntry>();
  #locks = new Map<string, Promise<void>>();
  /** The entries whose load runs now. */
  #building = new Set<ModelEntry>();
  /** Ensembles whose composing models are being loaded (guards against cycles). */
  #composing = new Set<string>();
  /** The temporary repositories of uploaded models, removed when no version needs them any more. */
  #uploads = new Set<string>();
  /** Models loaded only because an ensemble needed them (`unload_dependents` unloads only these). */
  #implicit = new Set<string>();
  /** Where models' own requests go (see connect). */
  #requests: ModelRequests = UNCONNECTED;
  /** Keeps copies of versions on the HTTP listener threads, when there are such threads. */
  #replicaHost: ReplicaHost | undefined;
  /** The count of arriving requests the dynamic batchers of this registry's models read. */
  readonly arrivals: ArrivalCounter;

  /**
   * Creates an empty registry.
   * @param options repositories, auto-complete and backend settings
   */
  constructor(options: RegistryOptions) {
    this.#options = options;
    this.#backends = options.backends ?? defaultBackends();
    this.arrivals = options.arrivals ?? new ArrivalCounter();
    // Models may run requests of their own (the Python backend's BLS) and write to the server log.
    const server: ServerAccess = {
      infer: (r) => this.#requests.infer(r),
      inferStream: (r, sink) => this.#requests.inferStream(r, sink),
      logger: options.logger,
      ...(options.metrics ? { metrics: options.metrics } : {}),
      models: {
        ready: (name, version) => this.isReady(name, version),
        load: (name, config, files) =>
          this.loadModel(name, config === undefined ? { files } : { config, files }),
        unload: (name, unloadDependents) => this.unloadModel(name, { unloadDependents }),
      },
    };
    for (const b of this.#backends.values()) b.bind?.(server);
  }

  /**
   * Connects the models to the inference pipeline that runs their own requests: ensemble steps and BLS
   * calls (the pipeline does it when it is created).
   * @param requests runs a model's request
   */
  connect(requests: ModelRequests): void {
    this.#requests = requests;
  }

  /**
   * Loads the named models, or every model of the repositories when `names` is undefined.
   * A model that fails stays in the registry as UNAVAILABLE with its reason.
   * @param names the models to load
   * @returns the names that failed, with their reasons
   */
  async loadModels(names?: readonly string[]): Promise<Map<string, string>> {
    await this.#options.beforeScan?.();
    const { models, duplicates } = await scanRepositories(this.#options.repositories);
    const failures = new Map<string, string>();
    const wanted = names ?? [...models.keys()];
    // Ensembles load after the models they compose (in passes, for ensembles of ensembles).
    const ensembles = new Set<string>();
    for (const name of wanted) {
      const loc = models.get(name);
      if (loc && await isEnsemble(loc.dir)) ensembles.add(name);
    }
    const loadOne = async (name: string) => {
      const location = models.get(name);
      if (!location) {
        failures.set(name, `Cannot load '${name}': no model folder of that name in the model repositories`);
        return;
      }
      const entry = await this.#serialized(
        name,
        () => this.#build(name, location, duplicates.get(name), undefined),
      );
      const reasons = reasonsOf(entry);
      if (reasons.length > 0) failures.set(name, reasons.join("; "));
      else failures.delete(name);
    };
    await Promise.all(wanted.filter((n) => !ensembles.has(n)).map(loadOne));
    let left = wanted.filter((n) => ensembles.has(n));
    for (let pass = 0; pass <= left.length && left.length > 0; pass++) {
      for (const name of left) await loadOne(name);
      left = left.filter((n) => failures.has(n));
    }
    return failures;
  }

  /**
   * Loads or reloads one model (the repository extension's load). A reload loads the new versions beside the
   * old ones and switches at once; requests already queued on the old ones finish there. A failed reload
   * keeps the old versions serving. Without a config override or files, a model that serves from files that
   * have not changed since it loaded is left as it is.
   * @param name the model name
   * @param options a JSON config override and files (`<version>/<file>` -> contents) to load from instead of
   *   the repository
   * @throws ServerError when the model cannot be found or no version loads
   */
  async loadModel(name: string, options: LoadOptions = {}): Promise<void> {
    this.#assertExplicit("load", name);
    this.#implicit.delete(name);
    try {
      await this.reloadModel(name, options);
    } catch (err) {
      // Triton's clients (the model control examples) look for "failed to load" in the message.
      if (!(err instanceof ServerError) || err.message.includes("failed to load")) throw err;
      const prefix = `Cannot load '${name}': `;
      const reason = err.message.startsWith(prefix) ? err.message.slice(prefix.length) : err.message;
      throw new ServerError(err.code, `${prefix}failed to load '${name}': ${reason}`);
    }
  }

  /**
   * Loads or reloads a model whatever the control mode (the repository poller's entry point); see loadModel.
   * @param name the model name
   * @param options a config override and uploaded files
   */
  reloadModel(name: string, options: LoadOptions = {}): Promise<void> {
    return this.#serialized(name, async () => {
      let override: Record<string, unknown> | undefined;
      if (options.config !== undefined) {
        try {
          override = JSON.parse(options.config);
        } catch (err) {
          throw invalidArg(
            `Cannot load '${name}': the 'config' parameter is not valid JSON: ${(err as Error).message}`,
          );
        }
        if (!override || typeof override !== "object" || Array.isArray(override)) {
          throw invalidArg(`Cannot load '${name}': the 'config' parameter must be a JSON object`);
        }
        refuseProgramParameters(name, override);
      }
      let location: ModelLocation | undefined;
      let duplicate: string[] | undefined;
      const upload = options.files && options.files.size > 0 ? options.files : undefined;
      if (upload) {
        if (options.config === undefined) {
          throw invalidArg(`Cannot load '${name}': loading from files needs the 'config' parameter too`);
        }
        location = await writeModelFiles(name, upload);
        this.#uploads.add(location.repository);
      } else {
        await this.#options.beforeScan?.();
        const { models, duplicates } = await scanRepositories(this.#options.repositories);
        location = models.get(name);
        duplicate = duplicates.get(name);
      }
      if (!location) {
        throw invalidArg(`Cannot load '${name}': no model folder of that name in the model repositories`);
      }
      // As Triton: loading a model that serves from files that have not changed since it loaded leaves it as
      // it is (also when it loaded with a config override).
      const current = this.#models.get(name);
      if (
        !upload && override === undefined && current?.stamp !== undefined &&
        current.location.dir === location.dir && !duplicate &&
        [...current.versions.values()].some((v) => v.state === "READY") &&
        current.stamp === await folderStamp(location.dir)
      ) {
        return;
      }
      let entry: ModelEntry;
      try {
        await this.#loadComposing(name, location, override);
        entry = await this.#build(name, location, duplicate, override);
      } catch (err) {
        // Uploaded files that no version serves go, whatever failed.
        if (upload && this.#models.get(name)?.location !== location) await this.#discard(location);
        throw err;
      }
      const serving = [...entry.versions.values()].some((v) => v.state === "READY");
      if (upload && (!serving || entry !== this.#models.get(name))) await this.#discard(location);
      if (!this.#models.get(name) || entry === this.#models.get(name)) {
        const reason = reasonsOf(entry);
        if (!serving) {
          throw invalidArg(`Cannot load '${name}': failed to load '${name}': ${reason.join("; ")}`);
        }
        return;
      }
      const reason = reasonsOf(entry);
      throw invalidArg(
        `Cannot load '${name}': failed to load '${name}', the previous versions keep serving: ${
          reason.join("; ")
        }`,
      );
    });
  }

  /**
   * Unloads a model: its versions stop taking requests, finish the queued and executing ones, and free their
   * runtime resources. A model of the repositories stays in the index as UNAVAILABLE; one loaded from uploaded
   * files leaves it. Unloading a model that is not known succeeds, as in Triton.
   * @param name the model name
   */
  async unloadModel(name: string, options: { unloadDependents?: boolean } = {}): Promise<void> {
    this.#assertExplicit("unload", name);
    const config = this.#models.get(name)?.config;
    await this.retireModel(name);
    if (options.unloadDependents && config?.platform === "ensemble") {
      // The composing models that were loaded for the ensemble go with it (`unload_dependents`); as in Triton,
      // those loaded on their own, or used by another ready ensemble, stay.
      for (const step of new Set(ensembleSteps(config).map((s) => s.model_name))) {
        if (step === name || !this.#implicit.has(step) || this.#readyEnsemblesUsing(step).length > 0) {
          continue;
        }
        this.#implicit.delete(step);
        await this.retireModel(step).catch(() => {});
      }
    }
  }

  /** The ensembles with a READY version whose steps use a model. */
  #readyEnsemblesUsing(model: string): string[] {
    const out: string[] = [];
    for (const [name, entry] of this.#models) {
      if (entry.config?.platform !== "ensemble") continue;
      if (![...entry.versions.values()].some((v) => v.state === "READY")) continue;
      if (ensembleSteps(entry.config).some((s) => s.model_name === model)) out.push(name);
    }
    return out;
  }

  /**
   * Before an ensemble loads (explicit loads, polls), loads the composing models that are not ready yet, as
   * Triton does; a composing model that fails leaves the ensemble to fail with its own reason.
   */
  async #loadComposing(
    name: string,
    location: ModelLocation,
    override: Record<string, unknown> | undefined,
  ): Promise<void> {
    let raw: Record<string, unknown>;
    try {
      raw = override ?? await readConfigFile(location.dir, name);
    } catch {
      return; // the load itself reports the config error
    }
    const steps = (raw.ensemble_scheduling as { step?: unknown } | null | undefined)?.step;
    // A malformed config (steps that are not a list of objects) is left for the load to report.
    if (raw.platform !== "ensemble" || !Array.isArray(steps)) return;
    const names = steps.map((st) => {
      const model = (st as { model_name?: unknown } | null)?.model_name;
      return typeof model === "string" ? model : "";
    });
    this.#composing.add(name);
    try {
      for (const model of new Set(names)) {
        if (!model || this.#composing.has(model) || this.isReady(model, "")) continue;
        this.#implicit.add(model);
        await this.reloadModel(model).catch(() => {});
      }
    } finally {
      this.#composing.delete(name);
    }
  }

  /**
   * Unloads a model whatever the control mode (the repository poller's entry point), and the ensembles that use
   * it; see unloadModel.
   * @param name the model name
   */
  async retireModel(name: string): Promise<void> {
    // A load of the model that is still running (an `initialize()` that hangs) would hold the unload up
    // behind it: it is cancelled, and its load request fails saying why.
    this.#cancelLoads(name, `the load was cancelled: '${name}' was unloaded while it loaded`);
    await this.#serialized(name, async () => {
      const entry = this.#models.get(name);
      if (!entry) return;
      await Promise.all(
        [...entry.versions.values()].filter((v) => v.state === "READY").map((v) => v.unload()),
      );
      // An uploaded model has no folder in the repositories to list it by once its files are gone.
      if (this.#uploads.has(entry.location.repository)) this.#models.delete(name);
      await this.#discard(entry.location);
    });
    // As Triton: the ensembles that use the model stop serving with it.
    for (const ensemble of this.#readyEnsemblesUsing(name)) {
      if (ensemble !== name) await this.retireModel(ensemble);
    }
  }

  /** Removes the temporary repository of an uploaded model (nothing for a model of the repositories). */
  async #discard(location: ModelLocation): Promise<void> {
    if (!this.#uploads.delete(location.repository)) return;
    await Deno.remove(location.repository, { recursive: true }).catch(() => {});
  }

  #assertExplicit(action: string, name: string): void {
    const mode = this.#options.controlMode ?? "none";
    if (mode !== "explicit") {
      throw invalidArg(
        `Cannot ${action} '${name}': explicit model load / unload is not allowed in model control mode '${mode}'`,
      );
    }
  }

  /**
   * Lets `host` keep copies of versions on other threads from now on: every version is told of it (they
   * tell it before they unload), and it hears of every change of the models.
   * @param host the host, or undefined for none
   */
  setReplicaHost(host: ReplicaHost | undefined): void {
    this.#replicaHost = host;
    for (const e of this.#models.values()) for (const v of e.versions.values()) v.replicaHost = host;
    host?.changed();
  }

  /** Runs model operations one at a time per model (the replica host hears of each once it is done). */
  /** Whether close() has begun: no load or unload starts after it. */
  #closed = false;

  #serialized<T>(name: string, op: () => Promise<T>): Promise<T> {
    const prior = this.#locks.get(name) ?? Promise.resolve();
    // Once the registry closes, an operation still waiting (a change the repository poller found behind a load
    // that hung) starts nothing: no model loads, and no process starts, after the server has let its go.
    const run = () =>
      this.#closed ? Promise.reject(unavailable(`Cannot change '${name}': the server is stopping`)) : op();
    const next = prior.then(run, run).finally(() => this.#replicaHost?.changed());
    const settled = next.then(() => {}, () => {});
    this.#locks.set(name, settled);
    settled.then(() => {
      if (this.#locks.get(name) === settled) this.#locks.delete(name);
    });
    return next;
  }

  /**
   * Builds a model entry and makes it current when it has a READY version or no older entry serves;
   * otherwise the older entry stays. Older versions are unloaded after the switch.
   */
  async #build(
    name: string,
    location: ModelLocation,
    duplicate: string[] | undefined,
    override: Record<string, unknown> | undefined,
  ): Promise<ModelEntry> {
    const entry: ModelEntry = {
      name,
      location,
      config: undefined,
      versions: new Map(),
      reason: "",
      stamp: await folderStamp(location.dir),
    };
    if (duplicate) {
      entry.reason = `Cannot load '${name}': the model is in more than one repository (${
        duplicate.join(", ")
      })`;
    } else {
      entry.loading = new AbortController();
      this.#building.add(entry);
      try {
        await this.#load(entry, override);
      } finally {
        this.#building.delete(entry);
        entry.loading = undefined;
      }
    }
    const old = this.#models.get(name);
    const oldReady = old ? [...old.versions.values()].filter((v) => v.state === "READY") : [];
    const newReady = [...entry.versions.values()].some((v) => v.state === "READY");
    if (newReady || oldReady.length === 0) {
      this.#models.set(name, entry);
      // As Triton: the load is done once the new versions serve and the old ones take no more requests; those
      // finish the requests they hold and unload in the background. A load that waited for them could wait for
      // itself: a request of the model whose Python code calls a model whose code loads it.
      await Promise.all(oldReady.map((v) => v.stopTaking()));
      // As Triton: a version the new config no longer serves stays in the index (UNLOADING, then UNAVAILABLE
      // "unloaded"), also over later reloads.
      const dropped = old ? [...old.versions.values()].filter((v) => v.unloaded) : [];
      for (const v of dropped) if (!entry.versions.has(v.version)) entry.versions.set(v.version, v);
      this.#retire(oldReady, old && old !== entry ? old.location : undefined);
      return entry;
    }
    return entry;
  }

  /** Old versions a reload replaced, finishing the requests they hold (close waits for them). */
  #retiring = new Set<Promise<void>>();

  /**
   * Unloads versions that take no more requests in the background, then removes the uploaded files they served
   * from (none for a model of the repositories).
   */
  #retire(versions: readonly ModelVersion[], location: ModelLocation | undefined): void {
    const done: Promise<void> = Promise.allSettled(versions.map((v) => v.unload()))
      .then(() => (location ? this.#discard(location) : undefined))
      .finally(() => this.#retiring.delete(done));
    this.#retiring.add(done);
  }

  async #load(entry: ModelEntry, override?: Record<string, unknown>): Promise<void> {
    const { name, location } = entry;
    try {
      const raw = override ? { ...override } : await readConfigFile(location.dir, name);
      if (raw.name === undefined || raw.name === "") raw.name = name;
      let config = toModelConfig(raw, name);
      // Before anything opens a file the config names (auto-complete reads the model file).
      checkFileNames(config, name);
      const available = await listVersions(location.dir);
      const files = await versionFileNames(location.dir, available);
      const { backend: backendName } = resolveBackend(config, files);
      if (backendName === "ensemble") {
        await this.#loadEnsemble(entry, config, available);
        return;
      }
      const backend = this.#backends.get(backendName);
      if (!backend) {
        throw unsupported(`Cannot load '${name}': the '${backendName}' backend is not supported yet`);
      }
      applyDefaults(config, backend.defaultModelFilename);
      const versions = selectVersions(config.version_policy, available);
      if (versions.length === 0) throw unavailable(`Cannot load '${name}': no version folders found`);
      if (this.#options.autoComplete) {
        // Complete from the newest selected version that has a folder (`specific` may list one without).
        const present = versions.filter((v) => available.includes(v));
        const v = present[present.length - 1] ?? versions[versions.length - 1]!;
        await backend.autoComplete(config, {
          ...this.#context(entry, config, backend, v),
          signal: entry.loading?.signal,
        });
        config = toModelConfig(config, name);
      }
      await validateConfig(config, name, location.dir);
      entry.config = config;
      const backendConfig = this.#options.backendConfig[backend.name] ?? {};
      await Promise.all(versions.map(async (v) => {
        const mv = new ModelVersion(config, v);
        mv.responseCache = cacheFor(config, this.#options.responseCache);
        mv.rateLimiter = this.#options.rateLimiter;
        mv.replicaHost = this.#replicaHost;
        mv.arrivals = this.arrivals;
        entry.versions.set(v, mv);
        if (!available.includes(v)) {
          mv.state = "UNAVAILABLE";
          mv.reason = `Cannot load '${name}' version ${v}: the version folder does not exist`;
          return;
        }
        await mv.load(backend, location.dir, backendConfig, entry.loading?.signal);
      }));
    } catch (err) {
      entry.reason = err instanceof Error ? err.message : String(err);
    }
  }

  async #loadEnsemble(entry: ModelEntry, config: ModelConfig, available: number[]): Promise<void> {
    const { name, location } = entry;
    applyDefaults(config, "");
    // As Triton: an ensemble's config says whether it is decoupled (dinfer's never are: their steps may not be).
    config.model_transaction_policy ??= { decoupled: false };
    config = toModelConfig(config, name);
    // Triton 2.51's ensemble_scheduling has no max_inflight_requests; dinfer does not use it either.
    const scheduling = config.ensemble_scheduling as { max_inflight_requests?: number } | undefined;
    if (scheduling?.max_inflight_requests === 0) delete scheduling.max_inflight_requests;
    await validateConfig(config, name, location.dir);
    entry.config = config;
    const versions = selectVersions(config.version_policy, available);
    if (versions.length === 0) throw unavailable(`Cannot load '${name}': no version folders found`);
    const lookup = (model: string, version: number): StepModel | undefined => {
      try {
        const mv = this.resolve(model, version > 0 ? String(version) : "");
        return { ...mv.signature, decoupled: mv.decoupled };
      } catch {
        return undefined;
      }
    };
    for (const v of versions) {
      const mv = new ModelVersion(config, v);
      mv.responseCache = cacheFor(config, this.#options.responseCache);
      entry.versions.set(v, mv);
      await mv.loadEnsemble(location.dir, lookup, (request) => this.#requests.infer(request));
    }
  }

  #context(entry: ModelEntry, config: ModelConfig, backend: Backend, version: number): InstanceContext {
    const versionDir = `${entry.location.dir}/${version}`;
    return {
      modelDir: entry.location.dir,
      versionDir,
      version,
      modelPath: `${versionDir}/${config.default_model_filename || backend.defaultModelFilename}`,
      instanceName: `${config.name}_autocomplete`,
      kind: "KIND_CPU",
      deviceId: 0,
      backendConfig: this.#options.backendConfig[backend.name] ?? {},
    };
  }

  /** The model names, sorted. */
  names(): string[] {
    return [...this.#models.keys()].sort();
  }

  /** A model entry, if known. */
  entry(name: string): ModelEntry | undefined {
    return this.#models.get(name);
  }

  /**
   * Resolves a model and version to a version that can serve: an explicit version must be READY; no version
   * means the highest READY one.
   * @param name the model name
   * @param version the version string ("" for the policy's choice)
   * @throws ServerError NOT_FOUND for unknown models and versions and for models with no READY version,
   *   UNAVAILABLE for an explicit version that is not READY
   */
  resolve(name: string, version: string): ModelVersion {
    const n = parseVersion(name, version);
    const entry = this.#models.get(name);
    if (!entry) throw notFound(`Request for unknown model: '${name}' is not found`);
    if (n >= 0) {
      const mv = entry.versions.get(n);
      if (!mv) throw notFound(`Request for unknown model: '${name}' version ${version} is not found`);
      if (mv.state !== "READY") {
        throw unavailable(
          `Request for unknown model: '${name}' version ${version} is not at ready state${
            mv.reason ? `: ${mv.reason}` : ""
          }`,
        );
      }
      return mv;
    }
    let best: ModelVersion | undefined;
    for (const v of entry.versions.values()) {
      if (v.state === "READY" && (!best || v.version > best.version)) best = v;
    }
    if (best) return best;
    const reason = reasonsOf(entry).join("; ");
    throw notFound(
      `Request for unknown model: '${name}' has no available versions${reason ? `: ${reason}` : ""}`,
    );
  }

  /**
   * Whether a model (and version) is ready.
   * @param name the model name
   * @param version the version string ("" for any)
   */
  isReady(name: string, version: string): boolean {
    parseVersion(name, version); // a malformed version is an error, not "not ready"
    try {
      this.resolve(name, version);
      return true;
    } catch (err) {
      if (err instanceof ServerError) return false;
      throw err;
    }
  }

  /**
   * The model metadata of the KServe v2 protocol: name, ready versions, platform, inputs and outputs.
   * @param name the model name
   * @param version the version string ("" for the policy's choice)
   */
  metadata(name: string, version: string): ModelMetadata {
    const mv = this.resolve(name, version);
    const versions = [...this.#models.get(name)!.versions.values()]
      .filter((v) => v.state === "READY")
      .map((v) => v.version)
      .sort((a, b) => a - b)
      .map(String);
    return { name, versions, platform: mv.config.platform || mv.config.backend, ...mv.metadata() };
  }

  /**
   * The statistics extension: every READY version of one model, or of every model when `name` is "".
   * @param name the model name, "" for all
   * @param version the version, "" for every READY version
   * @throws ServerError INVALID_ARG for unknown models and versions, as Triton answers
   */
  statistics(name: string, version: string): ModelStatistics[] {
    if (name !== "") {
      const n = parseVersion(name, version);
      const entry = this.#models.get(name);
      const ready = entry && [...entry.versions.values()].some((v) => v.state === "READY");
      if (!ready) {
        throw invalidArg(
          `Cannot get the statistics of '${name}': requested model '${name}' is not available`,
        );
      }
      if (n >= 0) {
        const mv = entry.versions.get(n);
        if (!mv || mv.state !== "READY") {
          throw invalidArg(
            `Cannot get the statistics of '${name}' version ${version}: requested model version is not available for model '${name}'`,
          );
        }
        return [modelStatistics(name, String(mv.version), mv.stats)];
      }
    }
    const entries = name === "" ? this.names().map((n) => this.#models.get(n)!) : [this.#models.get(name)!];
    return entries.flatMap((e) =>
      [...e.versions.values()]
        .filter((v) => v.state === "READY")
        .sort((a, b) => a.version - b.version)
        .map((v) => modelStatistics(e.name, String(v.version), v.stats))
    );
  }

  /** Every version that is READY, for metrics. */
  readyVersions(): ModelVersion[] {
    return [...this.#models.values()].flatMap((e) => [...e.versions.values()]).filter((v) =>
      v.state === "READY"
    );
  }

  /** Whether every model that is known has all its selected versions READY (for strict readiness). */
  allReady(): boolean {
    for (const entry of this.#models.values()) {
      if (entry.reason) return false;
      for (const v of entry.versions.values()) if (v.state !== "READY" && !v.unloaded) return false;
    }
    return true;
  }

  /**
   * The repository index: one row per model version, one row with only a name for models in the repositories
   * that were never loaded, and one per model that failed before its versions.
   * @param readyOnly list only READY versions
   */
  async index(readyOnly = false): Promise<IndexEntry[]> {
    const { models } = await scanRepositories(this.#options.repositories).catch(() => ({
      models: new Map(),
    }));
    const names = [...new Set([...models.keys(), ...this.#models.keys()])].sort();
    const rows: IndexEntry[] = [];
    for (const name of names) {
      const entry = this.#models.get(name);
      if (!entry) {
        if (!readyOnly) rows.push({ name, version: "", state: "", reason: "" });
        continue;
      }
      if (entry.versions.size === 0 && !readyOnly) {
        rows.push({ name, version: "", state: "UNAVAILABLE", reason: entry.reason });
      }
      for (const v of [...entry.versions.values()].sort((a, b) => a.version - b.version)) {
        if (readyOnly && v.state !== "READY") continue;
        rows.push({ name, version: String(v.version), state: v.state, reason: v.reason });
      }
    }
    return rows;
  }

  /**
   * Cancels every load that runs now (the server stops): their load requests fail saying so, and the
   * Python stubs they started are stopped.
   */
  cancelLoads(): void {
    this.#cancelLoads(undefined, "the load was cancelled: the server is shutting down");
  }

  /**
   * Cancels the loads that run now (all, or those of one model).
   * @param name the model, or undefined for every model
   * @param why the reason the load requests fail with
   */
  #cancelLoads(name: string | undefined, why: string): void {
    for (const entry of this.#building) {
      if (name === undefined || entry.name === name) {
        entry.loading?.abort(unavailable(`Cannot load '${entry.name}': ${why}`));
      }
    }
  }

  /**
   * Unloads every model, waiting for in-flight requests. Loads still running are cancelled first (their
   * Python stubs are stopped), so a model whose `initialize()` hangs does not hold the close up.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.cancelLoads();
    await Promise.all([...this.#locks.values()]);
    const all = [...this.#models.values()].flatMap((e) => [...e.versions.values()]);
    await Promise.all(all.filter((v) => v.state === "READY").map((v) => v.unload()));
    await Promise.all([...this.#retiring]);
    await Promise.all([...this.#models.values()].map((e) => this.#discard(e.location)));
  }
}
