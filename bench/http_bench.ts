/**
 * The HTTP benchmark (`./dinfer bench`): the `simple` model in-process with onnxruntime-node as the
 * baseline, then the real server in a child process under closed-loop load (JSON and binary tensor data,
 * several connection counts). Prints a table and writes `bench/RESULTS.md`.
 *
 * Flags: `--duration=<s>` measured seconds per point (default 5), `--warmup=<s>` (default 1),
 * `--connections=1,8,16,32`, `--quick` (1 s per point), `--profile` (also profile the server under JSON load
 * at 16 connections and add the top functions to the results), `--no-write` (print only),
 * `--server-arg=<arg>` (repeatable: one more server flag, e.g. `--server-arg=--model-repository=/tmp/models`).
 * @module
 */

import * as ort from "onnxruntime-node";
import { fileURLToPath } from "node:url";
import { sessionOptions } from "../server/backends/onnxruntime.ts";
import { readConfigFile, toModelConfig } from "../server/repository/config.ts";
import { freePort, httpRequest, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";
import { type ProfileSummary, startProfiler, summarizeProfile } from "./cpu_profile.ts";
import { cpuSeconds, machineBusySeconds, waitQuiet } from "./cpu_usage.ts";
import { measureMlp, mlpMarkdown } from "./mlp_bench.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const MODEL_DIR = `${ROOT}examples/models/simple`;
const RESULTS = `${ROOT}bench/RESULTS.md`;
const TARGET_RATE = 15_000;
const TARGET_ADDED_US = 100;

interface Flags {
  durationS: number;
  warmupS: number;
  connections: number[];
  quick: boolean;
  profile: boolean;
  write: boolean;
  serverArgs: string[];
}

function parseFlags(args: string[]): Flags {
  const flags: Flags = {
    durationS: 5,
    warmupS: 1,
    connections: [1, 8, 16, 32],
    quick: false,
    profile: false,
    write: true,
    serverArgs: [],
  };
  for (const arg of args) {
    const eq = arg.indexOf("=");
    const k = eq < 0 ? arg : arg.slice(0, eq);
    const v = eq < 0 ? undefined : arg.slice(eq + 1);
    const num = () => {
      const n = Number(v);
      if (v === undefined || !Number.isFinite(n) || n <= 0) {
        throw new Error(`Cannot parse '${arg}': expected a positive number`);
      }
      return n;
    };
    if (k === "--duration") flags.durationS = num();
    else if (k === "--warmup") flags.warmupS = num();
    else if (k === "--connections") flags.connections = (v ?? "").split(",").map(Number);
    else if (k === "--quick") {
      flags.quick = true;
      flags.durationS = 1;
      flags.warmupS = 0.3;
    } else if (k === "--profile") flags.profile = true;
    else if (k === "--no-write") flags.write = false;
    else if (k === "--server-arg" && v !== undefined) flags.serverArgs.push(v);
    else throw new Error(`Cannot parse '${arg}': unknown flag`);
  }
  if (flags.connections.some((c) => !Number.isInteger(c) || c < 1)) {
    throw new Error(`Cannot parse '--connections': expected positive integers`);
  }
  return flags;
}

// ---------------------------------------------------------------------------------------------------------
// Data: fixed inputs and the outputs the model must give

const INPUT0 = Int32Array.from({ length: 16 }, (_, i) => i * 3 - 7);
const INPUT1 = Int32Array.from({ length: 16 }, (_, i) => 100 - i * i);
const OUTPUT0 = INPUT0.map((v, i) => v + INPUT1[i]!);
const OUTPUT1 = INPUT0.map((v, i) => v - INPUT1[i]!);
const EXPECTED: Record<string, Int32Array> = { OUTPUT0, OUTPUT1 };

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function jsonBody(): Uint8Array {
  return encoder.encode(JSON.stringify({
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: [...INPUT0] },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: [...INPUT1] },
    ],
  }));
}

function binaryBody(): { body: Uint8Array; headerLength: number } {
  const header = encoder.encode(JSON.stringify({
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
    ],
    outputs: [
      { name: "OUTPUT0", parameters: { binary_data: true } },
      { name: "OUTPUT1", parameters: { binary_data: true } },
    ],
  }));
  const body = new Uint8Array(header.byteLength + 128);
  body.set(header, 0);
  body.set(new Uint8Array(INPUT0.buffer), header.byteLength);
  body.set(new Uint8Array(INPUT1.buffer), header.byteLength + 64);
  return { body, headerLength: header.byteLength };
}

interface OutputJson {
  name: string;
  datatype: string;
  shape: number[];
  data?: number[];
  parameters?: { binary_data_size?: number };
}

function sameShape(o: OutputJson): string | undefined {
  if (o.datatype !== "INT32") return `'${o.name}' has datatype '${o.datatype}'`;
  if (JSON.stringify(o.shape) !== "[1,16]") return `'${o.name}' has shape ${JSON.stringify(o.shape)}`;
  return undefined;
}

function compare(name: string, got: ArrayLike<number>): string | undefined {
  const want = EXPECTED[name];
  if (!want) return `unexpected output '${name}'`;
  if (got.length !== want.length) return `'${name}' has ${got.length} values, expected ${want.length}`;
  for (let i = 0; i < want.length; i++) {
    if (got[i] !== want[i]) return `'${name}'[${i}] is ${got[i]}, expected ${want[i]}`;
  }
  return undefined;
}

function checkJson(r: SampledResponse): string | undefined {
  if (r.status !== 200) return `status ${r.status}`;
  const body = JSON.parse(decoder.decode(r.body)) as { outputs?: OutputJson[] };
  const outputs = body.outputs ?? [];
  if (outputs.length !== 2) return `${outputs.length} outputs, expected 2`;
  for (const o of outputs) {
    const why = sameShape(o) ?? compare(o.name, o.data ?? []);
    if (why) return why;
  }
  return undefined;
}

function checkBinary(r: SampledResponse): string | undefined {
  if (r.status !== 200) return `status ${r.status}`;
  const m = /\r\ninference-header-content-length: *([0-9]+)/.exec(r.headers);
  if (!m) return "no Inference-Header-Content-Length";
  const hl = Number(m[1]);
  const header = JSON.parse(decoder.decode(r.body.subarray(0, hl))) as { outputs?: OutputJson[] };
  const outputs = header.outputs ?? [];
  if (outputs.length !== 2) return `${outputs.length} outputs, expected 2`;
  let off = hl;
  for (const o of outputs) {
    const size = o.parameters?.binary_data_size;
    if (size === undefined) return `'${o.name}' is not binary`;
    const view = new DataView(r.body.buffer, r.body.byteOffset + off, size);
    const values = Array.from({ length: size / 4 }, (_, i) => view.getInt32(i * 4, true));
    const why = sameShape(o) ?? compare(o.name, values);
    if (why) return why;
    off += size;
  }
  if (off !== r.body.byteLength) return `the body has ${r.body.byteLength - off} bytes after the outputs`;
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------
// Baseline: onnxruntime-node in-process, sequential

interface Baseline {
  runs: number;
  rate: number;
  p50Us: number;
  p99Us: number;
  options: ort.InferenceSession.SessionOptions;
}

async function baseline(durationS: number, warmupS: number): Promise<Baseline> {
  const config = toModelConfig(await readConfigFile(MODEL_DIR, "simple"), "simple");
  const options = sessionOptions(config);
  const session = await ort.InferenceSession.create(`${MODEL_DIR}/1/model.onnx`, options);
  try {
    const once = async () => {
      const feeds = {
        INPUT0: new ort.Tensor("int32", INPUT0, [1, 16]),
        INPUT1: new ort.Tensor("int32", INPUT1, [1, 16]),
      };
      const out = await session.run(feeds);
      return out;
    };
    const first = await once();
    for (const name of ["OUTPUT0", "OUTPUT1"]) {
      const why = compare(name, first[name]!.data as Int32Array);
      if (why) throw new Error(`The baseline is wrong: ${why}`);
    }
    const warmEnd = performance.now() + warmupS * 1000;
    while (performance.now() < warmEnd) await once();
    const lat: number[] = [];
    const start = performance.now();
    const end = start + durationS * 1000;
    let now = start;
    while (now < end) {
      const t0 = now;
      await once();
      now = performance.now();
      lat.push((now - t0) * 1000);
    }
    const sorted = Float64Array.from(lat).sort();
    return {
      runs: lat.length,
      rate: lat.length / ((now - start) / 1000),
      p50Us: sorted[Math.floor(sorted.length * 0.5)]!,
      p99Us: sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!,
      options,
    };
  } finally {
    await session.release();
  }
}

// ---------------------------------------------------------------------------------------------------------
// The server in a child process

/**
 * The server shut down cleanly in the middle of a point: something outside sent it SIGTERM or SIGINT (other
 * sessions share this machine). The point is measured again on a fresh server.
 */
class StoppedFromOutside extends Error {
  constructor(log: string) {
    super(`The server was stopped from outside: ${log}`);
    this.name = "StoppedFromOutside";
  }
}

/** Holds the server child process and restarts it when something outside stops it. */
class ServerSlot {
  server!: ChildServer;
  restarts = 0;
  #denoArgs: string[];
  #serverArgs: string[];
  constructor(denoArgs: string[], serverArgs: string[]) {
    this.#denoArgs = denoArgs;
    this.#serverArgs = serverArgs;
  }
  async start(): Promise<ChildServer> {
    this.server = await startChildServer(this.#denoArgs, this.#serverArgs);
    return this.server;
  }
  /** Runs `fn` on the server, restarting it and running again (up to 3 times) if it was stopped from outside. */
  async run<T>(fn: (server: ChildServer) => Promise<T>): Promise<T> {
    for (let attempt = 0;; attempt++) {
      try {
        return await fn(this.server);
      } catch (err) {
        if (!(err instanceof StoppedFromOutside) || attempt >= 3) throw err;
        this.restarts++;
        console.log(
          `  (the server was stopped from outside, exit code 0: restarting it and measuring again)`,
        );
        await this.server.stop();
        await this.start();
      }
    }
  }
  stop(): Promise<void> {
    return this.server.stop();
  }
}

interface ChildServer {
  port: number;
  pid: number;
  /** The exit code once the process has exited, else undefined. */
  exitCode(): number | undefined;
  stop(): Promise<void>;
  log(): string;
}

async function startChildServer(denoArgs: string[], serverArgs: string[]): Promise<ChildServer> {
  const port = freePort();
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      ...denoArgs,
      "main.ts",
      `--http-port=${port}`,
      ...(serverArgs.some((a) => a.startsWith("--grpc-port=")) ? [] : ["--allow-grpc=false"]),
      "--allow-metrics=false",
      "--log-info=false",
      ...serverArgs,
    ],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let output = "";
  const drain = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s.pipeThrough(new TextDecoderStream())) output = (output + chunk).slice(-8000);
  };
  const drained = Promise.all([drain(child.stdout), drain(child.stderr)]);
  let exited = false;
  let code: number | undefined;
  const status = child.status.then((s) => {
    exited = true;
    code = s.code;
    output += `\n[server exited: code ${s.code}${s.signal ? `, signal ${s.signal}` : ""}]`;
    return s;
  });
  const server: ChildServer = {
    port,
    pid: child.pid,
    exitCode: () => code,
    async stop() {
      if (!exited) child.kill("SIGTERM");
      const timer = setTimeout(() => !exited && child.kill("SIGKILL"), 5000);
      await status;
      clearTimeout(timer);
      await drained;
    },
    log: () => output,
  };
  const deadline = performance.now() + 60_000;
  while (performance.now() < deadline) {
    if (exited) break;
    try {
      const res = await fetch(`http://127.0.0.1:${port}/v2/health/ready`);
      await res.body?.cancel();
      if (res.status === 200) return server;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.stop();
  throw new Error(`Cannot start the server: it was not ready within 60 s: ${output}`);
}

/** Other processes' CPU above which a point is marked as disturbed. */
const DISTURBED_PCT = 25;

interface Point extends LoadResult {
  format: string;
  serverCpuPct: number;
  clientCpuPct: number;
  /** CPU used by every other process over the window: a busy machine makes the point unreliable. */
  otherCpuPct: number;
}

async function measure(
  server: ChildServer,
  format: "json" | "binary" | "health",
  connections: number,
  flags: Flags,
  quietS: number = flags.quick ? 1 : 3,
): Promise<Point> {
  const host = `127.0.0.1:${server.port}`;
  let request: Uint8Array;
  let check: ((r: SampledResponse) => string | undefined) | undefined;
  if (format === "json") {
    request = httpRequest({
      method: "POST",
      path: "/v2/models/simple/infer",
      host,
      headers: { "content-type": "application/json" },
    }, jsonBody());
    check = checkJson;
  } else if (format === "binary") {
    const { body, headerLength } = binaryBody();
    request = httpRequest({
      method: "POST",
      path: "/v2/models/simple/infer",
      host,
      headers: {
        "content-type": "application/octet-stream",
        "inference-header-content-length": String(headerLength),
      },
    }, body);
    check = checkBinary;
  } else {
    request = httpRequest({ method: "GET", path: "/v2/health/live", host });
    check = (r) => (r.status === 200 && r.body.byteLength === 0 ? undefined : `status ${r.status}`);
  }
  if (quietS > 0) await waitQuiet(quietS);
  // CPU use of both processes over the measured window.
  let s0 = 0, c0 = 0, m0 = 0, s1 = 0, c1 = 0, m1 = 0;
  const result = await runLoad({ hostname: "127.0.0.1", port: server.port }, {
    request,
    connections,
    durationS: flags.durationS,
    warmupS: flags.warmupS,
    check,
    onWindow(edge) {
      if (edge === "start") [s0, c0, m0] = [cpuSeconds(server.pid), cpuSeconds("self"), machineBusySeconds()];
      else [s1, c1, m1] = [cpuSeconds(server.pid), cpuSeconds("self"), machineBusySeconds()];
    },
  });
  // Let a pending exit status arrive before deciding the run was clean.
  await new Promise((r) => setTimeout(r, 0));
  if (server.exitCode() !== undefined || (result.errors > 0 && result.count === 0)) {
    await new Promise((r) => setTimeout(r, 200));
    if (server.exitCode() === 0) throw new StoppedFromOutside(server.log());
    if (server.exitCode() !== undefined) {
      throw new Error(
        `The server exited during the ${format} run at ${connections} connections (${result.firstError}): ${server.log()}`,
      );
    }
  }
  return {
    ...result,
    format,
    serverCpuPct: s1 > 0 && s0 > 0 ? (100 * (s1 - s0)) / flags.durationS : NaN,
    clientCpuPct: c1 > 0 && c0 > 0 ? (100 * (c1 - c0)) / flags.durationS : NaN,
    otherCpuPct: m1 > 0 && m0 > 0
      ? Math.max(0, (100 * (m1 - m0 - (s1 - s0) - (c1 - c0))) / flags.durationS)
      : NaN,
  };
}

/**
 * gRPC points: a server with gRPC on, and the gRPC load generator (bench/grpc_load.ts, @grpc/grpc-js) in a
 * process of its own, all points over one channel.
 */
async function measureGrpc(flags: Flags): Promise<Point[]> {
  const grpcPort = freePort();
  const server = await startChildServer([], [`--grpc-port=${grpcPort}`, ...flags.serverArgs]);
  try {
    const s0 = cpuSeconds(server.pid);
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        "bench/grpc_load.ts",
        `127.0.0.1:${grpcPort}`,
        flags.connections.join(","),
        String(flags.durationS),
        String(flags.warmupS),
      ],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const s1 = cpuSeconds(server.pid);
    const lines = new TextDecoder().decode(out.stdout).trim().split("\n").filter((l) => l.startsWith("{"));
    if (lines.length === 0) throw new Error(`gRPC load failed: ${new TextDecoder().decode(out.stderr)}`);
    const total = flags.connections.length * (flags.durationS + flags.warmupS);
    return lines.map((l) => ({
      ...(JSON.parse(l) as LoadResult),
      format: "grpc",
      // Per point CPU is not split out: the server's CPU over the whole gRPC run, per second.
      serverCpuPct: s1 > 0 && s0 > 0 ? (100 * (s1 - s0)) / total : NaN,
      clientCpuPct: NaN,
      otherCpuPct: NaN,
    }));
  } finally {
    await server.stop();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Report

async function machine(): Promise<Record<string, string>> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo");
  const meminfo = await Deno.readTextFile("/proc/meminfo");
  const model = /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? "unknown";
  const memKb = Number(/^MemTotal:\s*([0-9]+)/m.exec(meminfo)?.[1] ?? 0);
  let ortVersion = "unknown";
  try {
    const pkg = JSON.parse(await Deno.readTextFile(`${ROOT}node_modules/onnxruntime-node/package.json`));
    ortVersion = pkg.version;
  } catch {
    ortVersion = (ort.env.versions as Record<string, string> | undefined)?.node ?? "unknown";
  }
  const git = (...args: string[]) => {
    try {
      const out = new Deno.Command("git", { args, cwd: ROOT, stdout: "piped", stderr: "null" }).outputSync();
      return new TextDecoder().decode(out.stdout).trim();
    } catch {
      return "";
    }
  };
  const dirty =
    git("status", "--porcelain", "--untracked-files=no", "--", "server", "main.ts", "mod.ts") !== "";
  const stat = Deno.readTextFileSync("/proc/self/stat");
  const nice = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16] ?? "?";
  return {
    "CPUs (nproc)": String(navigator.hardwareConcurrency),
    "CPU model": model,
    "Memory": `${(memKb / 1024 / 1024).toFixed(1)} GiB`,
    "Deno": `${Deno.version.deno} (V8 ${Deno.version.v8})`,
    "onnxruntime-node": ortVersion,
    "Date": new Date().toISOString().replace(/\.\d+Z$/, "Z"),
    "Server code": `commit ${git("rev-parse", "--short", "HEAD") || "unknown"}${
      dirty ? " with uncommitted changes under server/" : ""
    }`,
    "Nice value of the benchmark and the server": nice,
  };
}

function fmt(n: number, digits = 0): string {
  return Number.isFinite(n) ? n.toLocaleString("en-US", { maximumFractionDigits: digits }) : "-";
}

function table(points: Point[]): string {
  const rows = [
    "| format | connections | infer/s | p50 µs | p90 µs | p99 µs | server CPU | server CPU µs/infer " +
    "| client CPU | other CPU | errors | checked (wrong) |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
  ];
  for (const p of points) {
    const cells = [
      p.format + (p.otherCpuPct > DISTURBED_PCT ? " †" : ""),
      String(p.connections),
      fmt(p.rate),
      fmt(p.p50Us),
      fmt(p.p90Us),
      fmt(p.p99Us),
      `${fmt(p.serverCpuPct)}%`,
      fmt((p.serverCpuPct * 1e4) / p.rate),
      `${fmt(p.clientCpuPct)}%`,
      `${fmt(p.otherCpuPct)}%`,
      String(p.errors),
      `${p.checked} (${p.mismatches})`,
    ];
    rows.push(`| ${cells.join(" | ")} |`);
  }
  return rows.join("\n");
}

function profileTable(summary: ProfileSummary, top = 25): string {
  const rows = [
    `Busy ${fmt(summary.busyMs)} ms of ${fmt(summary.wallMs)} ms sampled on the server's main thread ` +
    `(percentages are of busy time).`,
    "",
    "| function | self ms | self % | total % |",
    "|---|---:|---:|---:|",
  ];
  for (const r of summary.functions.slice(0, top)) {
    rows.push(`| \`${r.name}\` | ${fmt(r.selfMs)} | ${fmt(r.selfPct, 1)} | ${fmt(r.totalPct, 1)} |`);
  }
  rows.push("", "By file (self time):", "", "| file | self % | total % |", "|---|---:|---:|");
  for (const r of summary.files.slice(0, 15)) {
    rows.push(`| \`${r.name}\` | ${fmt(r.selfPct, 1)} | ${fmt(r.totalPct, 1)} |`);
  }
  return rows.join("\n");
}

async function profileServer(flags: Flags): Promise<ProfileSummary> {
  const inspector = `127.0.0.1:${freePort()}`;
  const slot = new ServerSlot([`--inspect=${inspector}`], flags.serverArgs);
  await slot.start();
  try {
    return await slot.run(async (server) => {
      // Warm up without the profiler, then profile the measured window only.
      await measure(server, "json", 16, { ...flags, durationS: flags.warmupS, warmupS: 0.2 });
      await waitQuiet(3);
      const profiler = await startProfiler(inspector, { intervalUs: 100 });
      const point = await measure(server, "json", 16, { ...flags, warmupS: 0.01 }, 0);
      const profile = await profiler.stop();
      await Deno.mkdir(`${ROOT}build/bench`, { recursive: true });
      await Deno.writeTextFile(`${ROOT}build/bench/server.cpuprofile`, JSON.stringify(profile));
      console.log(`Profiled run: ${fmt(point.rate)} infer/s (slowed by the profiler)`);
      return summarizeProfile(profile);
    });
  } finally {
    await slot.stop();
  }
}

async function main(args: string[]): Promise<void> {
  const flags = parseFlags(args);
  const info = await machine();
  for (const [k, v] of Object.entries(info)) console.log(`${k}: ${v}`);

  console.log(`\nBaseline: 'simple' in-process with onnxruntime-node, sequential ...`);
  const base = await baseline(Math.min(flags.durationS, 3), Math.min(flags.warmupS, 0.5));
  console.log(
    `  ${fmt(base.rate)} runs/s, p50 ${fmt(base.p50Us, 1)} µs, p99 ${fmt(base.p99Us, 1)} µs ` +
      `(session options ${JSON.stringify(base.options)})`,
  );

  const slot = new ServerSlot([], flags.serverArgs);
  const first = await slot.start();
  const points: Point[] = [];
  let ceiling: Point;
  let floor: Point;
  try {
    console.log(`\nServer on port ${first.port} (pid ${first.pid}); ${flags.durationS} s per point`);
    const short = {
      ...flags,
      durationS: Math.min(flags.durationS, 2),
      warmupS: Math.min(flags.warmupS, 0.5),
    };
    floor = await slot.run((server) => measure(server, "health", 1, short));
    console.log(
      `  HTTP floor (GET /v2/health/live, 1 connection): p50 ${fmt(floor.p50Us)} µs, p99 ${
        fmt(floor.p99Us)
      } µs`,
    );
    ceiling = await slot.run((server) => measure(server, "health", 16, short));
    console.log(
      `  load generator ceiling (GET /v2/health/live, 16 connections): ${fmt(ceiling.rate)} req/s, ` +
        `client CPU ${fmt(ceiling.clientCpuPct)}%, server CPU ${fmt(ceiling.serverCpuPct)}%`,
    );
    for (const format of ["json", "binary"] as const) {
      for (const c of flags.connections) {
        const p = await slot.run((server) => measure(server, format, c, flags));
        points.push(p);
        console.log(
          `  ${format.padEnd(6)} ${String(c).padStart(2)} conn: ${fmt(p.rate).padStart(7)} infer/s  p50 ${
            fmt(p.p50Us).padStart(5)
          } µs  p99 ${fmt(p.p99Us).padStart(6)} µs  server CPU ${fmt(p.serverCpuPct)}%  client CPU ${
            fmt(p.clientCpuPct)
          }%  other CPU ${
            fmt(p.otherCpuPct)
          }%  errors ${p.errors}  checked ${p.checked} (wrong ${p.mismatches})${
            p.firstError ? `  first error: ${p.firstError}` : ""
          }`,
        );
      }
    }
  } finally {
    await slot.stop();
  }
  const restarts = slot.restarts;
  console.log(`\ngRPC (ModelInfer, raw contents; @grpc/grpc-js client in its own process) ...`);
  const grpcPoints = await measureGrpc(flags);
  for (const p of grpcPoints) {
    points.push(p);
    console.log(
      `  grpc   ${String(p.connections).padStart(2)} in flight: ${fmt(p.rate).padStart(7)} infer/s  p50 ${
        fmt(p.p50Us).padStart(5)
      } µs  p99 ${
        fmt(p.p99Us).padStart(6)
      } µs  errors ${p.errors}  checked ${p.checked} (wrong ${p.mismatches})`,
    );
  }

  console.log(`\nBatching: MLP 784-1024-1024-10, 64 connections of single-sample binary requests ...`);
  const mlp = await measureMlp(flags.durationS, flags.warmupS);
  console.log(mlpMarkdown(mlp));

  let profile: ProfileSummary | undefined;
  if (flags.profile) {
    console.log(`\nProfiling the server under JSON load at 16 connections ...`);
    profile = await profileServer(flags);
    console.log(profileTable(profile, 20));
  }

  const at = (format: string, c: number) => points.find((p) => p.format === format && p.connections === c);
  const json1 = at("json", 1);
  const bin1 = at("binary", 1);
  const json16 = at("json", 16);
  const wrong = points.some((p) => p.mismatches > 0 || p.errors > 0);
  const added = json1 ? json1.p50Us - base.p50Us : NaN;
  const addedBin = bin1 ? bin1.p50Us - base.p50Us : NaN;
  const rateMet = json16 !== undefined && json16.rate >= TARGET_RATE && !wrong;
  const latencyMet = Number.isFinite(added) && added <= TARGET_ADDED_US && !wrong;

  const derived = [
    `| | JSON | binary |`,
    `|---|---:|---:|`,
    `| added latency at 1 connection (server p50 − baseline p50) | ${fmt(added)} µs | ${fmt(addedBin)} µs |`,
    `| of which the HTTP round trip alone (\`GET /v2/health/live\` p50 at 1 connection) | ${
      fmt(floor.p50Us)
    } µs | ${fmt(floor.p50Us)} µs |`,
    `| added latency beyond the HTTP round trip | ${fmt(added - floor.p50Us)} µs | ${
      fmt(addedBin - floor.p50Us)
    } µs |`,
    ...flags.connections.map((c) => {
      const j = at("json", c), b = at("binary", c);
      return `| throughput at ${c} connection(s) / baseline runs/s | ${
        fmt((j?.rate ?? NaN) / base.rate, 2)
      }× | ${fmt((b?.rate ?? NaN) / base.rate, 2)}× |`;
    }),
  ].join("\n");

  const grpc16 = at("grpc", 16);
  const bin16 = at("binary", 16);
  const grpcRatio = (grpc16?.rate ?? NaN) / (bin16?.rate ?? NaN);
  const targets = [
    `| target | measured | met |`,
    `|---|---:|---|`,
    `| gRPC ≥ 70% of HTTP binary throughput (16 in flight) | ${fmt(100 * grpcRatio)}% (${
      fmt(grpc16?.rate ?? NaN)
    } vs ${fmt(bin16?.rate ?? NaN)} infer/s) | ${grpcRatio >= 0.7 ? "yes" : "**no**"} |`,
    `| ≥ ${fmt(TARGET_RATE)} infer/s, \`simple\`, JSON, 16 connections | ${
      fmt(json16?.rate ?? NaN)
    } infer/s | ${rateMet ? "yes" : "**no**"} |`,
    `| ≤ ${TARGET_ADDED_US} µs added latency at 1 connection (JSON p50 − baseline p50) | ${fmt(added)} µs | ${
      latencyMet ? "yes" : "**no**"
    } |`,
  ].join("\n");

  console.log(`\n${table(points)}\n\n${derived}\n\n${targets}`);
  if (wrong) console.log("\nSome responses were errors or wrong: see the table");

  if (!flags.write) return;
  const md = `# Benchmark results

Written by \`./dinfer bench${args.length ? " " + args.join(" ") : ""}\` (\`bench/http_bench.ts\`).${
    flags.quick ? " **Quick run: 1 s per point, indicative only.**" : ""
  }

## Machine

${Object.entries(info).map(([k, v]) => `- ${k}: ${v}`).join("\n")}

## Method

- **Baseline**: the \`simple\` model (INT32 [1,16] + and −) in the benchmark's process with onnxruntime-node
  directly, session options as the server's backend makes them (\`sessionOptions\` in
  \`server/backends/onnxruntime.ts\`: \`${JSON.stringify(base.options)}\`); sequential \`session.run\` with
  new input tensors each run, ${Math.min(flags.durationS, 3)} s after ${Math.min(flags.warmupS, 0.5)} s of
  warm-up: **${fmt(base.rate)} runs/s, p50 ${fmt(base.p50Us, 1)} µs, p99 ${fmt(base.p99Us, 1)} µs**.
- **Server**: \`deno run -A main.ts --http-port=<free> --allow-grpc=false --allow-metrics=false
  --log-info=false\` in a child process (default repository \`examples/models\`), started fresh once.
- **Load** (\`bench/loadgen.ts\`): closed loop over raw TCP (\`Deno.connect\`), HTTP/1.1 keep-alive, N
  connections each with one request in flight, the same precomputed request bytes, responses parsed only
  for status and Content-Length; ${flags.warmupS} s warm-up not counted, then ${flags.durationS} s measured per
  point; latency is write-start to last-byte per request. The first response and every 1000th are checked
  against the expected outputs (JSON parsed, binary outputs decoded), so a wrong answer cannot pass as fast.
- **JSON**: \`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[...]}, ...]}\`, all outputs
  in JSON. **Binary**: \`Inference-Header-Content-Length\` body with both inputs as \`binary_data_size: 64\`
  and both outputs requested with \`binary_data: true\`.
- The load generator runs in the benchmark process, a different process from the server, on the same
  2 cores: the CPU columns show each process's user+system CPU over the measured window (100% = one core);
  "other CPU" is what every other process on the machine used meanwhile (other sessions share it);
  "server CPU µs/infer" is the server's CPU time per answered request, the figure least moved by a busy
  machine (at 100% of one core, 15,000 infer/s allows at most 67 µs).${
    restarts > 0
      ? `\n- Something outside stopped the server (SIGTERM/SIGINT, exit code 0) ${restarts} time(s) during this run;
  each interrupted point was measured again on a freshly started server.`
      : ""
  }
  The HTTP round trip alone (\`GET /v2/health/live\`, 1 connection, client and server together): p50
  **${fmt(floor.p50Us)} µs**, p99 ${fmt(floor.p99Us)} µs. The load generator's ceiling, against
  \`GET /v2/health/live\` at 16 connections: **${fmt(ceiling.rate)} req/s** (client CPU ${
    fmt(ceiling.clientCpuPct)
  }%, server CPU ${fmt(ceiling.serverCpuPct)}%).

## Results

${table(points)}
${
    points.some((p) => p.otherCpuPct > DISTURBED_PCT)
      ? `\n† Disturbed: other processes used more than ${DISTURBED_PCT}% CPU during the point; read it with care.\n`
      : ""
  }
${derived}

## Targets (from the issue)

${targets}
${wrong ? "\nSome responses were errors or wrong (see the table): the targets count as not met.\n" : ""}
${mlpMarkdown(mlp)}
## gRPC

The gRPC points use \`bench/grpc_load.ts\`: ModelInfer with raw contents through an \`@grpc/grpc-js\` client
in a process of its own (one channel, N calls in flight). Both ends run grpc-js over Deno's \`node:http2\`
layer, whose per-call cost (HTTP/2 framing in JavaScript, stream objects, callbacks) is several times that of
\`Deno.serve\` for HTTP/1.1: a bare ServerLive call costs about as much as a whole HTTP inference. The
client takes its share of the same two cores. The channel stays open for all points because Deno 2.9.6's
\`node:http2\` can abort the server process inside nghttp2 when a grpc-js client closes its connection
(\`find_stream_on_goaway_func: Assertion 'stream->closed_next == NULL'\` or \`free(): invalid pointer\`; Deno
issue 36788). Python grpcio clients (tritonclient) have not triggered it in the test suite.
${
    profile
      ? `
## Where the server spends its time (JSON, 16 connections)

Server started with \`--inspect\`; a CPU profile sampled every 100 µs over the measured window through the
inspector (\`bench/cpu_profile.ts\`), written to \`build/bench/server.cpuprofile\` (open it in Chrome DevTools).

${profileTable(profile)}
`
      : ""
  }`;
  await Deno.writeTextFile(RESULTS, md);
  console.log(`\nWrote ${RESULTS}`);
}

if (import.meta.main) {
  try {
    await main(Deno.args);
  } catch (err) {
    console.error(`bench: ${err instanceof Error ? err.message : String(err)}`);
    Deno.exit(1);
  }
}
