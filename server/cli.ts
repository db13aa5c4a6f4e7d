/**
 * The command line: Triton's flag names and defaults turned into typed ServerOptions. An unknown flag or a
 * bad value is one CliError naming it.
 * @module
 */

import { parseArgs } from "node:util";
import { parseRestrictions, type Restrictions } from "./frontends/restricted.ts";
import type { RateLimitMode, ResourceLimit } from "./scheduler/rate_limiter.ts";

/** The model control modes. */
export type ModelControlMode = "none" | "poll" | "explicit";

/** Everything the server is configured with. */
export interface ServerOptions {
  modelRepositories: string[];
  httpPort: number;
  httpAddress: string;
  grpcPort: number;
  grpcAddress: string;
  metricsPort: number;
  metricsAddress: string;
  allowHttp: boolean;
  allowGrpc: boolean;
  allowMetrics: boolean;
  allowGpuMetrics: boolean;
  allowCpuMetrics: boolean;
  modelControlMode: ModelControlMode;
  repositoryPollSecs: number;
  loadModels: string[];
  strictReadiness: boolean;
  exitOnError: boolean;
  exitTimeoutSecs: number;
  logVerbose: number;
  logInfo: boolean;
  logWarning: boolean;
  logError: boolean;
  logFile: string;
  logFormat: "default" | "ISO8601";
  httpMaxInputSize: number;
  /** `--http-thread-count`; 0 for auto (see httpListenerCount). */
  httpThreadCount: number;
  /** Most HTTP connections open at once (0: no limit). */
  httpMaxConnections: number;
  /** Seconds a new HTTP connection may take to send its first request's header (0: no limit). */
  httpHeaderTimeoutSecs: number;
  /** Seconds a kept-alive HTTP connection may wait for its next request (0: no limit). */
  httpIdleTimeoutSecs: number;
  /** Seconds an HTTP request body may take to arrive after its header (0: no limit). */
  httpBodyTimeoutSecs: number;
  autoCompleteConfig: boolean;
  backendConfig: Record<string, Record<string, string>>;
  allowClientShm: boolean;
  id: string;
  grpcKeepaliveTimeMs: number;
  grpcKeepaliveTimeoutMs: number;
  grpcKeepalivePermitWithoutCalls: boolean;
  grpcHttp2MaxPingsWithoutData: number;
  grpcMaxConnections: number;
  grpcUseSsl: boolean;
  grpcServerCert: string;
  grpcServerKey: string;
  grpcRootCert: string;
  grpcInferResponseCompressionLevel: "none" | "low" | "medium" | "high";
  metricsIntervalMs: number;
  metricsConfig: string[];
  traceConfig: string[];
  /** HTTP API groups that need a header (`--http-restricted-api`). */
  httpRestrictedApi: Restrictions;
  /** gRPC API groups that need a metadata key (`--grpc-restricted-protocol`). */
  grpcRestrictedProtocol: Restrictions;
  /** The response cache's size in bytes (`--cache-config=local,size=<bytes>`); 0 for no cache. */
  responseCacheSize: number;
  /** `--cache-directory`: where Triton looks for cache libraries; `local` is built in and needs none. */
  cacheDirectory: string;
  /** `--rate-limit`: off, or execution_count (instances run when their rate_limiter resources are free). */
  rateLimit: RateLimitMode;
  /** `--rate-limit-resource=<name>:<count>[:<device>]` settings. */
  rateLimitResources: ResourceLimit[];
}

/** A bad command line. */
export class CliError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CliError";
  }
}

type Kind = "string" | "int" | "bool" | "list" | "flag";

interface FlagSpec {
  kind: Kind;
  help: string;
  default?: string;
  choices?: readonly string[];
  min?: number;
  max?: number;
}

/** Every flag, with its kind, default and help text. */
export const FLAGS: Record<string, FlagSpec> = {
  "model-repository": { kind: "list", help: "Path to a model repository (repeatable)" },
  "model-store": { kind: "list", help: "Alias of --model-repository" },
  "http-port": { kind: "int", default: "8000", min: 0, max: 65535, help: "HTTP port" },
  "http-address": { kind: "string", default: "0.0.0.0", help: "HTTP listen address" },
  "http-thread-count": {
    kind: "string",
    default: "1",
    help:
      "Threads that accept, read and answer HTTP requests (the main thread and listener threads): a number " +
      "(at most one per CPU core) or auto (half the cores, at most 8)",
  },
  "http-max-input-size": {
    kind: "int",
    default: "67108864",
    min: 1,
    help: "Largest HTTP request body, in bytes",
  },
  "http-max-connections": {
    kind: "int",
    default: "10000",
    min: 0,
    help:
      "Most HTTP connections open at once, all threads together (0: no limit); more are answered 503 and closed",
  },
  "http-header-timeout-secs": {
    kind: "int",
    default: "30",
    min: 0,
    help: "Seconds a new HTTP connection may take to send its first request's header (0: no limit)",
  },
  "http-idle-timeout-secs": {
    kind: "int",
    default: "75",
    min: 0,
    help:
      "Seconds a kept-alive HTTP connection may wait for its next request before it is closed (0: no limit)",
  },
  "http-body-timeout-secs": {
    kind: "int",
    default: "60",
    min: 0,
    help:
      "Seconds an HTTP request body may take to arrive after its header; later it is answered 408 (0: no limit)",
  },
  "http-restricted-api": {
    kind: "list",
    help: "<api>[,<api>...]:<key>=<value>: those HTTP APIs need header <key> set to <value> (repeatable)",
  },
  "grpc-port": { kind: "int", default: "8001", min: 0, max: 65535, help: "gRPC port" },
  "grpc-address": { kind: "string", default: "0.0.0.0", help: "gRPC listen address" },
  "metrics-port": { kind: "int", default: "8002", min: 0, max: 65535, help: "Prometheus metrics port" },
  "metrics-address": { kind: "string", default: "0.0.0.0", help: "Metrics listen address" },
  "allow-http": { kind: "bool", default: "true", help: "Serve HTTP" },
  "allow-grpc": { kind: "bool", default: "true", help: "Serve gRPC" },
  "allow-metrics": { kind: "bool", default: "true", help: "Serve Prometheus metrics" },
  "allow-gpu-metrics": { kind: "bool", default: "true", help: "Report GPU metrics" },
  "allow-cpu-metrics": { kind: "bool", default: "true", help: "Report CPU metrics" },
  "metrics-interval-ms": {
    kind: "int",
    default: "2000",
    min: 1,
    help: "Interval between samples of the CPU and GPU gauges, ms",
  },
  "metrics-config": { kind: "list", help: "Metrics setting <key>=<value> (repeatable)" },
  "model-control-mode": {
    kind: "string",
    default: "none",
    choices: ["none", "poll", "explicit"],
    help: "Model control mode: none, poll or explicit",
  },
  "repository-poll-secs": {
    kind: "int",
    default: "15",
    min: 0,
    help: "Repository poll interval in poll mode",
  },
  "load-model": { kind: "list", help: "Model to load at start in explicit mode, '*' for all (repeatable)" },
  "strict-readiness": { kind: "bool", default: "true", help: "Ready only when every model is ready" },
  "exit-on-error": { kind: "bool", default: "true", help: "Exit when a model fails to load at start" },
  "exit-timeout-secs": {
    kind: "int",
    default: "30",
    min: 0,
    help: "Seconds to finish in-flight requests at exit",
  },
  "strict-model-config": { kind: "bool", help: "Deprecated: true disables auto-complete" },
  "disable-auto-complete-config": { kind: "flag", help: "Do not complete configs from the models" },
  "backend-config": { kind: "list", help: "<backend>,<key>=<value> (repeatable)" },
  "allow-client-shm": { kind: "bool", default: "false", help: "Allow client shared-memory regions" },
  "log-verbose": { kind: "int", default: "0", min: 0, help: "Verbose logging level" },
  "log-info": { kind: "bool", default: "true", help: "Log info messages" },
  "log-warning": { kind: "bool", default: "true", help: "Log warnings" },
  "log-error": { kind: "bool", default: "true", help: "Log errors" },
  "log-file": { kind: "string", default: "", help: "Log to this file instead of the console" },
  "log-format": {
    kind: "string",
    default: "default",
    choices: ["default", "ISO8601"],
    help: "Log line format",
  },
  "id": { kind: "string", default: "dinfer", help: "Server identifier (server metadata name)" },
  "grpc-keepalive-time": {
    kind: "int",
    default: "7200000",
    min: 1,
    help: "gRPC keepalive ping interval, ms",
  },
  "grpc-keepalive-timeout": { kind: "int", default: "20000", min: 1, help: "gRPC keepalive ack timeout, ms" },
  "grpc-keepalive-permit-without-calls": {
    kind: "bool",
    default: "false",
    help: "Allow keepalive pings without calls",
  },
  "grpc-http2-max-pings-without-data": {
    kind: "int",
    default: "2",
    min: 0,
    help: "Pings allowed without data",
  },
  "grpc-restricted-protocol": {
    kind: "list",
    help:
      "<api>[,<api>...]:<key>=<value>: those gRPC APIs need metadata triton-grpc-protocol-<key> set to <value> (repeatable)",
  },
  "grpc-max-connections": {
    kind: "int",
    default: "10000",
    min: 0,
    help: "Most gRPC connections open at once (0: no limit); more are closed at once",
  },
  "grpc-use-ssl": { kind: "bool", default: "false", help: "Serve gRPC over TLS" },
  "grpc-server-cert": { kind: "string", default: "", help: "TLS certificate file" },
  "grpc-server-key": { kind: "string", default: "", help: "TLS key file" },
  "grpc-root-cert": { kind: "string", default: "", help: "TLS root certificate (client authentication)" },
  "grpc-infer-response-compression-level": {
    kind: "string",
    default: "none",
    choices: ["none", "low", "medium", "high"],
    help: "Compression of gRPC infer responses",
  },
  "cache-config": {
    kind: "list",
    help: "Response cache setting <cache>,<key>=<value>; dinfer has the 'local' cache: local,size=<bytes>",
  },
  "cache-directory": {
    kind: "string",
    default: "/opt/tritonserver/caches",
    help: "Where cache libraries are looked for (the built-in 'local' cache needs none)",
  },
  "response-cache-byte-size": {
    kind: "int",
    min: 0,
    help: "Deprecated: the same as --cache-config=local,size=<bytes>",
  },
  "rate-limit": {
    kind: "string",
    default: "off",
    help: "Rate limiting: off, or execution_count (instances run when their rate_limiter resources are free)",
  },
  "rate-limit-resource": {
    kind: "list",
    help: "Copies of a rate-limiter resource <name>:<count>[:<device>] (repeatable)",
  },
  "trace-config": {
    kind: "list",
    help: "Trace setting [<mode>,]<key>=<value>, mode triton or opentelemetry (repeatable)",
  },
};

/** The help text listing every flag. */
export function helpText(): string {
  const lines = [
    "Usage: dinfer serve [--flag=value ...]",
    "",
    "Serves Triton model repositories over the KServe v2 protocol (HTTP, gRPC) with Prometheus metrics.",
    "",
  ];
  for (const [name, spec] of Object.entries(FLAGS)) {
    const value = spec.kind === "flag"
      ? ""
      : spec.kind === "bool"
      ? "=<bool>"
      : spec.kind === "int"
      ? "=<int>"
      : "=<string>";
    const def = spec.default !== undefined && spec.default !== "" ? ` (default: ${spec.default})` : "";
    lines.push(`  --${name}${value}`.padEnd(50) + spec.help + def);
  }
  lines.push("  --help".padEnd(50) + "Show this help");
  return lines.join("\n");
}

function parseBool(flag: string, v: string): boolean {
  const s = v.toLowerCase();
  if (["true", "1", "yes", "on"].includes(s)) return true;
  if (["false", "0", "no", "off"].includes(s)) return false;
  throw new CliError(`Bad value '${v}' for --${flag}: expected true or false`);
}

function parseInt(flag: string, v: string, spec: FlagSpec): number {
  if (!/^-?[0-9]+$/.test(v.trim())) throw new CliError(`Bad value '${v}' for --${flag}: expected an integer`);
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new CliError(`Bad value '${v}' for --${flag}: out of range`);
  if (spec.min !== undefined && n < spec.min) {
    throw new CliError(`Bad value '${v}' for --${flag}: must be at least ${spec.min}`);
  }
  if (spec.max !== undefined && n > spec.max) {
    throw new CliError(`Bad value '${v}' for --${flag}: must be at most ${spec.max}`);
  }
  return n;
}

/** `--http-thread-count`: a positive number, or 0 for `auto`. */
function threadCount(v: string): number {
  if (v === "auto") return 0;
  if (!/^[0-9]+$/.test(v) || Number(v) < 1 || Number(v) > 256) {
    throw new CliError(`Bad value '${v}' for --http-thread-count: expected 'auto' or a number from 1 to 256`);
  }
  return Number(v);
}

/**
 * How many threads serve HTTP: `--http-thread-count` capped at the number of cores; `auto` (0) is half the
 * cores, at most 8 (the other half is left to the models: ONNX Runtime's thread pools, Python stubs).
 * @param requested the flag's value, 0 for auto
 * @param cores the number of CPU cores
 */
export function httpListenerCount(requested: number, cores: number): number {
  const n = Math.max(1, cores);
  return requested === 0 ? Math.min(8, Math.max(1, Math.floor(n / 2))) : Math.min(requested, n);
}

/**
 * The response cache size from `--cache-config` entries (`local,size=<bytes>`, the only cache dinfer has) or the
 * deprecated `--response-cache-byte-size`; 0 when neither asks for a cache.
 */
function cacheSize(entries: string[], byteSize: string[] | undefined): number {
  if (byteSize !== undefined) {
    if (byteSize.length > 1) throw new CliError("Flag --response-cache-byte-size is given more than once");
    if (entries.length > 0) {
      throw new CliError("Flags --response-cache-byte-size and --cache-config cannot both be given");
    }
    return parseInt("response-cache-byte-size", byteSize[0]!, FLAGS["response-cache-byte-size"]!);
  }
  let size: number | undefined;
  for (const entry of entries) {
    const m = /^([^,=]+),([^,=]+)=(.*)$/.exec(entry);
    if (!m) throw new CliError(`Bad value '${entry}' for --cache-config: expected <cache>,<key>=<value>`);
    const [, cache, key, value] = m as unknown as [string, string, string, string];
    if (cache !== "local") {
      throw new CliError(
        `Bad value '${entry}' for --cache-config: cache '${cache}' is not supported (dinfer has the built-in 'local' cache)`,
      );
    }
    if (key !== "size") {
      throw new CliError(
        `Bad value '${entry}' for --cache-config: unknown setting '${key}' of the 'local' cache`,
      );
    }
    if (!/^[0-9]+$/.test(value) || !Number.isSafeInteger(Number(value)) || Number(value) < 1) {
      throw new CliError(`Bad value '${entry}' for --cache-config: size must be a positive number of bytes`);
    }
    size = Number(value);
  }
  return size ?? 0;
}

/** `--rate-limit`: off or execution_count, in any case. */
function rateLimitMode(v: string): RateLimitMode {
  const s = v.toLowerCase();
  if (s === "off" || s === "execution_count") return s;
  throw new CliError(`Bad value '${v}' for --rate-limit: expected off or execution_count`);
}

/** `--rate-limit-resource=<name>:<count>[:<device>]`. */
function rateLimitResource(v: string): ResourceLimit {
  const m = /^([^:]+):([0-9]+)(?::([0-9]+))?$/.exec(v);
  if (
    !m || !Number.isSafeInteger(Number(m[2])) || (m[3] !== undefined && !Number.isSafeInteger(Number(m[3])))
  ) {
    throw new CliError(
      `Bad value '${v}' for --rate-limit-resource: expected <name>:<count> or <name>:<count>:<device>`,
    );
  }
  return m[3] === undefined
    ? { name: m[1]!, count: Number(m[2]) }
    : { name: m[1]!, count: Number(m[2]), device: Number(m[3]) };
}

/**
 * Parses the serve command line.
 * @param args the arguments after `serve`
 * @returns the options, or "help" when --help was given
 * @throws CliError naming the bad flag or value
 */
export function parseCommandLine(args: readonly string[]): ServerOptions | "help" {
  const options: Record<string, { type: "string" | "boolean"; multiple?: boolean }> = {
    help: { type: "boolean" },
  };
  for (const [name, spec] of Object.entries(FLAGS)) {
    options[name] = spec.kind === "flag" ? { type: "boolean" } : { type: "string", multiple: true };
  }
  let values: Record<string, unknown>;
  let positionals: string[];
  try {
    ({ values, positionals } = parseArgs({ args: [...args], options, strict: true, allowPositionals: true }));
  } catch (err) {
    const msg = (err as Error).message;
    const unknown = /Unknown option '([^']+)'/.exec(msg);
    if (unknown) throw new CliError(`Unknown flag '${unknown[1]}' (see --help)`);
    const missing = /Option '([^']+?)(?: <value>)?' argument missing/.exec(msg);
    if (missing) throw new CliError(`Flag '${missing[1]}' needs a value`);
    throw new CliError(msg.split("\n")[0]!);
  }
  if (values.help) return "help";
  if (positionals.length > 0) {
    throw new CliError(`Unexpected argument '${positionals[0]}' (flags are --name=value)`);
  }

  const one = (name: string): string => {
    const spec = FLAGS[name]!;
    const list = values[name] as string[] | undefined;
    if (list && list.length > 1) throw new CliError(`Flag --${name} is given more than once`);
    const v = list?.[0] ?? spec.default ?? "";
    if (spec.choices && !spec.choices.includes(v)) {
      throw new CliError(`Bad value '${v}' for --${name}: expected one of ${spec.choices.join(", ")}`);
    }
    return v;
  };
  const int = (name: string) => parseInt(name, one(name), FLAGS[name]!);
  const bool = (name: string) => parseBool(name, one(name));
  const list = (name: string) => (values[name] as string[] | undefined) ?? [];

  const repos = [...list("model-repository"), ...list("model-store")];
  const backendConfig: Record<string, Record<string, string>> = {};
  for (const entry of list("backend-config")) {
    const m = /^(?:([^,=]+),)?([^,=]+)=(.*)$/.exec(entry);
    if (!m) throw new CliError(`Bad value '${entry}' for --backend-config: expected <backend>,<key>=<value>`);
    const backend = m[1] ?? "";
    (backendConfig[backend] ??= {})[m[2]!] = m[3]!;
  }
  for (
    const [flag, re] of [["metrics-config", /^[^=]+=.*$/], [
      "trace-config",
      /^(?:[^,=]+,)?[^,=]+=.*$/,
    ]] as const
  ) {
    for (const entry of list(flag)) {
      if (!re.test(entry)) throw new CliError(`Bad value '${entry}' for --${flag}: expected <key>=<value>`);
    }
  }
  const responseCacheSize = cacheSize(
    list("cache-config"),
    values["response-cache-byte-size"] as string[] | undefined,
  );
  const strictModelConfig = values["strict-model-config"] === undefined ? false : bool("strict-model-config");
  const mode = one("model-control-mode") as ModelControlMode;
  const loadModels = list("load-model");
  if (loadModels.length > 0 && mode !== "explicit") {
    throw new CliError("Flag --load-model needs --model-control-mode=explicit");
  }
  const restrictions = (flag: string): Restrictions => {
    try {
      return parseRestrictions(list(flag), flag);
    } catch (err) {
      throw new CliError((err as Error).message);
    }
  };
  const result: ServerOptions = {
    modelRepositories: repos,
    httpPort: int("http-port"),
    httpAddress: one("http-address"),
    grpcPort: int("grpc-port"),
    grpcAddress: one("grpc-address"),
    metricsPort: int("metrics-port"),
    metricsAddress: one("metrics-address"),
    allowHttp: bool("allow-http"),
    allowGrpc: bool("allow-grpc"),
    allowMetrics: bool("allow-metrics"),
    allowGpuMetrics: bool("allow-gpu-metrics"),
    allowCpuMetrics: bool("allow-cpu-metrics"),
    modelControlMode: mode,
    repositoryPollSecs: int("repository-poll-secs"),
    loadModels,
    strictReadiness: bool("strict-readiness"),
    exitOnError: bool("exit-on-error"),
    exitTimeoutSecs: int("exit-timeout-secs"),
    logVerbose: int("log-verbose"),
    logInfo: bool("log-info"),
    logWarning: bool("log-warning"),
    logError: bool("log-error"),
    logFile: one("log-file"),
    logFormat: one("log-format") as "default" | "ISO8601",
    httpMaxInputSize: int("http-max-input-size"),
    httpThreadCount: threadCount(one("http-thread-count")),
    httpMaxConnections: int("http-max-connections"),
    httpHeaderTimeoutSecs: int("http-header-timeout-secs"),
    httpIdleTimeoutSecs: int("http-idle-timeout-secs"),
    httpBodyTimeoutSecs: int("http-body-timeout-secs"),
    autoCompleteConfig: !values["disable-auto-complete-config"] && !strictModelConfig,
    backendConfig,
    allowClientShm: bool("allow-client-shm"),
    id: one("id"),
    grpcKeepaliveTimeMs: int("grpc-keepalive-time"),
    grpcKeepaliveTimeoutMs: int("grpc-keepalive-timeout"),
    grpcKeepalivePermitWithoutCalls: bool("grpc-keepalive-permit-without-calls"),
    grpcHttp2MaxPingsWithoutData: int("grpc-http2-max-pings-without-data"),
    grpcMaxConnections: int("grpc-max-connections"),
    grpcUseSsl: bool("grpc-use-ssl"),
    grpcServerCert: one("grpc-server-cert"),
    grpcServerKey: one("grpc-server-key"),
    grpcRootCert: one("grpc-root-cert"),
    grpcInferResponseCompressionLevel: one("grpc-infer-response-compression-level") as ServerOptions[
      "grpcInferResponseCompressionLevel"
    ],
    metricsIntervalMs: int("metrics-interval-ms"),
    metricsConfig: list("metrics-config"),
    traceConfig: list("trace-config"),
    httpRestrictedApi: restrictions("http-restricted-api"),
    grpcRestrictedProtocol: restrictions("grpc-restricted-protocol"),
    responseCacheSize,
    cacheDirectory: one("cache-directory"),
    rateLimit: rateLimitMode(one("rate-limit")),
    rateLimitResources: list("rate-limit-resource").map(rateLimitResource),
  };
  if (result.grpcUseSsl && (!result.grpcServerCert || !result.grpcServerKey)) {
    throw new CliError("Flag --grpc-use-ssl=true needs --grpc-server-cert and --grpc-server-key");
  }
  return result;
}

/**
 * The default options (as if no flag was given), with the given repositories.
 * @param repositories model repository paths
 */
export function defaultOptions(repositories: string[] = []): ServerOptions {
  const o = parseCommandLine([]) as ServerOptions;
  o.modelRepositories = repositories;
  return o;
}
