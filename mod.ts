/**
 * dinfer: a Triton-compatible inference server on Deno. This module is the embedding API.
 *
 * ```ts
 * import { startServer } from "./mod.ts";
 * const server = await startServer({ repository: { paths: ["./models"] }, http: { port: 0 }, grpc: { enabled: false } });
 * // ... fetch(`http://127.0.0.1:${server.httpAddr!.port}/v2/health/ready`)
 * await server.shutdown();
 * ```
 * @module
 */

export {
  CliError,
  ConfigError,
  defaultConfig,
  FLAGS,
  helpText,
  parseCommandLine,
  resolveConfig,
} from "./server/cli.ts";
export type * from "./server/config.ts";
export {
  EXAMPLE_REPOSITORY,
  type RunningServer,
  type StartOptions,
  startServer,
  StartupError,
  VERSION,
} from "./server/server.ts";
export { createHttpHandler, type Handler, type HttpOptions } from "./server/frontends/http/handler.ts";
export { ModelRegistry, type RegistryOptions } from "./server/models/registry.ts";
export { InferencePipeline, type PipelineOptions } from "./server/pipeline/pipeline.ts";
export { type ErrorCode, ServerError } from "./server/core/errors.ts";
export type { InferRequest, InferResponse, Tensor } from "./server/core/types.ts";
