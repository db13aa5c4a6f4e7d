/**
 * What the HTTP and gRPC frontends share: the server's identity, its extensions and services, and the one
 * readiness rule both answer with.
 * @module
 */

import type { Logger } from "../logging.ts";
import type { ModelRegistry } from "../models/registry.ts";
import type { SystemSharedMemory } from "../shm/system_shm.ts";
import type { CudaSharedMemory } from "../shm/cuda_shm.ts";
import type { TraceManager } from "../trace/trace.ts";
import type { Restrictions } from "./restricted.ts";

/**
 * The most bytes of a streamed answer (server-sent events, a gRPC stream's responses) held for a client that does
 * not read them, beyond what its connection took: past it the answer is cut and its requests cancelled, as if the
 * client had gone.
 */
export const STREAM_HELD_MAX = 16 * 1024 * 1024;

/** The options every frontend takes. */
export interface FrontendOptions {
  /** The server name of server metadata (`--id`). */
  serverName: string;
  /** The server version of server metadata. */
  serverVersion: string;
  /** The protocol extensions this server implements. */
  extensions: string[];
  /** Whether readiness needs every model ready (`--strict-readiness`). */
  strictReadiness: boolean;
  /**
   * Whether the server serves: every endpoint started, on all its threads, and not shutting down; readiness
   * answers not ready otherwise. Always, when not given.
   */
  serving?: () => boolean;
  /** The server's logger (the logging extension; verbose level 1 logs every HTTP request). */
  logger?: Logger;
  /** System shared-memory regions. */
  shm?: SystemSharedMemory;
  /** CUDA shared-memory regions. */
  cudaShm?: CudaSharedMemory;
  /** The trace extension. */
  traces?: TraceManager;
  /** API groups that need a header or metadata key (`--http-restricted-api`, `--grpc-restricted-protocol`). */
  restrictions?: Restrictions;
}

/**
 * Whether the server is ready: serving (started, not shutting down) and, with strict readiness, every model
 * ready.
 * @param registry the models
 * @param options the frontend options
 */
export function serverReady(registry: ModelRegistry, options: FrontendOptions): boolean {
  return (options.serving?.() ?? true) && (!options.strictReadiness || registry.allReady());
}
