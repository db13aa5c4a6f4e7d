/**
 * The HTTP/REST frontend (KServe v2 with Triton's extensions) as a pure `(Request) => Promise<Response>`
 * function; `Deno.serve` appears only at start-up.
 * @module
 */

import { elementSize, fromConfigType } from "../../core/dtypes.ts";
import { httpStatus, invalidArg, notFound, toServerError, unsupported } from "../../core/errors.ts";
import { nowNs } from "../../core/clock.ts";
import type { InferRequest, InferResponse } from "../../core/types.ts";
import type { ModelVersion } from "../../models/model_version.ts";
import { ENDPOINTS, type InferencePipeline } from "../../pipeline/pipeline.ts";
import type { ShmWritten } from "../../shm/session.ts";
import {
  type DecodedRequest,
  decodeInferRequest,
  encodeInferResponse,
  HEADER_LENGTH,
} from "./infer_codec.ts";
import { INFER_PATH, pathOf } from "./_paths.ts";
import { concat, readDeclared, readUpTo } from "./_body.ts";
import { type FrontendOptions, serverReady } from "../frontend.ts";
import { createGenerateHandler } from "./generate.ts";
import { createOpenAiHandler } from "./openai.ts";
import { type ApiGroup, httpApiGroup, matchesRestriction } from "../restricted.ts";
import { receiveBody } from "./listener.ts";
import { loadOptions } from "../load_parameters.ts";

/** What the HTTP frontend serves and how. */
export interface HttpOptions extends FrontendOptions {
  /** The largest request body accepted, in bytes (`--http-max-input-size`). */
  maxInputSize: number;
}

/** An HTTP request handler. */
export type Handler = (request: Request) => Promise<Response>;

const JSON_HEADERS = { "content-type": "application/json" };

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

function errorResponse(err: unknown): Response {
  const e = toServerError(err);
  return json({ error: e.message }, httpStatus(e.code));
}

/**
 * Reads a request body within the size limit, inflating gzip and deflate bodies.
 * @param asText whether a body that needs no inflating may come back as text (Deno decodes it natively, which is
 *   faster than decoding its bytes in JavaScript)
 * @param alignAt an offset in the body to place 8-byte aligned (see readDeclared)
 */
async function readBody(
  request: Request,
  limit: number,
  asText?: false,
  alignAt?: number,
): Promise<Uint8Array>;
async function readBody(request: Request, limit: number, asText: true): Promise<Uint8Array | string>;
async function readBody(
  request: Request,
  limit: number,
  asText = false,
  alignAt = 0,
): Promise<Uint8Array | string> {
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > limit) {
    throw invalidArg(
      `Cannot read the request body: ${declared} bytes is more than --http-max-input-size (${limit} bytes)`,
    );
  }
  const encoding = request.headers.get("content-encoding")?.trim().toLowerCase();
  const plain = !encoding || encoding === "identity";
  let body: Uint8Array;
  if (declared !== null) {
    if (asText && plain) {
      return await receiveBody(request, request.text());
    }
    body = await receiveBody(request, readDeclared(request.body, Number(declared), alignAt));
  } else {
    const read = await receiveBody(request, readUpTo(request.body, limit));
    if (read === null) {
      throw invalidArg(
        `Cannot read the request body: it is more than --http-max-input-size (${limit} bytes)`,
      );
    }
    body = read;
  }
  if (!plain) {
    if (encoding !== "gzip" && encoding !== "deflate") {
      throw unsupported(`Cannot read the request body: unsupported Content-Encoding '${encoding}'`);
    }
    body = await inflate(body, encoding, limit);
  }
  return body;
}

async function readJsonBody(request: Request, limit: number, what: string): Promise<Record<string, unknown>> {
  const body = await readBody(request, limit);
  if (body.byteLength === 0) return {};
  let v: unknown;
  try {
    v = JSON.parse(new TextDecoder().decode(body));
  } catch (err) {
    throw invalidArg(`Cannot read ${what}: malformed JSON: ${(err as Error).message}`);
  }
  if (!v || typeof v !== "object" || Array.isArray(v)) {
    throw invalidArg(`Cannot read ${what}: the body must be a JSON object`);
  }
  return v as Record<string, unknown>;
}

async function inflate(body: Uint8Array, encoding: "gzip" | "deflate", limit: number): Promise<Uint8Array> {
  const stream = new Blob([body as BlobPart]).stream().pipeThrough(new DecompressionStream(encoding));
  const chunks: Uint8Array[] = [];
  let total = 0;
  try {
    for await (const chunk of stream) {
      total += chunk.byteLength;
      if (total > limit) {
        throw invalidArg(
          `Cannot read the request body: it inflates to more than --http-max-input-size (${limit} bytes)`,
        );
      }
      chunks.push(chunk);
    }
  } catch (err) {
    if (err instanceof Error && err.name === "ServerError") throw err;
    throw invalidArg(
      `Cannot read the request body: it is not valid ${encoding} data: ${(err as Error).message}`,
    );
  }
  return concat(chunks, total);
}

function pickEncoding(request: Request): "gzip" | "deflate" | undefined {
  const accept = request.headers.get("accept-encoding");
  if (!accept) return undefined;
  for (const part of accept.split(",")) {
    const [name, ...params] = part.trim().toLowerCase().split(";");
    if (params.some((p) => /^\s*q=0(\.0*)?\s*$/.test(p))) continue;
    if (name === "gzip" || name === "deflate") return name;
  }
  return undefined;
}

async function compressed(body: Uint8Array, encoding: "gzip" | "deflate"): Promise<Uint8Array> {
  const stream = new Blob([body as BlobPart]).stream().pipeThrough(new CompressionStream(encoding));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

/**
 * Creates the HTTP handler over the inference pipeline.
 * @param pipeline the inference pipeline (and, through it, the models)
 * @param options server facts and limits
 * @returns the handler
 */
export function createHttpHandler(pipeline: InferencePipeline, options: HttpOptions): Handler {
  return createHttpFrontend(pipeline, options).handle;
}

/** The HTTP frontend: the request handler, and the main thread's part of requests that listener threads read. */
export interface HttpFrontend {
  /** Answers a request. */
  handle: Handler;
  /**
   * Runs an inference request a listener thread has decoded (no shared memory) through the pipeline.
   * @param request the decoded request
   * @param recvStart when its reading started (nowNs)
   * @param recvEnd when its reading ended (nowNs)
   */
  inferDecoded(request: InferRequest, recvStart: number, recvEnd: number): Promise<InferResponse>;
}

/** The one input of the raw binary form (no JSON header): its name, datatype and shape from the model. */
function rawInput(mv: ModelVersion, bytes: number) {
  const inputs = mv.config.input;
  if (inputs.length !== 1) {
    throw invalidArg(
      `Cannot read the inference request for '${mv.name}': the raw binary form needs a model with exactly one input, it has ${inputs.length}`,
    );
  }
  const spec = inputs[0]!;
  const datatype = fromConfigType(spec.data_type)!;
  const batch = mv.config.max_batch_size > 0 ? [1] : [];
  const dims = [...spec.dims];
  const wild = dims.filter((d) => d === -1).length;
  if (wild > 0) {
    const size = datatype === "BYTES"
      ? 0
      : (dims.filter((d) => d > 0).reduce((a, b) => a * b, 1) * elementSize(datatype));
    if (wild > 1 || datatype === "BYTES" || size === 0 || bytes % size !== 0) {
      throw invalidArg(
        `Cannot read the inference request for '${mv.name}': the shape of input '${spec.name}' [${
          dims.join(",")
        }] cannot be derived from ${bytes} bytes of raw data`,
      );
    }
    dims[dims.indexOf(-1)] = bytes / size;
  }
  return { name: spec.name, datatype, shape: [...batch, ...dims] };
}

/**
 * Encodes an inference response as the HTTP answer, compressed when the client accepts it.
 * @param request the HTTP request (its Accept-Encoding)
 * @param decoded the decoded request (the outputs' binary_data flags, binary_data_output)
 * @param response the inference response
 * @param written the outputs written to shared memory
 */
async function answer(
  request: Request,
  decoded: DecodedRequest,
  response: InferResponse,
  written: ShmWritten | undefined,
): Promise<Response> {
  const encoded = encodeInferResponse(response, decoded.request.outputs, decoded.binaryOutput, written);
  let headers: Record<string, string> = encoded.headerLength === undefined
    ? JSON_HEADERS
    : { [HEADER_LENGTH]: String(encoded.headerLength), "content-type": "application/octet-stream" };
  let out: Uint8Array | string = encoded.text ?? encoded.body;
  const encoding = pickEncoding(request);
  if (encoding) {
    out = await compressed(encoded.body, encoding);
    headers = { ...headers, "content-encoding": encoding };
  }
  return new Response(out as BodyInit, { status: 200, headers });
}

/**
 * Creates the HTTP frontend over the inference pipeline.
 * @param pipeline the inference pipeline (and, through it, the models)
 * @param options server facts and limits
 * @returns the handler and the entry point for requests decoded on listener threads
 */
export function createHttpFrontend(pipeline: InferencePipeline, options: HttpOptions): HttpFrontend {
  const registry = pipeline.registry;
  const generate = createGenerateHandler(pipeline, { maxInputSize: options.maxInputSize });
  const openai = createOpenAiHandler(pipeline, { maxInputSize: options.maxInputSize });

  async function infer(request: Request, model: string, version: string): Promise<Response> {
    const recvStart = nowNs();
    // As Triton: an unknown or unavailable model is NOT_FOUND / UNAVAILABLE whatever the body holds.
    const mv = pipeline.accept(model, version, ENDPOINTS.httpInfer);
    const hl = request.headers.get(HEADER_LENGTH);
    let headerLength: number | undefined;
    if (hl !== null) {
      headerLength = Number(hl);
      if (!/^\s*[0-9]+\s*$/.test(hl)) {
        throw invalidArg(
          `Cannot read the inference request for '${model}': Inference-Header-Content-Length '${hl}' is not a number`,
        );
      }
    }
    // A body that is JSON alone (no binary part) is read as text.
    const body = headerLength === undefined
      ? await readBody(request, options.maxInputSize, true)
      : await readBody(request, options.maxInputSize, false, headerLength);
    const recvEnd = nowNs();
    const shm = pipeline.shmSession();
    const decoded = decodeInferRequest(
      body,
      headerLength,
      { model, version },
      headerLength === 0 ? (bytes) => rawInput(mv, bytes) : undefined,
      shm?.reader,
    );
    return await pipeline.infer(
      mv,
      decoded.request,
      { endpoint: ENDPOINTS.httpInfer, shm, recvStart, recvEnd },
      (response, written) => answer(request, decoded, response, written),
    );
  }

  function modelMetadata(model: string, version: string): Response {
    return json(registry.metadata(model, version));
  }

  function modelConfig(model: string, version: string): Response {
    return json(registry.resolve(model, version).config);
  }

  async function route(request: Request): Promise<Response> {
    const url = { pathname: pathOf(request.url) };
    const parts = url.pathname.split("/").filter((p) => p !== "").map((p) => {
      try {
        return p.includes("%") ? decodeURIComponent(p) : p;
      } catch {
        throw invalidArg(`Cannot read the path '${url.pathname}': bad percent-encoding`);
      }
    });
    const method = request.method;
    const denied = restricted && checkRestriction(request, httpApiGroup(parts));
    if (denied) return denied;
    if (parts[0] === "v1") return await openai(request, url.pathname);
    if (parts[0] !== "v2") throw notFound(`Not found: '${url.pathname}'`);
    if (parts.length === 1 && method === "GET") {
      return json({
        name: options.serverName,
        version: options.serverVersion,
        extensions: options.extensions,
      });
    }
    if (parts[1] === "health" && parts.length === 3 && method === "GET") {
      if (parts[2] === "live") return new Response(null, { status: 200 });
      if (parts[2] === "ready") {
        return new Response(null, { status: serverReady(registry, options) ? 200 : 400 });
      }
    }
    if (parts[1] === "models" && parts[2] === "stats" && parts.length === 3 && method === "GET") {
      return json({ model_stats: registry.statistics("", "") });
    }
    if (parts[1] === "models" && parts.length >= 3) {
      const model = parts[2]!;
      let rest = parts.slice(3);
      let version = "";
      if (rest[0] === "versions") {
        // As Triton's routes: a version in the path is digits, anything else is no route.
        if (rest.length < 2 || !/^[0-9]+$/.test(rest[1]!)) throw notFound(`Not found: '${url.pathname}'`);
        version = rest[1]!;
        rest = rest.slice(2);
      }
      const action = rest.join("/");
      if (action === "" && method === "GET") return modelMetadata(model, version);
      if (action === "ready" && method === "GET") {
        return new Response(null, { status: registry.isReady(model, version) ? 200 : 400 });
      }
      if (action === "config" && method === "GET") return modelConfig(model, version);
      if (action === "infer" && method === "POST") return await infer(request, model, version);
      if ((action === "generate" || action === "generate_stream") && method === "POST") {
        return await generate(request, model, version, action === "generate_stream");
      }
      if (action === "stats" && method === "GET") {
        return json({ model_stats: registry.statistics(model, version) });
      }
      if (action === "trace/setting" && options.traces) {
        if (method === "GET") return json(options.traces.settings(model));
        if (method === "POST") {
          const body = await readJsonBody(request, options.maxInputSize, "the trace settings");
          return json(options.traces.update(body, model));
        }
      }
    }
    if (parts[1] === "models" && parts[2] === undefined) {
      throw notFound(`Not found: '${url.pathname}'`);
    }
    if (parts[1] === "repository" && method === "POST") {
      if (parts.length === 3 && parts[2] === "index") {
        const body = await readJsonBody(request, options.maxInputSize, "the repository index request");
        const ready = body.ready ?? false;
        if (typeof ready !== "boolean") {
          throw invalidArg("Cannot read the repository index request: 'ready' must be a boolean");
        }
        const rows = await registry.index(ready);
        return json(rows.map((r) => (r.state === "" ? { name: r.name } : r)));
      }
      if (parts.length === 5 && parts[2] === "models" && (parts[4] === "load" || parts[4] === "unload")) {
        const model = parts[3]!;
        const body = await readJsonBody(
          request,
          options.maxInputSize,
          `the ${parts[4]} request for '${model}'`,
        );
        const params = body.parameters ?? {};
        if (typeof params !== "object" || Array.isArray(params) || params === null) {
          throw invalidArg(
            `Cannot read the ${parts[4]} request for '${model}': 'parameters' must be an object`,
          );
        }
        if (parts[4] === "unload") {
          const dependents = (params as Record<string, unknown>).unload_dependents ?? false;
          if (typeof dependents !== "boolean") {
            throw invalidArg(`Cannot unload '${model}': parameter 'unload_dependents' must be a boolean`);
          }
          await registry.unloadModel(model, { unloadDependents: dependents });
          return new Response(null, { status: 200 });
        }
        await registry.loadModel(model, loadOptions(model, params as Record<string, unknown>, true));
        return new Response(null, { status: 200 });
      }
    }
    if (parts[1] === "trace" && parts[2] === "setting" && parts.length === 3 && options.traces) {
      if (method === "GET") return json(options.traces.settings());
      if (method === "POST") {
        return json(
          options.traces.update(await readJsonBody(request, options.maxInputSize, "the trace settings")),
        );
      }
    }
    if (parts[1] === "logging" && parts.length === 2 && options.logger) {
      if (method === "GET") return json(options.logger.toJson());
      if (method === "POST") {
        return json(
          options.logger.update(await readJsonBody(request, options.maxInputSize, "the log settings")),
        );
      }
    }
    if (parts[1] === "systemsharedmemory" && options.shm) {
      const shm = options.shm;
      const region = parts[2] === "region" ? parts[3] ?? "" : "";
      const action = parts[2] === "region" ? parts.slice(4).join("/") : parts.slice(2).join("/");
      if (action === "status" && method === "GET") return json(shm.status(region));
      if (action === "register" && method === "POST" && region) {
        const body = await readJsonBody(
          request,
          options.maxInputSize,
          `the register request for '${region}'`,
        );
        const { key, offset = 0, byte_size } = body as {
          key?: unknown;
          offset?: unknown;
          byte_size?: unknown;
        };
        if (typeof key !== "string" || typeof offset !== "number" || typeof byte_size !== "number") {
          throw invalidArg(
            `Cannot register shared memory region '${region}': the body needs 'key' (string), 'offset' and 'byte_size' (numbers)`,
          );
        }
        await shm.register(region, key, offset, byte_size);
        return new Response(null, { status: 200 });
      }
      if (action === "unregister" && method === "POST") {
        shm.unregister(region);
        return new Response(null, { status: 200 });
      }
    }
    if (parts[1] === "cudasharedmemory" && options.cudaShm) {
      const cuda = options.cudaShm;
      const region = parts[2] === "region" ? parts[3] ?? "" : "";
      const action = parts[2] === "region" ? parts.slice(4).join("/") : parts.slice(2).join("/");
      if (action === "status" && method === "GET") return json(cuda.status(region));
      if (action === "register" && method === "POST" && region) {
        cuda.checkAllowed();
        const body = await readJsonBody(
          request,
          options.maxInputSize,
          `the CUDA register request for '${region}'`,
        ) as { raw_handle?: { b64?: unknown }; device_id?: unknown; byte_size?: unknown };
        const handle = body.raw_handle?.b64;
        const { device_id, byte_size } = body;
        if (typeof handle !== "string" || typeof device_id !== "number" || typeof byte_size !== "number") {
          throw invalidArg(
            `Cannot register CUDA shared memory region '${region}': the body needs 'raw_handle' ({"b64": string}), 'device_id' and 'byte_size' (numbers)`,
          );
        }
        let raw: Uint8Array;
        try {
          raw = Uint8Array.from(atob(handle), (c) => c.charCodeAt(0));
        } catch {
          throw invalidArg(
            `Cannot register CUDA shared memory region '${region}': raw_handle.b64 is not base64`,
          );
        }
        cuda.register(region, raw, device_id, byte_size);
        return new Response(null, { status: 200 });
      }
      if (action === "unregister" && method === "POST") {
        cuda.unregister(region);
        return new Response(null, { status: 200 });
      }
    }
    throw notFound(`Not found: ${method} '${url.pathname}'`);
  }

  const restrictions = options.restrictions ?? {};
  const restricted = Object.keys(restrictions).length > 0;
  /** The 403 answer to a restricted call without the expected header; undefined when the call may go on. */
  function checkRestriction(request: Request, group: ApiGroup | undefined): Response | undefined {
    const rule = group && restrictions[group];
    if (!rule || matchesRestriction(request.headers.get(rule.key), rule.value)) return undefined;
    return json({ error: `This API is restricted, expecting header '${rule.key}'` }, 403);
  }

  function inferDecoded(request: InferRequest, recvStart: number, recvEnd: number): Promise<InferResponse> {
    if (options.logger && options.logger.verboseLevel >= 1) {
      const version = request.version ? `/versions/${request.version}` : "";
      options.logger.verbose(1, `HTTP request: POST /v2/models/${request.model}${version}/infer`);
    }
    let mv: ModelVersion;
    try {
      mv = pipeline.accept(request.model, request.version, ENDPOINTS.httpInfer);
    } catch (err) {
      return Promise.reject(err);
    }
    // The listener thread encodes the answer: the trace's send marks are taken as it goes back to it.
    return pipeline.run(mv, request, { endpoint: ENDPOINTS.httpInfer, recvStart, recvEnd });
  }

  function handle(request: Request): Promise<Response> {
    if (options.logger && options.logger.verboseLevel >= 1) {
      options.logger.verbose(1, `HTTP request: ${request.method} ${pathOf(request.url)}`);
    }
    if (request.method === "POST") {
      const m = INFER_PATH.exec(pathOf(request.url));
      if (m) {
        const denied = restricted && checkRestriction(request, "inference");
        if (denied) return Promise.resolve(denied);
        return infer(request, m[1]!, m[2] ?? "").catch(errorResponse);
      }
    }
    return route(request).catch(errorResponse);
  }

  return { handle, inferDecoded };
}
