/**
 * The request and response types shared by every frontend, scheduler and backend.
 * @module
 */

import type { Datatype, TensorData } from "./dtypes.ts";
import type { ServerError } from "./errors.ts";

/** A request or response parameter value (KServe v2 parameters; gRPC InferParameter). */
export type ParamValue = boolean | number | bigint | string;

/** A tensor: name, datatype, shape and contents. */
export interface Tensor {
  /** The tensor name. */
  name: string;
  /** The protocol datatype. */
  datatype: Datatype;
  /** The dims, batch dimension included where the model batches. */
  shape: number[];
  /** The contents: raw little-endian bytes, or for BYTES the elements length-prefixed in one buffer. */
  data: TensorData;
}

/** An output the client asked for, with its per-output options. */
export interface RequestedOutput {
  /** The output name. */
  name: string;
  /** The top-N classification extension: the number of classes to report; 0 for the plain tensor. */
  classification: number;
  /** Frontend-specific options (the HTTP binary_data flag, shared-memory parameters). */
  parameters: Record<string, ParamValue>;
}

/** One inference request as the core sees it, whatever frontend it came through. */
export interface InferRequest {
  /** The model name. */
  model: string;
  /** The model version asked for; "" for the one the version policy serves (the highest ready). */
  version: string;
  /** The request id, echoed in the response; "" when none. */
  id: string;
  /** The input tensors. */
  inputs: Tensor[];
  /** The outputs asked for; empty for all of them without options. */
  outputs: RequestedOutput[];
  /** The request parameters (priority, timeout, sequence_id, ...). */
  parameters: Record<string, ParamValue>;
  /** The trace of a sampled request (set and ended by the inference pipeline). */
  trace?: RequestTrace;
  /**
   * Where the responses of a request to a decoupled model go (set by the inference pipeline): each response or
   * error as the model sends it, `undefined` for a final flag without a response.
   */
  stream?: ResponseSink;
  /**
   * Aborts when the client is gone (a closed HTTP stream, a cancelled gRPC stream): the backend tells the model
   * (`request.is_cancelled()` in Python models), which may stop early.
   */
  signal?: AbortSignal;
}

/**
 * The trace of one sampled request, as the request path records into it (server/trace/trace.ts keeps and
 * writes it).
 */
export interface RequestTrace {
  /** The trace id. */
  readonly id: number;
  /** The model name. */
  readonly model: string;
  /** The model version. */
  readonly version: string;
  /** The request id, "" when none. */
  readonly requestId: string;
  /** The timestamps recorded so far, in the order they were recorded. */
  readonly timestamps: readonly { name: string; ns: number }[];
  /** When the trace ended (nowNs() at end()), 0 before. */
  readonly endNs: number;
  /**
   * Records a timestamp.
   * @param name Triton's timestamp name (REQUEST_START, QUEUE_START, COMPUTE_START, ...)
   * @param ns when, from nowNs(); now when left out
   */
  mark(name: string, ns?: number): void;
  /**
   * Records tensors (at trace level TENSORS; nothing otherwise).
   * @param kind "TENSOR_QUEUE_INPUT" or "TENSOR_BACKEND_OUTPUT"
   * @param tensors the tensors
   */
  recordTensors(kind: string, tensors: Iterable<Tensor>): void;
  /** Ends the trace (once). */
  end(): void;
}

/** Receives the responses of one request to a decoupled model; `final` is set on the last call. */
export type ResponseSink = (response: InferResponse | ServerError | undefined, final: boolean) => void;

/** The answer to one InferRequest. */
export interface InferResponse {
  /** The model name. */
  model: string;
  /** The version that executed the request. */
  version: string;
  /** The request id, "" when none. */
  id: string;
  /** The output tensors, in the order asked for (or the model's order). */
  outputs: Tensor[];
  /** Response parameters. */
  parameters: Record<string, ParamValue>;
}

/** An input or output of a model as its configuration declares it. */
export interface TensorSpec {
  /** The tensor name. */
  name: string;
  /** The protocol datatype. */
  datatype: Datatype;
  /** The config dims, without the batch dimension; -1 for a variable dim. */
  dims: number[];
  /** The shape the model itself sees (config `reshape`), without the batch dimension. */
  modelDims: number[];
  /** Whether the input may be left out (inputs only). */
  optional: boolean;
  /** Classification labels (outputs with a `label_filename`), by class index. */
  labels: string[] | undefined;
}
