/**
 * Server start-up and shutdown: loads the repositories, then serves HTTP and metrics.
 * @module
 */

import { fileURLToPath } from "node:url";
import { httpListenerCount, type ServerOptions } from "./cli.ts";
import type { FrontendOptions } from "./frontends/frontend.ts";
import { type GrpcServer, startGrpcServer } from "./frontends/grpc/service.ts";
import { createHttpFrontend } from "./frontends/http/handler.ts";
import { HttpWorkers } from "./frontends/http/workers.ts";
import { type ConnectionLimits, type ResilientServer, serveResilient } from "./frontends/http/listener.ts";
import { resolve as resolvePath } from "node:path";
import { Logger } from "./logging.ts";
import { removeStaleFiles } from "./cleanup.ts";
import { openGpuReader } from "./metrics/gpu.ts";
import { createMetrics, createMetricsHandler } from "./metrics/prometheus.ts";
import { SystemSampler } from "./metrics/sampler.ts";
import { ModelRegistry } from "./models/registry.ts";
import { InferencePipeline } from "./pipeline/pipeline.ts";
import { type Poller, startPoller } from "./repository/poller.ts";
import { SystemSharedMemory } from "./shm/system_shm.ts";
import { CudaSharedMemory } from "./shm/cuda_shm.ts";
import { trtShimPath } from "../ffi/trtshim.ts";
import { TraceManager } from "./trace/trace.ts";
import { ResponseCache } from "./cache/response_cache.ts";
import { registerCacheMetrics } from "./metrics/cache_metrics.ts";
import { RateLimiter } from "./scheduler/rate_limiter.ts";
import type { CloudRepositories } from "./repository/cloud.ts";

/** The server's version, reported in server metadata. */
export const VERSION = "0.1.0";

/** The protocol extensions this build implements. */
export const EXTENSIONS = [
  "classification",
  "sequence",
  "model_repository",
  "model_repository(unload_dependents)",
  "schedule_policy",
  "model_configuration",
  "system_shared_memory",
  "cuda_shared_memory",
  "binary_tensor_data",
  "parameters",
  "statistics",
  "trace",
  "logging",
];

/** The bundled example repository, served when no repository is given. */
export const EXAMPLE_REPOSITORY: string = fileURLToPath(new URL("../examples/models", import.meta.url));

/** A running server. */
export interface RunningServer {
  /** The models. */
  registry: ModelRegistry;
  /** The HTTP address actually bound (port 0 picks a free one). */
  httpAddr: Deno.NetAddr | undefined;
  /** The gRPC port actually bound, when gRPC is on. */
  grpcPort: number | undefined;
  /** The metrics address actually bound. */
  metricsAddr: Deno.NetAddr | undefined;
  /** The repository poller in poll mode. */
  poller: Poller | undefined;
  /** Models that failed to load at start, with their reasons. */
  loadFailures: Map<string, string>;
  /** Stops accepting requests, finishes in-flight ones (up to exit-timeout-secs) and frees everything. */
  shutdown(): Promise<void>;
  /** Resolves when the server has shut down. */
  finished: Promise<void>;
}

/** Start-up failed (for example a model failed to load with --exit-on-error=true). */
export class StartupError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "StartupError";
  }
}

/** The HTTP connection limits and timeouts the flags set (`--http-max-connections`, `--http-*-timeout-secs`). */
function connectionLimits(options: ServerOptions): ConnectionLimits {
  return {
    maxConnections: options.httpMaxConnections,
    headerTimeoutMs: options.httpHeaderTimeoutSecs * 1000,
    idleTimeoutMs: options.httpIdleTimeoutSecs * 1000,
    bodyTimeoutMs: options.httpBodyTimeoutSecs * 1000,
  };
}

/** Descriptors kept for the server's own files (models, logs, stub sockets) beside its connections. */
const OWN_DESCRIPTORS = 256;

/** The soft limit on open files of this process (Linux; Deno raises it to the hard limit at start), if known. */
function openFileLimit(): number | undefined {
  try {
    const line = Deno.readTextFileSync("/proc/self/limits").split("\n").find((l) =>
      l.startsWith("Max open files")
    );
    const soft = line?.slice("Max open files".length).trim().split(/\s+/)[0];
    return soft === undefined || !/^\d+$/.test(soft) ? undefined : Number(soft);
  } catch {
    return undefined;
  }
}

/**
 * Warns when a connection limit leaves no room below the limit on open files: a flood would then run the
 * process out of descriptors (refused by the kernel, with failed accepts) before the limit refuses it.
 */
function warnDescriptorLimit(options: ServerOptions, log: Logger): void {
  const limit = openFileLimit();
  if (limit === undefined) return;
  const flags: [string, number][] = [];
  if (options.allowHttp) flags.push(["--http-max-connections", options.httpMaxConnections]);
  if (options.allowGrpc) flags.push(["--grpc-max-connections", options.grpcMaxConnections]);
  for (const [flag, max] of flags) {
    if (max > 0 && max + OWN_DESCRIPTORS > limit) {
      log.warning(
        `${flag}=${max} leaves less than ${OWN_DESCRIPTORS} of the ${limit} open files this process may have for its own files: raise the limit (ulimit -n, LimitNOFILE=) or lower ${flag}`,
      );
    }
  }
}

/**
 * Warns, in explicit mode, for each endpoint whose model repository API any client can call: a model load can
 * upload files, and a Python model's files are code the server runs.
 */
function warnUnrestrictedRepository(
  options: ServerOptions,
  log: Logger,
  httpAddr: Deno.NetAddr | undefined,
  grpcPort: number | undefined,
): void {
  if (options.modelControlMode !== "explicit") return;
  const open: string[] = [];
  if (httpAddr && !options.httpRestrictedApi["model-repository"]) {
    open.push(`HTTP at ${httpAddr.hostname}:${httpAddr.port} (--http-restricted-api)`);
  }
  if (grpcPort !== undefined && !options.grpcRestrictedProtocol["model-repository"]) {
    open.push(`gRPC at ${options.grpcAddress}:${grpcPort} (--grpc-restricted-protocol)`);
  }
  for (const where of open) {
    log.warning(
      `The model repository API is open to every client on ${where}: any client that reaches it can load models with uploaded files, and an uploaded Python model runs as this server's user; restrict the 'model-repository' API (see docs/security.md)`,
    );
  }
}

/**
 * Starts a server.
 * @param options the parsed command line
 * @param logger where to log; one is made from the options when left out
 * @returns the running server
 */
export async function startServer(options: ServerOptions, logger?: Logger): Promise<RunningServer> {
  const log = logger ?? new Logger({
    info: options.logInfo,
    warning: options.logWarning,
    error: options.logError,
    verbose: options.logVerbose,
    format: options.logFormat,
    file: options.logFile,
  });
  const stale = removeStaleFiles();
  if (stale.length > 0) {
    log.info(
      `Removed ${stale.length} shared-memory objects and temporary folders of servers no longer running`,
    );
  }
  // Cloud repositories (s3://, gs://, as://) are mirrored into local folders, brought up to date before
  // every scan.
  let given = options.modelRepositories;
  let cloud: CloudRepositories | undefined;
  if (given.some((r) => /^(s3|gs|as):\/\//.test(r))) {
    try {
      // Loaded only here: the three cloud SDKs cost start-up time and memory a local repository does not need.
      const { CloudRepositories } = await import("./repository/cloud.ts");
      ({ paths: given, cloud } = await CloudRepositories.open(given));
    } catch (err) {
      throw new StartupError((err as Error).message);
    }
  }
  // Absolute, so that models started in their own folder (Python stubs) find their files.
  const repositories = given.length > 0 ? given.map((r) => resolvePath(r)) : [EXAMPLE_REPOSITORY];
  let traces: TraceManager;
  try {
    traces = new TraceManager(options.traceConfig);
    await traces.start();
  } catch (err) {
    await cloud?.close();
    throw new StartupError((err as Error).message);
  }
  let metrics: ReturnType<typeof createMetrics> | undefined;
  let sampler: SystemSampler | undefined;
  const responseCache = options.responseCacheSize > 0
    ? new ResponseCache(options.responseCacheSize)
    : undefined;
  const registry = new ModelRegistry({
    responseCache,
    rateLimiter: options.rateLimit === "execution_count"
      ? new RateLimiter(options.rateLimitResources)
      : undefined,
    repositories,
    autoComplete: options.autoCompleteConfig,
    backendConfig: options.backendConfig,
    controlMode: options.modelControlMode,
    logger: log,
    ...(cloud ? { beforeScan: () => cloud.sync() } : {}),
  });
  traces.modelKnown = (name) => registry.isReady(name, "");
  const shm = new SystemSharedMemory(options.allowClientShm);
  const cudaShm = new CudaSharedMemory(
    options.allowClientShm,
    trtShimPath(options.backendConfig.tensorrt ?? {}),
    (name) => shm.has(name),
  );
  shm.otherKind = (name) => cudaShm.has(name);
  // Every inference request takes this one path; the models' own requests (ensemble steps, BLS) too.
  const pipeline = new InferencePipeline(registry, { shm, cudaShm, traces });
  let toLoad: string[] | undefined;
  if (options.modelControlMode === "explicit") {
    toLoad = options.loadModels.includes("*") ? undefined : options.loadModels;
  }
  const failures = toLoad?.length === 0 ? new Map<string, string>() : await registry.loadModels(toLoad);
  for (const row of await registry.index()) {
    log.info(
      `Model '${row.name}' version ${row.version || "-"}: ${row.state}${
        row.reason ? ` (${row.reason})` : ""
      }`,
    );
  }
  if (failures.size > 0 && options.exitOnError) {
    await registry.close();
    await traces.close();
    await cloud?.close();
    const reasons = [...failures.entries()].map(([n, r]) => `'${n}': ${r}`).join("; ");
    throw new StartupError(`Cannot start: failed to load all models (${reasons})`);
  }
  if (options.allowMetrics) {
    // CPU and GPU gauges are sampled every --metrics-interval-ms; GPUs are those the shim sees.
    sampler = new SystemSampler({
      intervalMs: options.metricsIntervalMs,
      cpu: options.allowCpuMetrics,
      gpu: options.allowGpuMetrics
        ? openGpuReader({ tensorrtConfig: options.backendConfig.tensorrt })
        : undefined,
    });
    try {
      metrics = createMetrics(registry, { config: options.metricsConfig, sampler });
      if (responseCache) registerCacheMetrics(metrics, registry, responseCache);
    } catch (err) {
      await registry.close();
      await traces.close();
      await cloud?.close();
      throw new StartupError((err as Error).message);
    }
  }
  const poller = options.modelControlMode === "poll"
    ? await startPoller(
      registry,
      repositories,
      options.repositoryPollSecs,
      (m) => log.info(m),
      cloud ? () => cloud.sync() : undefined,
    )
    : undefined;
  let stopping = false;
  let httpServer: ResilientServer | undefined;
  let metricsServer: ResilientServer | undefined;
  let httpAddr: Deno.NetAddr | undefined;
  let httpWorkers: HttpWorkers | undefined;
  let httpLimits: ConnectionLimits | undefined;
  let metricsAddr: Deno.NetAddr | undefined;
  let grpcServer: GrpcServer | undefined;
  let grpcPort: number | undefined;

  const frontend: FrontendOptions = {
    serverName: options.id,
    serverVersion: VERSION,
    extensions: EXTENSIONS,
    strictReadiness: options.strictReadiness,
    isStopping: () => stopping,
    logger: log,
    shm,
    cudaShm,
    traces,
  };
  if (options.allowHttp) {
    const http = createHttpFrontend(pipeline, {
      ...frontend,
      maxInputSize: options.httpMaxInputSize,
      restrictions: options.httpRestrictedApi,
    });
    const listeners = httpListenerCount(options.httpThreadCount, navigator.hardwareConcurrency || 1);
    // The main thread and the listener threads count their open connections together.
    httpLimits = {
      ...connectionLimits(options),
      openConnections: new Int32Array(new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT)),
    };
    try {
      httpServer = serveResilient(
        {
          port: options.httpPort,
          hostname: options.httpAddress,
          name: "HTTPService",
          logger: log,
          // Listener threads join the same port; the kernel spreads connections over them.
          reusePort: listeners > 1,
          limits: httpLimits,
        },
        http.handle,
      );
    } catch (err) {
      await registry.close();
      await traces.close();
      throw new StartupError(
        `Cannot start the HTTP service on ${options.httpAddress}:${options.httpPort}: ${
          (err as Error).message
        }`,
      );
    }
    httpAddr = httpServer.addr;
    if (listeners > 1) {
      httpWorkers = await HttpWorkers.start(listeners - 1, http, {
        hostname: httpAddr.hostname,
        port: httpAddr.port,
        maxInputSize: options.httpMaxInputSize,
        ...(options.httpRestrictedApi.inference ? { inference: options.httpRestrictedApi.inference } : {}),
        limits: httpLimits,
        onError: (message) => log.error(message),
        onInfo: (message) => log.info(message),
      });
      log.info(`HTTPService serves on ${listeners} threads`);
    }
    log.info(`Started HTTPService at ${httpAddr.hostname}:${httpAddr.port}`);
  }
  if (options.allowGrpc) {
    try {
      grpcServer = await startGrpcServer(pipeline, {
        ...frontend,
        restrictions: options.grpcRestrictedProtocol,
        address: options.grpcAddress,
        port: options.grpcPort,
        keepaliveTimeMs: options.grpcKeepaliveTimeMs,
        keepaliveTimeoutMs: options.grpcKeepaliveTimeoutMs,
        keepalivePermitWithoutCalls: options.grpcKeepalivePermitWithoutCalls,
        http2MaxPingsWithoutData: options.grpcHttp2MaxPingsWithoutData,
        maxConnections: options.grpcMaxConnections,
        compressionLevel: options.grpcInferResponseCompressionLevel,
        useSsl: options.grpcUseSsl,
        serverCert: options.grpcServerCert,
        serverKey: options.grpcServerKey,
        rootCert: options.grpcRootCert,
      });
    } catch (err) {
      await httpServer?.shutdown();
      await registry.close();
      await traces.close();
      await cloud?.close();
      throw new StartupError(
        `Cannot start the gRPC service on ${options.grpcAddress}:${options.grpcPort}: ${
          (err as Error).message
        }`,
      );
    }
    grpcPort = grpcServer.port;
    log.info(`Started GRPCInferenceService at ${options.grpcAddress}:${grpcPort}`);
  }
  if (options.allowMetrics) {
    try {
      metricsServer = serveResilient(
        {
          port: options.metricsPort,
          hostname: options.metricsAddress,
          name: "Metrics Service",
          logger: log,
          limits: connectionLimits(options),
        },
        createMetricsHandler(metrics!),
      );
    } catch (err) {
      await httpServer?.shutdown();
      grpcServer?.forceShutdown();
      await registry.close();
      await traces.close();
      throw new StartupError(
        `Cannot start the metrics service on ${options.metricsAddress}:${options.metricsPort}: ${
          (err as Error).message
        }`,
      );
    }
    metricsAddr = metricsServer.addr;
    log.info(`Started Metrics Service at ${metricsAddr.hostname}:${metricsAddr.port}`);
    sampler?.start();
  }

  warnUnrestrictedRepository(options, log, httpAddr, grpcPort);
  warnDescriptorLimit(options, log);

  let resolveFinished: () => void = () => {};
  const finished = new Promise<void>((r) => (resolveFinished = r));
  let shuttingDown: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    shuttingDown ??= (async () => {
      stopping = true;
      log.info("Shutting down: finishing in-flight requests");
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<void>((r) => (timer = setTimeout(r, options.exitTimeoutSecs * 1000)));
      // Everything that may wait on a model (a poll, a load that hangs in initialize()) is inside the
      // --exit-timeout-secs bound.
      const drain = (async () => {
        await poller?.stop();
        await Promise.allSettled([
          httpServer?.shutdown(),
          httpWorkers?.shutdown(),
          metricsServer?.shutdown(),
          grpcServer?.shutdown(),
        ]);
        await registry.close();
      })();
      const drained = await Promise.race([drain.then(() => true), timeout.then(() => false)]);
      clearTimeout(timer);
      if (!drained) {
        // Requests still queued or running are dropped: the process exits without waiting for them.
        log.warning(
          `In-flight requests did not finish within --exit-timeout-secs=${options.exitTimeoutSecs}`,
        );
        grpcServer?.forceShutdown();
        httpWorkers?.terminate();
        void registry.close();
      } else {
        await Promise.allSettled([httpServer?.finished, metricsServer?.finished]);
      }
      shm.close();
      cudaShm.close();
      sampler?.stop();
      await traces.close();
      await cloud?.close();
      log.info("Stopped");
      if (!logger) log.close();
      resolveFinished();
    })();
    return shuttingDown;
  };
  return { registry, httpAddr, metricsAddr, grpcPort, poller, loadFailures: failures, shutdown, finished };
}
