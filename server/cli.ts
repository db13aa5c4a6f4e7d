/**
 * The command line: one table of Triton's flag names, each with its kind, default, help text and the field of the
 * configuration it fills. Parsing, `--help` and the defaults of the embedding API all come from that table. An
 * unknown flag or a bad value is one CliError naming it.
 * @module
 */

import { parseArgs } from "node:util";
import { parseRestrictions, type Restrictions } from "./frontends/restricted.ts";
import type { RateLimitMode, ResourceLimit } from "./scheduler/rate_limiter.ts";
import type { ServerConfig, ServerConfigInput } from "./config.ts";

/** A configuration that cannot be used: a bad value, or settings that contradict each other. */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigError";
  }
}

/** A bad command line. */
export class CliError extends ConfigError {
  constructor(message: string) {
    super(message);
    this.name = "CliError";
  }
}

type Section = keyof ServerConfig;

/** Where a flag's value goes: a section of the configuration and a field of it. */
export type FlagTarget = { [S in Section]: readonly [S, keyof ServerConfig[S] & string] }[Section];

interface FlagBase {
  /** The help text. */
  help: string;
  /** The field the value fills. */
  to: FlagTarget;
}

/** A flag with one value (given at most once). */
export interface ValueFlag extends FlagBase {
  kind: "string" | "int" | "bool";
  /**
   * The value when the flag is not given, as written on the command line. A flag without one leaves its field
   * to the flags before it in the table (or to the field's default) unless it is given.
   */
  default?: string;
  /** The only values taken. */
  choices?: readonly string[];
  /** The least integer taken. */
  min?: number;
  /** The greatest integer taken. */
  max?: number;
  /** Turns the value into the field's value, for values that are not a plain string, integer or boolean. */
  parse?: (value: string, flag: string) => unknown;
}

/** A flag that repeats; its values are collected in order. */
export interface ListFlag extends FlagBase {
  kind: "list";
  default?: undefined;
  /**
   * Turns the values into the field's value; without it the field is the list, and two flags filling the same
   * field add to it in the table's order.
   */
  parse?: (values: string[], flag: string) => unknown;
}

/** A flag without a value (`--disable-auto-complete-config`): when given, its field takes `value`. */
export interface SwitchFlag extends FlagBase {
  kind: "flag";
  default?: undefined;
  /** What the field takes when the flag is given. */
  value: unknown;
}

/** One flag of the table. */
export type FlagSpec = ValueFlag | ListFlag | SwitchFlag;

/** Every flag: kind, default, help text and the field it fills. */
export const FLAGS: Record<string, FlagSpec> = {
  "model-repository": {
    kind: "list",
    to: ["repository", "paths"],
    help: "Path to a model repository (repeatable)",
  },
  "model-store": { kind: "list", to: ["repository", "paths"], help: "Alias of --model-repository" },
  "http-port": {
    kind: "int",
    to: ["http", "port"],
    default: "8000",
    min: 0,
    max: 65535,
    help: "HTTP port",
  },
  "http-address": {
    kind: "string",
    to: ["http", "address"],
    default: "0.0.0.0",
    help: "HTTP listen address",
  },
  "http-thread-count": {
    kind: "string",
    to: ["http", "threadCount"],
    default: "auto",
    parse: threadCount,
    help:
      "Threads that accept, read and answer HTTP requests (the main thread and listener threads): a number " +
      "(at most one per CPU core) or auto (half the cores, at most 8)",
  },
  "http-max-input-size": {
    kind: "int",
    to: ["http", "maxInputSize"],
    default: "67108864",
    min: 1,
    help: "Largest HTTP request body, in bytes",
  },
  "http-max-connections": {
    kind: "int",
    to: ["http", "maxConnections"],
    default: "10000",
    min: 0,
    help:
      "Most HTTP connections open at once, all threads together (0: no limit); more are answered 503 and closed",
  },
  "http-header-timeout-secs": {
    kind: "int",
    to: ["http", "headerTimeoutSecs"],
    default: "30",
    min: 0,
    help: "Seconds a new HTTP connection may take to send its first request's header (0: no limit)",
  },
  "http-idle-timeout-secs": {
    kind: "int",
    to: ["http", "idleTimeoutSecs"],
    default: "75",
    min: 0,
    help:
      "Seconds a kept-alive HTTP connection may wait for its next request before it is closed (0: no limit)",
  },
  "http-body-timeout-secs": {
    kind: "int",
    to: ["http", "bodyTimeoutSecs"],
    default: "60",
    min: 0,
    help:
      "Seconds an HTTP request body may take to arrive after its header; later it is answered 408 (0: no limit)",
  },
  "http-restricted-api": {
    kind: "list",
    to: ["http", "restrictedApi"],
    parse: restrictions,
    help: "<api>[,<api>...]:<key>=<value>: those HTTP APIs need header <key> set to <value> (repeatable)",
  },
  "grpc-port": {
    kind: "int",
    to: ["grpc", "port"],
    default: "8001",
    min: 0,
    max: 65535,
    help: "gRPC port",
  },
  "grpc-address": {
    kind: "string",
    to: ["grpc", "address"],
    default: "0.0.0.0",
    help: "gRPC listen address",
  },
  "metrics-port": {
    kind: "int",
    to: ["metrics", "port"],
    default: "8002",
    min: 0,
    max: 65535,
    help: "Prometheus metrics port",
  },
  "metrics-address": {
    kind: "string",
    to: ["metrics", "address"],
    default: "0.0.0.0",
    help: "Metrics listen address",
  },
  "allow-http": { kind: "bool", to: ["http", "enabled"], default: "true", help: "Serve HTTP" },
  "allow-grpc": { kind: "bool", to: ["grpc", "enabled"], default: "true", help: "Serve gRPC" },
  "allow-metrics": {
    kind: "bool",
    to: ["metrics", "enabled"],
    default: "true",
    help: "Serve Prometheus metrics",
  },
  "allow-gpu-metrics": { kind: "bool", to: ["metrics", "gpu"], default: "true", help: "Report GPU metrics" },
  "allow-cpu-metrics": { kind: "bool", to: ["metrics", "cpu"], default: "true", help: "Report CPU metrics" },
  "metrics-interval-ms": {
    kind: "int",
    to: ["metrics", "intervalMs"],
    default: "2000",
    min: 1,
    help: "Interval between samples of the CPU and GPU gauges, ms",
  },
  "metrics-config": {
    kind: "list",
    to: ["metrics", "settings"],
    parse: (values, flag) => keyValues(values, flag, /^[^=]+=.*$/),
    help: "Metrics setting <key>=<value> (repeatable)",
  },
  "model-control-mode": {
    kind: "string",
    to: ["repository", "controlMode"],
    default: "none",
    choices: ["none", "poll", "explicit"],
    help: "Model control mode: none, poll or explicit",
  },
  "repository-poll-secs": {
    kind: "int",
    to: ["repository", "pollSecs"],
    default: "15",
    min: 0,
    help: "Repository poll interval in poll mode",
  },
  "load-model": {
    kind: "list",
    to: ["repository", "loadModels"],
    help: "Model to load at start in explicit mode, '*' for all (repeatable)",
  },
  "strict-readiness": {
    kind: "bool",
    to: ["server", "strictReadiness"],
    default: "true",
    help: "Ready only when every model is ready",
  },
  "exit-on-error": {
    kind: "bool",
    to: ["server", "exitOnError"],
    default: "true",
    help: "Exit when a model fails to load at start",
  },
  "exit-timeout-secs": {
    kind: "int",
    to: ["server", "exitTimeoutSecs"],
    default: "30",
    min: 0,
    help: "Seconds to finish in-flight requests at exit",
  },
  // Both turn auto-complete off: the switch comes later in the table, so it wins over
  // --strict-model-config=false.
  "strict-model-config": {
    kind: "bool",
    to: ["repository", "autoCompleteConfig"],
    default: "false",
    parse: (value, flag) => !parseBool(flag, value),
    help: "Deprecated: true disables auto-complete",
  },
  "disable-auto-complete-config": {
    kind: "flag",
    to: ["repository", "autoCompleteConfig"],
    value: false,
    help: "Do not complete configs from the models",
  },
  "backend-config": {
    kind: "list",
    to: ["backends", "settings"],
    parse: backendSettings,
    help: "<backend>,<key>=<value> (repeatable)",
  },
  "allow-client-shm": {
    kind: "bool",
    to: ["sharedMemory", "allowClient"],
    default: "false",
    help: "Allow client shared-memory regions",
  },
  "log-verbose": {
    kind: "int",
    to: ["logging", "verbose"],
    default: "0",
    min: 0,
    help: "Verbose logging level",
  },
  "log-info": { kind: "bool", to: ["logging", "info"], default: "true", help: "Log info messages" },
  "log-warning": { kind: "bool", to: ["logging", "warning"], default: "true", help: "Log warnings" },
  "log-error": { kind: "bool", to: ["logging", "error"], default: "true", help: "Log errors" },
  "log-file": {
    kind: "string",
    to: ["logging", "file"],
    default: "",
    help: "Log to this file instead of the console",
  },
  "log-format": {
    kind: "string",
    to: ["logging", "format"],
    default: "default",
    choices: ["default", "ISO8601"],
    help: "Log line format",
  },
  "id": {
    kind: "string",
    to: ["server", "id"],
    default: "dinfer",
    help: "Server identifier (server metadata name)",
  },
  "grpc-keepalive-time": {
    kind: "int",
    to: ["grpc", "keepaliveTimeMs"],
    default: "7200000",
    min: 1,
    help: "gRPC keepalive ping interval, ms",
  },
  "grpc-keepalive-timeout": {
    kind: "int",
    to: ["grpc", "keepaliveTimeoutMs"],
    default: "20000",
    min: 1,
    help: "gRPC keepalive ack timeout, ms",
  },
  "grpc-keepalive-permit-without-calls": {
    kind: "bool",
    to: ["grpc", "keepalivePermitWithoutCalls"],
    default: "false",
    help: "Allow keepalive pings without calls",
  },
  "grpc-http2-max-pings-without-data": {
    kind: "int",
    to: ["grpc", "http2MaxPingsWithoutData"],
    default: "2",
    min: 0,
    help: "Pings allowed without data",
  },
  "grpc-restricted-protocol": {
    kind: "list",
    to: ["grpc", "restrictedProtocol"],
    parse: restrictions,
    help:
      "<api>[,<api>...]:<key>=<value>: those gRPC APIs need metadata triton-grpc-protocol-<key> set to <value> (repeatable)",
  },
  "grpc-thread-count": {
    kind: "string",
    to: ["grpc", "threadCount"],
    default: "auto",
    parse: threadCount,
    help:
      "Threads that accept, read and answer gRPC calls (the main thread and listener threads, which HTTP " +
      "shares): a number (at most one per CPU core) or auto (half the cores, at most 8)",
  },
  "grpc-max-connections": {
    kind: "int",
    to: ["grpc", "maxConnections"],
    default: "10000",
    min: 0,
    help: "Most gRPC connections open at once (0: no limit); more are closed at once",
  },
  "grpc-use-ssl": { kind: "bool", to: ["grpc", "useSsl"], default: "false", help: "Serve gRPC over TLS" },
  "grpc-server-cert": {
    kind: "string",
    to: ["grpc", "serverCert"],
    default: "",
    help: "TLS certificate file",
  },
  "grpc-server-key": { kind: "string", to: ["grpc", "serverKey"], default: "", help: "TLS key file" },
  "grpc-root-cert": {
    kind: "string",
    to: ["grpc", "rootCert"],
    default: "",
    help: "TLS root certificate (client authentication)",
  },
  "grpc-infer-response-compression-level": {
    kind: "string",
    to: ["grpc", "inferResponseCompressionLevel"],
    default: "none",
    choices: ["none", "low", "medium", "high"],
    help: "Compression of gRPC infer responses",
  },
  "cache-config": {
    kind: "list",
    to: ["cache", "size"],
    parse: cacheSize,
    help: "Response cache setting <cache>,<key>=<value>; dinfer has the 'local' cache: local,size=<bytes>",
  },
  "cache-directory": {
    kind: "string",
    to: ["cache", "directory"],
    default: "/opt/tritonserver/caches",
    help: "Where cache libraries are looked for (the built-in 'local' cache needs none)",
  },
  "response-cache-byte-size": {
    kind: "int",
    to: ["cache", "size"],
    min: 0,
    help: "Deprecated: the same as --cache-config=local,size=<bytes>",
  },
  "rate-limit": {
    kind: "string",
    to: ["rateLimit", "mode"],
    default: "off",
    parse: rateLimitMode,
    help: "Rate limiting: off, or execution_count (instances run when their rate_limiter resources are free)",
  },
  "rate-limit-resource": {
    kind: "list",
    to: ["rateLimit", "resources"],
    parse: (values) => values.map(rateLimitResource),
    help: "Copies of a rate-limiter resource <name>:<count>[:<device>] (repeatable)",
  },
  "trace-config": {
    kind: "list",
    to: ["trace", "settings"],
    parse: (values, flag) => keyValues(values, flag, /^(?:[^,=]+,)?[^,=]+=.*$/),
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

function parseInt(flag: string, v: string, spec: ValueFlag): number {
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

/** A single-valued flag's value: checked against its choices, then its kind, then its own parse. */
function valueOf(flag: string, spec: ValueFlag, v: string): unknown {
  if (spec.choices && !spec.choices.includes(v)) {
    throw new CliError(`Bad value '${v}' for --${flag}: expected one of ${spec.choices.join(", ")}`);
  }
  if (spec.parse) return spec.parse(v, flag);
  if (spec.kind === "int") return parseInt(flag, v, spec);
  if (spec.kind === "bool") return parseBool(flag, v);
  return v;
}

/** `--http-thread-count`, `--grpc-thread-count`: a positive number, or 0 for `auto`. */
function threadCount(v: string, flag: string): number {
  if (v === "auto") return 0;
  if (!/^[0-9]+$/.test(v) || Number(v) < 1 || Number(v) > 256) {
    throw new CliError(`Bad value '${v}' for --${flag}: expected 'auto' or a number from 1 to 256`);
  }
  return Number(v);
}

/**
 * How many threads serve HTTP (or gRPC): `--http-thread-count` (`--grpc-thread-count`) capped at the number of
 * cores; `auto` (0) is half the cores, at most 8 (the other half is left to the models: ONNX Runtime's thread
 * pools, Python stubs).
 * @param requested the flag's value, 0 for auto
 * @param cores the number of CPU cores
 */
export function httpListenerCount(requested: number, cores: number): number {
  const n = Math.max(1, cores);
  return requested === 0 ? Math.min(8, Math.max(1, Math.floor(n / 2))) : Math.min(requested, n);
}

/** `--http-restricted-api` and `--grpc-restricted-protocol` entries. */
function restrictions(values: string[], flag: string): Restrictions {
  try {
    return parseRestrictions(values, flag);
  } catch (err) {
    throw new CliError((err as Error).message);
  }
}

/** `--metrics-config` and `--trace-config` entries, each checked against its form. */
function keyValues(values: string[], flag: string, form: RegExp): string[] {
  for (const entry of values) {
    if (!form.test(entry)) throw new CliError(`Bad value '${entry}' for --${flag}: expected <key>=<value>`);
  }
  return values;
}

/** `--backend-config=[<backend>,]<key>=<value>` entries by backend; a later entry for the same key wins. */
function backendSettings(values: string[]): Record<string, Record<string, string>> {
  const settings: Record<string, Record<string, string>> = {};
  for (const entry of values) {
    const m = /^(?:([^,=]+),)?([^,=]+)=(.*)$/.exec(entry);
    if (!m) throw new CliError(`Bad value '${entry}' for --backend-config: expected <backend>,<key>=<value>`);
    // The listener threads' copy limit (frontends/http/replicas.ts, copyMaxBytes).
    if (m[1] === "onnxruntime" && m[2] === "thread-copy-max-bytes" && !/^\d{1,15}$/.test(m[3]!)) {
      throw new CliError(
        `Bad value '${entry}' for --backend-config: thread-copy-max-bytes takes a number of bytes`,
      );
    }
    (settings[m[1] ?? ""] ??= {})[m[2]!] = m[3]!;
  }
  return settings;
}

/** The response cache size from `--cache-config` entries (`local,size=<bytes>`, the only cache dinfer has). */
function cacheSize(entries: string[]): number {
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

/** Puts a value into its field; a list added to a list already there (two flags, one field) joins it. */
function put(config: Record<string, Record<string, unknown>>, [section, field]: FlagTarget, value: unknown) {
  const fields = config[section] ??= {};
  const before = fields[field];
  fields[field] = Array.isArray(before) && Array.isArray(value) ? [...before, ...value] : value;
}

/** The rules between fields: settings that need another, or contradict each other. */
function checkConfig(config: ServerConfig): void {
  if (config.repository.loadModels.length > 0 && config.repository.controlMode !== "explicit") {
    throw new ConfigError("Flag --load-model needs --model-control-mode=explicit");
  }
  if (config.grpc.useSsl && (!config.grpc.serverCert || !config.grpc.serverKey)) {
    throw new ConfigError("Flag --grpc-use-ssl=true needs --grpc-server-cert and --grpc-server-key");
  }
}

/** Fills the configuration from the table: each flag's given value, else its default. */
function fromFlags(values: Record<string, unknown>): ServerConfig {
  const config: Record<string, Record<string, unknown>> = {};
  for (const [flag, spec] of Object.entries(FLAGS)) {
    const given = values[flag];
    if (spec.kind === "flag") {
      if (given) put(config, spec.to, spec.value);
    } else if (spec.kind === "list") {
      const list = (given as string[] | undefined) ?? [];
      put(config, spec.to, spec.parse ? spec.parse(list, flag) : list);
    } else {
      const list = given as string[] | undefined;
      if (list && list.length > 1) throw new CliError(`Flag --${flag} is given more than once`);
      const v = list?.[0] ?? spec.default;
      if (v !== undefined) put(config, spec.to, valueOf(flag, spec, v));
    }
  }
  if (values["response-cache-byte-size"] !== undefined && values["cache-config"] !== undefined) {
    throw new CliError("Flags --response-cache-byte-size and --cache-config cannot both be given");
  }
  return config as unknown as ServerConfig;
}

/**
 * Parses the serve command line.
 * @param args the arguments after `serve`
 * @returns the configuration, or "help" when --help was given
 * @throws CliError naming the bad flag or value
 */
export function parseCommandLine(args: readonly string[]): ServerConfig | "help" {
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
  const config = fromFlags(values);
  try {
    checkConfig(config);
  } catch (err) {
    throw new CliError((err as Error).message);
  }
  return config;
}

/** The configuration no flag changes: every field at its default. */
export function defaultConfig(): ServerConfig {
  return fromFlags({});
}

/**
 * A full configuration from a partial one: each field left out takes its default (the flag table's).
 * @param input the sections and fields to set
 * @returns the configuration
 * @throws ConfigError for a section or field that does not exist, or settings that contradict each other
 * @example
 * ```ts
 * const config = resolveConfig({ repository: { paths: ["./models"] }, http: { port: 0 }, grpc: { enabled: false } });
 * ```
 */
export function resolveConfig(input: ServerConfigInput = {}): ServerConfig {
  const config = defaultConfig() as unknown as Record<string, Record<string, unknown>>;
  for (const [section, fields] of Object.entries(input as Record<string, Record<string, unknown>>)) {
    const defaults = config[section];
    if (defaults === undefined) {
      throw new ConfigError(
        `Cannot configure '${section}': no such section (expected one of ${
          Object.keys(config).sort().join(", ")
        })`,
      );
    }
    for (const [field, value] of Object.entries(fields ?? {})) {
      if (!(field in defaults)) {
        throw new ConfigError(
          `Cannot configure '${section}.${field}': no such field (expected one of ${
            Object.keys(defaults).sort().join(", ")
          })`,
        );
      }
      if (value !== undefined) defaults[field] = value;
    }
  }
  const resolved = config as unknown as ServerConfig;
  checkConfig(resolved);
  return resolved;
}
