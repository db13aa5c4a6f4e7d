/**
 * The model registry: which models exist, their versions and states; resolves a request's model and version.
 * @module
 */

import { notFound, ServerError, unavailable, unsupported } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { InferRequest, InferResponse } from "../core/types.ts";
import type { Backend, InstanceContext } from "../backends/backend.ts";
import { onnxRuntimeBackend } from "../backends/onnxruntime.ts";
import {
  applyDefaults,
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
import { ModelVersion, type TensorMetadata, type VersionState } from "./model_version.ts";

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
}

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
}

/** A row of the repository index. */
export interface IndexEntry {
  name: string;
  version: string;
  state: VersionState;
  reason: string;
}

/** The built-in backends. */
export function defaultBackends(): Map<string, Backend> {
  return new Map([[onnxRuntimeBackend.name, onnxRuntimeBackend]]);
}

/** The registry of models. */
export class ModelRegistry {
  #options: RegistryOptions;
  #backends: Map<string, Backend>;
  #models = new Map<string, ModelEntry>();

  /**
   * Creates an empty registry.
   * @param options repositories, auto-complete and backend settings
   */
  constructor(options: RegistryOptions) {
    this.#options = options;
    this.#backends = options.backends ?? defaultBackends();
  }

  /**
   * Loads the named models, or every model of the repositories when `names` is undefined.
   * A model that fails stays in the registry as UNAVAILABLE with its reason.
   * @param names the models to load
   * @returns the names that failed, with their reasons
   */
  async loadModels(names?: readonly string[]): Promise<Map<string, string>> {
    const { models, duplicates } = await scanRepositories(this.#options.repositories);
    const failures = new Map<string, string>();
    const wanted = names ?? [...models.keys()];
    await Promise.all(wanted.map(async (name) => {
      const location = models.get(name);
      if (!location) {
        failures.set(name, `Cannot load '${name}': no model folder of that name in the model repositories`);
        return;
      }
      const dup = duplicates.get(name);
      const entry: ModelEntry = { name, location, config: undefined, versions: new Map(), reason: "" };
      this.#models.set(name, entry);
      if (dup) {
        entry.reason = `Cannot load '${name}': the model is in more than one repository (${dup.join(", ")})`;
      } else {
        await this.#load(entry);
      }
      const reasons = [entry.reason, ...[...entry.versions.values()].map((v) => v.reason)].filter((r) => r);
      if (reasons.length > 0) failures.set(name, reasons.join("; "));
    }));
    return failures;
  }

  async #load(entry: ModelEntry): Promise<void> {
    const { name, location } = entry;
    try {
      const raw = await readConfigFile(location.dir, name);
      if (raw.name === undefined || raw.name === "") raw.name = name;
      let config = toModelConfig(raw, name);
      const available = await listVersions(location.dir);
      const files = await versionFileNames(location.dir, available);
      const { backend: backendName } = resolveBackend(config, files);
      const backend = this.#backends.get(backendName);
      if (!backend) {
        throw unsupported(`Cannot load '${name}': the '${backendName}' backend is not supported yet`);
      }
      applyDefaults(config, backend.defaultModelFilename);
      const versions = selectVersions(config.version_policy, available);
      if (versions.length === 0) throw unavailable(`Cannot load '${name}': no version folders found`);
      if (this.#options.autoComplete) {
        const v = versions[versions.length - 1]!;
        await backend.autoComplete(config, this.#context(entry, config, backend, v));
        config = toModelConfig(config, name);
      }
      await validateConfig(config, name, location.dir);
      entry.config = config;
      const backendConfig = this.#options.backendConfig[backend.name] ?? {};
      await Promise.all(versions.map(async (v) => {
        const mv = new ModelVersion(config, v);
        entry.versions.set(v, mv);
        if (!available.includes(v)) {
          mv.state = "UNAVAILABLE";
          mv.reason = `Cannot load '${name}' version ${v}: the version folder does not exist`;
          return;
        }
        await mv.load(backend, location.dir, backendConfig);
      }));
    } catch (err) {
      entry.reason = err instanceof Error ? err.message : String(err);
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
   * @throws ServerError NOT_FOUND for unknown models and versions, UNAVAILABLE when none is ready
   */
  resolve(name: string, version: string): ModelVersion {
    const entry = this.#models.get(name);
    if (!entry) throw notFound(`Request for unknown model: '${name}' is not found`);
    if (version !== "") {
      const n = /^[0-9]+$/.test(version) ? Number(version) : NaN;
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
    const ready = [...entry.versions.values()].filter((v) => v.state === "READY").sort((a, b) =>
      b.version - a.version
    );
    if (ready[0]) return ready[0];
    const reason = entry.reason ||
      [...entry.versions.values()].map((v) => v.reason).filter((r) => r).join("; ");
    throw unavailable(
      `Request for unknown model: '${name}' has no available versions${reason ? `: ${reason}` : ""}`,
    );
  }

  /**
   * Whether a model (and version) is ready.
   * @param name the model name
   * @param version the version string ("" for any)
   */
  isReady(name: string, version: string): boolean {
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
   * @throws ServerError NOT_FOUND for unknown models and versions
   */
  statistics(name: string, version: string): ModelStatistics[] {
    if (name !== "") {
      const entry = this.#models.get(name);
      if (!entry) throw notFound(`Request for unknown model: '${name}' is not found`);
      if (version !== "") {
        const mv = this.resolve(name, version);
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
      for (const v of entry.versions.values()) if (v.state !== "READY") return false;
    }
    return true;
  }

  /**
   * Runs a request on the model and version it names.
   * @param request the decoded request
   */
  infer(request: InferRequest): Promise<InferResponse> {
    let mv: ModelVersion;
    try {
      mv = this.resolve(request.model, request.version);
    } catch (err) {
      return Promise.reject(err);
    }
    return mv.infer(request);
  }

  /** The repository index: one row per model version (or per model that failed before its versions). */
  index(): IndexEntry[] {
    const rows: IndexEntry[] = [];
    for (const name of this.names()) {
      const entry = this.#models.get(name)!;
      if (entry.versions.size === 0) {
        rows.push({ name, version: "", state: "UNAVAILABLE", reason: entry.reason });
      }
      for (const v of [...entry.versions.values()].sort((a, b) => a.version - b.version)) {
        rows.push({ name, version: String(v.version), state: v.state, reason: v.reason });
      }
    }
    return rows;
  }

  /** Unloads every model, waiting for in-flight requests. */
  async close(): Promise<void> {
    const all = [...this.#models.values()].flatMap((e) => [...e.versions.values()]);
    await Promise.all(all.filter((v) => v.state === "READY").map((v) => v.unload()));
  }
}
