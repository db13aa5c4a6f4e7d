/**
 * Validation: checks a request against its model's signature before any queue sees it.
 * @module
 */

import { BytesTensor } from "./bytes_tensor.ts";
import { elementCount, elementSize } from "./dtypes.ts";
import { invalidArg } from "./errors.ts";
import type { InferRequest, ParamValue, RequestedOutput, Tensor, TensorSpec } from "./types.ts";

/** What validation needs to know of a model version. */
export interface ModelSignature {
  /** The model name. */
  name: string;
  /** The config's max_batch_size; 0 when the model does not batch. */
  maxBatchSize: number;
  /** The inputs, in config order. */
  inputs: TensorSpec[];
  /** The outputs, in config order. */
  outputs: TensorSpec[];
}

/** A request that passed validation. */
export interface ValidatedRequest {
  /** The original request. */
  request: InferRequest;
  /** The batch size (1 for models that do not batch). */
  batchSize: number;
  /** The inputs by name. */
  inputs: Map<string, Tensor>;
  /** The outputs to return, resolved against the model (all of them when the request named none). */
  outputs: RequestedOutput[];
}

/**
 * Formats a shape the way error messages show it.
 * @param shape dims
 */
export function shapeText(shape: readonly number[]): string {
  return `[${shape.join(",")}]`;
}

/**
 * The classification an output's parameters ask for (the `classification` parameter; 0 for none), as the
 * codecs put it into a RequestedOutput: a value that is no number becomes NaN, which validateRequest refuses
 * (naming the value the client sent).
 * @param params the output's parameters
 */
export function requestedClassification(params: Record<string, ParamValue>): number {
  const c = params.classification;
  return c === undefined ? 0 : typeof c === "number" ? c : Number.NaN;
}

/**
 * Whether a shape matches a signature's dims (-1 any size), behind a batch dimension of any size when the model
 * batches; every dimension a non-negative integer.
 */
function shapeMatches(shape: readonly number[], dims: readonly number[], batched: boolean): boolean {
  const skip = batched ? 1 : 0;
  if (shape.length !== dims.length + skip) return false;
  for (let i = 0; i < shape.length; i++) {
    const d = shape[i]!;
    if (!Number.isInteger(d) || d < 0) return false;
    const want = i < skip ? -1 : dims[i - skip]!;
    if (want !== -1 && want !== d) return false;
  }
  return true;
}

/** The number of inputs a signature requires (not optional). */
function requiredCount(sig: ModelSignature): number {
  let n = 0;
  for (const spec of sig.inputs) if (!spec.optional) n++;
  return n;
}

function quoteList(names: readonly string[]): string {
  return names.map((n) => `'${n}'`).join(", ");
}

/**
 * Checks a request against a model signature: input names, datatypes, shapes, batch size, data sizes and the
 * requested outputs. Messages keep the phrases of Triton's that its clients and tests match on.
 * @param request the decoded request
 * @param sig the model's signature
 * @returns the validated request
 * @throws ServerError INVALID_ARG naming what was wrong
 */
export function validateRequest(request: InferRequest, sig: ModelSignature): ValidatedRequest {
  const fail = (reason: string): never => {
    throw invalidArg(`Cannot infer '${sig.name}': ${reason}`);
  };
  const inputs = new Map<string, Tensor>();
  let batchSize = -1;
  for (const t of request.inputs) {
    if (inputs.has(t.name)) fail(`input '${t.name}' is given more than once`);
    const spec = sig.inputs.find((s) => s.name === t.name);
    if (!spec) {
      fail(
        `unexpected inference input '${t.name}' for model '${sig.name}', the model's inputs are ${
          quoteList(sig.inputs.map((s) => s.name))
        }`,
      );
      return undefined as never;
    }
    if (t.datatype !== spec.datatype) {
      fail(
        `inference input '${t.name}' data-type is '${t.datatype}', but model '${sig.name}' expects '${spec.datatype}'`,
      );
    }
    if (!shapeMatches(t.shape, spec.dims, sig.maxBatchSize > 0)) {
      const expected = sig.maxBatchSize > 0 ? [-1, ...spec.dims] : spec.dims;
      fail(
        `unexpected shape for input '${t.name}' for model '${sig.name}'. Expected ${
          shapeText(expected)
        }, got ${shapeText(t.shape)}`,
      );
    }
    if (sig.maxBatchSize > 0) {
      const b = t.shape[0]!;
      if (b < 1) fail(`input '${t.name}' has batch size ${b}, expected at least 1`);
      if (b > sig.maxBatchSize) {
        fail(
          `inference request batch-size must be <= ${sig.maxBatchSize} for '${sig.name}', input '${t.name}' has ${b}`,
        );
      }
      if (batchSize !== -1 && b !== batchSize) {
        fail(
          `input '${t.name}' batch size does not match other inputs for '${sig.name}' (${b}, the others ${batchSize})`,
        );
      }
      batchSize = b;
    }
    const count = elementCount(t.shape);
    if (t.datatype === "BYTES") {
      if (!(t.data instanceof BytesTensor)) fail(`input '${t.name}' of type BYTES has no element list`);
      const n = (t.data as BytesTensor).count;
      if (n !== count) {
        fail(`input '${t.name}' has ${n} elements, expected ${count} for shape ${shapeText(t.shape)}`);
      }
    } else {
      if (!(t.data instanceof Uint8Array)) fail(`input '${t.name}' has no byte contents`);
      const bytes = (t.data as Uint8Array).byteLength;
      const want = count * elementSize(t.datatype);
      if (bytes !== want) {
        // Triton's wording, which its clients and tests match on (binary data, raw contents, shared memory).
        fail(
          `input byte size mismatch for input '${t.name}' for model '${sig.name}'. Expected ${want}, got ${bytes}`,
        );
      }
    }
    inputs.set(t.name, t);
  }
  let required = 0;
  for (const spec of sig.inputs) if (!spec.optional && inputs.has(spec.name)) required++;
  const missing = required === requiredCount(sig)
    ? []
    : sig.inputs.filter((spec) => !spec.optional && !inputs.has(spec.name)).map((s) => s.name);
  if (missing.length > 0) {
    // Triton's wording, which its clients and tests match on.
    const required = sig.inputs.filter((spec) => !spec.optional).length;
    const expected = required === sig.inputs.length
      ? `${required} inputs`
      : `number of inputs between ${required} and ${sig.inputs.length}`;
    const list = (names: string[]) => `[${names.sort().map((n) => `'${n}'`).join(",")}]`;
    fail(
      `expected ${expected} but got ${inputs.size} inputs for model '${sig.name}'. Got input(s) ${
        list([...inputs.keys()])
      }, but missing required input(s) ${list(missing)}. Please provide all required input(s).`,
    );
  }

  let outputs: RequestedOutput[];
  if (request.outputs.length === 0) {
    outputs = sig.outputs.map((s) => ({ name: s.name, classification: 0, parameters: {} }));
  } else {
    const seen = new Set<string>();
    for (const o of request.outputs) {
      if (seen.has(o.name)) fail(`output '${o.name}' is requested more than once`);
      seen.add(o.name);
      if (!sig.outputs.some((s) => s.name === o.name)) {
        fail(
          `unexpected inference output '${o.name}' for model '${sig.name}', the model's outputs are ${
            quoteList(sig.outputs.map((s) => s.name))
          }`,
        );
      }
      if (!Number.isInteger(o.classification) || o.classification < 0) {
        // The value as the client sent it (the codecs keep it among the output's parameters).
        const asked = o.parameters.classification ?? o.classification;
        fail(`output '${o.name}' asks for classification ${String(asked)}, expected a non-negative integer`);
      }
      if (o.classification > 0) {
        // Refused here rather than when the batch is answered, where it failed every request of the batch.
        const datatype = sig.outputs.find((s) => s.name === o.name)!.datatype;
        if (datatype === "BYTES" || datatype === "BOOL") {
          fail(`cannot classify output '${o.name}': datatype ${datatype} is not numeric`);
        }
      }
    }
    outputs = request.outputs;
  }
  return { request, batchSize: batchSize === -1 ? 1 : batchSize, inputs, outputs };
}
