import { assert, assertEquals, assertThrows } from "../assert.ts";
import {
  CliError,
  defaultOptions,
  FLAGS,
  helpText,
  httpListenerCount,
  parseCommandLine,
  type ServerOptions,
} from "../../server/cli.ts";
import { GRPC_METHOD_GROUPS, httpApiGroup } from "../../server/frontends/restricted.ts";
import { protoRoot } from "../../server/core/protos.ts";

function parse(args: string[]): ServerOptions {
  const o = parseCommandLine(args);
  if (o === "help") throw new Error("Expected options, got help");
  return o;
}

function fails(args: string[], message: string): void {
  assertThrows(() => parseCommandLine(args), CliError, { message });
}

const DEFAULTS: ServerOptions = {
  modelRepositories: [],
  httpPort: 8000,
  httpAddress: "0.0.0.0",
  grpcPort: 8001,
  grpcAddress: "0.0.0.0",
  metricsPort: 8002,
  metricsAddress: "0.0.0.0",
  allowHttp: true,
  allowGrpc: true,
  allowMetrics: true,
  allowGpuMetrics: true,
  allowCpuMetrics: true,
  modelControlMode: "none",
  repositoryPollSecs: 15,
  loadModels: [],
  strictReadiness: true,
  exitOnError: true,
  exitTimeoutSecs: 30,
  logVerbose: 0,
  logInfo: true,
  logWarning: true,
  logError: true,
  logFile: "",
  logFormat: "default",
  httpMaxInputSize: 67108864,
  httpThreadCount: 1,
  httpMaxConnections: 10000,
  httpHeaderTimeoutSecs: 30,
  httpIdleTimeoutSecs: 75,
  httpBodyTimeoutSecs: 60,
  autoCompleteConfig: true,
  backendConfig: {},
  allowClientShm: false,
  id: "dinfer",
  grpcKeepaliveTimeMs: 7200000,
  grpcKeepaliveTimeoutMs: 20000,
  grpcKeepalivePermitWithoutCalls: false,
  grpcHttp2MaxPingsWithoutData: 2,
  grpcMaxConnections: 10000,
  grpcUseSsl: false,
  grpcServerCert: "",
  grpcServerKey: "",
  grpcRootCert: "",
  grpcInferResponseCompressionLevel: "none",
  metricsIntervalMs: 2000,
  metricsConfig: [],
  traceConfig: [],
  httpRestrictedApi: {},
  grpcRestrictedProtocol: {},
  responseCacheSize: 0,
  cacheDirectory: "/opt/tritonserver/caches",
  rateLimit: "off",
  rateLimitResources: [],
};

Deno.test("no flags give Triton's defaults", () => {
  assertEquals(parse([]), DEFAULTS);
});

Deno.test("defaultOptions gives the defaults with the given repositories", () => {
  assertEquals(defaultOptions(), DEFAULTS);
  assertEquals(defaultOptions(["/models"]), { ...DEFAULTS, modelRepositories: ["/models"] });
});

Deno.test("--help asks for the help text", () => {
  assertEquals(parseCommandLine(["--help"]), "help");
  assertEquals(parseCommandLine(["--http-port=1", "--help"]), "help");
});

Deno.test("--model-repository repeats and --model-store is its alias, repositories in order", () => {
  const o = parse(["--model-repository=/a", "--model-store", "/c", "--model-repository", "/b"]);
  assertEquals(o.modelRepositories, ["/a", "/b", "/c"]);
});

Deno.test("flags take their value as --flag=value or --flag value", () => {
  const a = parse(["--http-port=9000", "--grpc-address=127.0.0.1", "--log-format=ISO8601"]);
  const b = parse(["--http-port", "9000", "--grpc-address", "127.0.0.1", "--log-format", "ISO8601"]);
  assertEquals(a, b);
  assertEquals(a.httpPort, 9000);
  assertEquals(a.grpcAddress, "127.0.0.1");
  assertEquals(a.logFormat, "ISO8601");
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
  assertEquals(o.grpcPort, 0);
  assertEquals(o.metricsPort, 65535);
  assertEquals(o.repositoryPollSecs, 0);
  assertEquals(o.exitTimeoutSecs, 5);
  assertEquals(o.logVerbose, 2);
  assertEquals(o.httpMaxInputSize, 1024);
  assertEquals(o.grpcKeepaliveTimeMs, 1000);
  assertEquals(o.grpcKeepaliveTimeoutMs, 500);
  assertEquals(o.grpcHttp2MaxPingsWithoutData, 0);
  assertEquals(o.metricsIntervalMs, 100);
  assertEquals(o.httpThreadCount, 4);
  assertEquals(o.httpMaxConnections, 0);
  assertEquals(o.httpHeaderTimeoutSecs, 5);
  assertEquals(o.httpIdleTimeoutSecs, 0);
  assertEquals(o.httpBodyTimeoutSecs, 120);
});

Deno.test("boolean flags take true/false, 1/0, yes/no, on/off in any case", () => {
  assertEquals(parse(["--strict-readiness=false"]).strictReadiness, false);
  assertEquals(parse(["--strict-readiness", "0"]).strictReadiness, false);
  assertEquals(parse(["--exit-on-error=FALSE"]).exitOnError, false);
  assertEquals(parse(["--exit-on-error=no"]).exitOnError, false);
  assertEquals(parse(["--allow-grpc=off"]).allowGrpc, false);
  assertEquals(parse(["--allow-client-shm=true"]).allowClientShm, true);
  assertEquals(parse(["--allow-client-shm=1"]).allowClientShm, true);
  assertEquals(parse(["--allow-client-shm=Yes"]).allowClientShm, true);
  assertEquals(parse(["--allow-client-shm=on"]).allowClientShm, true);
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
      o.allowHttp,
      o.allowMetrics,
      o.allowGpuMetrics,
      o.allowCpuMetrics,
      o.logInfo,
      o.logWarning,
      o.logError,
      o.grpcKeepalivePermitWithoutCalls,
    ],
    [false, false, false, false, false, false, false, true],
  );
});

Deno.test("--model-control-mode takes none, poll or explicit, and --load-model repeats in explicit mode", () => {
  assertEquals(parse(["--model-control-mode=poll"]).modelControlMode, "poll");
  const o = parse(["--model-control-mode=explicit", "--load-model=a", "--load-model", "b"]);
  assertEquals(o.modelControlMode, "explicit");
  assertEquals(o.loadModels, ["a", "b"]);
  assertEquals(parse(["--model-control-mode=explicit", "--load-model=*"]).loadModels, ["*"]);
});

Deno.test("--backend-config parses <backend>,<key>=<value> and global <key>=<value>", () => {
  const o = parse([
    "--backend-config=onnxruntime,default-max-batch-size=8",
    "--backend-config=onnxruntime,enable-global-threadpool=1",
    "--backend-config=python,shm-default-byte-size=a=b",
    "--backend-config=backend-directory=/opt/backends",
    "--backend-config=onnxruntime,empty=",
  ]);
  assertEquals(o.backendConfig, {
    onnxruntime: { "default-max-batch-size": "8", "enable-global-threadpool": "1", empty: "" },
    python: { "shm-default-byte-size": "a=b" },
    "": { "backend-directory": "/opt/backends" },
  });
});

Deno.test("a later --backend-config for the same key wins", () => {
  const o = parse(["--backend-config=onnxruntime,k=1", "--backend-config=onnxruntime,k=2"]);
  assertEquals(o.backendConfig, { onnxruntime: { k: "2" } });
});

Deno.test("--disable-auto-complete-config and --strict-model-config=true turn auto-complete off", () => {
  assertEquals(parse(["--disable-auto-complete-config"]).autoCompleteConfig, false);
  assertEquals(parse(["--strict-model-config=true"]).autoCompleteConfig, false);
  assertEquals(parse(["--strict-model-config=false"]).autoCompleteConfig, true);
});

Deno.test("--metrics-config and --trace-config collect their entries", () => {
  const o = parse([
    "--metrics-config=summary_latencies=true",
    "--trace-config=rate=100",
    "--trace-config=triton,file=/tmp/t.json",
  ]);
  assertEquals(o.metricsConfig, ["summary_latencies=true"]);
  assertEquals(o.traceConfig, ["rate=100", "triton,file=/tmp/t.json"]);
});

Deno.test("TLS flags are taken when --grpc-use-ssl has a certificate and key", () => {
  const o = parse([
    "--grpc-use-ssl=true",
    "--grpc-server-cert=c.pem",
    "--grpc-server-key=k.pem",
    "--grpc-root-cert=r",
  ]);
  assertEquals([o.grpcUseSsl, o.grpcServerCert, o.grpcServerKey, o.grpcRootCert], [
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
    if (spec.default === undefined || spec.kind === "flag" || spec.kind === "list") continue;
    parse([`--${name}=${spec.default}`]);
  }
});

Deno.test("--http-thread-count takes auto or a number from 1 to 256", () => {
  assertEquals(parse(["--http-thread-count=auto"]).httpThreadCount, 0);
  assertEquals(parse(["--http-thread-count=256"]).httpThreadCount, 256);
  fails(
    ["--http-thread-count=0"],
    "Bad value '0' for --http-thread-count: expected 'auto' or a number from 1 to 256",
  );
  fails(
    ["--http-thread-count=2x"],
    "Bad value '2x' for --http-thread-count: expected 'auto' or a number from 1 to 256",
  );
});

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
  assertEquals(o.httpRestrictedApi, {
    "model-repository": { key: "admin-key", value: "a:b=c" },
    "shared-memory": { key: "admin-key", value: "a:b=c" },
    inference: { key: "infer-key", value: "i" },
  });
  assertEquals(o.grpcRestrictedProtocol, {
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

Deno.test("every HTTP endpoint and gRPC method belongs to Triton's API group", () => {
  const group = (path: string) => httpApiGroup(path.split("/").filter((p) => p !== ""));
  assertEquals(
    [
      "/v2",
      "/v2/health/live",
      "/v2/health/ready",
      "/v2/models/m",
      "/v2/models/m/versions/2",
      "/v2/models/m/ready",
      "/v2/models/m/versions/2/ready",
      "/v2/models/m/config",
      "/v2/models/m/infer",
      "/v2/models/m/versions/2/infer",
      "/v2/models/m/generate",
      "/v2/models/stats",
      "/v2/models/m/stats",
      "/v2/models/m/trace/setting",
      "/v2/trace/setting",
      "/v2/logging",
      "/v2/repository/index",
      "/v2/repository/models/m/load",
      "/v2/systemsharedmemory/status",
      "/v2/cudasharedmemory/region/r/register",
      "/metrics",
    ].map(group),
    [
      "metadata",
      "health",
      "health",
      "metadata",
      "metadata",
      "health",
      "health",
      "model-config",
      "inference",
      "inference",
      "inference",
      "statistics",
      "statistics",
      "trace",
      "trace",
      "logging",
      "model-repository",
      "model-repository",
      "shared-memory",
      "shared-memory",
      undefined,
    ],
  );
  const methods = Object.keys(protoRoot().lookupService(".inference.GRPCInferenceService").methods);
  assertEquals(methods.filter((m) => GRPC_METHOD_GROUPS[m] === undefined), []);
  assertEquals(GRPC_METHOD_GROUPS.Check, "health");
});

Deno.test("cloud model repositories are taken as given", () => {
  const repos = ["s3://127.0.0.1:9000/bucket/models", "gs://bucket/models", "as://account/container/models"];
  assertEquals(parse(repos.map((r) => `--model-repository=${r}`)).modelRepositories, repos);
});
