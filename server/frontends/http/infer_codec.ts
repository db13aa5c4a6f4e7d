/**
 * The HTTP/REST wire format of inference: JSON requests and responses, the binary tensor data extension
 * (`Inference-Header-Content-Length`, `binary_data_size`, `binary_data`, `binary_data_output`) and the raw
 * single-input form.
 * @module
 */

import { concatBytes, copyInto } from "../../core/bytes.ts";
import { BytesTensor } from "../../core/bytes_tensor.ts";
import {
  type Datatype,
  elementCount,
  fromJsonValues,
  isDatatype,
  parseJsonExact,
  stringifyExact,
  toJsonText,
  utf8Decode,
  utf8Encode,
} from "../../core/dtypes.ts";
import { invalidArg } from "../../core/errors.ts";
import type { InferRequest, InferResponse, ParamValue, RequestedOutput, Tensor } from "../../core/types.ts";
import { requestedClassification, shapeText } from "../../core/validate.ts";
import { shmLocation } from "../../shm/regions.ts";
import { readShmInput, type ShmReader } from "../../shm/session.ts";
import { DEFERRED_DATA, JSON_STREAM_BYTES, jsonChunks, jsonWhole } from "./json_chunks.ts";
import { SmallCache } from "../../core/small_cache.ts";
import { Slab } from "../../core/slab.ts";

/** The header that splits a body into its JSON part and its binary part. */
export const HEADER_LENGTH = "inference-header-content-length";

type Json = Record<string, unknown>;

/** The binary part of a body that has none (only read: no tensor is a view of it). */
const NO_BYTES = new Uint8Array(0);

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function parameters(v: unknown, where: string): Record<string, ParamValue> {
  if (v === undefined || v === null) return {};
  if (!isObject(v)) throw invalidArg(`Cannot read ${where}: 'parameters' must be an object`);
  for (const [k, x] of Object.entries(v)) {
    // parseJsonExact gives bigint for integers beyond 2^53; they stay exact (e.g. a uint64 sequence_id).
    if (typeof x !== "boolean" && typeof x !== "number" && typeof x !== "string" && typeof x !== "bigint") {
      throw invalidArg(`Cannot read ${where}: parameter '${k}' must be a boolean, number or string`);
    }
  }
  return v as Record<string, ParamValue>;
}

/** The parameters of an input that has none (frozen: only read). */
const NO_PARAMETERS: Readonly<Record<string, ParamValue>> = Object.freeze({});

/** Whether parameters hold a key starting with `triton_` (reserved). */
function hasReservedKey(params: Record<string, ParamValue>): boolean {
  for (const k in params) if (k.startsWith("triton_")) return true;
  return false;
}

/** Appends the leaves of nested arrays in order; iterative, so that any nesting depth is fine. */
/**
 * Appends the leaves of nested lists to `out`, in order; iterative, so that a deeply nested value cannot overflow
 * the stack.
 * @param data the lists
 * @param out where the leaves go
 */
export function flatten(data: unknown[], out: unknown[]): void {
  const stack: { array: unknown[]; next: number }[] = [{ array: data, next: 0 }];
  while (stack.length > 0) {
    const top = stack[stack.length - 1]!;
    if (top.next === top.array.length) {
      stack.pop();
      continue;
    }
    const v = top.array[top.next++];
    if (Array.isArray(v)) stack.push({ array: v, next: 0 });
    else out.push(v);
  }
}

/** The model and version a request addresses (from the URL). */
export interface Target {
  /** The model name. */
  model: string;
  /** The version ("" for the policy's choice). */
  version: string;
}

/** A decoded request plus what the HTTP encoder needs for the answer. */
export interface DecodedRequest {
  /** The core request. */
  request: InferRequest;
  /** Whether outputs default to binary (`binary_data_output`). */
  binaryOutput: boolean;
}

/**
 * Decodes an inference request body.
 * @param body the (decompressed) body; text when it is JSON alone (no Inference-Header-Content-Length)
 * @param headerLength the Inference-Header-Content-Length value, or undefined when absent
 * @param target the model and version from the URL
 * @param rawInput for the raw single-input form: the model's only input (name, datatype, shape) to fill
 * @param shm reads inputs that name a shared-memory region
 */
export function decodeInferRequest(
  body: Uint8Array | string,
  headerLength: number | undefined,
  target: Target,
  rawInput?: (bytes: number) => { name: string; datatype: Datatype; shape: number[] },
  shm?: ShmReader,
): DecodedRequest {
  const where = `the inference request for '${target.model}'`;
  if (typeof body === "string") {
    if (headerLength !== undefined) {
      throw invalidArg(`Cannot read ${where}: a text body cannot carry binary data`);
    }
    return decodeJson(body, NO_BYTES, target, where, shm);
  }
  if (headerLength === 0) {
    if (!rawInput) {
      throw invalidArg(`Cannot read ${where}: the raw binary form needs a model with exactly one input`);
    }
    const spec = rawInput(body.byteLength);
    const data = spec.datatype === "BYTES"
      ? BytesTensor.fromWire(body, elementCount(spec.shape), `input '${spec.name}'`)
      : body;
    return {
      request: {
        model: target.model,
        version: target.version,
        id: "",
        inputs: [{ ...spec, data }],
        outputs: [],
        parameters: {},
      },
      binaryOutput: true,
    };
  }
  let jsonBytes = body;
  let binary: Uint8Array = NO_BYTES;
  if (headerLength !== undefined) {
    if (!Number.isInteger(headerLength) || headerLength < 0 || headerLength > body.byteLength) {
      throw invalidArg(
        `Cannot read ${where}: Inference-Header-Content-Length is ${headerLength} but the body has ${body.byteLength} bytes`,
      );
    }
    jsonBytes = body.subarray(0, headerLength);
    binary = body.subarray(headerLength);
    const text = utf8Decode(jsonBytes);
    const known = binaryHeaders.get(text)?.decode(binary, target);
    if (known) return known;
    const decoded = decodeJson(text, binary, target, where, shm);
    rememberHeader(text, decoded, binary);
    return decoded;
  }
  return decodeJson(utf8Decode(jsonBytes), binary, target, where, shm);
}

/** The JSON parts of binary requests longer than this many characters are not remembered. */
const HEADER_CACHE_MAX_CHARS = 4096;

/** How many JSON parts are remembered (see SmallCache). */
const HEADER_CACHE_ENTRIES = 64;

/**
 * What a binary request's JSON part says, remembered from its first decoding: clients send the same JSON part
 * again and again (only the binary data differs), and a request whose JSON part is known is rebuilt from this
 * without parsing or checking it again. Only a JSON part whose every input is binary data of a fixed-width
 * datatype is remembered (no JSON data, no shared memory, no BYTES, whose elements are checked per request).
 */
class BinaryHeader {
  readonly #id: string;
  readonly #parameters: Readonly<Record<string, ParamValue>>;
  readonly #inputs: readonly { name: string; datatype: Datatype; shape: readonly number[]; size: number }[];
  readonly #outputs: readonly RequestedOutput[];
  readonly #binaryOutput: boolean;
  readonly #total: number;

  constructor(decoded: DecodedRequest) {
    const r = decoded.request;
    this.#id = r.id;
    this.#parameters = { ...r.parameters };
    this.#inputs = r.inputs.map((t) => ({
      name: t.name,
      datatype: t.datatype,
      shape: [...t.shape],
      size: (t.data as Uint8Array).byteLength,
    }));
    this.#total = this.#inputs.reduce((n, t) => n + t.size, 0);
    this.#outputs = r.outputs.map((o) => ({ ...o, parameters: { ...o.parameters } }));
    this.#binaryOutput = decoded.binaryOutput;
  }

  /**
   * The request of this JSON part with `binary` as its binary part; undefined where the binary part's length is
   * not what the inputs claim (the full decoding says what is wrong).
   */
  decode(binary: Uint8Array, target: Target): DecodedRequest | undefined {
    if (binary.byteLength !== this.#total) return undefined;
    const inputs: Tensor[] = [];
    let offset = 0;
    for (const t of this.#inputs) {
      const data = binary.subarray(offset, offset + t.size);
      offset += t.size;
      inputs.push({ name: t.name, datatype: t.datatype, shape: t.shape.slice(), data });
    }
    const outputs: RequestedOutput[] = [];
    for (const o of this.#outputs) {
      outputs.push({ name: o.name, classification: o.classification, parameters: { ...o.parameters } });
    }
    return {
      request: {
        model: target.model,
        version: target.version,
        id: this.#id,
        inputs,
        outputs,
        parameters: { ...this.#parameters },
      },
      binaryOutput: this.#binaryOutput,
    };
  }
}

/** The remembered JSON parts of binary requests, by their text. */
const binaryHeaders = new SmallCache<string, BinaryHeader>(HEADER_CACHE_ENTRIES);

/** Remembers a binary request's JSON part where every input is binary data of a fixed-width datatype. */
function rememberHeader(text: string, decoded: DecodedRequest, binary: Uint8Array): void {
  if (text.length > HEADER_CACHE_MAX_CHARS) return;
  for (const t of decoded.request.inputs) {
    if (t.datatype === "BYTES" || !(t.data instanceof Uint8Array) || t.data.buffer !== binary.buffer) return;
  }
  binaryHeaders.set(text, new BinaryHeader(decoded));
}

/** Decodes the JSON part of a request; `binary` holds the bytes after it (binary tensor data). */
function decodeJson(
  text: string,
  binary: Uint8Array,
  target: Target,
  where: string,
  shm: ShmReader | undefined,
): DecodedRequest {
  let json: unknown;
  try {
    json = parseJsonExact(text);
  } catch (err) {
    throw invalidArg(`Cannot read ${where}: malformed JSON: ${(err as Error).message}`);
  }
  if (!isObject(json)) throw invalidArg(`Cannot read ${where}: the JSON body must be an object`);
  const id = json.id;
  if (id !== undefined && typeof id !== "string") {
    throw invalidArg(`Cannot read ${where}: 'id' must be a string`);
  }
  const params = parameters(json.parameters, where);
  if (!Array.isArray(json.inputs)) throw invalidArg(`Cannot read ${where}: 'inputs' must be an array`);
  let offset = 0;
  const inputs: Tensor[] = json.inputs.map((raw: unknown, i: number) => {
    if (!isObject(raw)) throw invalidArg(`Cannot read ${where}: input ${i} must be an object`);
    const name = raw.name;
    if (typeof name !== "string") throw invalidArg(`Cannot read ${where}: input ${i} has no 'name'`);
    const what = `input '${name}'`;
    const datatype = raw.datatype;
    if (!isDatatype(datatype)) {
      throw invalidArg(
        `Cannot read ${where}: ${what} has unknown datatype ${
          typeof datatype === "bigint" ? String(datatype) : JSON.stringify(datatype)
        }`,
      );
    }
    const shape = raw.shape;
    // Safe integers only: 1e300 is an integer to JavaScript, and no int64 dim.
    if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
      throw invalidArg(`Cannot read ${where}: ${what} 'shape' must be an array of non-negative integers`);
    }
    // An input's parameters are only read here: one without any shares NO_PARAMETERS.
    const p = raw.parameters === undefined || raw.parameters === null
      ? NO_PARAMETERS
      : parameters(raw.parameters, `${where}, ${what}`);
    const count = elementCount(shape);
    const loc = p.shared_memory_region === undefined ? undefined : shmLocation(p, `${where}, ${what}`);
    if (loc) {
      if (raw.data !== undefined || p.binary_data_size !== undefined) {
        throw invalidArg(`Cannot read ${where}: ${what} has both shared memory and data`);
      }
      return { name, datatype, shape, data: readShmInput(shm, loc, datatype, shape, where, what) };
    }
    if (p.binary_data_size !== undefined) {
      const size = p.binary_data_size;
      if (raw.data !== undefined) {
        throw invalidArg(`Cannot read ${where}: ${what} has both 'data' and binary data`);
      }
      if (typeof size !== "number" || !Number.isInteger(size) || size < 0) {
        throw invalidArg(`Cannot read ${where}: ${what} 'binary_data_size' must be a non-negative integer`);
      }
      if (offset + size > binary.byteLength) {
        throw invalidArg(
          `Cannot read ${where}: ${what} claims ${size} bytes of binary data but only ${
            binary.byteLength - offset
          } remain`,
        );
      }
      // A body without a binary part shares NO_BYTES; a tensor gets an empty buffer of its own.
      const chunk = binary === NO_BYTES ? new Uint8Array(0) : binary.subarray(offset, offset + size);
      offset += size;
      const data = datatype === "BYTES"
        ? BytesTensor.fromWire(chunk, count, what, { input: name, model: target.model })
        : chunk;
      return { name, datatype, shape, data };
    }
    if (!Array.isArray(raw.data)) throw invalidArg(`Cannot read ${where}: ${what} has no 'data'`);
    // Nested data is flattened into a copy; flat data (the common case) is used as it is.
    let flat: unknown[] = raw.data;
    for (const v of raw.data) {
      if (Array.isArray(v)) {
        flat = [];
        flatten(raw.data, flat);
        break;
      }
    }
    if (flat.length !== count) {
      throw invalidArg(
        `Cannot read ${where}: ${what} has ${flat.length} data elements, expected ${count} for shape ${
          shapeText(shape)
        }`,
      );
    }
    return { name, datatype, shape, data: fromJsonValues(datatype, flat, what) };
  });
  if (offset !== binary.byteLength) {
    throw invalidArg(
      `Cannot read ${where}: the body has ${binary.byteLength} bytes of binary data but the inputs claim ${offset}`,
    );
  }
  let outputs: RequestedOutput[] = [];
  if (json.outputs !== undefined) {
    if (!Array.isArray(json.outputs)) throw invalidArg(`Cannot read ${where}: 'outputs' must be an array`);
    outputs = json.outputs.map((raw: unknown, i: number) => {
      if (!isObject(raw) || typeof raw.name !== "string") {
        throw invalidArg(`Cannot read ${where}: output ${i} must be an object with a 'name'`);
      }
      const p = parameters(raw.parameters, `${where}, output '${raw.name}'`);
      return { name: raw.name, classification: requestedClassification(p), parameters: p };
    });
  }
  const binaryOutput = params.binary_data_output === true;
  // As Triton: an HTTP request's binary_data_output is the frontend's, not the model's, and 'triton_' keys are
  // reserved.
  delete params.binary_data_output;
  if (hasReservedKey(params)) {
    throw invalidArg(
      `Cannot read ${where}: parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified`,
    );
  }
  return {
    request: {
      model: target.model,
      version: target.version,
      id: id ?? "",
      inputs,
      outputs,
      parameters: params,
    },
    binaryOutput,
  };
}

/** An encoded response body and its header length (undefined for pure JSON). */
export interface EncodedResponse {
  /** The body as bytes (joined on first use when binary data follows the JSON part). */
  readonly body: Uint8Array;
  /**
   * The body as text when it is JSON alone (no binary part): Deno.serve writes a text body faster than the
   * same bytes encoded in JavaScript first.
   */
  readonly text: string | undefined;
  /** The JSON part's length when binary data follows. */
  readonly headerLength: number | undefined;
  /** The body in its parts, not joined: the JSON part's bytes, then each binary output's bytes (empty for pure JSON). */
  readonly parts: readonly Uint8Array[];
  /** The body's length in bytes when binary data follows (undefined for pure JSON). */
  readonly byteLength: number | undefined;
  /**
   * For pure JSON with outputs of `JSON_STREAM_BYTES` or more (then `text` is undefined): the body, their data
   * written in chunks as it is read.
   */
  readonly chunks?: () => ReadableStream<Uint8Array>;
}

/**
 * From this many body bytes on, a response with binary data is written in its parts rather than joined into one
 * buffer first: a joined copy of a large output costs as much memory as the output itself, while for a small one a
 * single buffer is written faster than a stream.
 */
export const STREAM_RESPONSE_BYTES: number = 1 << 20;

/** The status and headers of a JSON answer (Response only reads them). */
const JSON_ANSWER: ResponseInit = Object.freeze({
  status: 200,
  headers: Object.freeze({ "content-type": "application/json" }),
});

/** How many binary answers' status and headers are kept, by JSON part length (see binaryAnswer). */
const BINARY_ANSWERS_KEPT = 256;
const binaryAnswers = new SmallCache<number, ResponseInit>(BINARY_ANSWERS_KEPT);

/** The status and headers of a binary answer whose JSON part has `headerLength` bytes (Response only reads them). */
function binaryAnswer(headerLength: number): ResponseInit {
  let init = binaryAnswers.get(headerLength);
  if (init === undefined) {
    init = Object.freeze({
      status: 200,
      headers: Object.freeze({
        [HEADER_LENGTH]: String(headerLength),
        "content-type": "application/octet-stream",
      }),
    });
    binaryAnswers.set(headerLength, init);
  }
  return init;
}

/**
 * The HTTP answer of an encoded inference response: JSON as text; with binary data, one buffer when small, and
 * the parts streamed one after the other (with their exact Content-Length) when large.
 * @param encoded the encoded response
 */
export function inferResponse(encoded: EncodedResponse): Response {
  if (encoded.chunks) return new Response(encoded.chunks(), JSON_ANSWER);
  if (encoded.text !== undefined) return new Response(encoded.text, JSON_ANSWER);
  if (encoded.byteLength! < STREAM_RESPONSE_BYTES) {
    return new Response(encoded.body as BodyInit, binaryAnswer(encoded.headerLength!));
  }
  const { headers } = binaryAnswer(encoded.headerLength!);
  // A plain stream, not a byte stream: a byte stream's enqueue takes (detaches) the part's whole buffer, and the
  // parts are outputs' own bytes, which a cache entry or the other requests of a batch may share. Empty parts
  // are left out.
  const parts = encoded.parts.filter((p) => p.byteLength > 0);
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      const next = parts.shift();
      if (next === undefined) controller.close();
      else controller.enqueue(next);
    },
  });
  return new Response(stream, {
    status: 200,
    headers: { ...headers as Record<string, string>, "content-length": String(encoded.byteLength) },
  });
}

/**
 * The first texts of responses and of outputs, by model name or output name, with the version or datatype they
 * were made for (the names come from the models, so that few are ever made; see SmallCache).
 */
const HEAD_CACHE_SIZE = 1024;
const responseHeads = new SmallCache<string, { version: string; text: string }>(HEAD_CACHE_SIZE);
const outputHeads = new SmallCache<string, { datatype: Datatype; text: string }>(HEAD_CACHE_SIZE);

/** The start of an output's JSON, up to its shape: `{"name":...,"datatype":...,"shape":`. */
function outputHead(name: string, datatype: Datatype): string {
  const hit = outputHeads.get(name);
  if (hit !== undefined && hit.datatype === datatype) return hit.text;
  const text = `{"name":${JSON.stringify(name)},"datatype":"${datatype}","shape":`;
  outputHeads.set(name, { datatype, text });
  return text;
}

/** The start of a response's JSON: `{"model_name":...,"model_version":...`. */
function responseHead(model: string, version: string): string {
  const hit = responseHeads.get(model);
  if (hit !== undefined && hit.version === version) return hit.text;
  const text = `{"model_name":${JSON.stringify(model)},"model_version":${JSON.stringify(version)}`;
  responseHeads.set(model, { version, text });
  return text;
}

/** The binary_data parameter of the output the request named `name`, if it named it. */
function requestedFlag(requested: readonly RequestedOutput[], name: string): ParamValue | undefined {
  for (const r of requested) if (r.name === name) return r.parameters.binary_data;
  return undefined;
}

/**
 * Encodes an inference response: outputs in JSON, or in binary when the output asks (`binary_data`) or the
 * request does (`binary_data_output`).
 * @param response the core response
 * @param requested the outputs as the request named them (for their binary_data flags)
 * @param binaryOutput the request's binary_data_output
 * @param shmOutputs outputs already written to shared memory, with their parameters
 */
export function encodeInferResponse(
  response: InferResponse,
  requested: readonly RequestedOutput[],
  binaryOutput: boolean,
  shmOutputs?: Map<string, Record<string, ParamValue>>,
): EncodedResponse {
  const chunks: Uint8Array[] = [];
  /** Outputs whose data is written later (`json_chunks.ts`), `DEFERRED_DATA` standing in the text. */
  const deferred: Tensor[] = [];
  // The JSON text is written piece by piece: the tensor data arrays straight from their typed arrays.
  const outputs = response.outputs.map((t) => {
    const inShm = shmOutputs?.get(t.name);
    if (inShm) {
      return JSON.stringify({ name: t.name, datatype: t.datatype, shape: t.shape, parameters: inShm });
    }
    const flag = requestedFlag(requested, t.name);
    const binary = flag === undefined ? binaryOutput : flag === true;
    if (binary) {
      const bytes = t.data instanceof Uint8Array ? t.data : t.data.data;
      chunks.push(bytes);
      return `{"name":${JSON.stringify(t.name)},"datatype":"${t.datatype}","shape":${
        JSON.stringify(t.shape)
      },"parameters":{"binary_data_size":${bytes.byteLength}}}`;
    }
    const large = t.data.byteLength >= JSON_STREAM_BYTES && deferred.push(t) > 0;
    return `${outputHead(t.name, t.datatype)}${JSON.stringify(t.shape)},"data":${
      large ? DEFERRED_DATA : toJsonText(t.datatype, t.data)
    }}`;
  });
  let text = responseHead(response.model, response.version);
  if (response.id) text += `,"id":${JSON.stringify(response.id)}`;
  if (Object.keys(response.parameters).length > 0) {
    text += `,"parameters":${stringifyExact(response.parameters)}`;
  }
  text += `,"outputs":[${outputs.join(",")}]}`;
  if (deferred.length > 0) {
    if (chunks.length === 0) return new DeferredJsonResponse(text, deferred);
    text = jsonWhole(text, deferred);
  }
  if (chunks.length === 0) return new JsonResponse(text);
  let binaryBytes = 0;
  for (const c of chunks) binaryBytes += c.byteLength;
  // UTF-8 takes at most 3 bytes per UTF-16 unit: a small body is written once, the JSON part's bytes and the
  // binary parts one after the other.
  const room = text.length * 3 + binaryBytes;
  if (room < STREAM_RESPONSE_BYTES) return new JoinedResponse(text, chunks, binaryBytes);
  const json = utf8Encode(text);
  return new BinaryResponse(json.byteLength, [json, ...chunks]);
}

/** The parts of a response that is JSON alone (none). */
const NO_PARTS: readonly Uint8Array[] = [];

// The encoded responses are instances of classes, not object literals with a getter: each such literal gets a
// map of its own (the getter's closure is part of it), and maps live in the old generation, so that everything
// the closure holds (the response's text) outlived the young generation's collections with every request.

/** A response that is JSON alone. */
class JsonResponse implements EncodedResponse {
  readonly text: string;
  readonly headerLength = undefined;
  readonly parts = NO_PARTS;
  readonly byteLength = undefined;
  constructor(text: string) {
    this.text = text;
  }
  get body(): Uint8Array {
    return utf8Encode(this.text);
  }
}

/** A pure JSON answer whose large outputs' data is written in chunks as the body is read. */
class DeferredJsonResponse implements EncodedResponse {
  readonly text = undefined;
  readonly headerLength = undefined;
  readonly parts = NO_PARTS;
  readonly byteLength = undefined;
  readonly #text: string;
  readonly #deferred: readonly Tensor[];
  constructor(text: string, deferred: readonly Tensor[]) {
    this.#text = text;
    this.#deferred = deferred;
  }
  readonly chunks = (): ReadableStream<Uint8Array> => jsonChunks(this.#text, this.#deferred);
  get body(): Uint8Array {
    return utf8Encode(jsonWhole(this.#text, this.#deferred));
  }
}

/** A large response whose JSON part binary data follows, kept in its parts (joined only when asked). */
class BinaryResponse implements EncodedResponse {
  readonly text = undefined;
  readonly headerLength: number;
  readonly parts: readonly Uint8Array[];
  readonly byteLength: number;
  #joined: Uint8Array | undefined;
  constructor(headerLength: number, parts: Uint8Array[]) {
    this.headerLength = headerLength;
    this.parts = parts;
    this.byteLength = parts.reduce((n, c) => n + c.byteLength, 0);
  }
  get body(): Uint8Array {
    return this.#joined ??= concatBytes(this.parts, this.byteLength);
  }
}

/** JSON parts up to this many characters are remembered in their encoded form (see jsonPartBytes). */
const JSON_PART_KEEP_CHARS = 4096;
let lastJsonPart = "";
let lastJsonPartBytes: Uint8Array = new Uint8Array(0);

/**
 * The UTF-8 bytes of a response's JSON part, only read: the answers of one batch (and of the batches after it)
 * mostly share the same JSON part (same model, outputs and shapes, no id), which is then encoded once.
 */
function jsonPartBytes(text: string): Uint8Array {
  if (text === lastJsonPart) return lastJsonPartBytes;
  const bytes = utf8Encode(text);
  if (text.length <= JSON_PART_KEEP_CHARS) {
    lastJsonPart = text;
    lastJsonPartBytes = bytes;
  }
  return bytes;
}

/**
 * Small joined answers (up to a quarter of the slab) are cut from a slab: an answer costs no buffer of its own,
 * and `new Response` copies the body anyway. In a loop on 2 cores a 363-byte `new Uint8Array` took 0.61 µs and a
 * cut 0.11 µs. `bench/ab.ts`, 3 rounds of 4 pairs, 2026-11-27: `simple` over HTTP binary at 16 connections 1.06x
 * and 1.17x the requests in two runs (totals 1.04x and 1.10x) at 0.94x and 0.90x the server's CPU per request;
 * the MLP at 64 connections 1.01x at 0.97x; `add_sub_py` over HTTP binary at 8 connections 0.96x, 1.10x and
 * 1.09x at 1.05x, 0.97x and 0.93x.
 */
const bodies = new Slab(8 * 1024);

/** A small response with binary data as one buffer: the JSON text, then the binary parts. */
class JoinedResponse implements EncodedResponse {
  readonly text = undefined;
  readonly headerLength: number;
  readonly byteLength: number;
  readonly body: Uint8Array;
  readonly #chunks: readonly Uint8Array[];
  /**
   * @param text the JSON part
   * @param chunks the binary parts
   * @param binaryBytes the binary parts' total length
   */
  constructor(text: string, chunks: readonly Uint8Array[], binaryBytes: number) {
    const json = jsonPartBytes(text);
    this.headerLength = json.byteLength;
    this.byteLength = json.byteLength + binaryBytes;
    // Two parts at least (chunks is not empty): bytes of its own, never the shared JSON part's.
    const body = bodies.take(this.byteLength);
    body.set(json, 0);
    copyInto(body, chunks, json.byteLength);
    this.body = body;
    this.#chunks = chunks;
  }
  get parts(): readonly Uint8Array[] {
    return [this.body.subarray(0, this.headerLength), ...this.#chunks];
  }
}
