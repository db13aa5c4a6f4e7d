/**
 * Copies of small models on the HTTP listener threads, the main thread's side. A model version whose instances
 * run on the main thread (an ONNX model file under 1 MiB; no sequence batching, response cache, rate limiter or
 * BYTES tensors; not decoupled; dynamic batching without priority levels, a queue size, a queue delay or
 * response ordering) would have every request of every listener thread wait for that one thread; instead each listener
 * thread opens its own copy of the version and runs the requests it reads itself, through the same validation
 * and scheduler code (a dynamic batcher of its own, which batches the requests that thread reads), recording
 * the statistics into shared cells that the version's statistics fold in (see SharedVersionStats).
 *
 * The main thread publishes a route table (`model/version` and `model/` for the version a request without
 * one gets) to every listener thread whenever the models change; a request whose route the thread has no open
 * copy for goes to the main thread as before, so a late table costs speed, never a wrong answer. A version
 * about to unload is first taken out of the tables, and its copies closed, on every thread (ModelVersion
 * awaits `withdraw`), so that no thread runs a request on it after it has unloaded. Requests that the server
 * traces, logs verbosely or times in latency summaries keep going to the main thread.
 *
 * `--backend-config=onnxruntime,thread-copy-max-bytes=N` (for all models; the config parameter
 * `thread_copy_max_bytes` for one) copies bigger versions too: any whose folder holds under N bytes, also
 * those whose instances run on worker threads (the MLP of bench/models), each copy running on its listener
 * thread with one intra-op thread unless the config sets them. Then no request that a listener
 * thread reads for such a model passes through the main thread, at the cost of one more session of the model
 * per thread that serves it, and of the thread's other connections waiting while a copy runs a batch.
 * @module
 */

import type { ModelConfig } from "../../core/model_config.ts";
import type { ModelSignature } from "../../core/validate.ts";
import { observesLatencies, statsCellCount } from "../../metrics/stats.ts";
import { delayFromEnvironment } from "../../scheduler/scheduler.ts";
import { instanceThread, threadCopyParameter, WORKER_MIN_MODEL_BYTES } from "../../backends/onnxruntime.ts";
import type { ModelRegistry } from "../../models/registry.ts";
import type { ModelVersion, ReplicaHost, VersionSource } from "../../models/model_version.ts";

/** What a listener thread needs to open its copy of a version. */
export interface ReplicaSpec {
  /** The version's config. */
  config: ModelConfig;
  /** The signature its requests are validated against. */
  signature: ModelSignature;
  /** Where its files are. */
  context: VersionSource["context"];
  /** The model file and its version folder as the version loaded them: a copy opens only while both are unchanged. */
  file: { size: number; mtime: number; folder: string | undefined };
}

/** The messages of the replica protocol, main thread to listener thread. */
export type ReplicaMessage =
  | { op: "replica-open"; id: -1; replica: number; spec: ReplicaSpec; cells: SharedArrayBuffer }
  | { op: "replica-close"; id: -1; replica: number }
  | { op: "routes"; id: -1; routes: Record<string, number> }
  /** Where the thread counts the requests it runs itself (cell `index` of an Int32Array). */
  | { op: "replica-served"; id: -1; cells: SharedArrayBuffer; index: number };

/** The most bytes a version folder may hold for the listener threads to copy the version, by default. */
const MAX_COPY_BYTES = 1 << 20;

/**
 * The config parameter `thread_copy_max_bytes`, else `--backend-config=onnxruntime,thread-copy-max-bytes=N`:
 * the listener threads copy every version (that the other conditions allow) whose folder holds under N bytes,
 * wherever its instances run, each copy on its thread with one intra-op thread unless the config sets them;
 * undefined where neither is set (then only small models whose instances run on the main thread are copied, as they
 * are under any limit).
 * @param config the version's config (the model's load checked the parameter)
 * @param backendConfig the ONNX Runtime backend's settings (server/cli.ts checked the value)
 */
function copyMaxBytes(config: ModelConfig, backendConfig: Record<string, string>): number | undefined {
  const v = backendConfig["thread-copy-max-bytes"];
  return threadCopyParameter(config) ?? (v === undefined ? undefined : Number(v));
}

/**
 * Whether a version may run on the listener threads (see the module's documentation).
 * @param mv the version
 */
export function replicable(mv: ModelVersion): boolean {
  const source = mv.source;
  if (mv.state !== "READY" || source?.backend !== "onnxruntime" || !source.file?.folder) return false;
  const c = mv.config;
  if (mv.decoupled || mv.responseCache || mv.rateLimiter) return false;
  if (c.sequence_batching !== undefined || !threadLocalBatching(c)) return false;
  if (c.instance_group.some((g) => g.kind !== "KIND_CPU")) return false;
  const sig = mv.signature;
  if ([...sig.inputs, ...sig.outputs].some((t) => t.datatype === "BYTES")) return false;
  // The whole version folder counts: ONNX Runtime reads external data files beside the model file, and each
  // thread would hold its own copy of them.
  // The limit copies bigger versions too; the small ones of the default rule stay copied under any limit.
  const limit = copyMaxBytes(c, source.context.backendConfig);
  if (limit !== undefined && folderBytes(source.context.versionDir, limit) < limit) return true;
  const bytes = folderBytes(source.context.versionDir, MAX_COPY_BYTES);
  if (bytes >= MAX_COPY_BYTES || source.file.size >= WORKER_MIN_MODEL_BYTES) return false;
  try {
    return instanceThread(c, source.context.backendConfig, source.file.size) === "main";
  } catch {
    return false;
  }
}

/** Entries a version folder may hold for the listener threads to copy the version (see folderBytes). */
const MAX_COPY_ENTRIES = 256;

/**
 * The bytes of the files under a folder, counting no further than `limit` (Infinity when unreadable, deeper than
 * 8 levels or holding more than MAX_COPY_ENTRIES entries). The walk is synchronous, once per version and only
 * where there are listener threads; the entry bound keeps it short whatever the folder holds.
 */
function folderBytes(dir: string, limit: number): number {
  let total = 0, entries = 0;
  const walk = (d: string, depth: number) => {
    if (depth > 8) throw new Error("too deep");
    for (const e of Deno.readDirSync(d)) {
      if (total >= limit) return;
      if (++entries > MAX_COPY_ENTRIES) throw new Error("too many entries");
      const path = `${d}/${e.name}`;
      if (e.isDirectory) walk(path, depth + 1);
      else total += Deno.statSync(path).size;
    }
  };
  try {
    walk(dir, 0);
  } catch {
    return Infinity;
  }
  return total;
}

/**
 * Whether a model's dynamic batching, if any, means the same when each thread batches its own requests: no
 * priority levels, queue size (it would hold per thread), response ordering or queue delay (each thread sees a
 * share of the requests, so its batches would fill more slowly and more requests would wait the whole delay).
 * @param c the config
 */
function threadLocalBatching(c: ModelConfig): boolean {
  const db = c.dynamic_batching as
    | {
      preserve_ordering?: boolean;
      priority_levels?: number;
      max_queue_delay_microseconds?: number;
      default_queue_policy?: { max_queue_size?: number };
      priority_queue_policy?: Record<string, unknown>;
    }
    | undefined;
  if (db === undefined) return true;
  return !db.preserve_ordering && !db.priority_levels && !db.default_queue_policy?.max_queue_size &&
    Object.keys(db.priority_queue_policy ?? {}).length === 0 && !db.max_queue_delay_microseconds;
}

interface Live {
  version: ModelVersion;
  /** The statistics cells of each listener thread. */
  cells: Float64Array[];
}

/** The main thread's side of the listener threads' copies. */
export class ListenerReplicas implements ReplicaHost {
  readonly #registry: ModelRegistry;
  readonly #threads: number;
  readonly #send: (thread: number, msg: ReplicaMessage) => void;
  readonly #allowed: (model: string) => boolean;
  #nextId = 1;
  readonly #ids = new WeakMap<ModelVersion, number>();
  readonly #live = new Map<number, Live>();
  /** Versions withdrawn (or being withdrawn), with the withdrawal, so that a second call waits for the first. */
  readonly #withdrawing = new WeakMap<ModelVersion, Promise<void>>();
  /** Whether each version could be copied, once decided (it does not change while the version is loaded). */
  readonly #eligible = new WeakMap<ModelVersion, boolean>();
  /** Closings awaited, by `thread:replica`. */
  readonly #closing = new Map<string, () => void>();
  /** Threads that failed after they started: no answer will come from them. */
  readonly #dead = new Set<number>();
  /** The requests each thread ran itself. */
  readonly #served: Int32Array;
  #stopped = false;

  /**
   * @param registry the models
   * @param threads how many listener threads
   * @param send posts a message to a listener thread
   * @param allowed whether a model's requests may run away from the main thread now (not traced or logged
   *   request by request)
   */
  constructor(
    registry: ModelRegistry,
    threads: number,
    send: (thread: number, msg: ReplicaMessage) => void,
    allowed: (model: string) => boolean,
  ) {
    this.#registry = registry;
    this.#threads = threads;
    this.#send = send;
    this.#allowed = (model) => !observesLatencies() && delayFromEnvironment() === 0 && allowed(model);
    const served = new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT * Math.max(1, threads));
    this.#served = new Int32Array(served);
    for (let t = 0; t < threads; t++) send(t, { op: "replica-served", id: -1, cells: served, index: t });
    // The memory reclaimer and anything else that asks whether requests arrive count these too.
    registry.arrivals.addSource(() => this.#served.reduce((a, b) => a + b, 0));
  }

  /** The versions with copies on the listener threads, as `model/version`. */
  serving(): string[] {
    return [...this.#live.values()].map((l) => `${l.version.name}/${l.version.version}`).sort();
  }

  /** Publishes the route table (opening copies of versions that became eligible). */
  changed(): void {
    if (this.#stopped) return;
    const routes: Record<string, number> = {};
    for (const name of this.#registry.names()) {
      if (!this.#allowed(name)) continue;
      const entry = this.#registry.entry(name);
      if (!entry) continue;
      for (const mv of entry.versions.values()) {
        const id = this.#offer(mv);
        if (id !== undefined) routes[`${name}/${mv.version}`] = id;
      }
      try {
        const d = this.#registry.resolve(name, "");
        const id = this.#ids.get(d);
        if (id !== undefined && routes[`${name}/${d.version}`] === id) routes[`${name}/`] = id;
      } catch { /* no version serves: the main thread answers */ }
    }
    for (let t = 0; t < this.#threads; t++) this.#send(t, { op: "routes", id: -1, routes });
  }

  /** The id of a version's copies, opening them first where it is eligible and has none yet. */
  #offer(mv: ModelVersion): number | undefined {
    if (this.#withdrawing.has(mv) || mv.state !== "READY") return undefined;
    const known = this.#ids.get(mv);
    if (known !== undefined) return known;
    let eligible = this.#eligible.get(mv);
    if (eligible === undefined) this.#eligible.set(mv, eligible = replicable(mv));
    if (!eligible) return undefined;
    const id = this.#nextId++;
    const source = mv.source!;
    const spec: ReplicaSpec = {
      config: mv.config,
      signature: mv.signature,
      context: source.context,
      file: source.file!,
    };
    // Versions the registry made while the host was being set must tell it too before they unload.
    mv.replicaHost = this;
    const cells: Float64Array[] = [];
    for (let t = 0; t < this.#threads; t++) {
      const sab = new SharedArrayBuffer(
        Float64Array.BYTES_PER_ELEMENT * statsCellCount(mv.config.max_batch_size),
      );
      const c = new Float64Array(sab);
      mv.stats.share(c);
      cells.push(c);
      this.#send(t, { op: "replica-open", id: -1, replica: id, spec, cells: sab });
    }
    this.#ids.set(mv, id);
    this.#live.set(id, { version: mv, cells });
    return id;
  }

  /** Takes a version out of every thread's routes and closes its copies; resolves once every thread has. */
  withdraw(mv: ModelVersion): Promise<void> {
    let w = this.#withdrawing.get(mv);
    if (!w) {
      // Recorded before it starts: the route table it publishes must leave the version out.
      w = Promise.resolve().then(() => this.#withdraw(mv));
      this.#withdrawing.set(mv, w);
    }
    return w;
  }

  async #withdraw(mv: ModelVersion): Promise<void> {
    const id = this.#ids.get(mv);
    if (id === undefined || !this.#live.has(id)) return;
    if (this.#stopped) {
      // The listener threads have stopped: no copy runs any more.
      for (const c of this.#live.get(id)!.cells) mv.stats.unshare(c);
      this.#live.delete(id);
      return;
    }
    this.changed();
    const closed: Promise<void>[] = [];
    for (let t = 0; t < this.#threads; t++) {
      if (this.#dead.has(t)) continue;
      const key = `${t}:${id}`;
      // As the main thread's own scheduler: the unload waits for the requests the thread has taken.
      closed.push(
        new Promise<void>((resolve) => {
          this.#closing.set(key, () => {
            this.#closing.delete(key);
            resolve();
          });
        }),
      );
      this.#send(t, { op: "replica-close", id: -1, replica: id });
    }
    await Promise.all(closed);
    const live = this.#live.get(id)!;
    for (const c of live.cells) mv.stats.unshare(c);
    this.#live.delete(id);
  }

  /**
   * A listener thread has closed its copy (or never had it open).
   * @param thread the thread's index
   * @param replica the copy's id
   */
  closed(thread: number, replica: number): void {
    this.#closing.get(`${thread}:${replica}`)?.();
  }

  /**
   * A listener thread failed after it started: nothing is waited for from it any more.
   * @param thread the thread's index
   */
  failed(thread: number): void {
    this.#dead.add(thread);
    for (const [key, done] of [...this.#closing]) if (key.startsWith(`${thread}:`)) done();
  }

  /** Stops publishing (the listener threads have stopped); waiting withdrawals end at once. */
  stop(): void {
    this.#stopped = true;
    for (const done of [...this.#closing.values()]) done();
  }
}
