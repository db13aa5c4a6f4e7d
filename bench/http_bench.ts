/**
 * The HTTP benchmark (`./dinfer bench`): the `simple` model in-process with onnxruntime-node as the
 * baseline, then the real server in a child process under closed-loop load (JSON and binary tensor data,
 * several connection counts). Prints a table and writes `bench/RESULTS.md`.
 *
 * When `h2load` (Debian package `nghttp2-client`) is on PATH, gRPC and HTTP binary are also measured with it, an
 * efficient client in C, against a fresh server of their own (`bench/h2load.ts`). When `wrk` (Debian package `wrk`) is
 * on PATH, the comparison with the hand-written peer is measured with it as the client too (`bench/wrk.ts`).
 *
 * Flags: `--duration=<s>` measured seconds per point (default 5), `--warmup=<s>` (default 1),
 * `--connections=1,8,16,32`, `--quick` (1 s per point), `--profile` (also profile the server under JSON load
 * at 16 connections and add the top functions to the results), `--profile-grpc` (profile the server under
 * h2load's gRPC load at 16 streams), `--no-h2load` (skip the h2load points as if h2load were absent),
 * `--peers-only` (only dinfer beside the hand-written peer and the floor, printed), `--no-write` (print only), `--out=<path>` (write there instead of `bench/RESULTS.md`),
 * `--server-arg=<arg>` (repeatable: one more server flag, e.g. `--server-arg=--model-repository=/tmp/models`).
 * @module
 */

import * as ort from "onnxruntime-node";
import { fileURLToPath } from "node:url";
import { sessionOptions } from "../server/backends/onnxruntime.ts";
import { readConfigFile, toModelConfig } from "../server/repository/config.ts";
import { freePort, httpRequest, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";
import { type ChildServer, startChildServer } from "./child_server.ts";
import { type ProfileSummary, startProfiler, summarizeProfile } from "./cpu_profile.ts";
import { cpuSeconds, machineBusySeconds, waitQuiet } from "./cpu_usage.ts";
import { measureMlp, mlpMarkdown } from "./mlp_bench.ts";
import { binaryBody, inferRequest, INPUT0, INPUT1, jsonBody, OUTPUT0, OUTPUT1 } from "./simple_requests.ts";
import { findH2load, grpcInferArgs, type H2loadResult, h2loadVersion, runH2load } from "./h2load.ts";
import { grpcFrame, grpcInferOnce, simpleInferRequest } from "./grpc_simple.ts";
import { median } from "./stats.ts";
import { findWrk, runWrk } from "./wrk.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const MODEL_DIR = `${ROOT}examples/models/simple`;
const RESULTS = `${ROOT}bench/RESULTS.md`;
/** The issue's ratio targets: dinfer against the hand-written peer (simple, JSON), gRPC against HTTP binary. */
const TARGET_PEER_RATIO = 1.0;
const TARGET_GRPC_RATIO = 1.0;
const H2LOAD_MISSING = "h2load is not on PATH: the gRPC and HTTP binary points through h2load were skipped " +
  "(install: `apt-get install nghttp2-client`).";
const H2LOAD_SKIPPED = "The gRPC and HTTP binary points through h2load were skipped (`--no-h2load`).";

interface Flags {
  durationS: number;
  warmupS: number;
  connections: number[];
  quick: boolean;
  /** Only the comparison with the hand-written peer and the floor (printed, not written). */
  peersOnly: boolean;
  profile: boolean;
  profileGrpc: boolean;
  h2load: boolean;
  write: boolean;
  out: string;
  serverArgs: string[];
}

function parseFlags(args: string[]): Flags {
  const flags: Flags = {
    durationS: 5,
    warmupS: 1,
    connections: [1, 8, 16, 32],
    quick: false,
    peersOnly: false,
    profile: false,
    profileGrpc: false,
    h2load: true,
    write: true,
    out: RESULTS,
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
    else if (k === "--peers-only") flags.peersOnly = true;
    else if (k === "--quick") {
      flags.quick = true;
      flags.durationS = 1;
      flags.warmupS = 0.3;
    } else if (k === "--profile") flags.profile = true;
    else if (k === "--profile-grpc") flags.profileGrpc = true;
    else if (k === "--no-h2load") flags.h2load = false;
    else if (k === "--no-write") flags.write = false;
    else if (k === "--out" && v) flags.out = v;
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

const EXPECTED: Record<string, Int32Array> = { OUTPUT0, OUTPUT1 };

const decoder = new TextDecoder();

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

export function checkJson(r: SampledResponse): string | undefined {
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
  /**
   * For information: the same loop with `await setTimeout(0)` before each run (the thread sleeps between runs,
   * as a server at 1 connection does), timing the run alone.
   */
  idle: { runs: number; p50Us: number; p99Us: number };
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
    // The idle-gap loop, after the baseline so that the baseline is measured as before.
    const idleLat: number[] = [];
    const idleWarmEnd = performance.now() + warmupS * 1000;
    while (performance.now() < idleWarmEnd) {
      await new Promise((r) => setTimeout(r, 0));
      await once();
    }
    const idleEnd = performance.now() + durationS * 1000;
    while (performance.now() < idleEnd) {
      await new Promise((r) => setTimeout(r, 0));
      const t0 = performance.now();
      await once();
      idleLat.push((performance.now() - t0) * 1000);
    }
    const idleSorted = Float64Array.from(idleLat).sort();
    return {
      runs: lat.length,
      rate: lat.length / ((now - start) / 1000),
      p50Us: sorted[Math.floor(sorted.length * 0.5)]!,
      p99Us: sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.99) - 1)]!,
      options,
      idle: {
        runs: idleLat.length,
        p50Us: idleSorted[Math.floor(idleSorted.length * 0.5)] ?? NaN,
        p99Us: idleSorted[Math.min(idleSorted.length - 1, Math.ceil(idleSorted.length * 0.99) - 1)] ?? NaN,
      },
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

/** Other processes' CPU above which a point is marked as disturbed. */
const DISTURBED_PCT = 25;

interface Point extends LoadResult {
  format: string;
  serverCpuPct: number;
  clientCpuPct: number;
  /** CPU used by every other process over the window: a busy machine makes the point unreliable. */
  otherCpuPct: number;
  /** The server's compute_infer time per success over the point, warm-up included (statistics delta). */
  computeInferUs?: number;
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
  if (format === "json" || format === "binary") {
    request = inferRequest(format, host);
    check = format === "json" ? checkJson : checkBinary;
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
// gRPC and HTTP binary through h2load

/** What the server's statistics say about `simple` (GET /v2/models/simple/stats). */
interface ModelStats {
  success: number;
  fail: number;
  computeInferNs: number;
}

async function modelStats(port: number): Promise<ModelStats> {
  // A client of its own, closed at once: no idle keep-alive connection stays open during a point.
  using client = Deno.createHttpClient({});
  const res = await fetch(`http://127.0.0.1:${port}/v2/models/simple/stats`, { client });
  const text = await res.text();
  if (res.status !== 200) {
    throw new Error(`Cannot read the statistics of 'simple': status ${res.status}: ${text}`);
  }
  const body = JSON.parse(text) as {
    model_stats: { inference_stats: Record<string, { count: number; ns: number }> }[];
  };
  const stats = body.model_stats[0]?.inference_stats;
  if (!stats) throw new Error(`Cannot read the statistics of 'simple': no model_stats in ${text}`);
  return {
    success: stats.success?.count ?? NaN,
    fail: stats.fail?.count ?? NaN,
    computeInferNs: stats.compute_infer?.ns ?? NaN,
  };
}

/** The server's mean compute_infer time per successful request between two statistics, in microseconds. */
function computeInferUs(before: ModelStats, after: ModelStats): number {
  return (after.computeInferNs - before.computeInferNs) / (after.success - before.success) / 1000;
}

/** One h2load point. */
interface H2Point {
  protocol: "grpc" | "binary";
  /** gRPC: streams in flight on one connection; HTTP: connections, one request each. */
  inFlight: number;
  run: H2loadResult;
  /** Succeeded requests per second of h2load's run. */
  rate: number;
  serverCpuPct: number;
  serverCpuUsPerInfer: number;
  clientCpuPct: number;
  otherCpuPct: number;
  /** Successes and failures the server counted over the run (statistics delta). */
  serverSuccess: number;
  serverFail: number;
  computeInferUs: number;
  /** Why the point is wrong, else undefined. */
  wrong?: string;
}

/** The request bodies h2load sends, in files. */
interface H2Bodies {
  grpc: string;
  binary: string;
  headerLength: number;
  /** The encoded ModelInferRequest inside the gRPC frame. */
  message: Uint8Array;
}

async function writeBodies(dir: string): Promise<H2Bodies> {
  const message = simpleInferRequest(INPUT0, INPUT1);
  const { body, headerLength } = binaryBody();
  await Deno.writeFile(`${dir}/grpc.bin`, grpcFrame(message));
  await Deno.writeFile(`${dir}/binary.bin`, body);
  return { grpc: `${dir}/grpc.bin`, binary: `${dir}/binary.bin`, headerLength, message };
}

function h2loadArgs(
  protocol: "grpc" | "binary",
  inFlight: number,
  ports: { http: number; grpc: number },
  bodies: H2Bodies,
): string[] {
  return protocol === "grpc" ? grpcInferArgs(ports.grpc, bodies.grpc, inFlight) : [
    ...["--h1", "-c", String(inFlight), "-m", "1", "-d", bodies.binary],
    ...["-H", "content-type: application/octet-stream"],
    ...["-H", `inference-header-content-length: ${bodies.headerLength}`],
    `http://127.0.0.1:${ports.http}/v2/models/simple/infer`,
  ];
}

/** h2load's -D argument for a duration in seconds. */
function h2loadDuration(seconds: number): string {
  return `${Math.max(1, Math.round(seconds * 1000))}ms`;
}

/** Checks one real gRPC call with the request h2load sends: the outputs are decoded and compared. */
async function checkGrpcOnce(grpcPort: number, message: Uint8Array): Promise<string | undefined> {
  let outputs;
  try {
    outputs = await grpcInferOnce(`127.0.0.1:${grpcPort}`, message);
  } catch (err) {
    return `the call failed: ${err instanceof Error ? err.message : String(err)}`;
  }
  if (outputs.length !== 2) return `${outputs.length} outputs, expected 2`;
  for (const o of outputs) {
    const values = new Int32Array(new Uint8Array(o.contents).buffer);
    const why = sameShape(o) ?? compare(o.name, values);
    if (why) return why;
  }
  return undefined;
}

/** Checks one HTTP request with the body h2load sends: the binary outputs are decoded and compared. */
async function checkBinaryOnce(httpPort: number, bodies: H2Bodies): Promise<string | undefined> {
  using client = Deno.createHttpClient({});
  const res = await fetch(`http://127.0.0.1:${httpPort}/v2/models/simple/infer`, {
    client,
    method: "POST",
    headers: {
      "content-type": "application/octet-stream",
      "inference-header-content-length": String(bodies.headerLength),
    },
    body: await Deno.readFile(bodies.binary),
  });
  const body = new Uint8Array(await res.arrayBuffer());
  const headers = [...res.headers].map(([k, v]) => `\r\n${k.toLowerCase()}: ${v}`).join("");
  return checkBinary({ status: res.status, headers, body });
}

/** Fails the point the way `measure` does when the server exited during an h2load run. */
async function checkServerAlive(server: ChildServer, what: string, cause?: unknown): Promise<void> {
  await new Promise((r) => setTimeout(r, cause ? 200 : 0));
  if (server.exitCode() === 0) throw new StoppedFromOutside(server.log());
  if (server.exitCode() !== undefined) {
    throw new Error(`The server exited during ${what}: ${server.log()}`);
  }
  if (cause) throw cause;
}

async function h2loadPoint(
  server: ChildServer,
  grpcPort: number,
  point: { protocol: "grpc" | "binary"; inFlight: number; bodies: H2Bodies; h2load: string },
  flags: Flags,
): Promise<H2Point> {
  const { protocol, inFlight, bodies, h2load } = point;
  const what = `the h2load ${protocol} run at ${inFlight} in flight`;
  const args = h2loadArgs(protocol, inFlight, { http: server.port, grpc: grpcPort }, bodies);
  await waitQuiet(flags.quick ? 1 : 3);
  let warm: H2loadResult;
  try {
    warm = await runH2load(["-D", h2loadDuration(flags.warmupS), ...args], { path: h2load });
  } catch (err) {
    await checkServerAlive(server, what, err);
    throw err;
  }
  await checkServerAlive(server, what);
  // The measured run sends a fixed number of requests (about the duration at the warm-up's rate) so that
  // the server's success count can be matched exactly: with -D, h2load does not count its warm-up and
  // leaves requests in flight at the end, which the server still answers.
  const per = protocol === "binary" ? inFlight : 1;
  const warmRate = warm.succeeded / warm.seconds;
  const estimate = Number.isFinite(warmRate) && warmRate > 0 ? warmRate * flags.durationS : 1000;
  const requests = Math.ceil(Math.max(inFlight, estimate) / per) * per;
  const before = await modelStats(server.port);
  const s0 = cpuSeconds(server.pid), c0 = cpuSeconds("self"), m0 = machineBusySeconds();
  let run: H2loadResult;
  try {
    run = await runH2load(["-n", String(requests), ...args], {
      path: h2load,
      timeoutS: 60 + 20 * flags.durationS,
    });
  } catch (err) {
    await checkServerAlive(server, what, err);
    throw err;
  }
  const s1 = cpuSeconds(server.pid), c1 = cpuSeconds("self"), m1 = machineBusySeconds();
  await checkServerAlive(server, what);
  const after = await modelStats(server.port);
  const serverSuccess = after.success - before.success;
  const serverFail = after.fail - before.fail;
  const problems: string[] = [];
  const failed = run.failed + run.errored + run.timeout;
  if (failed > 0 || run.succeeded !== requests) {
    problems.push(`h2load: ${run.succeeded} of ${requests} succeeded, ${failed} failed or errored`);
  }
  if (serverSuccess !== run.succeeded) {
    problems.push(`the server counted ${serverSuccess} successes, h2load ${run.succeeded}`);
  }
  if (serverFail !== 0) problems.push(`the server counted ${serverFail} failures`);
  const serverCpu = s1 - s0;
  return {
    protocol,
    inFlight,
    run,
    rate: run.succeeded / run.seconds,
    serverCpuPct: (100 * serverCpu) / run.wallSeconds,
    serverCpuUsPerInfer: (1e6 * serverCpu) / run.succeeded,
    clientCpuPct: (100 * run.cpuSeconds) / run.wallSeconds,
    otherCpuPct: Math.max(0, (100 * (m1 - m0 - serverCpu - (c1 - c0) - run.cpuSeconds)) / run.wallSeconds),
    serverSuccess,
    serverFail,
    computeInferUs: computeInferUs(before, after),
    ...(problems.length ? { wrong: problems.join("; ") } : {}),
  };
}

/** The h2load points and the check calls made before them. */
interface H2Run {
  points: H2Point[];
  /** The check calls: what was checked and the answer ("right" or why it was wrong). */
  checks: { what: string; wrong?: string }[];
  restarts: number;
}

/**
 * HTTP binary and gRPC through h2load, against one fresh server with gRPC on: first one checked call of each
 * (the same bytes h2load sends), then for each in-flight count a warm-up run and a measured run.
 */
async function measureH2load(flags: Flags, h2load: string): Promise<H2Run> {
  const grpcPort = freePort();
  const slot = new ServerSlot([], [`--grpc-port=${grpcPort}`, ...flags.serverArgs]);
  const dir = await Deno.makeTempDir({ prefix: "dinfer-bench-h2load-" });
  try {
    const bodies = await writeBodies(dir);
    const first = await slot.start();
    try {
      console.log(`  server on ports ${first.port} (HTTP) and ${grpcPort} (gRPC), pid ${first.pid}`);
      const grpcWrong = await slot.run(async (server) => {
        const why = await checkGrpcOnce(grpcPort, bodies.message);
        await checkServerAlive(server, "the gRPC check call");
        return why;
      });
      const binaryWrong = await slot.run((server) => checkBinaryOnce(server.port, bodies));
      const checks = [
        { what: "gRPC (@grpc/grpc-js, one ModelInfer call)", ...(grpcWrong ? { wrong: grpcWrong } : {}) },
        { what: "HTTP binary (fetch, one request)", ...(binaryWrong ? { wrong: binaryWrong } : {}) },
      ];
      for (const c of checks) {
        console.log(`  check call, ${c.what}: ${c.wrong ? `wrong: ${c.wrong}` : "right"}`);
      }
      const points: H2Point[] = [];
      for (const protocol of ["binary", "grpc"] as const) {
        const checkWrong = protocol === "grpc" ? grpcWrong : binaryWrong;
        for (const inFlight of flags.connections) {
          const p = await slot.run((server) =>
            h2loadPoint(server, grpcPort, { protocol, inFlight, bodies, h2load }, flags)
          );
          if (checkWrong) p.wrong = `the check call was wrong: ${checkWrong}${p.wrong ? `; ${p.wrong}` : ""}`;
          points.push(p);
          console.log(
            `  ${protocol.padEnd(6)} ${String(inFlight).padStart(2)} in flight: ${
              fmt(p.rate).padStart(7)
            } infer/s  mean ${fmt(p.run.meanUs).padStart(5)} µs  server CPU ${fmt(p.serverCpuPct)}% (${
              fmt(p.serverCpuUsPerInfer)
            } µs/infer)  h2load CPU ${fmt(p.clientCpuPct)}%  other CPU ${
              fmt(p.otherCpuPct)
            }%  succeeded ${p.run.succeeded}, server counted ${p.serverSuccess}${
              p.wrong ? `  WRONG: ${p.wrong}` : ""
            }`,
          );
        }
      }
      return { points, checks, restarts: slot.restarts };
    } finally {
      await slot.stop();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** Profiles the server's main thread under h2load's gRPC load (16 streams on one connection). */
async function profileGrpcServer(
  flags: Flags,
  h2load: string,
): Promise<{ summary: ProfileSummary; rate: number }> {
  const inspector = `127.0.0.1:${freePort()}`;
  const grpcPort = freePort();
  const slot = new ServerSlot([`--inspect=${inspector}`], [`--grpc-port=${grpcPort}`, ...flags.serverArgs]);
  const dir = await Deno.makeTempDir({ prefix: "dinfer-bench-h2load-" });
  try {
    const bodies = await writeBodies(dir);
    await slot.start();
    try {
      return await slot.run(async (server) => {
        const args = h2loadArgs("grpc", 16, { http: server.port, grpc: grpcPort }, bodies);
        // Warm up without the profiler, then profile the measured run only.
        await runH2load(["-D", h2loadDuration(flags.warmupS), ...args], { path: h2load });
        await waitQuiet(3);
        const profiler = await startProfiler(inspector, { intervalUs: 100 });
        const run = await runH2load(["-D", h2loadDuration(flags.durationS), ...args], { path: h2load });
        const profile = await profiler.stop();
        await checkServerAlive(server, "the profiled gRPC run");
        await Deno.mkdir(`${ROOT}build/bench`, { recursive: true });
        await Deno.writeTextFile(`${ROOT}build/bench/server-grpc.cpuprofile`, JSON.stringify(profile));
        const rate = run.succeeded / run.seconds;
        console.log(`Profiled run: ${fmt(rate)} infer/s (slowed by the profiler)`);
        return { summary: summarizeProfile(profile), rate };
      });
    } finally {
      await slot.stop();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function h2loadTable(points: H2Point[]): string {
  const rows = [
    "| protocol | in flight | run s | infer/s | mean µs | max µs | server CPU | server CPU µs/infer | h2load CPU " +
    "| other CPU | failed or errored | succeeded (h2load / server) | wrong |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
  ];
  for (const p of points) {
    const cells = [
      (p.protocol === "grpc" ? "grpc" : "binary (HTTP/1.1)") + (p.otherCpuPct > DISTURBED_PCT ? " †" : ""),
      String(p.inFlight),
      fmt(p.run.seconds, 2),
      fmt(p.rate),
      fmt(p.run.meanUs),
      fmt(p.run.maxUs),
      `${fmt(p.serverCpuPct)}%`,
      fmt(p.serverCpuUsPerInfer),
      `${fmt(p.clientCpuPct)}%`,
      `${fmt(p.otherCpuPct)}%`,
      String(p.run.failed + p.run.errored + p.run.timeout),
      `${fmt(p.run.succeeded)} / ${fmt(p.serverSuccess)}`,
      p.wrong ? `**${p.wrong}**` : "no",
    ];
    rows.push(`| ${cells.join(" | ")} |`);
  }
  return rows.join("\n");
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

/** Which part of the stack a profile row belongs to (by its file, as summarizeProfile names files). */
function origin(file: string): string {
  if (file === "(garbage collector)") return "V8 garbage collector";
  if (file.includes("@grpc/grpc-js")) return "@grpc/grpc-js (JavaScript)";
  if (file.includes("protobufjs")) return "protobufjs (JavaScript)";
  if (file.includes("onnxruntime")) return "ONNX Runtime (the model run and its binding)";
  if (file.startsWith("server/")) return "dinfer's own code (server/)";
  if (file.startsWith("ext:deno_node") || file.startsWith("node:")) {
    return "Deno's Node layer in JavaScript (node:http2, streams, buffers, events)";
  }
  if (file.startsWith("ext:")) return "Deno's runtime in JavaScript (event loop, timers)";
  return "native code called from JavaScript (socket writes, nghttp2, other ops)";
}

/** Self time summed by part of the stack, largest first. */
export function originTable(summary: ProfileSummary): string {
  const by = new Map<string, number>();
  for (const f of summary.files) by.set(origin(f.name), (by.get(origin(f.name)) ?? 0) + f.selfPct);
  const rows = ["| part of the stack | self % of busy time |", "|---|---:|"];
  for (const [k, v] of [...by.entries()].sort((a, b) => b[1] - a[1])) rows.push(`| ${k} | ${fmt(v, 1)} |`);
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

/** dinfer beside the stack's floor (bench/floor_server.ts) at 1 connection, JSON, in alternating rounds. */
interface FloorComparison {
  rounds: number;
  roundS: number;
  /** p50 of each round, in microseconds. */
  dinferP50s: number[];
  floorP50s: number[];
  /** Server CPU per answered request of each server, over all rounds. */
  dinferCpuUs: number;
  floorCpuUs: number;
  dinferP50: number;
  floorP50: number;
  wrong: boolean;
}

/**
 * Measures dinfer and the floor server one after the other, round after round (both started fresh, idle while
 * the other is measured), so that both see the same state of a shared machine; the medians are compared.
 */
async function measureFloor(flags: Flags): Promise<FloorComparison> {
  const rounds = flags.quick ? 2 : 5;
  const roundS = flags.quick ? 1 : 2;
  const dinfer = await startChildServer([], flags.serverArgs);
  const floor = await startChildServer([], [], { script: "bench/floor_server.ts" });
  const result: FloorComparison = {
    rounds,
    roundS,
    dinferP50s: [],
    floorP50s: [],
    dinferCpuUs: 0,
    floorCpuUs: 0,
    dinferP50: NaN,
    floorP50: NaN,
    wrong: false,
  };
  const cpu = { dinfer: 0, floor: 0 };
  const count = { dinfer: 0, floor: 0 };
  try {
    const roundFlags = { ...flags, durationS: roundS, warmupS: Math.min(flags.warmupS, 0.5) };
    for (let r = 0; r < rounds; r++) {
      for (const [name, server] of [["dinfer", dinfer], ["floor", floor]] as const) {
        const p = await measure(server, "json", 1, roundFlags, r === 0 ? (flags.quick ? 1 : 3) : 0);
        if (p.errors > 0 || p.mismatches > 0) result.wrong = true;
        (name === "dinfer" ? result.dinferP50s : result.floorP50s).push(p.p50Us);
        cpu[name] += (p.serverCpuPct / 100) * roundS;
        count[name] += p.count;
      }
    }
  } finally {
    await dinfer.stop();
    await floor.stop();
  }
  result.dinferCpuUs = (1e6 * cpu.dinfer) / count.dinfer;
  result.floorCpuUs = (1e6 * cpu.floor) / count.floor;
  result.dinferP50 = median(result.dinferP50s);
  result.floorP50 = median(result.floorP50s);
  return result;
}

/**
 * The servers of the peer comparison: dinfer with Triton's own `simple` config, dinfer with the bundled one, dinfer
 * with two HTTP threads, the peer, the floor.
 */
type PeerName = "dinferT" | "dinfer" | "dinfer2" | "peer" | "floor";
const PEER_NAMES: readonly PeerName[] = ["dinferT", "dinfer", "dinfer2", "peer", "floor"];

/**
 * A repository holding `simple` with the config of Triton's own example (max_batch_size 8, no dynamic batching,
 * ONNX Runtime's default threads): the bundled config adds `dynamic_batching { }` and one intra-op thread.
 * @returns the repository's path (the caller removes it)
 */
export async function tritonSimpleRepository(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-bench-simple-" });
  const from = `${ROOT}examples/models/simple`;
  await Deno.mkdir(`${dir}/simple/1`, { recursive: true });
  await Deno.copyFile(`${from}/1/model.onnx`, `${dir}/simple/1/model.onnx`);
  const config = (await Deno.readTextFile(`${from}/config.pbtxt`)).split("\n")
    .filter((l) => !l.startsWith("dynamic_batching") && !l.includes("intra_op_thread_count"))
    .join("\n");
  await Deno.writeTextFile(`${dir}/simple/config.pbtxt`, config);
  return dir;
}

/** dinfer beside the hand-written peer server and the stack's floor, JSON, at 1 and 16 connections. */
interface PeerComparison {
  rounds: number;
  roundS: number;
  /** Per connection count, per server: the throughput and p50 of each round, and CPU µs per request. */
  points: {
    connections: number;
    server: PeerName;
    rates: number[];
    p50s: number[];
    cpuUs: number;
  }[];
  /** The same with wrk as the client (Triton's config, the peer and the floor), when wrk is on PATH. */
  wrk?: PeerComparison["points"];
  wrong: boolean;
}

/** The servers measured again with wrk as the client. */
const WRK_PEERS: readonly PeerName[] = ["dinferT", "peer", "floor"];

/** One wrk point of the comparison: a warm-up run, then the measured one with the server's CPU over it. */
async function measureWrk(
  wrk: string,
  server: ChildServer,
  connections: number,
  seconds: number,
  warmupS: number,
): Promise<{ rate: number; p50Us: number; cpuS: number; count: number; wrong: number }> {
  const url = `http://127.0.0.1:${server.port}/v2/models/simple/infer`;
  const body = new TextDecoder().decode(jsonBody());
  const expected = [OUTPUT0, OUTPUT1].map((o) => `[${[...o].join(",")}]`);
  await runWrk(wrk, url, body, expected, connections, warmupS);
  const c0 = cpuSeconds(server.pid);
  const r = await runWrk(wrk, url, body, expected, connections, seconds);
  return { ...r, cpuS: cpuSeconds(server.pid) - c0 };
}

/**
 * Measures dinfer, the hand-written peer (`bench/peer_onnx_server.ts`: Deno.serve, JSON.parse, the public
 * `await session.run()`, Response.json) and the floor one after the other, round after round, at 1 and at 16
 * connections, so that all three see the same state of a shared machine; medians are compared.
 */
async function measurePeers(flags: Flags): Promise<PeerComparison> {
  const rounds = flags.quick ? 2 : 5;
  const roundS = flags.quick ? 1 : 3;
  const tritonRepo = await tritonSimpleRepository();
  const servers = {
    dinferT: await startChildServer([], [...flags.serverArgs, `--model-repository=${tritonRepo}`]),
    dinfer: await startChildServer([], flags.serverArgs),
    dinfer2: await startChildServer([], [...flags.serverArgs, "--http-thread-count=2"]),
    peer: await startChildServer([], [], { script: "bench/peer_onnx_server.ts" }),
    floor: await startChildServer([], [], { script: "bench/floor_server.ts" }),
  };
  const wrk = findWrk();
  const result: PeerComparison = { rounds, roundS, points: [], wrong: false, wrk: wrk ? [] : undefined };
  const acc = new Map<string, { rates: number[]; p50s: number[]; cpuS: number; count: number }>();
  const add = (key: string, p: { rate: number; p50Us: number; count: number }, cpuS: number) => {
    const a = acc.get(key) ?? { rates: [], p50s: [], cpuS: 0, count: 0 };
    a.rates.push(p.rate);
    a.p50s.push(p.p50Us);
    a.cpuS += cpuS;
    a.count += p.count;
    acc.set(key, a);
  };
  try {
    const roundFlags = { ...flags, durationS: roundS, warmupS: Math.min(flags.warmupS, 0.5) };
    for (let r = 0; r < rounds; r++) {
      for (const connections of [1, 16]) {
        // The order moves along one server every round, so that none is always measured first or last while the
        // machine's speed drifts.
        const at = r % PEER_NAMES.length;
        for (const name of [...PEER_NAMES.slice(at), ...PEER_NAMES.slice(0, at)]) {
          const p = await measure(servers[name], "json", connections, roundFlags, r === 0 ? 1 : 0);
          if (p.errors > 0 || p.mismatches > 0) result.wrong = true;
          add(`${name}/${connections}`, p, (p.serverCpuPct / 100) * roundS);
        }
        if (!wrk) continue;
        const wat = r % WRK_PEERS.length;
        for (const name of [...WRK_PEERS.slice(wat), ...WRK_PEERS.slice(0, wat)]) {
          const p = await measureWrk(wrk, servers[name], connections, roundS, roundFlags.warmupS);
          if (p.wrong > 0) result.wrong = true;
          add(`wrk:${name}/${connections}`, p, p.cpuS);
        }
      }
    }
  } finally {
    for (const s of Object.values(servers)) await s.stop();
    await Deno.remove(tritonRepo, { recursive: true });
  }
  for (const connections of [1, 16]) {
    for (const server of PEER_NAMES) {
      const a = acc.get(`${server}/${connections}`)!;
      result.points.push({
        connections,
        server,
        rates: a.rates,
        p50s: a.p50s,
        cpuUs: (1e6 * a.cpuS) / a.count,
      });
      const w = acc.get(`wrk:${server}/${connections}`);
      if (w) {
        result.wrk?.push({
          connections,
          server,
          rates: w.rates,
          p50s: w.p50s,
          cpuUs: (1e6 * w.cpuS) / w.count,
        });
      }
    }
  }
  return result;
}

/** What the garbage collector cost a gRPC call, and what changed it (measured by hand, not by this run). */
const GRPC_GARBAGE =
  `**Garbage** (2026-11-27, \`--v8-flags=--trace-gc\` and V8's sampling heap profiler, h2load at 16 streams):
Deno's \`node:http2\` keeps closed streams past the young generation's collections, and grpc-js's listeners on
a stream kept the whole call with it: 9.2 KB a call were promoted to the old generation, and scavenges took
10% of the main thread (the fixed-bytes floor promoted as much; \`Deno.serve\` promotes nothing). The stream
now drops its listeners once closed (\`server/frontends/grpc/framing.ts\`): 2.8–3.1 KB a call (the stream's own
objects) and 3.4–3.8%; V8's worker threads still spend about 18 µs a call on the full collections that
follow. A response's protobuf fields are encoded once per form of response (4.2 → 1.15 µs a call). With both,
dinfer's gRPC reached 0.81 (one connection of 16 streams) and 0.95 (4 × 4) of the floor's rate, against 0.63
and 0.63 before (\`bench/grpc_floor.ts\`, 2026-11-27).`;

/** What kept closed gRPC streams, and the change that lets them go (measured by hand, not by this run). */
const GRPC_CLOSED_STREAMS =
  `**What kept closed streams** (2026-11-28, by hand). A bare \`node:http2\` server that registered each stream with
a \`FinalizationRegistry\` saw them freed only at full collections, in bursts, never by a scavenge. Deno wraps a
stream's native handle in a JavaScript object backed by its C++ heap, and such objects outlive every scavenge
(\`new URLPattern()\` objects, also wrapped, each with 600 B of plain objects attached, had the 600 B promoted; a
plain object with the same attachment had nothing promoted); the handle points back at its stream (\`owner\` and
a symbol-keyed owner). With those two properties set to undefined once the stream closed, the streams were
freed continuously between full collections; clearing the handle's other properties (its write functions)
changed nothing. dinfer now does this on every gRPC call's \`close\` (\`framing.ts\`). \`bench/promotion.ts\`
(simple-grpc, fresh servers): 190–380 B per call promoted and scavenges at 1.3–1.6% of the main thread in about
one server out of three to four; the others still read 1.7–2.1 KB and 3–4%. Which of the two a server showed did
not depend on the handle's other properties: with its write functions and \`onread\` replaced as well (they close
over the stream's state and its session), 2 of 4 servers read 260–560 B, as did 2 of 4 without, in alternation;
the low readings went with the faster runs (13–14k calls/s against 9–13k). With V8's page promotion off
(\`--v8-flags=--no-page-promotion\`: a scavenge then copies a mostly live young page instead of moving it whole
into the old generation) four servers of four read 190–360 B at first; later, with the machine slower (7–9k
calls/s), three of three read 1.6–2.3 KB with it off and two of two without: which level a server keeps goes
with how fast the machine runs, not with page promotion. **What the release does to
throughput is below what this machine can tell apart with confidence**: \`bench/ab.ts\` against 8c04d78 (server CPU per call, B over A) read
0.93, 0.91, 0.95, 0.92 and 1.03 (\`simple-grpc\`, 16 streams; 3–6 rounds of 3–4 pairs) and 0.87 (\`python-grpc\`,
8), but four A/A runs of the same server against itself read 0.94, 0.95, 1.03 and 0.98, so the gain is a few
percent at most; eight alternating pairs of fresh servers measured one at a time (main thread and V8's worker
threads per call) had the machine's speed move 1.4× between runs and showed no difference either way. Page promotion off
against on, the same way: 0.96 (\`simple-grpc\`), 0.99 (\`simple-json\`), 0.96 (\`mlp\`), 0.93 (\`python-json\`, 1
connection), also within that noise; the flag is not set (it would have to be on every way the server is
started: V8 ignores it when set from inside the process).`;

function peersMarkdown(cmp: PeerComparison): string {
  const get = (server: string, c: number) =>
    cmp.points.find((p) => p.server === server && p.connections === c)!;
  const rows: string[] = [];
  for (const c of [1, 16]) {
    const p = get("peer", c);
    const f = get("floor", c);
    for (
      const [name, label] of [
        ["dinferT", "dinfer, Triton's config"],
        ["dinfer", "dinfer, bundled config"],
        ["dinfer2", "dinfer, bundled config, 2 HTTP threads"],
      ] as const
    ) {
      const d = get(name, c);
      const ratio = median(d.rates) / median(p.rates);
      const rates = (x: { rates: number[] }) =>
        `${fmt(median(x.rates))} [${x.rates.map((v) => fmt(v)).join(" ")}]`;
      const p50s = [d, p, f].map((x) => fmt(median(x.p50s))).join(" / ");
      const cpus = [d, p, f].map((x) => fmt(x.cpuUs)).join(" / ");
      rows.push(
        `| ${c} | ${label} | ${rates(d)} | ${rates(p)} | **${ratio.toFixed(2)}** [${
          d.rates.map((v, i) => (v / p.rates[i]!).toFixed(2)).join(" ")
        }] | ${fmt(median(f.rates))} | ${p50s} | ${cpus} |`,
      );
    }
  }
  return `## dinfer beside a hand-written server (simple, JSON)

The peer is what a user would write instead (\`bench/peer_onnx_server.ts\`: \`Deno.serve\`, \`JSON.parse\`,
onnxruntime-node's public \`await session.run()\` with default session options, \`Response.json\`); the floor is
\`bench/floor_server.ts\`. dinfer runs three times: with the config of Triton's own \`simple\` example (max_batch_size 8,
no dynamic batching, ONNX Runtime's default threads: the workload the target names), with the bundled config
(\`examples/models/simple\`, which adds \`dynamic_batching { }\` and one intra-op thread), and with the bundled
config and two HTTP threads (\`--http-thread-count=2\`: a listener thread beside the main thread, see the README).
All five run as fresh child processes, measured one after the other in
${cmp.rounds} alternating rounds of ${cmp.roundS} s per connection count (the bench's closed-loop load generator), the
order moved along one server every round; medians, with each round's value in brackets (for the ratio: the ratio of the medians, then each round's own). Target: dinfer ≥ 1.0× the peer at 1 and at 16 connections.

| connections | server | dinfer infer/s | peer infer/s | dinfer / peer | floor infer/s | p50 µs dinfer / peer / floor | server CPU µs per request dinfer / peer / floor |
|---:|---|---:|---:|---:|---:|---:|---:|
${rows.join("\n")}
${wrkMarkdown(cmp)}${
    cmp.wrong ? "\n**Some responses were wrong or failed: the numbers above do not count.**\n" : ""
  }
`;
}

/** The comparison's wrk table, or a line saying wrk was not there. */
function wrkMarkdown(cmp: PeerComparison): string {
  const points = cmp.wrk;
  if (!points) {
    return "\n`wrk` is not on PATH: the points with it as the client were skipped (install: `apt-get install wrk`).\n";
  }
  const rows: string[] = [];
  for (const c of [1, 16]) {
    const get = (server: PeerName) => points.find((p) => p.server === server && p.connections === c)!;
    const [d, p, f] = [get("dinferT"), get("peer"), get("floor")];
    const rates = (x: { rates: number[] }) =>
      `${fmt(median(x.rates))} [${x.rates.map((v) => fmt(v)).join(" ")}]`;
    rows.push(
      `| ${c} | ${rates(d)} | ${rates(p)} | **${(median(d.rates) / median(p.rates)).toFixed(2)}** [${
        d.rates.map((v, i) => (v / p.rates[i]!).toFixed(2)).join(" ")
      }] | ${fmt(median(f.rates))} | ${[d, p, f].map((x) => fmt(median(x.p50s))).join(" / ")} | ${
        [d, p, f].map((x) => fmt(x.cpuUs)).join(" / ")
      } |`,
    );
  }
  return `
**The same with \`wrk\` as the client** (the client the issue's own figures came from: one thread in C, far less CPU
per request than the bench's load generator in Deno, which shares the two cores with the server): dinfer with
Triton's config, the peer and the floor, in the same rounds right after the points above, their order moved
along one server every round; a ${cmp.roundS} s run per point after a short warm-up run, every answer checked
(status 200 and both outputs' values in the body, by a Lua hook).

| connections | dinfer (Triton's config) infer/s | peer infer/s | dinfer / peer | floor infer/s | p50 µs dinfer / peer / floor | server CPU µs per request dinfer / peer / floor |
|---:|---:|---:|---:|---:|---:|---:|
${rows.join("\n")}
`;
}

async function main(args: string[]): Promise<void> {
  const flags = parseFlags(args);
  const info = await machine();
  for (const [k, v] of Object.entries(info)) console.log(`${k}: ${v}`);
  if (flags.peersOnly) {
    console.log(peersMarkdown(await measurePeers(flags)));
    return;
  }

  console.log(`\nBaseline: 'simple' in-process with onnxruntime-node, sequential ...`);
  const base = await baseline(Math.min(flags.durationS, 3), Math.min(flags.warmupS, 0.5));
  console.log(
    `  ${fmt(base.rate)} runs/s, p50 ${fmt(base.p50Us, 1)} µs, p99 ${fmt(base.p99Us, 1)} µs ` +
      `(session options ${JSON.stringify(base.options)})`,
  );
  console.log(
    `  with an idle gap (await setTimeout(0) before each run, run time only): ${fmt(base.idle.runs)} runs, ` +
      `p50 ${fmt(base.idle.p50Us, 1)} µs, p99 ${fmt(base.idle.p99Us, 1)} µs`,
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
        const p = await slot.run(async (server) => {
          // The statistics are read outside the point's window, so the point measures what it did before.
          const before = await modelStats(server.port);
          const point = await measure(server, format, c, flags);
          return { ...point, computeInferUs: computeInferUs(before, await modelStats(server.port)) };
        });
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

  const h2load = flags.h2load ? findH2load() : undefined;
  let h2: H2Run | undefined;
  if (h2load) {
    console.log(`\ngRPC and HTTP binary through h2load (${h2load}) ...`);
    h2 = await measureH2load(flags, h2load);
  } else {
    console.log(`\n${flags.h2load ? H2LOAD_MISSING : H2LOAD_SKIPPED}`);
  }

  console.log(
    `\nThe stack's floor (bench/floor_server.ts) beside dinfer, JSON at 1 connection, alternating ...`,
  );
  const cmp = await measureFloor(flags);
  console.log(
    `  dinfer p50 ${fmt(cmp.dinferP50)} µs [${cmp.dinferP50s.map((v) => fmt(v)).join(" ")}], floor p50 ${
      fmt(cmp.floorP50)
    } µs [${cmp.floorP50s.map((v) => fmt(v)).join(" ")}]; server CPU per request: dinfer ${
      fmt(cmp.dinferCpuUs)
    } µs, floor ${fmt(cmp.floorCpuUs)} µs`,
  );

  console.log(
    `\ndinfer beside the hand-written peer and the floor, JSON at 1 and 16 connections, alternating ...`,
  );
  const peers = await measurePeers(flags);
  console.log(peersMarkdown(peers));

  console.log(`\nBatching: MLP 784-1024-1024-10, 64 connections of single-sample binary requests ...`);
  const mlp = await measureMlp(flags.durationS, flags.warmupS);
  console.log(mlpMarkdown(mlp));

  let profile: ProfileSummary | undefined;
  if (flags.profile) {
    console.log(`\nProfiling the server under JSON load at 16 connections ...`);
    profile = await profileServer(flags);
    console.log(profileTable(profile, 20));
  }
  let grpcProfile: { summary: ProfileSummary; rate: number } | undefined;
  if (flags.profileGrpc && h2load) {
    console.log(`\nProfiling the server under h2load's gRPC load at 16 streams ...`);
    grpcProfile = await profileGrpcServer(flags, h2load);
    console.log(profileTable(grpcProfile.summary, 20));
  } else if (flags.profileGrpc) {
    console.log(`\n--profile-grpc: skipped, h2load is not on PATH`);
  }

  const at = (format: string, c: number) => points.find((p) => p.format === format && p.connections === c);
  const json1 = at("json", 1);
  const bin1 = at("binary", 1);
  const h2Wrong = h2 !== undefined && (h2.points.some((p) => p.wrong) || h2.checks.some((c) => c.wrong));
  const wrong = points.some((p) => p.mismatches > 0 || p.errors > 0) || h2Wrong || cmp.wrong;
  const added = json1 ? json1.p50Us - base.p50Us : NaN;
  const addedBin = bin1 ? bin1.p50Us - base.p50Us : NaN;

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
    `| the stack's floor at 1 connection: \`bench/floor_server.ts\` (Deno.serve, JSON.parse, one native ONNX ` +
    `Runtime run, the JSON answer; nothing else), median p50 of ${cmp.rounds} rounds alternating with dinfer, ` +
    `and what it adds over the baseline | ${fmt(cmp.floorP50)} µs (+${
      fmt(cmp.floorP50 - base.p50Us)
    } µs) | - |`,
    `| dinfer in the same rounds: median p50, and what it adds over the floor | ${fmt(cmp.dinferP50)} µs (+${
      fmt(cmp.dinferP50 - cmp.floorP50)
    } µs) | - |`,
    `| server CPU per request in those rounds: dinfer, the floor | ${fmt(cmp.dinferCpuUs)} µs, ${
      fmt(cmp.floorCpuUs)
    } µs | - |`,
    `| for information: added latency at 1 connection against the idle-gap baseline (server p50 − ${
      fmt(base.idle.p50Us, 1)
    } µs) | ${fmt((json1?.p50Us ?? NaN) - base.idle.p50Us)} µs | ${
      fmt((bin1?.p50Us ?? NaN) - base.idle.p50Us)
    } µs |`,
    `| the server's own compute_infer per request at 1 connection (statistics: compute_infer.ns / ` +
    `success.count) | ${fmt(json1?.computeInferUs ?? NaN, 1)} µs | ${
      fmt(bin1?.computeInferUs ?? NaN, 1)
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
  const grpcJsRow = (label: string) =>
    `| ${label} | ${grpcRatio.toFixed(2)}× (${fmt(grpc16?.rate ?? NaN)} vs ${
      fmt(bin16?.rate ?? NaN)
    } infer/s) | ${grpcRatio >= TARGET_GRPC_RATIO ? "yes" : "**no**"} |`;
  const h2At = (protocol: string, n: number) =>
    h2?.points.find((p) => p.protocol === protocol && p.inFlight === n);
  const h2Grpc16 = h2At("grpc", 16);
  const h2Bin16 = h2At("binary", 16);
  const h2Ratio = (h2Grpc16?.rate ?? NaN) / (h2Bin16?.rate ?? NaN);
  const grpcRows = h2
    ? [
      `| gRPC ≥ ${
        TARGET_GRPC_RATIO.toFixed(1)
      }× HTTP binary throughput (16 in flight), both measured by h2load: ` +
      `gRPC with 16 streams on one connection, HTTP/1.1 with 16 connections | ${h2Ratio.toFixed(2)}× (${
        fmt(h2Grpc16?.rate ?? NaN)
      } vs ${fmt(h2Bin16?.rate ?? NaN)} infer/s) | ${
        h2Ratio >= TARGET_GRPC_RATIO && !h2Wrong ? "yes" : "**no**"
      } |`,
      grpcJsRow(
        "the same with the grpc-js client (`bench/grpc_load.ts`, gRPC) and `bench/loadgen.ts` (HTTP binary)",
      ),
    ]
    : [grpcJsRow(`gRPC ≥ ${TARGET_GRPC_RATIO.toFixed(1)}× HTTP binary throughput (16 in flight)`)];
  const peerRows = [1, 16].map((c) => {
    const rate = (server: PeerName) =>
      median(peers.points.find((p) => p.server === server && p.connections === c)?.rates ?? [NaN]);
    const ratio = rate("dinferT") / rate("peer");
    return `| \`simple\` (Triton's config) JSON ≥ ${
      TARGET_PEER_RATIO.toFixed(1)
    }× the hand-written peer, ${c} ` +
      `connection(s) (see the next section; with the bundled config ${
        fmt(rate("dinfer") / rate("peer"), 2)
      }×) | ${fmt(ratio, 2)}× (${fmt(rate("dinferT"))} vs ${fmt(rate("peer"))} infer/s) | ${
        ratio >= TARGET_PEER_RATIO && !peers.wrong ? "yes" : "**no**"
      } |`;
  }).flatMap((row, i) => {
    const c = [1, 16][i]!;
    const rate = (server: PeerName) =>
      median(peers.wrk?.find((p) => p.server === server && p.connections === c)?.rates ?? [NaN]);
    const ratio = rate("dinferT") / rate("peer");
    return peers.wrk
      ? [
        row,
        `| the same, ${c} connection(s), \`wrk\` as the client | ${fmt(ratio, 2)}× (${
          fmt(rate("dinferT"))
        } vs ${fmt(rate("peer"))} infer/s) | ${
          ratio >= TARGET_PEER_RATIO && !peers.wrong ? "yes" : "**no**"
        } |`,
      ]
      : [row];
  });
  const targets = [
    `| target | measured | met |`,
    `|---|---:|---|`,
    ...peerRows,
    ...grpcRows,
  ].join("\n");

  const h2Section = h2 && h2load
    ? `## gRPC and HTTP binary through h2load

\`h2load\` (${h2loadVersion(h2load)}) is an HTTP/2 and HTTP/1.1 load generator written in C; it needs far
less CPU per request than the grpc-js client, so these points compare the server's two protocols rather than
the clients. One fresh server with gRPC on (\`--grpc-port=<free>\`), the other flags as above. Per point: a
${flags.warmupS} s warm-up run (\`-D\`), then a measured run of a fixed number of requests (\`-n\`, about
${flags.durationS} s at the warm-up's rate).

- **gRPC**: ModelInfer on \`simple\` with raw contents, one HTTP/2 connection with N streams in flight
  (\`-c 1 -m N\`), headers \`content-type: application/grpc\` and \`te: trailers\`; the body is the 5-byte gRPC
  frame prefix and the ModelInferRequest encoded with protobufjs (INPUT0, INPUT1 INT32 [1,16] as two 64-byte
  \`raw_input_contents\`). **HTTP binary**: \`h2load --h1\`, N connections with one request each, the body of
  the binary points above.
- h2load does not read the gRPC status (it is in the trailers), so the server's statistics check every point:
  \`inference_stats.success.count\` of \`simple\` (\`GET /v2/models/simple/stats\`) must rise by exactly
  h2load's succeeded count over the measured run, with no failures. The run has a fixed count because with
  \`-D\` h2load counts neither its warm-up nor the requests in flight when it stops, which the server still
  answers. Before the points, one request of each kind with the same bytes had its outputs checked: ${
      h2.checks.map((c) => `${c.what}: ${c.wrong ? `**wrong: ${c.wrong}**` : "right"}`).join("; ")
    }.
- Latency is h2load's "time for request" (mean and maximum; h2load prints no percentiles). "h2load CPU" is
  h2load's own user+system CPU over the run, on the same 2 cores; the other CPU columns as above.

${h2loadTable(h2.points)}
${
      h2.points.some((p) => p.otherCpuPct > DISTURBED_PCT)
        ? `\n† Disturbed: other processes used more than ${DISTURBED_PCT}% CPU during the point.\n`
        : ""
    }`
    : `## gRPC and HTTP binary through h2load

${flags.h2load ? H2LOAD_MISSING : H2LOAD_SKIPPED}
`;

  const grpcTime = grpcProfile
    ? `Where a gRPC call's server time goes: see the profile under h2load below.`
    : `**Where a gRPC call's server time goes** (a CPU profile of the server's main thread under h2load's gRPC
load at 16 streams, 100 µs sampling, taken once by hand, not by this run; \`--profile-grpc\` takes one and
writes its table here). Self time: garbage collector 11.3%, \`writeBuffer\` (socket writes) 9.9%, ONNX
Runtime's native run 4.0%. Total time (overlapping): \`sendPending\` 24.9%, \`socketOnData\` 12.2%,
\`getOutgoingChunk\` 11.4%, \`node:http2\` receive 9.1%, grpc-js interceptors about 4%; dinfer's own decoding,
validation and encoding about 4%. Most of a call is HTTP/2 in JavaScript (\`node:http2\`, grpc-js) and
garbage collection.`;

  console.log(`\n${table(points)}\n\n${derived}\n\n${targets}`);
  if (h2) console.log(`\n${h2loadTable(h2.points)}`);
  if (wrong) console.log("\nSome responses were errors or wrong: see the tables");

  if (!flags.write) return;
  const allRestarts = restarts + (h2?.restarts ?? 0);
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
  For information, an **idle-gap baseline**: the same loop with \`await setTimeout(0)\` before each run (the
  thread sleeps between runs, as a server's does at 1 connection), timing the run alone:

| in-process \`session.run\` of \`simple\` | runs | runs/s | p50 µs | p99 µs |
|---|---:|---:|---:|---:|
| back to back (the baseline) | ${fmt(base.runs)} | ${fmt(base.rate)} | ${fmt(base.p50Us, 1)} | ${
    fmt(base.p99Us, 1)
  } |
| after \`await setTimeout(0)\` (idle gap; the run's time only) | ${fmt(base.idle.runs)} | - | ${
    fmt(base.idle.p50Us, 1)
  } | ${fmt(base.idle.p99Us, 1)} |

- **Server**: \`deno run -A main.ts --http-port=<free> --allow-grpc=false --allow-metrics=false
  --log-info=false\` in a child process (default repository \`examples/models\`), started fresh once.
- **Load** (\`bench/loadgen.ts\`): closed loop over raw TCP (\`Deno.connect\`), HTTP/1.1 keep-alive, N
  connections each with one request in flight, the same precomputed request bytes, responses parsed only
  for status and Content-Length; ${flags.warmupS} s warm-up not counted, then ${flags.durationS} s measured per
  point; latency is write-start to last-byte per request. The first response and every 1000th are checked
  against the expected outputs (JSON parsed, binary outputs decoded), so a wrong answer cannot pass as fast.
- **The stack's floor** (\`bench/floor_server.ts\`): the least a server on dinfer's stack can do for the
  same JSON request — \`Deno.serve\`, \`JSON.parse\`, one synchronous run through onnxruntime-node's native
  binding with the server's session options, the JSON answer — with no validation, scheduling, statistics
  or other endpoints. It and a fresh dinfer server are measured at 1 connection in ${cmp.rounds} alternating
  rounds of ${cmp.roundS} s (each idle while the other runs, so both see the same state of a shared machine);
  the medians are reported. The gap between the floor and the baseline is what the machine and the stack
  cost (HTTP round trip, and a model run that is slower after the thread has waited for the network than
  back to back); the gap between dinfer and the floor is dinfer's own.
- **JSON**: \`{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":[...]}, ...]}\`, all outputs
  in JSON. **Binary**: \`Inference-Header-Content-Length\` body with both inputs as \`binary_data_size: 64\`
  and both outputs requested with \`binary_data: true\`.
- The load generator runs in the benchmark process, a different process from the server, on the same
  2 cores: the CPU columns show each process's user+system CPU over the measured window (100% = one core);
  "other CPU" is what every other process on the machine used meanwhile (other sessions share it);
  "server CPU µs/infer" is the server's CPU time per answered request, the figure least moved by a busy
  machine (at 100% of one core, 15,000 infer/s allows at most 67 µs).${
    allRestarts > 0
      ? `\n- Something outside stopped the server (SIGTERM/SIGINT, exit code 0) ${allRestarts} time(s) during this run;
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

The \`grpc\` rows are measured with the grpc-js client (see [gRPC](#grpc)).

**Why binary costs the server more than JSON here** (by hand, 2026-11-27, one server, JSON and binary windows
alternating: main-thread CPU 26.1 against 32.3 µs per request at 16 connections, 125 against 141 at 1). A CPU
profile at 16 connections gave 15.1 µs of JavaScript per JSON request and 16.4 per binary one. The JSON answer
(a string with its content type alone) takes Deno's static response path; the binary answer (bytes, with the
\`Inference-Header-Content-Length\` header) builds its headers natively and takes its body as bytes (about
2.4 µs together), and is joined once (0.85 µs). The binary request saves the JSON numbers' parsing and printing
(about 3 µs). The rest of the gap is outside JavaScript.

${h2Section}
## Targets (from the issue)

${targets}
${wrong ? "\nSome responses were errors or wrong (see the tables): the targets count as not met.\n" : ""}
${peersMarkdown(peers)}
${mlpMarkdown(mlp)}
## gRPC

The \`grpc\` rows of the results use \`bench/grpc_load.ts\`: ModelInfer with raw contents through an
\`@grpc/grpc-js\` client in a process of its own (one channel, N calls in flight). Both ends run grpc-js over
Deno's \`node:http2\` layer, whose per-call cost (HTTP/2 framing in JavaScript, stream objects, callbacks) is
several times that of \`Deno.serve\` for HTTP/1.1: a bare ServerLive call costs about as much as a whole HTTP
inference. The client takes its share of the same two cores, so the gRPC target is read from the h2load
points when h2load is installed. Clients may close their connections: the server drops clients' HTTP/2 GOAWAY
frames before \`node:http2\` sees them (\`server/frontends/grpc/goaway_filter.ts\`), as Deno 2.9.6's
\`node:http2\` could abort the process on one (Deno issue 36788), so a client disconnecting no longer stops
the server. The same wrapper holds what the session writes for two more event-loop turns, so that a call's
headers, data and trailers leave in one socket write: Deno's \`node:http2\` sends the trailers two turns after
the data. In a CPU profile at 1 stream (2026-11-27, by hand) the socket writes took 24% of the main thread's
time with three writes per call and 9% with one; the throughput is in \`goaway_filter.ts\`.

${grpcTime}

${GRPC_GARBAGE}

${GRPC_CLOSED_STREAMS}
${
    profile
      ? `
## Where the server spends its time (JSON, 16 connections)

Server started with \`--inspect\`; a CPU profile sampled every 100 µs over the measured window through the
inspector (\`bench/cpu_profile.ts\`), written to \`build/bench/server.cpuprofile\` (open it in Chrome DevTools).

${profileTable(profile)}
`
      : ""
  }${
    grpcProfile
      ? `
## Where a gRPC call's server time goes (h2load, 16 streams on one connection)

Server started with \`--inspect\` and gRPC on; h2load's gRPC load of the points above (16 streams), a CPU
profile sampled every 100 µs over a ${flags.durationS} s run through the inspector (\`bench/cpu_profile.ts\`),
written to \`build/bench/server-grpc.cpuprofile\`. ${fmt(grpcProfile.rate)} infer/s while profiled.

By part of the stack (self time of each file, grouped):

${originTable(grpcProfile.summary)}

${profileTable(grpcProfile.summary)}
`
      : ""
  }`;
  await Deno.writeTextFile(flags.out, `${md.trimEnd()}\n${await otherSections(flags.out)}`);
  console.log(`\nWrote ${flags.out}`);
}

/**
 * The sections other benchmarks keep in the results file (each between `<!-- name:start -->` and
 * `<!-- name:end -->`), so that rewriting this benchmark's part keeps them.
 */
async function otherSections(path: string): Promise<string> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch {
    return "";
  }
  const sections = text.match(/<!-- ([\w-]+):start -->[\s\S]*?<!-- \1:end -->/g) ?? [];
  return sections.map((s) => `\n${s}\n`).join("");
}

if (import.meta.main) {
  try {
    await main(Deno.args);
  } catch (err) {
    console.error(`bench: ${err instanceof Error ? err.message : String(err)}`);
    Deno.exit(1);
  }
}
