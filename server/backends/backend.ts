/**
 * The Backend interface: what every runtime (ONNX Runtime, TensorRT, Python) provides to the core.
 * @module
 */

import type { ArrivalCounter } from "../core/arrivals.ts";
import { ServerError } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { InferRequest, InferResponse, ParamValue, ResponseSink, Tensor } from "../core/types.ts";
import type { Logger } from "../logging.ts";

/**
 * The response parameters a backend gives a request beside its outputs (a Python model's
 * `InferenceResponse(parameters=...)`), kept on the map of the outputs it answers with.
 */
export const RESPONSE_PARAMETERS: unique symbol = Symbol("response parameters");

/** A request's outputs by name, with the response parameters the backend gave it, if any. */
export type BackendOutputs = Map<string, Tensor> & { [RESPONSE_PARAMETERS]?: Record<string, ParamValue> };

/**
 * What `executeRequests` answers in the place of a request that the model gave back to be run again (Triton's
 * TRITONSERVER_REQUEST_RELEASE_RESCHEDULE: a Python model's `request.set_release_flags`). The sequence batcher of
 * a model with `iterative_sequence` runs the request again; anywhere else it fails the request, with this
 * message (Triton's words first).
 */
export class RescheduledRequest extends ServerError {
  /** @param model the model's name */
  constructor(model: string) {
    super(
      "INTERNAL",
      `Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag: '${model}' runs a request again only with sequence_batching { iterative_sequence: true }`,
    );
  }
}

/** One request of a batch, for backends whose requests stay separate (see executeRequests). */
export interface BackendRequest {
  /** The request's inputs by name. */
  inputs: Map<string, Tensor>;
  /** The outputs to produce. */
  outputNames: readonly string[];
  /** The request id ("" when none). */
  id: string;
  /** The request parameters (sequence_id among them). */
  parameters: Record<string, ParamValue>;
  /**
   * Set for requests to decoupled models: takes each response (outputs by name, an error, or undefined for a
   * final flag alone) as the model sends it; the last call has `final` set.
   */
  send?: (outputs: Map<string, Tensor> | Error | undefined, final: boolean) => void;
  /** Aborts when the client has gone away (see InferRequest.signal). */
  signal?: AbortSignal;
}

/** Where a model version lives and how an instance of it is placed. */
export interface InstanceContext {
  /** The model folder. */
  modelDir: string;
  /** The version folder. */
  versionDir: string;
  /** The version number. */
  version: number;
  /** The model file or folder inside the version folder (default_model_filename or the backend's default). */
  modelPath: string;
  /** Triton's instance name, `<group>_<index>`. */
  instanceName: string;
  /** The instance group kind (KIND_CPU, KIND_GPU, ...). */
  kind: string;
  /** The device id for GPU instances, 0 otherwise. */
  deviceId: number;
  /** Server-wide settings from `--backend-config=<backend>,<key>=<value>`. */
  backendConfig: Record<string, string>;
  /**
   * Aborted when the load is cancelled (the model is unloaded, or the server stops, while it loads): a backend
   * whose instance start can wait (a Python `initialize()`) gives up, frees what it started and throws the
   * signal's reason.
   */
  signal?: AbortSignal;
  /**
   * The server's count of arriving requests, where the instance runs in a server: whether requests arrive one at
   * a time (else one arrives while another is inside a model: others wait behind each).
   */
  arrivals?: Pick<ArrivalCounter, "alone">;
  /**
   * The instance is an HTTP listener thread's copy of a version (frontends/http/replicas.ts): it runs on that
   * thread, with one intra-op thread unless the config sets them.
   */
  copy?: boolean;
}

/** One model instance: executes whole batches. */
export interface BackendInstance {
  /**
   * Executes one batch. Either every output is produced or the whole batch fails.
   * @param inputs the (batched) inputs by name, shapes in config terms (batch dim first when the model batches)
   * @param outputNames the outputs to produce
   * @returns the outputs by name
   */
  execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>>;
  /**
   * Optional: executes a batch as a list of separate requests (as Triton's Python backend hands them to
   * `execute(requests)`), each answered with its outputs or its own error. When present, the scheduler uses it
   * instead of concatenating the batch for `execute`.
   * @param requests the requests of the batch
   * @returns one entry per request: its outputs by name, or the error for that request alone; for a request
   *   with `send` (decoupled models) an empty map says the model took it, and its responses go to `send`
   */
  executeRequests?(requests: readonly BackendRequest[]): Promise<(Map<string, Tensor> | Error)[]>;
  /**
   * Optional: executes one batch on the caller's thread and returns its outputs at once (as `execute`, but
   * synchronous; it throws where `execute` would reject). The scheduler then runs the requests queued for a
   * model back to back, one execution each, before it answers any of them.
   */
  executeSync?(inputs: Map<string, Tensor>, outputNames: readonly string[]): Map<string, Tensor>;
  /**
   * Optional: how many batches the scheduler may hand this instance before the first is answered (default
   * 1). An instance that runs its batches one after another anyway (a Python stub reads them in order) takes
   * the next one early, so that it finds it waiting when it finishes the one before.
   */
  readonly pipelineDepth?: number;
  /** Optional: where and through what the instance runs, e.g. "the server's thread, through libortshim". */
  readonly runsOn?: string;
  /**
   * Optional: a buffer of exactly `byteLength` bytes for the scheduler to concatenate one batched input into
   * (not BYTES). The instance keeps such buffers for later batches and hands them to its runtime without a copy;
   * the scheduler passes the filled buffer to the next `execute` and keeps no reference to it after that.
   * @param name the input
   * @param byteLength its size in bytes
   */
  inputBuffer?(name: string, byteLength: number): Uint8Array;
  /** Frees the instance's runtime resources. */
  close(): Promise<void>;
}

/** What the server lends a backend whose models call back into it (Triton's BLS) or write to its log. */
export interface ServerAccess {
  /**
   * Runs a request on any model of the server.
   * @param request the request
   */
  infer(request: InferRequest): Promise<InferResponse>;
  /**
   * Runs a request on any model and streams its responses (decoupled models).
   * @param request the request
   * @param sink receives each response
   */
  inferStream(request: InferRequest, sink: ResponseSink): Promise<void>;
  /** The server log, when the server has one. */
  logger: Logger | undefined;
  /** The server's models as a model's own code manages them (Triton's BLS model loading API). */
  models?: ModelControl;
  /** Custom metrics that models' own code makes, shown on the metrics endpoint. */
  metrics?: ModelMetrics;
}

/** The kind of a custom metric family. */
export type MetricKind = "counter" | "gauge" | "histogram";

/**
 * Custom metrics (the Python backend's `pb_utils.MetricFamily`): families and metrics are reached through
 * handles that an owner (a stub) holds; every call that fails throws INVALID_ARG with Triton's wording.
 */
export interface ModelMetrics {
  /**
   * Makes a family, or takes the one of that name (of the same kind).
   * @returns a handle on it
   */
  family(owner: object, name: string, description: string, kind: MetricKind): number;
  /**
   * Makes a metric of a family (the handle of `family`), or takes the one with those labels.
   * @param buckets a histogram's upper bounds (only histograms have them)
   * @returns a handle on it
   */
  metric(
    owner: object,
    family: number,
    labels: Record<string, string>,
    buckets: number[] | undefined,
  ): number;
  /** Increments (counters, gauges), sets (gauges) or observes (histograms) a metric's value. */
  update(metric: number, action: "increment" | "set" | "observe", value: number): void;
  /** A counter's or gauge's value. */
  value(metric: number): number;
  /** Lets go of a handle. */
  drop(owner: object, handle: number): void;
  /** Lets go of every handle of an owner. */
  release(owner: object): void;
}

/** Loading, unloading and readiness of the server's models, for a model's own code. */
export interface ModelControl {
  /**
   * Whether a model version is ready.
   * @param name the model
   * @param version the version, "" for the one the version policy serves
   */
  ready(name: string, version: string): boolean;
  /**
   * Loads (or reloads) a model as the repository API's load does (explicit model control only).
   * @param name the model
   * @param config a JSON config that replaces config.pbtxt, or undefined
   * @param files the model's files by `<version>/<name>`
   */
  load(name: string, config: string | undefined, files: Map<string, Uint8Array>): Promise<void>;
  /**
   * Unloads a model as the repository API's unload does (explicit model control only).
   * @param name the model
   * @param unloadDependents whether an ensemble's composing models go with it
   */
  unload(name: string, unloadDependents: boolean): Promise<void>;
}

/** A runtime that can complete configurations and create instances. */
export interface Backend {
  /** The backend name as configs write it (`onnxruntime`, `tensorrt`, `python`). */
  readonly name: string;
  /** The model file name when the config gives none. */
  readonly defaultModelFilename: string;
  /**
   * Fills in what the config leaves out (inputs, outputs, max_batch_size, ...) from the model itself.
   * @param config the config to complete, changed in place
   * @param ctx where the model version lives
   */
  autoComplete(config: ModelConfig, ctx: InstanceContext): Promise<void>;
  /**
   * Creates one instance of a model version.
   * @param config the validated config
   * @param ctx where the model lives and how the instance is placed
   */
  createInstance(config: ModelConfig, ctx: InstanceContext): Promise<BackendInstance>;
  /**
   * Optional: takes what the server lends its backends, before any model loads. A backend object serves one
   * server (one model registry).
   * @param server calls into the server's models, and its log
   */
  bind?(server: ServerAccess): void;
}
