import { assert, assertEquals, assertThrows } from "../assert.ts";
import {
  CliError,
  ConfigError,
  defaultConfig,
  FLAGS,
  helpText,
  httpListenerCount,
  parseCommandLine,
  resolveConfig,
} from "../../server/cli.ts";
import type { ServerConfig } from "../../server/config.ts";
import { GRPC_METHOD_GROUPS } from "../../server/frontends/grpc/server.ts";
import { protoRoot } from "../../server/core/protos.ts";

function parse(args: string[]): ServerConfig {
  const o = parseCommandLine(args);
  if (o === "help") throw new Error("Expected options, got help");
  return o;
}

function fails(args: string[], message: string): void {
  assertThrows(() => parseCommandLine(args), CliError, { message });
}

const DEFAULTS: ServerConfig = {
  server: { id: "dinfer", strictReadiness: true, exitOnError: true, exitTimeoutSecs: 30 },
  repository: { paths: [], controlMode: "none", pollSecs: 15, loadModels: [], autoCompleteConfig: true },
  http: {
    enabled: true,
    address: "0.0.0.0",
    port: 8000,
    threadCount: 0,
    maxInputSize: 67108864,
    maxConnections: 10000,
    headerTimeoutSecs: 30,
    idleTimeoutSecs: 75,
    bodyTimeoutSecs: 60,
    restrictedApi: {},
  },
  grpc: {
    enabled: true,
    address: "0.0.0.0",
    port: 8001,
    keepaliveTimeMs: 7200000,
    keepaliveTimeoutMs: 20000,
    keepalivePermitWithoutCalls: false,
    http2MaxPingsWithoutData: 2,
    threadCount: 0,
    maxConnections: 10000,
    useSsl: false,
    serverCert: "",
    serverKey: "",
    rootCert: "",
    inferResponseCompressionLevel: "none",
    restrictedProtocol: {},
  },
  metrics: {
    enabled: true,
    address: "0.0.0.0",
    port: 8002,
    gpu: true,
    cpu: true,
    intervalMs: 2000,
    settings: [],
  },
  logging: { info: true, warning: true, error: true, verbose: 0, format: "default", file: "" },
  trace: { settings: [] },
  backends: { settings: {} },
  sharedMemory: { allowClient: false },
  cache: { size: 0, directory: "/opt/tritonserver/caches" },
  rateLimit: { mode: "off", resources: [] },
};

Deno.test("no flags give Triton's defaults", () => {
  assertEquals(parse([]), DEFAULTS);
});

Deno.test("defaultConfig gives the defaults, and resolveConfig fills a partial configuration with them", () => {
  assertEquals(defaultConfig(), DEFAULTS);
  assertEquals(resolveConfig(), DEFAULTS);
  assertEquals(
    resolveConfig({ repository: { paths: ["/models"] }, http: { port: 0 }, grpc: { enabled: false } }),
    {
      ...DEFAULTS,
      repository: { ...DEFAULTS.repository, paths: ["/models"] },
      http: { ...DEFAULTS.http, port: 0 },
      grpc: { ...DEFAULTS.grpc, enabled: false },
    },
  );
});

Deno.test("resolveConfig refuses a section or field that does not exist, and contradicting settings", () => {
  const bad = (input: unknown, message: string) =>
    assertThrows(() => resolveConfig(input as Parameters<typeof resolveConfig>[0]), ConfigError, { message });
  bad(
    { htp: { port: 1 } },
    "Cannot configure 'htp': no such section (expected one of backends, cache, grpc, http, logging, metrics, rateLimit, repository, server, sharedMemory, trace)",
  );
  bad(
    { http: { prot: 1 } },
    "Cannot configure 'http.prot': no such field (expected one of address, bodyTimeoutSecs, enabled, headerTimeoutSecs, idleTimeoutSecs, maxConnections, maxInputSize, port, restrictedApi, threadCount)",
  );
  bad({ repository: { loadModels: ["a"] } }, "Flag --load-model needs --model-control-mode=explicit");
  bad({ grpc: { useSsl: true } }, "Flag --grpc-use-ssl=true needs --grpc-server-cert and --grpc-server-key");
});

Deno.test("every field of the configuration documents its default, and the flag table gives that default", async () => {
  // The logging section is the logger's own settings type, documented where it is declared.
  const source = await Deno.readTextFile(new URL("../../server/config.ts", import.meta.url)) +
    (await Deno.readTextFile(new URL("../../server/logging.ts", import.meta.url)))
      .replace("export interface LogSettings {", "export interface LoggingSection {");
  // The section each interface is: `  http: HttpSection;` in ServerConfig.
  const sections = new Map(
    [...source.matchAll(/^ {2}(\w+): (\w+Section);$/gm)].map((m) => [m[2]!, m[1]!] as const),
  );
  const documented: Record<string, Record<string, unknown>> = {};
  for (const block of source.matchAll(/^export interface (\w+Section)[^{]*\{\n([\s\S]*?)^\}/gm)) {
    const fields = documented[sections.get(block[1]!)!] = {} as Record<string, unknown>;
    for (const field of block[2]!.matchAll(/@default (.*?)\s*\*\/\n {2}(\w+):/g)) {
      fields[field[2]!] = JSON.parse(field[1]!);
    }
  }
  assertEquals(documented, defaultConfig() as unknown as Record<string, Record<string, unknown>>);
});

Deno.test("--help asks for the help text", () => {
  assertEquals(parseCommandLine(["--help"]), "help");
  assertEquals(parseCommandLine(["--http-port=1", "--help"]), "help");
});

Deno.test("--model-repository repeats and --model-store is its alias, repositories in order", () => {
  const o = parse(["--model-repository=/a", "--model-store", "/c", "--model-repository", "/b"]);
  assertEquals(o.repository.paths, ["/a", "/b", "/c"]);
});

Deno.test("flags take their value as --flag=value or --flag value", () => {
  const a = parse(["--http-port=9000", "--grpc-address=127.0.0.1", "--log-format=ISO8601"]);
  const b = parse(["--http-port", "9000", "--grpc-address", "127.0.0.1", "--log-format", "ISO8601"]);
  assertEquals(a, b);
  assertEquals(a.http.port, 9000);
  assertEquals(a.grpc.address, "127.0.0.1");
  assertEquals(a.logging.format, "ISO8601");
});

Deno.test("integer flags are parsed", () => {
  const o = parse([
    "--grpc-port=0",
    "--metrics-port=65535",
    "--repository-poll-secs=0",
    "--exit-timeout-secs=5",
    "--log-verbose=2",
    "--http-max-input-size=1024",
    "--grpc-keepalive-time=1000",
    "--grpc-keepalive-timeout=500",
    "--grpc-http2-max-pings-without-data=0",
    "--metrics-interval-ms=100",
    "--http-thread-count=4",
    "--http-max-connections=0",
    "--http-header-timeout-secs=5",
    "--http-idle-timeout-secs=0",
    "--http-body-timeout-secs=120",
  ]);
  assertEquals(o.grpc.port, 0);
  assertEquals(o.metrics.port, 65535);
  assertEquals(o.repository.pollSecs, 0);
  assertEquals(o.server.exitTimeoutSecs, 5);
  assertEquals(o.logging.verbose, 2);
  assertEquals(o.http.maxInputSize, 1024);
  assertEquals(o.grpc.keepaliveTimeMs, 1000);
  assertEquals(o.grpc.keepaliveTimeoutMs, 500);
  assertEquals(o.grpc.http2MaxPingsWithoutData, 0);
  assertEquals(o.metrics.intervalMs, 100);
  assertEquals(o.http.threadCount, 4);
  assertEquals(o.http.maxConnections, 0);
  assertEquals(o.http.headerTimeoutSecs, 5);
  assertEquals(o.http.idleTimeoutSecs, 0);
  assertEquals(o.http.bodyTimeoutSecs, 120);
});

Deno.test("boolean flags take true/false, 1/0, yes/no, on/off in any case", () => {
  assertEquals(parse(["--strict-readiness=false"]).server.strictReadiness, false);
  assertEquals(parse(["--strict-readiness", "0"]).server.strictReadiness, false);
  assertEquals(parse(["--exit-on-error=FALSE"]).server.exitOnError, false);
  assertEquals(parse(["--exit-on-error=no"]).server.exitOnError, false);
  assertEquals(parse(["--allow-grpc=off"]).grpc.enabled, false);
  assertEquals(parse(["--allow-client-shm=true"]).sharedMemory.allowClient, true);
  assertEquals(parse(["--allow-client-shm=1"]).sharedMemory.allowClient, true);
  assertEquals(parse(["--allow-client-shm=Yes"]).sharedMemory.allowClient, true);
  assertEquals(parse(["--allow-client-shm=on"]).sharedMemory.allowClient, true);
  const o = parse([
    "--allow-http=false",
    "--allow-metrics=0",
    "--allow-gpu-metrics=false",
    "--allow-cpu-metrics=false",
    "--log-info=false",
    "--log-warning=false",
    "--log-error=false",
    "--grpc-keepalive-permit-without-calls=true",
  ]);
  assertEquals(
    [
      o.http.enabled,
      o.metrics.enabled,
      o.metrics.gpu,
      o.metrics.cpu,
      o.logging.info,
      o.logging.warning,
      o.logging.error,
      o.grpc.keepalivePermitWithoutCalls,
    ],
    [false, false, false, false, false, false, false, true],
  );
});

Deno.test("--model-control-mode takes none, poll or explicit, and --load-model repeats in explicit mode", () => {
  assertEquals(parse(["--model-control-mode=poll"]).repository.controlMode, "poll");
  const o = parse(["--model-control-mode=explicit", "--load-model=a", "--load-model", "b"]);
  assertEquals(o.repository.controlMode, "explicit");
  assertEquals(o.repository.loadModels, ["a", "b"]);
  assertEquals(parse(["--model-control-mode=explicit", "--load-model=*"]).repository.loadModels, ["*"]);
});

Deno.test("--backend-config parses <backend>,<key>=<value> and global <key>=<value>", () => {
  const o = parse([
    "--backend-config=onnxruntime,default-max-batch-size=8",
    "--backend-config=onnxruntime,enable-global-threadpool=1",
    "--backend-config=python,shm-default-byte-size=a=b",
    "--backend-config=backend-directory=/opt/backends",
    "--backend-config=onnxruntime,empty=",
  ]);
  assertEquals(o.backends.settings, {
    onnxruntime: { "default-max-batch-size": "8", "enable-global-threadpool": "1", empty: "" },
    python: { "shm-default-byte-size": "a=b" },
    "": { "backend-directory": "/opt/backends" },
  });
});

Deno.test("--backend-config=onnxruntime,thread-copy-max-bytes takes a number of bytes", () => {
  assertEquals(
    parse(["--backend-config=onnxruntime,thread-copy-max-bytes=16777216"]).backends.settings,
    { onnxruntime: { "thread-copy-max-bytes": "16777216" } },
  );
  for (const bad of ["", "16M", "-1", "1.5", "1e6"]) {
    fails(
      [`--backend-config=onnxruntime,thread-copy-max-bytes=${bad}`],
      `Bad value 'onnxruntime,thread-copy-max-bytes=${bad}' for --backend-config: thread-copy-max-bytes takes a number of bytes`,
    );
  }
});

Deno.test("a later --backend-config for the same key wins", () => {
  const o = parse(["--backend-config=onnxruntime,k=1", "--backend-config=onnxruntime,k=2"]);
  assertEquals(o.backends.settings, { onnxruntime: { k: "2" } });
});

Deno.test("--disable-auto-complete-config and --strict-model-config=true turn auto-complete off", () => {
  assertEquals(parse(["--disable-auto-complete-config"]).repository.autoCompleteConfig, false);
  assertEquals(parse(["--strict-model-config=true"]).repository.autoCompleteConfig, false);
  assertEquals(parse(["--strict-model-config=false"]).repository.autoCompleteConfig, true);
});

Deno.test("--metrics-config and --trace-config collect their entries", () => {
  const o = parse([
    "--metrics-config=summary_latencies=true",
    "--trace-config=rate=100",
    "--trace-config=triton,file=/tmp/t.json",
  ]);
  assertEquals(o.metrics.settings, ["summary_latencies=true"]);
  assertEquals(o.trace.settings, ["rate=100", "triton,file=/tmp/t.json"]);
});

Deno.test("TLS flags are taken when --grpc-use-ssl has a certificate and key", () => {
  const o = parse([
    "--grpc-use-ssl=true",
    "--grpc-server-cert=c.pem",
    "--grpc-server-key=k.pem",
    "--grpc-root-cert=r",
  ]);
  assertEquals([o.grpc.useSsl, o.grpc.serverCert, o.grpc.serverKey, o.grpc.rootCert], [
    true,
    "c.pem",
    "k.pem",
    "r",
  ]);
});

Deno.test("an unknown flag is refused", () => {
  fails(["--foo=1"], "Unknown flag '--foo' (see --help)");
  fails(["--model-repo=/m"], "Unknown flag '--model-repo' (see --help)");
  fails(["-x"], "Unknown flag '-x' (see --help)");
});

Deno.test("a flag without its value is refused", () => {
  fails(["--http-port"], "Flag '--http-port' needs a value");
});

Deno.test("a positional argument is refused", () => {
  fails(["serve"], "Unexpected argument 'serve' (flags are --name=value)");
});

Deno.test("a bad integer is refused", () => {
  fails(["--http-port=abc"], "Bad value 'abc' for --http-port: expected an integer");
  fails(["--http-port=80.5"], "Bad value '80.5' for --http-port: expected an integer");
  fails(["--http-port="], "Bad value '' for --http-port: expected an integer");
  fails(["--exit-timeout-secs=1e3"], "Bad value '1e3' for --exit-timeout-secs: expected an integer");
  fails(
    ["--http-max-input-size=99999999999999999999"],
    "Bad value '99999999999999999999' for --http-max-input-size: out of range",
  );
  fails(["--http-max-input-size=0"], "Bad value '0' for --http-max-input-size: must be at least 1");
  fails(["--log-verbose=-1"], "Bad value '-1' for --log-verbose: must be at least 0");
  fails(["--http-idle-timeout-secs=-1"], "Bad value '-1' for --http-idle-timeout-secs: must be at least 0");
  fails(["--http-max-connections=1.5"], "Bad value '1.5' for --http-max-connections: expected an integer");
});

Deno.test("an out-of-range port is refused", () => {
  fails(["--http-port=65536"], "Bad value '65536' for --http-port: must be at most 65535");
  fails(["--grpc-port=70000"], "Bad value '70000' for --grpc-port: must be at most 65535");
  fails(["--metrics-port=-1"], "Bad value '-1' for --metrics-port: must be at least 0");
});

Deno.test("a bad boolean is refused", () => {
  fails(["--strict-readiness=maybe"], "Bad value 'maybe' for --strict-readiness: expected true or false");
  fails(["--allow-http="], "Bad value '' for --allow-http: expected true or false");
  fails(["--strict-model-config=2"], "Bad value '2' for --strict-model-config: expected true or false");
});

Deno.test("a value outside a flag's choices is refused", () => {
  fails(
    ["--model-control-mode=auto"],
    "Bad value 'auto' for --model-control-mode: expected one of none, poll, explicit",
  );
  fails(["--log-format=json"], "Bad value 'json' for --log-format: expected one of default, ISO8601");
  fails(
    ["--grpc-infer-response-compression-level=max"],
    "Bad value 'max' for --grpc-infer-response-compression-level: expected one of none, low, medium, high",
  );
});

Deno.test("a single-valued flag given twice is refused", () => {
  fails(["--http-port=1", "--http-port=2"], "Flag --http-port is given more than once");
});

Deno.test("--load-model without explicit model control is refused", () => {
  fails(["--load-model=simple"], "Flag --load-model needs --model-control-mode=explicit");
  fails(
    ["--model-control-mode=poll", "--load-model=simple"],
    "Flag --load-model needs --model-control-mode=explicit",
  );
});

Deno.test("--grpc-use-ssl without a certificate and key is refused", () => {
  const message = "Flag --grpc-use-ssl=true needs --grpc-server-cert and --grpc-server-key";
  fails(["--grpc-use-ssl=true"], message);
  fails(["--grpc-use-ssl=true", "--grpc-server-cert=c.pem"], message);
  fails(["--grpc-use-ssl=true", "--grpc-server-key=k.pem"], message);
});

Deno.test("bad --backend-config, --metrics-config and --trace-config entries are refused", () => {
  fails(
    ["--backend-config=onnxruntime"],
    "Bad value 'onnxruntime' for --backend-config: expected <backend>,<key>=<value>",
  );
  fails(
    ["--backend-config=a,b,c=d"],
    "Bad value 'a,b,c=d' for --backend-config: expected <backend>,<key>=<value>",
  );
  fails(["--backend-config==v"], "Bad value '=v' for --backend-config: expected <backend>,<key>=<value>");
  fails(["--metrics-config=summary"], "Bad value 'summary' for --metrics-config: expected <key>=<value>");
  fails(["--trace-config=a,b,c=d"], "Bad value 'a,b,c=d' for --trace-config: expected <key>=<value>");
});

Deno.test("the help text lists every flag with its default", () => {
  const text = helpText();
  for (const name of Object.keys(FLAGS)) assert(text.includes(`  --${name}`), `--${name} is listed`);
  assert(text.includes("  --help"), "--help is listed");
  const lines = text.split("\n");
  assertEquals(lines[0], "Usage: dinfer serve [--flag=value ...]");
  const port = lines.find((l) => l.startsWith("  --http-port="));
  assertEquals(port, "  --http-port=<int>".padEnd(50) + "HTTP port (default: 8000)");
  const flag = lines.find((l) => l.startsWith("  --disable-auto-complete-config"));
  assertEquals(
    flag,
    "  --disable-auto-complete-config".padEnd(50) + "Do not complete configs from the models",
  );
  const bool = lines.find((l) => l.startsWith("  --strict-readiness="));
  assertEquals(
    bool,
    "  --strict-readiness=<bool>".padEnd(50) + "Ready only when every model is ready (default: true)",
  );
});

Deno.test("every flag's default parses as its kind", () => {
  for (const [name, spec] of Object.entries(FLAGS)) {
    if (spec.kind === "flag" || spec.kind === "list" || spec.default === undefined) continue;
    parse([`--${name}=${spec.default}`]);
  }
});

for (const [flag, section] of [["http-thread-count", "http"], ["grpc-thread-count", "grpc"]] as const) {
  Deno.test(`--${flag} takes auto or a number from 1 to 256`, () => {
    assertEquals(parse([`--${flag}=auto`])[section].threadCount, 0);
    assertEquals(parse([`--${flag}=3`])[section].threadCount, 3);
    assertEquals(parse([`--${flag}=256`])[section].threadCount, 256);
    fails([`--${flag}=0`], `Bad value '0' for --${flag}: expected 'auto' or a number from 1 to 256`);
    fails([`--${flag}=2x`], `Bad value '2x' for --${flag}: expected 'auto' or a number from 1 to 256`);
  });
}

Deno.test("HTTP listener threads: auto is half the cores (at most 8), a number is capped at the cores", () => {
  assertEquals(httpListenerCount(0, 1), 1);
  assertEquals(httpListenerCount(0, 2), 1);
  assertEquals(httpListenerCount(0, 16), 8);
  assertEquals(httpListenerCount(0, 64), 8);
  assertEquals(httpListenerCount(4, 2), 2);
  assertEquals(httpListenerCount(4, 16), 4);
  assertEquals(httpListenerCount(1, 16), 1);
});

Deno.test("--http-restricted-api and --grpc-restricted-protocol map each API group to its key and value", () => {
  const o = parse([
    "--http-restricted-api=model-repository,shared-memory:admin-key=a:b=c",
    "--http-restricted-api=inference:infer-key=i",
    "--grpc-restricted-protocol=health, metadata ,trace,logging,statistics,model-config:k=v",
  ]);
  assertEquals(o.http.restrictedApi, {
    "model-repository": { key: "admin-key", value: "a:b=c" },
    "shared-memory": { key: "admin-key", value: "a:b=c" },
    inference: { key: "infer-key", value: "i" },
  });
  assertEquals(o.grpc.restrictedProtocol, {
    health: { key: "k", value: "v" },
    metadata: { key: "k", value: "v" },
    trace: { key: "k", value: "v" },
    logging: { key: "k", value: "v" },
    statistics: { key: "k", value: "v" },
    "model-config": { key: "k", value: "v" },
  });
});

Deno.test("bad restricted-API entries are refused naming the problem", () => {
  fails(
    ["--http-restricted-api=model-repository"],
    "Bad value 'model-repository' for --http-restricted-api: expected <api>[,<api>...]:<key>=<value>",
  );
  fails(
    ["--grpc-restricted-protocol=repository:k=v"],
    "Bad value 'repository:k=v' for --grpc-restricted-protocol: unknown API 'repository' (expected one of health, metadata, inference, shared-memory, model-config, model-repository, statistics, trace, logging)",
  );
  fails(
    ["--http-restricted-api=inference:k=v", "--http-restricted-api=health,inference:j=w"],
    "Bad value 'health,inference:j=w' for --http-restricted-api: API 'inference' is in more than one group",
  );
  fails(
    ["--http-restricted-api=inference:k="],
    "Bad value 'inference:k=' for --http-restricted-api: the key and the value must not be empty",
  );
  fails(
    ["--http-restricted-api=inference:=v"],
    "Bad value 'inference:=v' for --http-restricted-api: the key and the value must not be empty",
  );
  fails(
    ["--http-restricted-api=inference:a key=v"],
    "Bad value 'inference:a key=v' for --http-restricted-api: 'a key' is not a valid header name",
  );
});

Deno.test("every gRPC method belongs to Triton's API group", () => {
  const methods = Object.keys(protoRoot().lookupService(".inference.GRPCInferenceService").methods);
  assertEquals(methods.filter((m) => GRPC_METHOD_GROUPS[m] === undefined), []);
  assertEquals(GRPC_METHOD_GROUPS.Check, "health");
});

Deno.test("cloud model repositories are taken as given", () => {
  const repos = ["s3://127.0.0.1:9000/bucket/models", "gs://bucket/models", "as://account/container/models"];
  assertEquals(parse(repos.map((r) => `--model-repository=${r}`)).repository.paths, repos);
});
