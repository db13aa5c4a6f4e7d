/**
 * Running one batch of validated requests on one instance: inputs concatenated once per input, outputs split
 * back into per-request views, requested outputs and classification applied.
 * @module
 */

import { BytesTensor } from "../core/bytes_tensor.ts";
import { classify } from "../core/classification.ts";
import { internal, type ServerError, toServerError } from "../core/errors.ts";
import type { InferResponse, ParamValue, Tensor, TensorSpec } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import { type BackendInstance, type BackendOutputs, RESPONSE_PARAMETERS } from "../backends/backend.ts";
import { nowNs } from "../core/clock.ts";
import { setBytes } from "../core/shared_copy.ts";
import type { ExecutionTimes } from "../metrics/stats.ts";

/** The errors a model sent as a request's response (not failures of the execution itself). */
const modelErrors = new WeakSet<Error>();

/**
 * Whether an error is a response the model sent (a Python model's `InferenceResponse(error=...)`): as in Triton,
 * the request counts as a success in the statistics, its execution having succeeded.
 * @param err an error response of executeBatch
 */
export function isModelError(err: Error): boolean {
  return modelErrors.has(err);
}
import type { InstanceGate } from "./rate_limiter.ts";

/** What a batch needs to know of its model. */
export interface BatchModel {
  /** The model name. */
  name: string;
  /** The version string reported in responses. */
  version: string;
  /** Whether the model batches (max_batch_size > 0). */
  batched: boolean;
  /** The outputs by name. */
  outputs: Map<string, TensorSpec>;
  /** The rate limiter's gate (`--rate-limit=execution_count`): executions wait for their resources. */
  gate?: InstanceGate;
}

function concatInput(name: string, parts: Tensor[], instance: BackendInstance): Tensor {
  const first = parts[0]!;
  if (parts.length === 1) return first;
  const batch = parts.reduce((n, t) => n + t.shape[0]!, 0);
  const shape = [batch, ...first.shape.slice(1)];
  if (first.datatype === "BYTES") {
    return {
      name,
      datatype: "BYTES",
      shape,
      data: BytesTensor.concat(parts.map((t) => t.data as BytesTensor)),
    };
  }
  const total = parts.reduce((n, t) => n + (t.data as Uint8Array).byteLength, 0);
  // Straight into a buffer the instance lends (and reuses), where it has one.
  const out = instance.inputBuffer?.(name, total) ?? new Uint8Array(total);
  let off = 0;
  for (const t of parts) {
    setBytes(out, t.data as Uint8Array, off);
    off += (t.data as Uint8Array).byteLength;
  }
  return { name, datatype: first.datatype, shape, data: out };
}

function sliceOutput(t: Tensor, start: number, count: number, total: number): Tensor {
  if (start === 0 && count === total) return t;
  const shape = [count, ...t.shape.slice(1)];
  if (t.datatype === "BYTES") {
    const per = (t.data as BytesTensor).count / total;
    return { ...t, shape, data: (t.data as BytesTensor).slice(start * per, (start + count) * per) };
  }
  const bytes = t.data as Uint8Array;
  const per = bytes.byteLength / total;
  return { ...t, shape, data: bytes.subarray(start * per, (start + count) * per) };
}

/** Marks the compute timestamps (and, at level TENSORS, the outputs) of the traced requests of a batch. */
function traceExecution(
  requests: readonly ValidatedRequest[],
  responses: readonly (InferResponse | ServerError)[],
  times: ExecutionTimes,
): void {
  requests.forEach((r, i) => {
    const trace = r.request.trace;
    if (!trace) return;
    trace.mark("COMPUTE_START", times.start);
    trace.mark("COMPUTE_INPUT_END", times.inputEnd);
    trace.mark("COMPUTE_OUTPUT_START", times.inferEnd);
    trace.mark("COMPUTE_END", times.outputEnd);
    const res = responses[i];
    if (res && !(res instanceof Error)) trace.recordTensors("TENSOR_BACKEND_OUTPUT", res.outputs);
  });
}

/**
 * Builds a request's response from the outputs the backend produced.
 * @param partial leave out requested outputs the backend did not produce (a decoupled model's responses may
 *   carry any subset); otherwise a missing output is an error
 */
function respond(
  model: BatchModel,
  r: ValidatedRequest,
  outputs: (name: string) => Tensor | undefined,
  partial = false,
  parameters?: Readonly<Record<string, ParamValue>>,
): InferResponse {
  const tensors: Tensor[] = [];
  for (const o of r.outputs) {
    const t = outputs(o.name);
    if (!t) {
      if (partial) continue;
      throw internal(`Cannot run '${model.name}': the backend produced no output '${o.name}'`);
    }
    tensors.push(
      o.classification > 0
        ? classify(t, o.classification, model.batched, model.outputs.get(o.name)?.labels)
        : t,
    );
  }
  return {
    model: model.name,
    version: model.version,
    id: r.request.id,
    outputs: tensors,
    parameters: parameters ? { ...parameters } : {},
  };
}

/** The `send` of a request to a decoupled model: turns each backend response into the request's response. */
function streamTo(
  model: BatchModel,
  r: ValidatedRequest,
): ((outputs: Map<string, Tensor> | Error | undefined, final: boolean) => void) | undefined {
  const stream = r.request.stream;
  if (!stream) return undefined;
  return (out, final) => {
    if (out === undefined) return stream(undefined, final);
    if (out instanceof Error) return stream(toServerError(out), final);
    let response: InferResponse | ServerError;
    try {
      response = respond(
        model,
        r,
        (name) => out.get(name),
        true,
        (out as BackendOutputs)[RESPONSE_PARAMETERS],
      );
    } catch (err) {
      response = toServerError(err);
    }
    stream(response, final);
  };
}

/** A batch for a backend that takes separate requests: each request gets its own outputs or error. */
async function executeSeparately(
  model: BatchModel,
  instance: BackendInstance,
  requests: readonly ValidatedRequest[],
): Promise<{ responses: (InferResponse | ServerError)[]; times: ExecutionTimes }> {
  const start = nowNs();
  const list = requests.map((r) => ({
    inputs: r.inputs,
    outputNames: r.outputs.map((o) => o.name),
    id: r.request.id,
    parameters: r.request.parameters,
    send: streamTo(model, r),
    signal: r.request.signal,
  }));
  const total = requests.reduce((n, r) => n + r.batchSize, 0);
  const inputEnd = nowNs();
  const results = await instance.executeRequests!(list);
  const inferEnd = nowNs();
  const responses = requests.map((r, i) => {
    const out = results[i];
    if (out === undefined) {
      return internal(`Cannot run '${model.name}': the backend gave no answer for a request`);
    }
    if (out instanceof Error) {
      const e = toServerError(out);
      modelErrors.add(e);
      return e;
    }
    try {
      // A decoupled model's request answers through its stream; the response here only says it ran.
      if (r.request.stream) return respond(model, r, () => undefined, true);
      // As Triton: a model that answers each request itself (Python) may leave out outputs; the response
      // carries those it produced.
      return respond(model, r, (name) => out.get(name), true, (out as BackendOutputs)[RESPONSE_PARAMETERS]);
    } catch (err) {
      return toServerError(err);
    }
  });
  const times = { batchSize: total, start, inputEnd, inferEnd, outputEnd: nowNs() };
  traceExecution(requests, responses, times);
  return { responses, times };
}

/**
 * Whether two requests may share a batch: same inputs with the same non-batch shapes.
 * @param a one request
 * @param b another
 */
export function batchCompatible(a: ValidatedRequest, b: ValidatedRequest): boolean {
  if (a.inputs.size !== b.inputs.size) return false;
  for (const [name, ta] of a.inputs) {
    const tb = b.inputs.get(name);
    if (!tb || ta.shape.length !== tb.shape.length) return false;
    for (let i = 1; i < ta.shape.length; i++) if (ta.shape[i] !== tb.shape[i]) return false;
  }
  return true;
}

/**
 * Executes requests as one batch on an instance and builds each request's response. Requests must be
 * batch-compatible; a model that does not batch gets exactly one request.
 * @param model the model's batch facts
 * @param instance the instance to run on
 * @param requests the requests of the batch
 * @returns one response per request, in order, and the execution's timestamps; rejects for the whole batch
 *   when execution fails
 */
export function executeBatch(
  model: BatchModel,
  instance: BackendInstance,
  requests: readonly ValidatedRequest[],
): Promise<{ responses: (InferResponse | ServerError)[]; times: ExecutionTimes }> {
  const gate = model.gate;
  return gate ? executeGated(gate, model, instance, requests) : runBatch(model, instance, requests);
}

async function executeGated(
  gate: NonNullable<BatchModel["gate"]>,
  model: BatchModel,
  instance: BackendInstance,
  requests: readonly ValidatedRequest[],
): Promise<{ responses: (InferResponse | ServerError)[]; times: ExecutionTimes }> {
  // Under the rate limiter the wait for resources comes before the execution's start: it is queue time.
  await gate.acquire(instance);
  try {
    return await runBatch(model, instance, requests);
  } finally {
    gate.release(instance);
  }
}

function runBatch(
  model: BatchModel,
  instance: BackendInstance,
  requests: readonly ValidatedRequest[],
): Promise<{ responses: (InferResponse | ServerError)[]; times: ExecutionTimes }> {
  if (instance.executeRequests) return executeSeparately(model, instance, requests);
  let start: number;
  let inputEnd: number;
  let execution: Promise<Map<string, Tensor>>;
  try {
    start = nowNs();
    const { inputs, names } = batchInputs(instance, requests);
    inputEnd = nowNs();
    execution = instance.execute(inputs, names);
  } catch (err) {
    return Promise.reject(err);
  }
  // A plain promise chain rather than an async function: a lone request costs no suspended frame.
  return execution.then((produced) => splitBatch(model, requests, produced, start, inputEnd));
}

/**
 * Executes requests as one batch on an instance that runs on the caller's thread (`executeSync`, no rate
 * limiter) and builds each request's response, as executeBatch does, at once.
 * @param model the model's batch facts
 * @param instance the instance to run on; it has executeSync
 * @param requests the requests of the batch
 * @returns one response per request, in order, and the execution's timestamps
 * @throws the execution's error, for the whole batch
 */
export function executeBatchSync(
  model: BatchModel,
  instance: BackendInstance,
  requests: readonly ValidatedRequest[],
): { responses: (InferResponse | ServerError)[]; times: ExecutionTimes } {
  const start = nowNs();
  const { inputs, names } = batchInputs(instance, requests);
  const inputEnd = nowNs();
  const produced = instance.executeSync!(inputs, names);
  return splitBatch(model, requests, produced, start, inputEnd);
}

/** A batch's inputs (each concatenated over its requests) and the outputs any of them asked for. */
function batchInputs(
  instance: BackendInstance,
  requests: readonly ValidatedRequest[],
): { inputs: Map<string, Tensor>; names: string[] } {
  const first = requests[0]!;
  // A batch of one runs on the request's own inputs (backends only read them).
  if (requests.length === 1) return { inputs: first.inputs, names: first.outputs.map((o) => o.name) };
  const inputs = new Map<string, Tensor>();
  for (const name of first.inputs.keys()) {
    inputs.set(name, concatInput(name, requests.map((r) => r.inputs.get(name)!), instance));
  }
  const wanted = new Set<string>();
  for (const r of requests) for (const o of r.outputs) wanted.add(o.name);
  return { inputs, names: [...wanted] };
}

/** Splits a batch's outputs into each request's response and traces the execution. */
function splitBatch(
  model: BatchModel,
  requests: readonly ValidatedRequest[],
  produced: Map<string, Tensor>,
  start: number,
  inputEnd: number,
): { responses: (InferResponse | ServerError)[]; times: ExecutionTimes } {
  const inferEnd = nowNs();
  const total = requests.reduce((n, r) => n + r.batchSize, 0);
  for (const [name, full] of produced) {
    if (model.batched && full.shape[0] !== total) {
      throw internal(
        `Cannot run '${model.name}': output '${name}' has batch dim ${full.shape[0]}, expected ${total}`,
      );
    }
  }
  let offset = 0;
  const responses = requests.map((r) => {
    const at = offset;
    offset += r.batchSize;
    return respond(model, r, (name) => {
      const full = produced.get(name);
      return full && model.batched ? sliceOutput(full, at, r.batchSize, total) : full;
    });
  });
  const times = { batchSize: total, start, inputEnd, inferEnd, outputEnd: nowNs() };
  traceExecution(requests, responses, times);
  // A backend without separate requests answers a decoupled model's request with exactly one response.
  requests.forEach((r, i) => r.request.stream?.(responses[i], true));
  return { responses, times };
}
