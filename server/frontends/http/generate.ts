/**
 * Triton's generate extension on the HTTP frontend: `POST /v2/models/{m}[/versions/{v}]/generate` answers one
 * JSON object, `.../generate_stream` answers Server-Sent Events, one `data:` event per response of the model
 * as the model sends it. The request's top-level fields (and those inside `parameters`) become input tensors
 * when the model has an input of that name, request parameters otherwise; a response's outputs become
 * top-level fields beside `model_name` and `model_version`, one-element tensors as plain values.
 * @module
 */

import {
  type Datatype,
  fromJsonValues,
  parseJsonExact,
  toJsonValues,
  utf8Decode,
} from "../../core/dtypes.ts";
import { httpStatus, internal, invalidArg, ServerError, toServerError } from "../../core/errors.ts";
import type { InferRequest, InferResponse, ParamValue, Tensor } from "../../core/types.ts";
import { type ValidatedRequest, validateRequest } from "../../core/validate.ts";
import type { ModelVersion } from "../../models/model_version.ts";
import { ENDPOINTS, type InferencePipeline } from "../../pipeline/pipeline.ts";
import { readUpTo } from "./_body.ts";
import { EventBody } from "./event_body.ts";
import { flatten } from "./infer_codec.ts";
import { receiveBody } from "./listener.ts";

/** Limits of the generate endpoints. */
export interface GenerateOptions {
  /** The largest request body accepted, in bytes (`--http-max-input-size`). */
  maxInputSize: number;
}

/** Handles one generate request: the model and version come from the URL. */
export type GenerateHandler = (
  request: Request,
  model: string,
  version: string,
  stream: boolean,
) => Promise<Response>;

const JSON_HEADERS = { "content-type": "application/json" };
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };
const encoder = new TextEncoder();

/** Triton's wording: clients match on it. */
const ONE_RESPONSE = "generate expects model to produce exactly 1 response, use generate stream for model " +
  "that generates various number of responses";

function errorJson(err: unknown): string {
  return JSON.stringify({ error: toServerError(err).message });
}

/**
 * Reads a request body of at most `limit` bytes. The generate endpoints take no Content-Encoding (as Triton).
 * @param request the HTTP request
 * @param limit `--http-max-input-size`
 * @param what names the request in errors
 */
export async function readLimitedBody(request: Request, limit: number, what: string): Promise<Uint8Array> {
  const encoding = request.headers.get("content-encoding")?.trim().toLowerCase();
  if (encoding && encoding !== "identity") {
    throw invalidArg(
      `Cannot read ${what}: unsupported Content-Encoding '${encoding}', only 'identity' is supported`,
    );
  }
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) {
    throw invalidArg(
      `Cannot read ${what}: ${declared} bytes is more than --http-max-input-size (${limit} bytes)`,
    );
  }
  const body = await receiveBody(request, readUpTo(request.body, limit));
  if (body === null) {
    throw invalidArg(`Cannot read ${what}: it is more than --http-max-input-size (${limit} bytes)`);
  }
  return body;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** The leaves of a value: itself, or those of nested lists (see flatten in infer_codec.ts). */
function leaves(v: unknown, out: unknown[]): unknown[] {
  if (Array.isArray(v)) flatten(v, out);
  else out.push(v);
  return out;
}

/**
 * The shape a generate value takes for an input of the given metadata shape (batch dim first where the model
 * batches), as Triton shapes it: the fixed dims divide the element count, the innermost variable dim takes
 * what is left and the other variable dims are 1.
 * @returns the shape, or undefined when the count does not fit
 */
export function generateShape(dims: readonly number[], count: number): number[] | undefined {
  const shape = [...dims];
  let left = count;
  for (const d of shape) {
    if (d === -1) continue;
    if (d === 0 ? left !== 0 : left % d !== 0) return undefined;
    left = d === 0 ? 0 : left / d;
  }
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] === -1) {
      shape[i] = left;
      left = 1;
    }
  }
  return left === 1 || (count === 0 && shape.includes(0)) ? shape : undefined;
}

/** A request parameter from a JSON value, as Triton takes them (string, integer, boolean or double). */
function parameterOf(key: string, value: unknown): ParamValue {
  if (typeof value === "string" || typeof value === "boolean" || typeof value === "bigint") return value;
  if (typeof value === "number") return value;
  // Triton's wording (clients match on it).
  throw invalidArg(`parameter '${key}' has invalid type. It should be either 'int', 'bool', or 'string'.`);
}

/**
 * Converts a generate request body to an inference request of the model: fields named like an input become
 * that input, the others request parameters; `parameters` is read the same way one level down.
 * @param body the parsed JSON object
 * @param inputs the model's inputs: name, datatype and metadata shape
 * @param target the model and version
 */
export function decodeGenerateRequest(
  body: Record<string, unknown>,
  inputs: ReadonlyMap<string, { datatype: Datatype; shape: number[] }>,
  target: { model: string; version: string },
): InferRequest {
  const where = `the generate request for '${target.model}'`;
  const request: InferRequest = {
    model: target.model,
    version: target.version,
    id: "",
    inputs: [],
    outputs: [],
    parameters: {},
  };
  const seen = new Set<string>();
  const take = (key: string, value: unknown) => {
    const spec = inputs.get(key);
    if (!spec) {
      request.parameters[key] = parameterOf(key, value);
      return;
    }
    if (seen.has(key)) {
      throw invalidArg(
        `Cannot read ${where}: input '${key}' is given twice (at the top level and in 'parameters')`,
      );
    }
    seen.add(key);
    const values = leaves(value, []);
    const shape = generateShape(spec.shape, values.length);
    // Triton's wording (clients match on it).
    if (!shape) throw invalidArg(`The schema can not convert input '${key}' to tensor with proper shape`);
    const data = fromJsonValues(spec.datatype, values, `input '${key}' of ${where}`);
    request.inputs.push({ name: key, datatype: spec.datatype, shape, data } satisfies Tensor);
  };
  for (const [key, value] of Object.entries(body)) {
    if (key === "parameters" && !inputs.has(key)) {
      if (!isObject(value)) throw invalidArg(`Cannot read ${where}: 'parameters' must be a JSON object`);
      for (const [k, v] of Object.entries(value)) take(k, v);
      continue;
    }
    if (key === "id") {
      if (typeof value !== "string") throw invalidArg(`Cannot read ${where}: 'id' must be a string`);
      // As Triton, the id is a request parameter too.
      request.id = value;
    }
    take(key, value);
  }
  return request;
}

/**
 * A response as the generate endpoints write it: `id` (when set), `model_name`, `model_version`, the response
 * parameters and the outputs, keys in sorted order (as Triton writes them); a one-element output is a plain
 * value.
 * @param response the inference response
 */
export function encodeGenerateResponse(response: InferResponse): Record<string, unknown> {
  const fields = new Map<string, unknown>();
  if (response.id !== "") fields.set("id", response.id);
  fields.set("model_name", response.model);
  fields.set("model_version", response.version);
  for (const [k, v] of Object.entries(response.parameters)) {
    if (k !== "triton_final_response") fields.set(k, typeof v === "bigint" ? Number(v) : v);
  }
  for (const t of response.outputs) {
    const values = toJsonValues(t.datatype, t.data);
    fields.set(t.name, values.length === 1 ? values[0] : values);
  }
  const out: Record<string, unknown> = {};
  for (const k of [...fields.keys()].sort()) out[k] = fields.get(k);
  return out;
}

/** One item a generate request produced: a response or an error. */
type Item = InferResponse | ServerError;

function itemJson(item: Item): string {
  return item instanceof ServerError ? errorJson(item) : JSON.stringify(encodeGenerateResponse(item));
}

/**
 * Creates the handler of the generate endpoints over the inference pipeline.
 * @param pipeline the inference pipeline
 * @param options limits
 * @returns the handler; errors before inference starts are thrown (the caller writes them as JSON errors)
 */
export function createGenerateHandler(
  pipeline: InferencePipeline,
  options: GenerateOptions,
): GenerateHandler {
  /** Decodes and validates the request; throws what fails before inference begins. */
  async function prepare(
    request: Request,
    model: string,
    version: string,
  ): Promise<{ mv: ModelVersion; validated: ValidatedRequest }> {
    let mv = pipeline.accept(model, version, ENDPOINTS.generate);
    const body = await readLimitedBody(request, options.maxInputSize, `the generate request for '${model}'`);
    // A reload that finished while the body arrived replaced the version (see the infer route).
    if (mv.state !== "READY") mv = pipeline.accept(model, version, ENDPOINTS.generate, true);
    let json: unknown = {};
    if (body.byteLength > 0) {
      try {
        json = parseJsonExact(utf8Decode(body));
      } catch (err) {
        throw invalidArg(
          `Cannot read the generate request for '${model}': malformed JSON: ${(err as Error).message}`,
        );
      }
    }
    if (!isObject(json)) {
      throw invalidArg(`Cannot read the generate request for '${model}': the body must be a JSON object`);
    }
    const meta = mv.metadata();
    const inputs = new Map(meta.inputs.map((i) => [i.name, { datatype: i.datatype, shape: i.shape }]));
    const decoded = decodeGenerateRequest(json, inputs, { model, version });
    // Problems with the inputs are answered as JSON errors, before any response (the pipeline takes the
    // validated request on, not validating it again).
    return { mv, validated: validateRequest(decoded, mv.signature) };
  }

  /** Runs the request; `onItem` takes each response or error as it comes, and `final` once at the end. */
  function run(
    mv: ModelVersion,
    validated: ValidatedRequest,
    onItem: (item: Item | undefined, final: boolean) => void,
  ): Promise<void> {
    let ended = false;
    const exchange = { endpoint: ENDPOINTS.generate, validated };
    return pipeline.stream(mv, validated.request, exchange, (response, _written, final) => {
      if (ended) return;
      ended = final;
      const item = response instanceof Error ? toServerError(response) : response;
      if (item !== undefined || final) onItem(item, final);
    }).then(
      () => {
        if (!ended) onItem(undefined, true);
      },
      (err) => {
        if (ended) return;
        ended = true;
        onItem(toServerError(err), true);
      },
    );
  }

  async function generate(mv: ModelVersion, validated: ValidatedRequest): Promise<Response> {
    const items: Item[] = [];
    await run(mv, validated, (item) => item && items.push(item));
    // As Triton: the status is the first response's; the body the one response, or an error when the model
    // sent another number of them.
    const first = items[0];
    const status = first instanceof ServerError ? httpStatus(first.code) : 200;
    const body = items.length === 1 ? itemJson(first!) : errorJson(internal(ONE_RESPONSE));
    return new Response(body, { status, headers: JSON_HEADERS });
  }

  function generateStream(
    mv: ModelVersion,
    validated: ValidatedRequest,
    signal: AbortSignal,
  ): Promise<Response> {
    const request = validated.request;
    const controller = new AbortController();
    const abort = () => controller.abort();
    // A client that left while the body was read and checked has aborted already: no event would tell.
    if (signal.aborted) controller.abort();
    else signal.addEventListener("abort", abort, { once: true });
    request.signal = controller.signal;
    // The client went away or stopped reading: the model is told (request.is_cancelled()).
    const events = new EventBody(() => {
      signal.removeEventListener("abort", abort);
      controller.abort();
    });
    return new Promise<Response>((resolve) => {
      let started = false;
      const start = (status: number) => {
        if (started) return;
        started = true;
        resolve(new Response(events.body, { status, headers: SSE_HEADERS }));
      };
      run(mv, validated, (item, final) => {
        if (item !== undefined) {
          // As Triton: the first response sets the status; the events follow as the model sends them.
          start(item instanceof ServerError ? httpStatus(item.code) : 200);
          if (events.open) events.push(encoder.encode(`data: ${itemJson(item)}\n\n`));
        }
        if (final) {
          start(200);
          signal.removeEventListener("abort", abort);
          events.close();
        }
      });
    });
  }

  return async function handle(request: Request, model: string, version: string, stream: boolean) {
    const { mv, validated } = await prepare(request, model, version);
    if (stream) return await generateStream(mv, validated, request.signal);
    validated.request.signal = request.signal;
    return await generate(mv, validated);
  };
}
