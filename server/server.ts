/**
 * Server start-up and shutdown: a sequence of small steps (repositories, traces, models, metrics, polling,
 * shared memory, then the endpoints), each registering its undo on one cleanup stack. Every way out (a failed
 * start, an abort, `shutdown()`) unwinds that stack, newest first, within `--exit-timeout-secs`.
 * @module
 */

import { fileURLToPath } from "node:url";
import { ConfigError, httpListenerCount, resolveConfig } from "./cli.ts";
import type { ServerConfig, ServerConfigInput } from "./config.ts";
import type { FrontendOptions } from "./frontends/frontend.ts";
import { type GrpcServer, startGrpcServer } from "./frontends/grpc/server.ts";
import { grpcInferDecoded } from "./frontends/grpc/infer.ts";
import { connectionCount, type GrpcListenOptions } from "./frontends/grpc/listen.ts";
import { createHttpFrontend, type HttpFrontend } from "./frontends/http/handler.ts";
import { ListenerThreads } from "./frontends/http/workers.ts";
import { ListenerReplicas } from "./frontends/http/replicas.ts";
import {
  type ConnectionLimits,
  type ResilientServeOptions,
  type ResilientServer,
  serveResilient,
} from "./frontends/http/listener.ts";
import { resolve as resolvePath } from "node:path";
import { Logger } from "./logging.ts";
import { CleanupStack, removeStaleFiles } from "./cleanup.ts";
import { MemoryReclaimer, reclaimMemory } from "./core/memory.ts";
import { openGpuReader } from "./metrics/gpu.ts";
import { createMetrics, createMetricsHandler, parseMetricsConfig } from "./metrics/prometheus.ts";
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
import { CustomMetrics } from "./metrics/custom.ts";
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
  /** The configuration it runs with, every field filled. */
  config: ServerConfig;
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

/** How a server starts, besides its configuration. */
export interface StartOptions {
  /** Where to log; when left out, one is made from the configuration's `logging` section (closed at the end). */
  logger?: Logger;
  /**
   * Stops the server when aborted: during start-up the start fails and everything made so far is undone; once
   * started, it is `shutdown()`.
   */
  signal?: AbortSignal;
}

/** What the start-up steps share: the configuration, the log, and the stack each step registers its undo on. */
interface Startup {
  config: ServerConfig;
  log: Logger;
  stack: CleanupStack;
  signal: AbortSignal | undefined;
}

/** The HTTP connection limits and timeouts the flags set (`--http-max-connections`, `--http-*-timeout-secs`). */
function connectionLimits(http: ServerConfig["http"]): ConnectionLimits {
  return {
    maxConnections: http.maxConnections,
    headerTimeoutMs: http.headerTimeoutSecs * 1000,
    idleTimeoutMs: http.idleTimeoutSecs * 1000,
    bodyTimeoutMs: http.bodyTimeoutSecs * 1000,
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
function warnDescriptorLimit({ config, log }: Startup): void {
  const limit = openFileLimit();
  if (limit === undefined) return;
  const flags: [string, number][] = [];
  if (config.http.enabled) flags.push(["--http-max-connections", config.http.maxConnections]);
  if (config.grpc.enabled) flags.push(["--grpc-max-connections", config.grpc.maxConnections]);
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
  { config, log }: Startup,
  httpAddr: Deno.NetAddr | undefined,
  grpcPort: number | undefined,
): void {
  if (config.repository.controlMode !== "explicit") return;
  const open: string[] = [];
  if (httpAddr && !config.http.restrictedApi["model-repository"]) {
    open.push(`HTTP at ${httpAddr.hostname}:${httpAddr.port} (--http-restricted-api)`);
  }
  if (grpcPort !== undefined && !config.grpc.restrictedProtocol["model-repository"]) {
    open.push(`gRPC at ${config.grpc.address}:${grpcPort} (--grpc-restricted-protocol)`);
  }
  for (const where of open) {
    log.warning(
      `The model repository API is open to every client on ${where}: any client that reaches it can load models with uploaded files, and an uploaded Python model runs as this server's user; restrict the 'model-repository' API (see docs/security.md)`,
    );
  }
}

/** Fails the start when it was aborted (checked between steps). */
function checkAborted({ signal }: Startup): void {
  if (signal?.aborted) throw new StartupError("Cannot start: the start was aborted");
}

/** Removes the shared-memory objects and temporary folders that servers no longer running left behind. */
function removeStale({ log }: Startup): void {
  const stale = removeStaleFiles();
  if (stale.length > 0) {
    log.info(
      `Removed ${stale.length} shared-memory objects and temporary folders of servers no longer running`,
    );
  }
}

/**
 * The repositories as local absolute folders (models started in their own folder, Python stubs, find their
 * files): cloud repositories (s3://, gs://, as://) are mirrored into local folders, brought up to date before
 * every scan; none given is the bundled examples.
 */
async function openRepositories(
  s: Startup,
): Promise<{ paths: string[]; cloud: CloudRepositories | undefined }> {
  let given = s.config.repository.paths;
  let cloud: CloudRepositories | undefined;
  if (given.some((r) => /^(s3|gs|as):\/\//.test(r))) {
    // Loaded only here: the three cloud SDKs cost start-up time and memory a local repository does not need.
    const { CloudRepositories } = await import("./repository/cloud.ts");
    ({ paths: given, cloud } = await CloudRepositories.open(given));
    const opened = cloud;
    s.stack.defer("cloud repositories", () => opened.close());
  }
  return { paths: given.length > 0 ? given.map((r) => resolvePath(r)) : [EXAMPLE_REPOSITORY], cloud };
}

/** Starts tracing (`--trace-config`). */
async function startTraces(s: Startup): Promise<TraceManager> {
  const traces = new TraceManager(s.config.trace.settings);
  await traces.start();
  s.stack.defer("traces", () => traces.close());
  return traces;
}

/** The model registry over the repositories, with its response cache and rate limiter. */
function openRegistry(
  s: Startup,
  repositories: string[],
  traces: TraceManager,
  cloud: CloudRepositories | undefined,
): { registry: ModelRegistry; responseCache: ResponseCache | undefined; customMetrics: CustomMetrics } {
  const { config } = s;
  const responseCache = config.cache.size > 0 ? new ResponseCache(config.cache.size) : undefined;
  const customMetrics = new CustomMetrics();
  const registry = new ModelRegistry({
    responseCache,
    rateLimiter: config.rateLimit.mode === "execution_count"
      ? new RateLimiter(config.rateLimit.resources)
      : undefined,
    repositories,
    autoComplete: config.repository.autoCompleteConfig,
    backendConfig: config.backends.settings,
    controlMode: config.repository.controlMode,
    logger: s.log,
    metrics: customMetrics,
    ...(cloud ? { beforeScan: () => cloud.sync() } : {}),
  });
  // Unloading waits for the requests in flight and for loads that hang; past the time limit it goes on
  // unwaited (the stubs end with the process).
  s.stack.defer("models", () => registry.close(), { force: () => void registry.close().catch(() => {}) });
  traces.modelKnown = (name) => registry.isReady(name, "");
  return { registry, responseCache, customMetrics };
}

/** Loads the models of the start (all of them, or `--load-model` in explicit mode) and logs their states. */
async function loadModels(s: Startup, registry: ModelRegistry): Promise<Map<string, string>> {
  const { config, log } = s;
  let toLoad: string[] | undefined;
  if (config.repository.controlMode === "explicit") {
    toLoad = config.repository.loadModels.includes("*") ? undefined : config.repository.loadModels;
  }
  const loading = toLoad?.length === 0
    ? Promise.resolve(new Map<string, string>())
    : registry.loadModels(toLoad);
  const failures = await untilAborted(s, loading);
  for (const row of await registry.index()) {
    log.info(
      `Model '${row.name}' version ${row.version || "-"}: ${row.state}${
        row.reason ? ` (${row.reason})` : ""
      }`,
    );
  }
  if (failures.size > 0 && config.server.exitOnError) {
    const reasons = [...failures.entries()].map(([n, r]) => `'${n}': ${r}`).join("; ");
    throw new StartupError(`Cannot start: failed to load all models (${reasons})`);
  }
  return failures;
}

/** A step's promise, or a StartupError as soon as the start is aborted (a load that hangs does not hold it). */
function untilAborted<T>({ signal }: Startup, step: Promise<T>): Promise<T> {
  if (!signal) return step;
  return new Promise<T>((resolve, reject) => {
    const abort = () => reject(new StartupError("Cannot start: the start was aborted"));
    if (signal.aborted) abort();
    signal.addEventListener("abort", abort, { once: true });
    step.then(resolve, reject).finally(() => signal.removeEventListener("abort", abort));
  });
}

/** The Prometheus metrics and the CPU and GPU sampler (`--allow-metrics`), when on. */
function createServerMetrics(
  s: Startup,
  registry: ModelRegistry,
  responseCache: ResponseCache | undefined,
  customMetrics: CustomMetrics,
): ReturnType<typeof createMetrics> | undefined {
  const { metrics: m, backends } = s.config;
  if (!m.enabled) return undefined;
  // CPU and GPU gauges are sampled every --metrics-interval-ms; GPUs are those the shim sees.
  const sampler = new SystemSampler({
    intervalMs: m.intervalMs,
    cpu: m.cpu,
    gpu: m.gpu ? openGpuReader({ tensorrtConfig: backends.settings.tensorrt }) : undefined,
  });
  s.stack.defer("metrics sampler", () => sampler.stop());
  const metrics = createMetrics(registry, { config: m.settings, sampler });
  if (responseCache) registerCacheMetrics(metrics, registry, responseCache);
  customMetrics.attach(metrics);
  sampler.start();
  return metrics;
}

/** Follows the repositories in poll mode (`--repository-poll-secs`). */
async function startPolling(
  s: Startup,
  registry: ModelRegistry,
  repositories: string[],
  cloud: CloudRepositories | undefined,
): Promise<Poller | undefined> {
  const { repository } = s.config;
  if (repository.controlMode !== "poll") return undefined;
  const poller = await startPoller(
    registry,
    repositories,
    repository.pollSecs,
    (m) => s.log.info(m),
    cloud ? () => cloud.sync() : undefined,
  );
  // A poll in progress may wait on a load that hangs: past the time limit it is left unwaited.
  s.stack.defer("repository poller", () => poller.stop(), {
    force: () => void poller.stop().catch(() => {}),
  });
  return poller;
}

/** The system and CUDA shared-memory regions clients register (`--allow-client-shm`). */
function openSharedMemory(s: Startup): { shm: SystemSharedMemory; cudaShm: CudaSharedMemory } {
  const allow = s.config.sharedMemory.allowClient;
  const shm = new SystemSharedMemory(allow);
  s.stack.defer("system shared memory", () => shm.close());
  const cudaShm = new CudaSharedMemory(
    allow,
    trtShimPath(s.config.backends.settings.tensorrt ?? {}),
    (name) => shm.has(name),
  );
  s.stack.defer("CUDA shared memory", () => cudaShm.close());
  shm.otherKind = (name) => cudaShm.has(name);
  return { shm, cudaShm };
}

/** The endpoints stop together: each stops accepting, then answers the requests it has. */
const ENDPOINTS = "endpoints";

/**
 * Starts one listener of the HTTP services (its failed accepts logged by the server's logger).
 * @param s the start-up state
 * @param what the service in a start-up error, e.g. "HTTP service"
 * @param options where it listens, its log name and limits
 * @param handler answers its requests
 * @throws StartupError naming the service and address when it cannot listen
 */
function listen(
  s: Startup,
  what: string,
  options: Omit<ResilientServeOptions, "logger">,
  handler: (request: Request) => Promise<Response>,
): ResilientServer {
  try {
    return serveResilient({ ...options, logger: s.log }, handler);
  } catch (err) {
    throw new StartupError(
      `Cannot start the ${what} on ${options.hostname}:${options.port}: ${(err as Error).message}`,
    );
  }
}

/** How many threads serve a protocol (the main thread and listener threads). */
function threadsFor(requested: number): number {
  return httpListenerCount(requested, navigator.hardwareConcurrency || 1);
}

/** The main thread's HTTP service, and what its listener threads share with it. */
interface HttpService {
  addr: Deno.NetAddr;
  finished: Promise<void>;
  frontend: HttpFrontend;
  limits: ConnectionLimits;
}

/** Serves HTTP (`--allow-http`) on the main thread; `serveThreads` adds the listener threads. */
function serveHttp(
  s: Startup,
  pipeline: InferencePipeline,
  frontend: FrontendOptions,
): HttpService | undefined {
  const { http: config } = s.config;
  if (!config.enabled) return undefined;
  const http = createHttpFrontend(pipeline, {
    ...frontend,
    maxInputSize: config.maxInputSize,
    restrictions: config.restrictedApi,
  });
  // The main thread and the listener threads count their open connections together.
  const limits: ConnectionLimits = {
    ...connectionLimits(config),
    openConnections: connectionCount(),
  };
  const server = listen(s, "HTTP service", {
    port: config.port,
    hostname: config.address,
    name: "HTTPService",
    // Listener threads join the same port; the kernel spreads connections over them.
    reusePort: threadsFor(config.threadCount) > 1,
    limits,
  }, http.handle);
  s.stack.defer("HTTP service", () => server.shutdown(), { group: ENDPOINTS });
  s.log.info(`Started HTTPService at ${server.addr.hostname}:${server.addr.port}`);
  return { addr: server.addr, finished: server.finished, frontend: http, limits };
}

/** The main thread's gRPC service, and what its listener threads share with it. */
interface GrpcService {
  server: GrpcServer;
  listen: GrpcListenOptions;
  open: Int32Array;
}

/** Serves gRPC (`--allow-grpc`) on the main thread; `serveThreads` adds the listener threads. */
async function serveGrpc(
  s: Startup,
  pipeline: InferencePipeline,
  frontend: FrontendOptions,
): Promise<GrpcService | undefined> {
  const { grpc: config } = s.config;
  if (!config.enabled) return undefined;
  let server: GrpcServer;
  const listen: GrpcListenOptions = {
    address: config.address,
    port: config.port,
    keepalive: {
      timeMs: config.keepaliveTimeMs,
      timeoutMs: config.keepaliveTimeoutMs,
      permitWithoutCalls: config.keepalivePermitWithoutCalls,
      maxPingsWithoutData: config.http2MaxPingsWithoutData,
    },
    maxConnections: config.maxConnections,
    compressionLevel: config.inferResponseCompressionLevel,
    ...(config.useSsl
      ? { tls: { serverCert: config.serverCert, serverKey: config.serverKey, rootCert: config.rootCert } }
      : {}),
  };
  // The main thread and the listener threads count their open connections together.
  const open = connectionCount();
  try {
    server = await startGrpcServer(pipeline, {
      ...frontend,
      ...listen,
      restrictions: config.restrictedProtocol,
      // Listener threads join the same port; the kernel spreads connections over them.
      reusePort: threadsFor(config.threadCount) > 1,
      open,
    });
  } catch (err) {
    throw new StartupError(
      `Cannot start the gRPC service on ${config.address}:${config.port}: ${(err as Error).message}`,
    );
  }
  s.stack.defer("gRPC service", () => server.shutdown(), {
    group: ENDPOINTS,
    force: () => server.forceShutdown(),
  });
  s.log.info(`Started GRPCInferenceService at ${config.address}:${server.port}`);
  return { server, listen: { ...listen, port: server.port }, open };
}

/**
 * Starts the listener threads (`--http-thread-count`, `--grpc-thread-count`): as many as the larger of the two
 * asks beside the main thread, the first ones serving HTTP, the first ones serving gRPC.
 * @returns the threads; undefined where there are none
 */
async function serveThreads(
  s: Startup,
  pipeline: InferencePipeline,
  frontend: FrontendOptions,
  http: HttpService | undefined,
  grpc: GrpcService | undefined,
): Promise<ListenerThreads | undefined> {
  const httpThreads = http ? threadsFor(s.config.http.threadCount) - 1 : 0;
  const grpcThreads = grpc ? threadsFor(s.config.grpc.threadCount) - 1 : 0;
  const count = Math.max(httpThreads, grpcThreads);
  if (count === 0) return undefined;
  const inference = s.config.grpc.restrictedProtocol.inference;
  const workers = await ListenerThreads.start(count, {
    ...(http && httpThreads > 0
      ? {
        http: {
          threads: httpThreads,
          frontend: http.frontend,
          hostname: http.addr.hostname,
          port: http.addr.port,
          maxInputSize: s.config.http.maxInputSize,
          inference: s.config.http.restrictedApi.inference,
          limits: http.limits,
        },
      }
      : {}),
    ...(grpc && grpcThreads > 0
      ? {
        grpc: {
          threads: grpcThreads,
          methods: grpc.server.methods,
          listen: grpc.listen,
          open: grpc.open,
          ...(inference ? { inference } : {}),
          infer: grpcInferDecoded(pipeline),
        },
      }
      : {}),
    onError: (message) => s.log.error(message),
    onInfo: (message) => s.log.info(message),
  });
  s.stack.defer("listener threads", () => workers.shutdown(), {
    group: ENDPOINTS,
    force: () => workers.terminate(),
  });
  // Small models that run one request per execution run on every listener thread too (see replicas.ts).
  const replicas = new ListenerReplicas(
    pipeline.registry,
    workers.count,
    (thread, msg) => workers.post(thread, msg),
    (model) => s.log.verboseLevel < 1 && !pipeline.mayTrace(model),
  );
  workers.attach(replicas);
  // A logger an embedder shares between servers keeps telling the others too, and forgets this one at the end.
  const log = s.log, traces = frontend.traces;
  const logBefore = log.afterUpdate, tracesBefore = traces?.afterUpdate;
  log.afterUpdate = () => (logBefore?.(), replicas.changed());
  if (traces) traces.afterUpdate = () => (tracesBefore?.(), replicas.changed());
  s.stack.defer("listener-thread copies", () => {
    log.afterUpdate = logBefore;
    if (traces) traces.afterUpdate = tracesBefore;
  });
  pipeline.registry.setReplicaHost(replicas);
  const copied = replicas.serving();
  if (copied.length > 0) s.log.info(`Listener threads run requests of ${copied.join(", ")} themselves`);
  if (httpThreads > 0) s.log.info(`HTTPService serves on ${httpThreads + 1} threads`);
  if (grpcThreads > 0) s.log.info(`GRPCInferenceService serves on ${grpcThreads + 1} threads`);
  return workers;
}

/** Serves the Prometheus metrics, when on. */
function serveMetrics(
  s: Startup,
  metrics: ReturnType<typeof createMetrics> | undefined,
): { addr: Deno.NetAddr; finished: Promise<void> } | undefined {
  const { metrics: config } = s.config;
  if (!metrics) return undefined;
  const server = listen(s, "metrics service", {
    port: config.port,
    hostname: config.address,
    name: "Metrics Service",
    limits: connectionLimits(s.config.http),
  }, createMetricsHandler(metrics));
  s.stack.defer("metrics service", () => server.shutdown(), { group: ENDPOINTS });
  s.log.info(`Started Metrics Service at ${server.addr.hostname}:${server.addr.port}`);
  return { addr: server.addr, finished: server.finished };
}

/**
 * An idle server gives back what its start left and what a burst of requests grew it by (see core/memory.ts),
 * on every thread: each listener thread collects its own garbage when asked. With the bundled models, the
 * first reclaim took the idle RSS from 129-132 MB to 116-118 (one thread; 2 cores, 2026-11-28) and each
 * listener thread's share from about 27 MB to 17.
 */
function reclaimIdleMemory(s: Startup, registry: ModelRegistry, threads: ListenerThreads | undefined): void {
  const reclaimer = new MemoryReclaimer({
    arrivals: () => registry.arrivals.total,
    afterStart: true,
    reclaim: () => {
      reclaimMemory();
      return threads?.reclaim();
    },
  });
  reclaimer.start();
  s.stack.defer("memory reclaimer", () => reclaimer.stop());
}

/**
 * Starts a server.
 * @param input the configuration: any part of it; what is left out takes its default (see resolveConfig)
 * @param options the logger, and a signal that stops the server
 * @returns the running server
 * @throws ConfigError for a configuration that cannot be used; StartupError when a step of the start fails,
 *   after everything made so far has been undone
 * @example
 * ```ts
 * const server = await startServer({ repository: { paths: ["./models"] }, http: { port: 0 } });
 * await server.shutdown();
 * ```
 */
export async function startServer(
  input: ServerConfigInput = {},
  options: StartOptions = {},
): Promise<RunningServer> {
  const config = resolveConfig(input);
  const log = options.logger ?? new Logger(config.logging);
  const timeoutMs = config.server.exitTimeoutSecs * 1000;
  const stack = new CleanupStack({
    onError: (name, err) => log.error(`Cannot stop the ${name}: ${(err as Error)?.message ?? err}`),
    // Requests still queued or running are dropped: the process exits without waiting for them.
    onLate: () =>
      log.warning(
        `In-flight requests did not finish within --exit-timeout-secs=${config.server.exitTimeoutSecs}`,
      ),
  });
  // The last undo.
  stack.defer("log", () => {
    log.info("Stopped");
    if (!options.logger) log.close();
  });
  const s: Startup = { config, log, stack, signal: options.signal };
  // Readiness: once every endpoint has started on all its threads (a connection made earlier stays on the main
  // thread), until shutting down begins.
  let serving = false;
  let started: Omit<RunningServer, "shutdown" | "finished">;
  const ended: Promise<void>[] = [];
  try {
    checkAborted(s);
    // Checked before the models load, which can take long: a bad entry stops the start at once.
    parseMetricsConfig(config.metrics.settings);
    removeStale(s);
    const { paths, cloud } = await openRepositories(s);
    const traces = await startTraces(s);
    const { registry, responseCache, customMetrics } = openRegistry(s, paths, traces, cloud);
    const { shm, cudaShm } = openSharedMemory(s);
    // Every inference request takes this one path; the models' own requests (ensemble steps, BLS) too.
    const pipeline = new InferencePipeline(registry, { shm, cudaShm, traces });
    const loadFailures = await loadModels(s, registry);
    checkAborted(s);
    const metrics = createServerMetrics(s, registry, responseCache, customMetrics);
    const poller = await startPolling(s, registry, paths, cloud);
    const frontend: FrontendOptions = {
      serverName: config.server.id,
      serverVersion: VERSION,
      extensions: EXTENSIONS,
      strictReadiness: config.server.strictReadiness,
      serving: () => serving,
      logger: log,
      shm,
      cudaShm,
      traces,
    };
    // gRPC before HTTP (as Triton starts them): once HTTP answers readiness, the gRPC port is bound.
    const grpc = await serveGrpc(s, pipeline, frontend);
    const http = serveHttp(s, pipeline, frontend);
    const threads = await serveThreads(s, pipeline, frontend, http, grpc);
    const grpcPort = grpc?.server.port;
    const metricsServer = serveMetrics(s, metrics);
    // Loads still running (an `initialize()` that hangs) would hold up the endpoints' drain of the requests
    // that asked for them: they are cancelled before it.
    stack.defer("loads in progress", () => registry.cancelLoads());
    // The first undo: readiness turns false before the endpoints stop.
    stack.defer("readiness", () => void (serving = false));
    checkAborted(s);
    ended.push(...[http?.finished, metricsServer?.finished].filter((p) => p !== undefined));
    warnUnrestrictedRepository(s, http?.addr, grpcPort);
    warnDescriptorLimit(s);
    reclaimIdleMemory(s, registry, threads);
    started = {
      registry,
      httpAddr: http?.addr,
      grpcPort,
      metricsAddr: metricsServer?.addr,
      poller,
      loadFailures,
      config,
    };
    serving = true;
  } catch (err) {
    await stack.unwind(timeoutMs);
    if (err instanceof StartupError || err instanceof ConfigError) throw err;
    throw new StartupError((err as Error).message);
  }
  let resolveFinished: () => void = () => {};
  const finished = new Promise<void>((r) => (resolveFinished = r));
  let shuttingDown: Promise<void> | undefined;
  const shutdown = (): Promise<void> => {
    shuttingDown ??= (async () => {
      log.info("Shutting down: finishing in-flight requests");
      if (await stack.unwind(timeoutMs)) await Promise.allSettled(ended);
      resolveFinished();
    })();
    return shuttingDown;
  };
  options.signal?.addEventListener("abort", () => void shutdown(), { once: true });
  return { ...started, shutdown, finished };
}
