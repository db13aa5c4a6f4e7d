/**
 * The HTTP/REST frontend (KServe v2 with Triton's extensions) as a pure `(Request) => Promise<Response>`
 * function over a route table; `Deno.serve` appears only at start-up.
 * @module
 */

import { invalidArg, notFound } from "../../core/errors.ts";
import type { InferRequest, InferResponse } from "../../core/types.ts";
import type { ModelVersion } from "../../models/model_version.ts";
import { ENDPOINTS, type InferencePipeline } from "../../pipeline/pipeline.ts";
import { INFER_PATH, pathOf } from "./_paths.ts";
import { createOpenAiHandler } from "./openai.ts";
import { type ApiGroup, matchesRestriction } from "../restricted.ts";
import { errorResponse, json } from "./middleware.ts";
import type { HttpOptions, RouteDeps } from "./options.ts";
import { type CompiledRoute, createRouter, type Route, type RouteContext, type Router } from "./router.ts";
import { healthRoutes } from "./routes/health.ts";
import { metadataRoutes } from "./routes/metadata.ts";
import { statisticsRoutes } from "./routes/statistics.ts";
import { inferRoutes } from "./routes/infer.ts";
import { repositoryRoutes } from "./routes/repository.ts";
import { sharedMemoryRoutes } from "./routes/shared_memory.ts";
import { traceRoutes } from "./routes/trace.ts";
import { loggingRoutes } from "./routes/logging.ts";

export type { HttpOptions } from "./options.ts";

/** An HTTP request handler. */
export type Handler = (request: Request) => Promise<Response>;

/**
 * The HTTP route table, in the order routes are tried: `/v2/models/stats` comes before the model routes, whose
 * `:model` would take it.
 * @param pipeline the inference pipeline (and, through it, the models)
 * @param options server facts and limits; a service left out (traces, logger, shared memory) has no routes
 */
export function httpRoutes(pipeline: InferencePipeline, options: HttpOptions): Route[] {
  const deps: RouteDeps = { pipeline, options };
  const openai = createOpenAiHandler(pipeline, { maxInputSize: options.maxInputSize });
  const openaiRoute = ({ request, path }: RouteContext) => openai(request, path);
  return [
    ...inferRoutes(deps),
    ...healthRoutes(deps),
    ...statisticsRoutes(deps),
    ...metadataRoutes(deps),
    ...repositoryRoutes(deps),
    ...sharedMemoryRoutes(deps),
    ...traceRoutes(deps),
    ...loggingRoutes(deps),
    // The OpenAI-compatible API routes its own paths: its model list is metadata, everything else runs models.
    { method: "*", path: "/v1/models/*", group: "metadata", handler: openaiRoute },
    { method: "*", path: "/v1/*", group: "inference", handler: openaiRoute },
  ];
}

/**
 * The 404 of a path no route takes: a path outside the API, `/v2/models` alone, or a version that is not digits
 * names only the path; any other names the method too.
 */
function noRoute(method: string, path: string, parts: readonly string[]): Error {
  const models = parts[0] === "v2" && parts[1] === "models";
  const badVersion = models && parts[3] === "versions" && !/^[0-9]+$/.test(parts[4] ?? "");
  if (parts[0] !== "v2" || (models && parts.length === 2) || badVersion) {
    return notFound(`Not found: '${path}'`);
  }
  return notFound(`Not found: ${method} '${path}'`);
}

/** The path's segments, percent-decoded, empty ones left out. */
function segments(path: string): string[] {
  return path.split("/").filter((p) => p !== "").map((p) => {
    try {
      return p.includes("%") ? decodeURIComponent(p) : p;
    } catch {
      throw invalidArg(`Cannot read the path '${path}': bad percent-encoding`);
    }
  });
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

/**
 * Creates the HTTP frontend over the inference pipeline.
 * @param pipeline the inference pipeline (and, through it, the models)
 * @param options server facts and limits
 * @returns the handler and the entry point for requests decoded on listener threads
 */
export function createHttpFrontend(pipeline: InferencePipeline, options: HttpOptions): HttpFrontend {
  const router: Router = createRouter(httpRoutes(pipeline, options));
  // The infer route, which the hot path runs without going through the table.
  const infer = router.match("POST", ["v2", "models", "m", "infer"])!.route;

  const restrictions = options.restrictions ?? {};
  const restricted = Object.keys(restrictions).length > 0;
  /** The 403 answer to a restricted call without the expected header; undefined when the call may go on. */
  function checkRestriction(request: Request, group: ApiGroup): Response | undefined {
    const rule = restrictions[group];
    if (!rule || matchesRestriction(request.headers.get(rule.key), rule.value)) return undefined;
    return json({ error: `This API is restricted, expecting header '${rule.key}'` }, 403);
  }

  /** Runs a route behind its group's restriction; what its handler throws comes back as a rejection. */
  function run(
    route: CompiledRoute,
    request: Request,
    params: Record<string, string>,
    path: string,
  ): Promise<Response> {
    try {
      const denied = restricted && checkRestriction(request, route.group);
      if (denied) return Promise.resolve(denied);
      return Promise.resolve(route.run({ request, params, path, bodyLimit: 0 }));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  function route(request: Request, path: string): Promise<Response> {
    let parts: string[];
    try {
      parts = segments(path);
    } catch (err) {
      return Promise.reject(err);
    }
    const found = router.match(request.method, parts);
    if (!found) return Promise.reject(noRoute(request.method, path, parts));
    return run(found.route, request, found.params, path);
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
    const path = pathOf(request.url);
    if (options.logger && options.logger.verboseLevel >= 1) {
      options.logger.verbose(1, `HTTP request: ${request.method} ${path}`);
    }
    if (request.method === "POST") {
      const m = INFER_PATH.exec(path);
      if (m) {
        const params: Record<string, string> = { model: m[1]! };
        if (m[2] !== undefined) params.version = m[2];
        return run(infer, request, params, path).catch(errorResponse);
      }
    }
    return route(request, path).catch(errorResponse);
  }

  return { handle, inferDecoded };
}
