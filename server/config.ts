/**
 * The server's configuration, one section per component. The command line fills it (see `FLAGS` in cli.ts,
 * where each flag names its section and field), and so does the embedding API: `startServer` takes a partial
 * of it and `resolveConfig` fills in the rest from the flags' defaults.
 * @module
 */

import type { Restrictions } from "./frontends/restricted.ts";
import type { LogSettings } from "./logging.ts";
import type { RateLimitMode, ResourceLimit } from "./scheduler/rate_limiter.ts";

/** The model control modes. */
export type ModelControlMode = "none" | "poll" | "explicit";

/** The server as a whole: its name and how it starts, reports readiness and stops. */
export interface ServerSection {
  /** The name in server metadata (`--id`). @default "dinfer" */
  id: string;
  /** Ready only when every model is ready (`--strict-readiness`). @default true */
  strictReadiness: boolean;
  /** A model that fails to load at start fails the start (`--exit-on-error`). @default true */
  exitOnError: boolean;
  /** Seconds a stop may take to finish in-flight requests and free everything (`--exit-timeout-secs`). @default 30 */
  exitTimeoutSecs: number;
}

/** Where the models come from and when they load. */
export interface RepositorySection {
  /**
   * Model repositories: folders, or s3://, gs://, as:// URLs (`--model-repository`, `--model-store`); none
   * serves the bundled examples. @default []
   */
  paths: string[];
  /** none: load everything at start; poll: follow the repositories; explicit: load on request (`--model-control-mode`). @default "none" */
  controlMode: ModelControlMode;
  /** Seconds between repository scans in poll mode (`--repository-poll-secs`). @default 15 */
  pollSecs: number;
  /** Models loaded at start in explicit mode, `*` for all (`--load-model`). @default [] */
  loadModels: string[];
  /**
   * Complete model configs from the models themselves (off with `--disable-auto-complete-config` or
   * `--strict-model-config=true`). @default true
   */
  autoCompleteConfig: boolean;
}

/** The HTTP/REST endpoint. */
export interface HttpSection {
  /** Serve HTTP (`--allow-http`). @default true */
  enabled: boolean;
  /** The address listened on (`--http-address`). @default "0.0.0.0" */
  address: string;
  /** The port; 0 picks a free one (`--http-port`). @default 8000 */
  port: number;
  /** Threads that accept and answer requests, 0 for auto (`--http-thread-count`; see httpListenerCount). @default 0 */
  threadCount: number;
  /** The largest request body in bytes (`--http-max-input-size`). @default 67108864 */
  maxInputSize: number;
  /** The most connections open at once, all threads together; 0 for no limit (`--http-max-connections`). @default 10000 */
  maxConnections: number;
  /** Seconds a new connection may take to send its first request's header; 0 for no limit (`--http-header-timeout-secs`). @default 30 */
  headerTimeoutSecs: number;
  /** Seconds a kept-alive connection may wait for its next request; 0 for no limit (`--http-idle-timeout-secs`). @default 75 */
  idleTimeoutSecs: number;
  /** Seconds a request body may take to arrive after its header; 0 for no limit (`--http-body-timeout-secs`). @default 60 */
  bodyTimeoutSecs: number;
  /** API groups that need a header (`--http-restricted-api`). @default {} */
  restrictedApi: Restrictions;
}

/** The gRPC endpoint. */
export interface GrpcSection {
  /** Serve gRPC (`--allow-grpc`). @default true */
  enabled: boolean;
  /** The address listened on (`--grpc-address`). @default "0.0.0.0" */
  address: string;
  /** The port; 0 picks a free one (`--grpc-port`). @default 8001 */
  port: number;
  /** Milliseconds between keepalive pings (`--grpc-keepalive-time`). @default 7200000 */
  keepaliveTimeMs: number;
  /** Milliseconds to wait for a ping's acknowledgement (`--grpc-keepalive-timeout`). @default 20000 */
  keepaliveTimeoutMs: number;
  /** Allow keepalive pings on a connection without calls (`--grpc-keepalive-permit-without-calls`). @default false */
  keepalivePermitWithoutCalls: boolean;
  /** Pings allowed without data (`--grpc-http2-max-pings-without-data`). @default 2 */
  http2MaxPingsWithoutData: number;
  /** Threads that accept and answer calls, 0 for auto (`--grpc-thread-count`; see httpListenerCount). @default 0 */
  threadCount: number;
  /** The most connections open at once, all threads together; 0 for no limit (`--grpc-max-connections`). @default 10000 */
  maxConnections: number;
  /** Serve over TLS (`--grpc-use-ssl`). @default false */
  useSsl: boolean;
  /** The TLS certificate file (`--grpc-server-cert`). @default "" */
  serverCert: string;
  /** The TLS key file (`--grpc-server-key`). @default "" */
  serverKey: string;
  /** The root certificate that client certificates must chain to (`--grpc-root-cert`). @default "" */
  rootCert: string;
  /** Compression of infer responses (`--grpc-infer-response-compression-level`). @default "none" */
  inferResponseCompressionLevel: "none" | "low" | "medium" | "high";
  /** API groups that need a metadata key (`--grpc-restricted-protocol`). @default {} */
  restrictedProtocol: Restrictions;
}

/** The Prometheus endpoint and the gauges it samples. */
export interface MetricsSection {
  /** Serve metrics (`--allow-metrics`). @default true */
  enabled: boolean;
  /** The address listened on (`--metrics-address`). @default "0.0.0.0" */
  address: string;
  /** The port; 0 picks a free one (`--metrics-port`). @default 8002 */
  port: number;
  /** Report GPU gauges (`--allow-gpu-metrics`). @default true */
  gpu: boolean;
  /** Report CPU gauges (`--allow-cpu-metrics`). @default true */
  cpu: boolean;
  /** Milliseconds between samples of the CPU and GPU gauges (`--metrics-interval-ms`). @default 2000 */
  intervalMs: number;
  /** `<key>=<value>` settings (`--metrics-config`). @default [] */
  settings: string[];
}

/**
 * The log: the logger's own settings (`LogSettings` in logging.ts documents each field's flag and default),
 * which the logging API changes at run time.
 */
export type LoggingSection = LogSettings;

/** Request tracing. */
export interface TraceSection {
  /** `[<mode>,]<key>=<value>` settings, mode triton or opentelemetry (`--trace-config`). @default [] */
  settings: string[];
}

/** The backends' settings. */
export interface BackendsSection {
  /**
   * Settings by backend name (`--backend-config=<backend>,<key>=<value>`); the empty name holds the global ones.
   * @default {}
   */
  settings: Record<string, Record<string, string>>;
}

/** Shared memory that clients register. */
export interface SharedMemorySection {
  /** Let clients register system and CUDA shared-memory regions (`--allow-client-shm`). @default false */
  allowClient: boolean;
}

/** The response cache. */
export interface CacheSection {
  /** Its size in bytes, 0 for no cache (`--cache-config=local,size=<bytes>`, `--response-cache-byte-size`). @default 0 */
  size: number;
  /** Where cache libraries are looked for; the built-in `local` cache needs none (`--cache-directory`). @default "/opt/tritonserver/caches" */
  directory: string;
}

/** The rate limiter in front of model instances. */
export interface RateLimitSection {
  /** off, or execution_count: instances run when their rate_limiter resources are free (`--rate-limit`). @default "off" */
  mode: RateLimitMode;
  /** Copies of each resource (`--rate-limit-resource=<name>:<count>[:<device>]`). @default [] */
  resources: ResourceLimit[];
}

/** Everything the server is configured with, one section per component. */
export interface ServerConfig {
  /** The server as a whole. */
  server: ServerSection;
  /** Where the models come from and when they load. */
  repository: RepositorySection;
  /** The HTTP/REST endpoint. */
  http: HttpSection;
  /** The gRPC endpoint. */
  grpc: GrpcSection;
  /** The Prometheus endpoint. */
  metrics: MetricsSection;
  /** The log. */
  logging: LoggingSection;
  /** Request tracing. */
  trace: TraceSection;
  /** The backends' settings. */
  backends: BackendsSection;
  /** Client shared memory. */
  sharedMemory: SharedMemorySection;
  /** The response cache. */
  cache: CacheSection;
  /** The rate limiter. */
  rateLimit: RateLimitSection;
}

/** A partial configuration: any section, any field of it; what is left out keeps its default. */
export type ServerConfigInput = { [S in keyof ServerConfig]?: Partial<ServerConfig[S]> };
