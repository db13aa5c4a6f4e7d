/**
 * The gRPC wire format of inference: `ModelInferRequest` (typed `InferTensorContents` or
 * `raw_input_contents`) to the core request, and the core response to `ModelInferResponse`
 * (`raw_output_contents`, as Triton answers).
 * @module
 */

import { BytesTensor } from "../../core/bytes_tensor.ts";
import { bytesOf, type Datatype, elementCount, fromJsonValues, isDatatype } from "../../core/dtypes.ts";
import { invalidArg } from "../../core/errors.ts";
import { lookupType } from "../../core/protos.ts";
import type * as protobuf from "protobufjs";
import type { InferRequest, InferResponse, ParamValue, RequestedOutput, Tensor } from "../../core/types.ts";
import { requestedClassification, shapeText } from "../../core/validate.ts";
import { shmLocation } from "../../shm/regions.ts";
import { readShmInput, type ShmReader } from "../../shm/session.ts";
import { SmallCache } from "../../core/small_cache.ts";

/** An int64/uint64 as protobufjs decodes it: a number, or a Long. */
type LongLike = number | { toString(): string; toNumber?(): number; unsigned?: boolean };

/** A decoded `InferParameter`. */
export interface InferParameterMessage {
  bool_param?: boolean;
  int64_param?: LongLike;
  string_param?: string;
  double_param?: number;
  uint64_param?: LongLike;
  parameter_choice?: string;
}

interface ContentsMessage {
  bool_contents?: boolean[];
  int_contents?: number[];
  int64_contents?: LongLike[];
  uint_contents?: number[];
  uint64_contents?: LongLike[];
  fp32_contents?: number[];
  fp64_contents?: number[];
  bytes_contents?: Uint8Array[];
}

interface InputMessage {
  name: string;
  datatype: string;
  shape: LongLike[];
  parameters?: Record<string, InferParameterMessage>;
  contents?: ContentsMessage | null;
}

/** A decoded `ModelInferRequest`. */
export interface ModelInferRequestMessage {
  model_name: string;
  model_version: string;
  id: string;
  parameters?: Record<string, InferParameterMessage>;
  inputs: InputMessage[];
  outputs: { name: string; parameters?: Record<string, InferParameterMessage> }[];
  raw_input_contents: Uint8Array[];
}

/** Converts a protobufjs 64-bit value to a number (exact up to 2^53). */
export function longToNumber(v: LongLike): number {
  if (typeof v === "number") return v;
  return v.toNumber ? v.toNumber() : Number(v.toString());
}

function longToBigInt(v: LongLike): bigint {
  return typeof v === "number" ? BigInt(v) : BigInt(v.toString());
}

/**
 * Converts a gRPC parameter map to core parameters (int64 and uint64 as numbers when exact, else bigint).
 * @param params the decoded map
 */
export function fromInferParameters(
  params: Record<string, InferParameterMessage> | undefined,
): Record<string, ParamValue> {
  const out: Record<string, ParamValue> = {};
  if (!params) return out;
  for (const [k, p] of Object.entries(params)) {
    const choice = p.parameter_choice;
    if (choice === "bool_param") out[k] = p.bool_param!;
    else if (choice === "string_param") out[k] = p.string_param!;
    else if (choice === "double_param") out[k] = p.double_param!;
    else if (choice === "int64_param" || choice === "uint64_param") {
      const b = longToBigInt(p[choice]!);
      out[k] = b >= BigInt(Number.MIN_SAFE_INTEGER) && b <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : b;
    }
  }
  return out;
}

/**
 * Converts core parameters to a gRPC parameter map: booleans, strings, integers as int64 (uint64 beyond
 * int64's range), other numbers as double.
 * @param params core parameters
 */
export function toInferParameters(
  params: Record<string, ParamValue>,
): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [k, v] of Object.entries(params)) {
    if (typeof v === "boolean") out[k] = { bool_param: v };
    else if (typeof v === "string") out[k] = { string_param: v };
    else if (typeof v === "bigint") {
      out[k] = v > 2n ** 63n - 1n ? { uint64_param: v.toString() } : { int64_param: v.toString() };
    } else if (Number.isInteger(v)) out[k] = { int64_param: v };
    else out[k] = { double_param: v };
  }
  return out;
}

const TYPED_FIELD: Record<Datatype, keyof ContentsMessage | undefined> = {
  BOOL: "bool_contents",
  UINT8: "uint_contents",
  UINT16: "uint_contents",
  UINT32: "uint_contents",
  UINT64: "uint64_contents",
  INT8: "int_contents",
  INT16: "int_contents",
  INT32: "int_contents",
  INT64: "int64_contents",
  FP16: undefined,
  BF16: undefined,
  FP32: "fp32_contents",
  FP64: "fp64_contents",
  BYTES: "bytes_contents",
};

function fromContents(dt: Datatype, contents: ContentsMessage, count: number, what: string): Tensor["data"] {
  const field = TYPED_FIELD[dt];
  if (!field) {
    throw invalidArg(
      `Cannot read ${what}: datatype ${dt} has no typed contents field, send it in raw_input_contents`,
    );
  }
  for (const [k, v] of Object.entries(contents)) {
    if (k !== field && Array.isArray(v) && v.length > 0) {
      throw invalidArg(`Cannot read ${what}: datatype ${dt} takes '${field}', but '${k}' is set`);
    }
  }
  const values = (contents[field] ?? []) as unknown[];
  if (values.length !== count) {
    throw invalidArg(`Cannot read ${what}: '${field}' has ${values.length} elements, expected ${count}`);
  }
  if (dt === "BYTES") return BytesTensor.of(values as Uint8Array[]);
  if (dt === "INT64" || dt === "UINT64") {
    const out = dt === "INT64" ? new BigInt64Array(count) : new BigUint64Array(count);
    for (let i = 0; i < count; i++) out[i] = longToBigInt(values[i] as LongLike);
    return bytesOf(out);
  }
  return fromJsonValues(dt, values, what);
}

/**
 * Decodes a `ModelInferRequest` into the core request.
 * @param msg the decoded message
 * @param shm reads inputs that name a shared-memory region
 */
export function decodeModelInferRequest(msg: ModelInferRequestMessage, shm?: ShmReader): InferRequest {
  const where = `the inference request for '${msg.model_name}'`;
  const raw = msg.raw_input_contents ?? [];
  // Inputs in shared memory take no raw_input_contents entry; the others take one each, in order.
  const inShm = msg.inputs.map((t) =>
    shmLocation(fromInferParameters(t.parameters), `${where}, input '${t.name}'`)
  );
  const rawCount = inShm.filter((l) => l === undefined).length;
  if (raw.length > 0 && raw.length !== rawCount) {
    throw invalidArg(
      `Cannot read ${where}: raw_input_contents has ${raw.length} entries for ${rawCount} inputs; when raw contents are used every input must have one`,
    );
  }
  let rawIndex = 0;
  const inputs: Tensor[] = msg.inputs.map((t, n) => {
    const what = `input '${t.name}'`;
    const loc = inShm[n];
    const i = loc ? -1 : rawIndex++;
    if (!isDatatype(t.datatype)) {
      throw invalidArg(`Cannot read ${where}: ${what} has unknown datatype '${t.datatype}'`);
    }
    const shape = t.shape.map(longToNumber);
    if (!shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw invalidArg(
        `Cannot read ${where}: ${what} has shape ${shapeText(shape)}, dims must be non-negative`,
      );
    }
    const count = elementCount(shape);
    const hasTyped = t.contents !== undefined && t.contents !== null &&
      Object.values(t.contents).some((v) => Array.isArray(v) && v.length > 0);
    if (loc) {
      if (hasTyped) {
        throw invalidArg(`Cannot read ${where}: ${what} has both shared memory and typed contents`);
      }
      return {
        name: t.name,
        datatype: t.datatype,
        shape,
        data: readShmInput(shm, loc, t.datatype, shape, where, what),
      };
    }
    if (raw.length > 0) {
      if (hasTyped) {
        throw invalidArg(`Cannot read ${where}: ${what} has both typed contents and raw_input_contents`);
      }
      const bytes = raw[i]!;
      if (t.datatype === "BYTES") {
        return {
          name: t.name,
          datatype: t.datatype,
          shape,
          data: BytesTensor.fromWire(bytes, count, `${where}, ${what}`, {
            input: t.name,
            model: msg.model_name,
          }),
        };
      }
      return { name: t.name, datatype: t.datatype, shape, data: bytes };
    }
    if (!t.contents) {
      if (count === 0) {
        return {
          name: t.name,
          datatype: t.datatype,
          shape,
          data: t.datatype === "BYTES" ? new BytesTensor(new Uint8Array(0), 0) : new Uint8Array(0),
        };
      }
      throw invalidArg(`Cannot read ${where}: ${what} has no contents and there are no raw_input_contents`);
    }
    return {
      name: t.name,
      datatype: t.datatype,
      shape,
      data: fromContents(t.datatype, t.contents, count, `${where}, ${what}`),
    };
  });
  const outputs: RequestedOutput[] = (msg.outputs ?? []).map((o) => {
    const parameters = fromInferParameters(o.parameters);
    return { name: o.name, classification: requestedClassification(parameters), parameters };
  });
  const parameters = fromInferParameters(msg.parameters);
  // As Triton: 'triton_' keys are reserved; the one a client may send is the stream's, not the model's.
  for (const k of Object.keys(parameters)) {
    if (k === "triton_enable_empty_final_response") delete parameters[k];
    else if (k.startsWith("triton_")) {
      throw invalidArg(
        `Cannot read ${where}: parameter keys starting with 'triton_' are reserved for Triton usage. Only the following keys starting with 'triton_' are allowed: triton_enable_empty_final_response`,
      );
    }
  }
  return {
    model: msg.model_name,
    version: msg.model_version ?? "",
    id: msg.id ?? "",
    inputs,
    outputs,
    parameters,
  };
}

/**
 * Encodes a core response as a `ModelInferResponse` object (for `Type.encode`), outputs in
 * `raw_output_contents`.
 * @param response the core response
 * @param shmOutputs outputs already written to shared memory, with their parameters
 */
export function encodeModelInferResponse(
  response: InferResponse,
  shmOutputs?: Map<string, Record<string, ParamValue>>,
): Record<string, unknown> {
  return { ...responseFields(response, shmOutputs), raw_output_contents: rawContents(response, shmOutputs) };
}

/** A `ModelInferResponse` object's fields but `raw_output_contents`. */
function responseFields(
  response: InferResponse,
  shmOutputs: Map<string, Record<string, ParamValue>> | undefined,
): Record<string, unknown> {
  return {
    model_name: response.model,
    model_version: response.version,
    id: response.id,
    parameters: toInferParameters(response.parameters),
    outputs: response.outputs.map((t) => {
      const inShm = shmOutputs?.get(t.name);
      return inShm
        ? { name: t.name, datatype: t.datatype, shape: t.shape, parameters: toInferParameters(inShm) }
        : { name: t.name, datatype: t.datatype, shape: t.shape };
    }),
  };
}

/** A response's `raw_output_contents`: one entry per output, by position, empty for an output in shared memory. */
function rawContents(
  response: InferResponse,
  shmOutputs: Map<string, Record<string, ParamValue>> | undefined,
): Uint8Array[] {
  return response.outputs.map((t) =>
    shmOutputs?.has(t.name) ? new Uint8Array(0) : t.data instanceof Uint8Array ? t.data : t.data.data
  );
}

/** The wire tag of `ModelInferResponse.raw_output_contents` (field 6, length-delimited). */
const RAW_OUTPUT_TAG = (6 << 3) | 2;
/** The wire tag of `ModelStreamInferResponse.infer_response` (field 2, length-delimited). */
const STREAM_RESPONSE_TAG = (2 << 3) | 2;

let responseType: protobuf.Type | undefined;

/** The bytes of a varint (a length: non-negative, below 2^53). */
function varintLength(n: number): number {
  let length = 1;
  for (; n >= 128; n = Math.floor(n / 128)) length++;
  return length;
}

/** Writes a varint at `at`, returning the position after it. */
function writeVarint(out: Uint8Array, at: number, n: number): number {
  for (; n >= 128; n = Math.floor(n / 128)) out[at++] = (n % 128) | 128;
  out[at++] = n;
  return at;
}

/** Raw outputs from this size on are parts of their own in `encodeModelInferResponseParts`; smaller ones are copied. */
export const OWN_PART_BYTES = 64 * 1024;

/** How many encoded response fields `encodeModelInferResponseParts` keeps (see plainFieldsKey). */
const FIELDS_KEPT = 64;
const encodedFields = new SmallCache<string, Uint8Array>(FIELDS_KEPT);

/**
 * The key of a response's fields (all but the raw contents) when they are only the model, version and outputs'
 * names, datatypes and shapes: no id, no parameters, no output in shared memory. Such fields repeat from one
 * response to the next (the same model and shapes), and protobufjs took about 4 µs to encode those of `simple`
 * on 2 cores, against about 1 µs to decode its whole request; undefined for any other response.
 */
function plainFieldsKey(
  response: InferResponse,
  shmOutputs: Map<string, Record<string, ParamValue>> | undefined,
  parameters: Record<string, ParamValue> | undefined,
): string | undefined {
  if (response.id !== "" || parameters !== undefined || (shmOutputs !== undefined && shmOutputs.size > 0)) {
    return undefined;
  }
  for (const _ in response.parameters) return undefined;
  // Each text with its length first, so that no two responses share a key.
  let key = `${response.model.length}:${response.model}${response.version.length}:${response.version}`;
  for (const t of response.outputs) {
    key += `${t.name.length}:${t.name}${t.datatype}:${t.shape.join(",")};`;
  }
  return key;
}

/** How `encodeModelInferResponseParts` lays the message out. */
export interface ResponsePartsOptions {
  /** Bytes left free at the start of the first part, for the caller (a frame header); 0 unless given. */
  reserve?: number;
  /** Whether the message is a `ModelStreamInferResponse` carrying the response (and no error). */
  stream?: boolean;
  /** Parameters added to the response's own. */
  parameters?: Record<string, ParamValue>;
}

/**
 * Encodes a core response as the protobuf bytes of a `ModelInferResponse` (outputs in `raw_output_contents`), in
 * parts whose concatenation is the message: the fields but the raw contents through protobufjs, then the raw
 * contents (the message's last field), each output of `OWN_PART_BYTES` or more being a part of its own (the
 * output's bytes, not a copy) and the rest joined around them.
 * @param response the core response
 * @param shmOutputs outputs already written to shared memory, with their parameters
 * @param options free bytes before the message, the stream's wrapping, added parameters
 * @returns the parts: the first starts with `reserve` free bytes
 */
export function encodeModelInferResponseParts(
  response: InferResponse,
  shmOutputs: Map<string, Record<string, ParamValue>> | undefined,
  options: ResponsePartsOptions = {},
): Uint8Array[] {
  const { reserve = 0, stream = false } = options;
  const withParameters = options.parameters
    ? { ...response, parameters: { ...response.parameters, ...options.parameters } }
    : response;
  // The fields of a plain response are encoded once for all the responses that share them (read only: they are
  // copied into the first part below).
  const key = plainFieldsKey(response, shmOutputs, options.parameters);
  let head = key === undefined ? undefined : encodedFields.get(key);
  if (head === undefined) {
    const fields = responseFields(withParameters, shmOutputs);
    head = (responseType ??= lookupType("ModelInferResponse")).encode(fields).finish();
    if (key !== undefined) encodedFields.set(key, head);
  }
  const raw = rawContents(response, shmOutputs);
  let inner = head.byteLength;
  for (const r of raw) inner += 1 + varintLength(r.byteLength) + r.byteLength;
  // The lengths of the parts the bytes are copied into: before, between and after the outputs that are parts
  // of their own.
  const lengths: number[] = [];
  let length = reserve + (stream ? 1 + varintLength(inner) : 0) + head.byteLength;
  for (const r of raw) {
    length += 1 + varintLength(r.byteLength);
    if (r.byteLength < OWN_PART_BYTES) length += r.byteLength;
    else {
      lengths.push(length);
      length = 0;
    }
  }
  if (length > 0 || lengths.length === 0) lengths.push(length);
  const parts: Uint8Array[] = [];
  let out = new Uint8Array(lengths[0]!);
  let at = reserve;
  if (stream) {
    out[at++] = STREAM_RESPONSE_TAG;
    at = writeVarint(out, at, inner);
  }
  out.set(head, at);
  at += head.byteLength;
  for (const r of raw) {
    out[at++] = RAW_OUTPUT_TAG;
    at = writeVarint(out, at, r.byteLength);
    if (r.byteLength < OWN_PART_BYTES) {
      out.set(r, at);
      at += r.byteLength;
    } else {
      parts.push(out, r);
      out = new Uint8Array(lengths[parts.length / 2] ?? 0);
      at = 0;
    }
  }
  if (parts.length / 2 < lengths.length) parts.push(out);
  return parts;
}
