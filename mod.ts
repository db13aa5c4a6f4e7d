/**
 * dinfer: a Triton-compatible inference server on Deno. This module is the embedding API.
 *
 * ```ts
 * import { defaultOptions, startServer } from "./mod.ts";
 * const server = await startServer({ ...defaultOptions(["./models"]), httpPort: 0, allowGrpc: false });
 * // ... fetch(`http://127.0.0.1:${server.httpAddr!.port}/v2/health/ready`)
 * await server.shutdown();
 * ```
 * @module
 */

export { CliError, defaultOptions, helpText, parseCommandLine, type ServerOptions } from "./server/cli.ts";
export {
  EXAMPLE_REPOSITORY,
  type RunningServer,
  startServer,
  StartupError,
  VERSION,
} from "./server/server.ts";
export { createHttpHandler, type Handler, type HttpOptions } from "./server/frontends/http/handler.ts";
export { ModelRegistry, type RegistryOptions } from "./server/models/registry.ts";
export { InferencePipeline, type PipelineOptions } from "./server/pipeline/pipeline.ts";
export { type ErrorCode, ServerError } from "./server/core/errors.ts";
export type { InferRequest, InferResponse, Tensor } from "./server/core/types.ts";
