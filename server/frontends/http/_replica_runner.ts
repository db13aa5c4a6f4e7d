/**
 * The listener thread's side of the copies of small models (see replicas.ts): opens and closes its copies as
 * the main thread says, keeps the route table, and runs a decoded request on its own copy where the table
 * routes it to one that is open, through the same validation and scheduler as the main thread.
 * @module
 */

import { nowNs } from "../../core/clock.ts";
import { toServerError } from "../../core/errors.ts";
import type { InferRequest, InferResponse } from "../../core/types.ts";
import type { validateRequest } from "../../core/validate.ts";
import type { BackendInstance } from "../../backends/backend.ts";
import type { PoolScheduler } from "../../scheduler/scheduler.ts";
import { ArrivalCounter } from "../../core/arrivals.ts";
import type { ReplicaMessage, ReplicaSpec } from "./replicas.ts";
import type { Answer } from "./_channel.ts";

interface Replica {
  spec: ReplicaSpec;
  instance: BackendInstance;
  scheduler: PoolScheduler;
  validate: typeof validateRequest;
}

/**
 * What running a copy takes, loaded with the first copy: a listener thread that runs no model holds neither
 * ONNX Runtime nor the scheduler and model-version code (a thread's memory).
 */
function loadCopyModules() {
  return Promise.all([
    import("../../backends/onnxruntime.ts"),
    import("../../scheduler/scheduler.ts"),
    import("../../models/model_version.ts"),
    import("../../metrics/stats.ts"),
    import("../../core/validate.ts"),
  ]);
}

/** The copies of one listener thread. */
export class ReplicaRunner {
  #routes: Record<string, number> = {};
  /** What each copy is opened from, with its statistics cells, from `replica-open` until it is closed. */
  readonly #specs = new Map<number, { spec: ReplicaSpec; cells: SharedArrayBuffer }>();
  readonly #open = new Map<number, Replica>();
  /** Opening (or failed) copies, settled when the copy is open or has failed. */
  readonly #pending = new Map<number, Promise<void>>();
  readonly #report: (message: string) => void;
  /** This thread's inference requests, which its dynamic batchers ask whether requests come together. */
  readonly #arrivals = new ArrivalCounter();
  /** The requests this thread ran itself, counted where the main thread reads them (idle detection). */
  #served: { cells: Int32Array; index: number } | undefined;

  /** @param report logs a copy that cannot open */
  constructor(report: (message: string) => void) {
    this.#report = report;
  }

  /**
   * Takes a message of the replica protocol.
   * @param msg the message
   * @param closed called once a copy is closed (for `replica-close`)
   */
  handle(msg: ReplicaMessage, closed: (replica: number) => void): void {
    if (msg.op === "routes") this.#routes = msg.routes;
    else if (msg.op === "replica-served") {
      this.#served = { cells: new Int32Array(msg.cells), index: msg.index };
    } else if (msg.op === "replica-open") {
      // Opened when the first request for it reaches this thread: a thread holds only the models it serves.
      this.#specs.set(msg.replica, { spec: msg.spec, cells: msg.cells });
    } else {
      this.#specs.delete(msg.replica);
      const opening = this.#pending.get(msg.replica) ?? Promise.resolve();
      void opening.then(() => this.#close(msg.replica)).catch((err) =>
        this.#report(`An HTTP listener thread failed to close its copy of a model: ${(err as Error).message}`)
      ).finally(() => closed(msg.replica));
    }
  }

  async #openCopy(id: number, spec: ReplicaSpec, cells: SharedArrayBuffer): Promise<void> {
    const { config, context } = spec;
    let instance: BackendInstance | undefined;
    try {
      const [
        { onnxRuntimeBackend },
        { PoolScheduler },
        { batchingOptions, fileStamp, folderStamp },
        { SharedVersionStats },
        { validateRequest },
      ] = await loadCopyModules();
      // The copy must be of the files the main thread loaded (the model and any file beside it, such as external
      // weights): one replaced since is not opened.
      const same = async () => {
        const now = await fileStamp(context.modelPath);
        return now?.size === spec.file.size && now.mtime === spec.file.mtime &&
          await folderStamp(context.versionDir) === spec.file.folder;
      };
      if (!await same()) throw new Error(`'${context.versionDir}' has changed since the version loaded`);
      instance = await onnxRuntimeBackend.createInstance(config, {
        ...context,
        instanceName: `${config.name}_http`,
        kind: "KIND_CPU",
        deviceId: 0,
        copy: true,
      });
      if (!await same()) throw new Error(`'${context.versionDir}' changed while the copy opened`);
      const stats = new SharedVersionStats(new Float64Array(cells), config.name, String(context.version));
      const scheduler = new PoolScheduler(
        {
          name: config.name,
          version: String(context.version),
          batched: config.max_batch_size > 0,
          outputs: new Map(spec.signature.outputs.map((o) => [o.name, o])),
        },
        [instance],
        { ...batchingOptions(config), arrivals: this.#arrivals },
        stats,
      );
      if (this.#specs.has(id)) this.#open.set(id, { spec, instance, scheduler, validate: validateRequest });
      else await instance.close(); // closed while it opened
    } catch (err) {
      await instance?.close().catch(() => {});
      this.#report(
        `An HTTP listener thread cannot run '${config.name}' version ${context.version} itself (its requests go to the main thread): ${
          (err as Error).message
        }`,
      );
    }
  }

  async #close(id: number): Promise<void> {
    this.#pending.delete(id);
    const r = this.#open.get(id);
    if (!r) return;
    this.#open.delete(id);
    await r.scheduler.stop();
    await r.instance.close();
  }

  /** Closes every copy (the thread is stopping). */
  async closeAll(): Promise<void> {
    this.#routes = {};
    this.#specs.clear();
    await Promise.allSettled([...this.#pending.values()]);
    await Promise.allSettled([...this.#open.keys()].map((id) => this.#close(id)));
  }

  /**
   * Runs a request on this thread's copy of the version it names, if the route table sends it to an open one.
   * @param request the decoded request
   * @returns the answer, or undefined when the main thread must run it
   */
  infer(request: InferRequest): Promise<Answer> | undefined {
    this.#arrivals.arrived();
    const id = this.#routes[`${request.model}/${request.version}`];
    if (id === undefined) return undefined;
    const r = this.#open.get(id);
    if (!r) {
      // The first request: it goes to the main thread while the copy opens.
      const from = this.#specs.get(id);
      if (from && !this.#pending.has(id)) this.#pending.set(id, this.#openCopy(id, from.spec, from.cells));
      return undefined;
    }
    const received = nowNs();
    if (this.#served) Atomics.add(this.#served.cells, this.#served.index, 1);
    let response: Promise<InferResponse>;
    try {
      // As on the main thread (ModelVersion.infer): a request refused at validation is not counted.
      response = r.scheduler.enqueue(r.validate(request, r.spec.signature), received);
    } catch (err) {
      return Promise.resolve(failed(err));
    }
    return response.then((res) => ({ response: res }), failed);
  }
}

function failed(err: unknown): Answer {
  const e = toServerError(err);
  return { error: { code: e.code, message: e.message } };
}
