/**
 * What the HTTP routes share: JSON answers, the error answer, and the wrappers of the route table (body limit,
 * response compression) with the body readers that honour the limit.
 * @module
 */

import { httpStatus, invalidArg, toServerError, unsupported } from "../../core/errors.ts";
import { readDeclaredBody, readUpTo } from "./_body.ts";
import { concatBytes } from "../../core/bytes.ts";
import { receiveBody } from "./listener.ts";
import type { RouteContext, RouteHandler, Wrapper } from "./router.ts";

/** The headers of a JSON answer. */
export const JSON_HEADERS: Readonly<Record<string, string>> = { "content-type": "application/json" };

/**
 * A JSON answer.
 * @param body the value to send
 * @param status the HTTP status
 */
export function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

/** An empty 200 answer. */
export function ok(): Response {
  return new Response(null, { status: 200 });
}

/**
 * The answer to a failed request: `{"error": message}` with the status of its error code.
 * @param err what was thrown
 */
export function errorResponse(err: unknown): Response {
  const e = toServerError(err);
  return json({ error: e.message }, httpStatus(e.code));
}

/**
 * The wrapper that lets a route read a request body of at most `limit` bytes (after inflating).
 * @param limit `--http-max-input-size`
 */
export function bodyLimit(limit: number): Wrapper {
  return (handler: RouteHandler): RouteHandler => (ctx) => {
    ctx.bodyLimit = limit;
    return handler(ctx);
  };
}

/** The wrapper that compresses a route's answers with gzip or deflate when the client's Accept-Encoding takes it. */
export const compression: Wrapper = (handler: RouteHandler): RouteHandler => (ctx) => {
  const encoding = pickEncoding(ctx.request);
  return encoding ? compress(handler, ctx, encoding) : handler(ctx);
};

async function compress(
  handler: RouteHandler,
  ctx: RouteContext,
  encoding: "gzip" | "deflate",
): Promise<Response> {
  const response = await handler(ctx);
  if (response.body === null) return response;
  const headers = new Headers(response.headers);
  headers.set("content-encoding", encoding);
  const stream = response.body.pipeThrough(new CompressionStream(encoding));
  const body = new Uint8Array(await new Response(stream).arrayBuffer());
  return new Response(body, { status: response.status, headers });
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

/**
 * Reads a route's request body within its limit (`bodyLimit`), inflating gzip and deflate bodies.
 * @param ctx the route context
 * @param asText whether a body that needs no inflating may come back as text (Deno decodes it natively, which is
 *   faster than decoding its bytes in JavaScript)
 * @param alignAt an offset in the body to place 8-byte aligned (see readDeclared): where the binary part of a
 *   binary-extension request starts, so that its tensors are read in place
 */
export function readBody(ctx: RouteContext, asText?: false, alignAt?: number): Promise<Uint8Array>;
export function readBody(ctx: RouteContext, asText: true): Promise<Uint8Array | string>;
export function readBody(ctx: RouteContext, asText = false, alignAt = 0): Promise<Uint8Array | string> {
  try {
    const { request, bodyLimit: limit } = ctx;
    const declared = request.headers.get("content-length");
    if (declared !== null && Number(declared) > limit) {
      throw invalidArg(
        `Cannot read the request body: ${declared} bytes is more than --http-max-input-size (${limit} bytes)`,
      );
    }
    const raw = request.headers.get("content-encoding");
    const encoding = raw === null ? undefined : raw.trim().toLowerCase();
    const plain = !encoding || encoding === "identity";
    // The common body (declared length, not compressed) is read without an async function's frame.
    if (declared !== null && plain) {
      return asText
        ? receiveBody(request, request.text())
        : receiveBody(request, readDeclaredBody(request, Number(declared), alignAt));
    }
    return readOtherBody(request, limit, declared, plain ? undefined : encoding!, alignAt);
  } catch (err) {
    return Promise.reject(err);
  }
}

/** readBody for a body of undeclared length or one to inflate (`encoding`: its Content-Encoding, unless identity). */
async function readOtherBody(
  request: Request,
  limit: number,
  declared: string | null,
  encoding: string | undefined,
  alignAt: number,
): Promise<Uint8Array> {
  let body: Uint8Array;
  if (declared !== null) {
    body = await receiveBody(request, readDeclaredBody(request, Number(declared), alignAt));
  } else {
    const read = await receiveBody(request, readUpTo(request.body, limit));
    if (read === null) {
      throw invalidArg(
        `Cannot read the request body: it is more than --http-max-input-size (${limit} bytes)`,
      );
    }
    body = read;
  }
  if (encoding !== undefined) {
    if (encoding !== "gzip" && encoding !== "deflate") {
      throw unsupported(`Cannot read the request body: unsupported Content-Encoding '${encoding}'`);
    }
    body = await inflate(body, encoding, limit);
  }
  return body;
}

/**
 * Reads a route's request body as a JSON object; an empty body is `{}`.
 * @param ctx the route context
 * @param what names the request in errors, e.g. "the trace settings"
 */
export async function readJsonObject(ctx: RouteContext, what: string): Promise<Record<string, unknown>> {
  const body = await readBody(ctx);
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
  return concatBytes(chunks, total);
}
