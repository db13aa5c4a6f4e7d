/**
 * How throughput grows with cores: dinfer, the hand-written peer and ONNX Runtime in-process, each pinned to
 * the first N cores (`taskset -c 0-(N-1)`) for N = 1, 2, 4, 8, 16 (those the machine has), in one run.
 *
 * Workloads:
 * - `simple` with Triton's own config (max_batch_size 8, no dynamic batching), JSON, 16·N connections: dinfer
 *   with `--http-thread-count=N`, with half as many HTTP threads (the `auto` rule) and with one (the default);
 *   the same with the bundled config (dynamic batching) and N/2 HTTP threads; the hand-written peer
 *   (bench/peer_onnx_server.ts: one JavaScript thread); and the peer run as N processes on one port
 *   (SO_REUSEPORT, one ONNX Runtime intra-op thread each), as a user would run it on N cores.
 * - The MLP 784-1024-1024-10 (bench/models/mlp, dynamic batching), single-sample binary requests, 32·N
 *   connections (at least 64): dinfer with N, half as many and one HTTP thread; from 2 cores, dinfer with
 *   N/2 threads (2 at least) that run copies of the model themselves (`thread-copy-max-bytes`); the batching floor
 *   (bench/mlp_floor_server.ts: dinfer's design with nothing else, its worker's ONNX Runtime with N-1 intra-op
 *   threads that do not spin, as dinfer's worker has by default); ONNX Runtime in-process at batch 64 on the
 *   same cores, the model's own limit.
 * - `grpc`: `simple` (Triton's config) over gRPC, ModelInfer with raw contents, from h2load: 4·N connections (at
 *   least 4) of 4 streams each; dinfer with N, half as many and one gRPC thread. h2load cannot read gRPC
 *   statuses, so the model's statistics must count no failure over the window.
 *
 * The load comes from up to 8 load-generator processes (bench/loadgen.ts), each pinned to a core the server does
 * not use while the machine has such cores; when the server has every core, the load generators share them
 * (the report says so). Every point records the server's CPU time over the measured window, so a saturated
 * server shows as busy cores, and checks a sample of the answers.
 *
 * Usage: `deno run -A bench/scaling.ts [--cores=1,2,4,8,16] [--workloads=simple,mlp,grpc] [--duration=2] [--warmup=1]
 * [--json=FILE] [--no-write]`; `deno run -A bench/scaling.ts --render=FILE` writes the section of bench/RESULTS.md from a
 * JSON result written elsewhere (for example on a bigger machine).
 * @module
 */

import { fileURLToPath } from "node:url";
import { availableParallelism } from "node:os";
import { parseArgs } from "node:util";
import { type ChildServer, startChildServer } from "./child_server.ts";
import { cpuSeconds, machineBusySeconds, threadCpuSeconds } from "./cpu_usage.ts";
import { checkJson, tritonSimpleRepository } from "./http_bench.ts";
import { freePort, httpRequest, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";
import {
  expectedLogits,
  inProcessOnce,
  MLP_COPIES_FLAG,
  mlpConfigOptions,
  ORT_DEFAULTS,
} from "./mlp_bench.ts";
import { mlpCheck, mlpRequest } from "./mlp_load.ts";
import { INPUT0, INPUT1, jsonBody } from "./simple_requests.ts";
import { grpcFrame, simpleInferRequest } from "./grpc_simple.ts";
import { findH2load, grpcInferArgs, runH2load } from "./h2load.ts";
import { median } from "./stats.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RESULTS = `${ROOT}bench/RESULTS.md`;
const MODELS = `${ROOT}bench/models`;
const START = "<!-- scaling:start -->";
const END = "<!-- scaling:end -->";
/** Load-generator processes at most. */
const MAX_LOADERS = 8;

/** What one load-generator process is asked to do (`--load=<json>`). */
interface LoadJob {
  port: number;
  workload: Workload;
  connections: number;
  durationS: number;
  warmupS: number;
  /** Date.now() at which to start, so that every process measures the same window. */
  startAt: number;
  /** The MLP's logits for the benchmark's input. */
  expected?: number[];
}

/** What is measured: `simple` over HTTP JSON, the MLP over HTTP binary, `simple` over gRPC. */
type Workload = "simple" | "mlp" | "grpc";

/** Streams per connection of the gRPC workload. */
const GRPC_STREAMS = 4;

/** One measured point. */
export interface ScalingPoint {
  /** Cores the server was pinned to. */
  cores: number;
  workload: Workload;
  /**
   * Who served: `dinfer` (N HTTP threads), `dinfer-half` (N/2), `dinfer-1` (one), `dinfer-batching` (the
   * bundled config, N/2), `peer`, `peer-xN`, `floor` (bench/mlp_floor_server.ts), `ort` (in-process).
   */
  server: string;
  /** HTTP threads (dinfer), processes (peer-xN). */
  threads: number;
  connections: number;
  /** Requests (inferences, for `ort`) per second. */
  rate: number;
  /** Median of the load processes' median latencies, µs. */
  p50Us: number;
  /** The worst of the load processes' 99th percentiles, µs. */
  p99Us: number;
  /** The server's CPU over the window, in cores (1 = one core busy). */
  serverCores: number;
  /** The server's main thread (of the first process) over the window, in cores; NaN where not read. */
  mainCores?: number;
  /** The whole machine's busy CPU over the window, in cores. */
  machineCores: number;
  /** Mean batch size the server formed (MLP). */
  batch?: number;
  errors: number;
  mismatches: number;
  firstError?: string;
}

/** The whole run. */
export interface ScalingResult {
  machine: { cpus: number; cpu: string; memoryGiB: number; deno: string; date: string; commit: string };
  durationS: number;
  warmupS: number;
  loaders: { cores: number; processes: number; pinned: boolean }[];
  points: ScalingPoint[];
}

// ---------------------------------------------------------------------------------------------------------
// Load-generator process.

function simpleRequest(port: number): Uint8Array {
  return httpRequest({
    method: "POST",
    path: "/v2/models/simple/infer",
    host: `127.0.0.1:${port}`,
    headers: { "content-type": "application/json" },
  }, jsonBody());
}

/** The gRPC workload's load: h2load, ModelInfer of `simple` with raw contents. */
async function grpcLoad(job: LoadJob): Promise<LoadResult> {
  const h2load = findH2load();
  if (!h2load) throw new Error("h2load is not on PATH (apt-get install nghttp2-client)");
  const file = await Deno.makeTempFile({ prefix: "dinfer-scaling-grpc-" });
  try {
    await Deno.writeFile(file, grpcFrame(simpleInferRequest(INPUT0, INPUT1)));
    const ms = (s: number) => `${Math.round(s * 1000)}ms`;
    const r = await runH2load(
      [
        "-D",
        ms(job.durationS),
        `--warm-up-time=${ms(job.warmupS)}`,
        ...grpcInferArgs(job.port, file, GRPC_STREAMS, job.connections),
      ],
      { path: h2load, timeoutS: job.durationS + job.warmupS + 60 },
    );
    return {
      connections: job.connections,
      count: r.succeeded,
      seconds: r.seconds,
      rate: r.succeeded / r.seconds,
      // h2load reports the mean and the spread, not percentiles.
      p50Us: NaN,
      p90Us: NaN,
      p99Us: NaN,
      meanUs: r.meanUs,
      errors: r.failed + r.errored + r.timeout,
      checked: 0,
      mismatches: 0,
    };
  } finally {
    await Deno.remove(file);
  }
}

async function loadProcess(job: LoadJob): Promise<LoadResult> {
  const wait = job.startAt - Date.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  if (job.workload === "grpc") return await grpcLoad(job);
  const check: (r: SampledResponse) => string | undefined = job.workload === "simple"
    ? checkJson
    : mlpCheck(job.expected ?? []);
  return await runLoad({ hostname: "127.0.0.1", port: job.port }, {
    request: job.workload === "simple" ? simpleRequest(job.port) : mlpRequest(`127.0.0.1:${job.port}`, "mlp"),
    connections: job.connections,
    durationS: job.durationS,
    warmupS: job.warmupS,
    check,
    checkEvery: 500,
  });
}

// ---------------------------------------------------------------------------------------------------------
// The coordinator.

function coreList(first: number, count: number): string {
  return count === 1 ? String(first) : `${first}-${first + count - 1}`;
}

/** The load processes for a server on cores 0..n-1 of a machine with `total` cores. */
function loaders(n: number, total: number): { cpus: (string | undefined)[] } {
  const free = total - n;
  if (free <= 0) {
    return { cpus: Array.from({ length: Math.min(MAX_LOADERS, Math.max(1, total)) }, () => undefined) };
  }
  return { cpus: Array.from({ length: Math.min(MAX_LOADERS, free) }, (_, i) => String(n + i)) };
}

interface ModelCounts {
  inferences: number;
  executions: number;
  failures: number;
}

async function modelCounts(port: number, model: string): Promise<ModelCounts> {
  try {
    const res = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/stats`);
    const body = await res.json() as {
      model_stats?: {
        inference_count: number;
        execution_count: number;
        inference_stats?: { fail?: { count: number } };
      }[];
    };
    const s = body.model_stats?.[0];
    return {
      inferences: Number(s?.inference_count ?? NaN),
      executions: Number(s?.execution_count ?? NaN),
      failures: Number(s?.inference_stats?.fail?.count ?? NaN),
    };
  } catch {
    return { inferences: NaN, executions: NaN, failures: NaN };
  }
}

/**
 * Drives the servers (all answering on `port`) from the load processes and measures the window.
 * @param port the HTTP port (statistics)
 * @param pids the server processes whose CPU time counts
 * @param loadPort where the load goes: the HTTP port unless given (the gRPC port)
 */
async function drive(
  port: number,
  pids: number[],
  n: number,
  total: number,
  job: Omit<LoadJob, "port" | "startAt" | "connections"> & { connections: number },
  statsModel?: string,
  loadPort = port,
): Promise<Omit<ScalingPoint, "cores" | "workload" | "server" | "threads">> {
  // No more load processes than connections (gRPC at N=1 has 4).
  const cpus = loaders(n, total).cpus.slice(0, Math.max(1, job.connections));
  const startAt = Date.now() + 1500;
  const per = Math.floor(job.connections / cpus.length);
  const extra = job.connections - per * cpus.length;
  const procs = cpus.map((cpu, i) => {
    const spec: LoadJob = { ...job, port: loadPort, startAt, connections: per + (i < extra ? 1 : 0) };
    const deno = [Deno.execPath(), "run", "-A", `${ROOT}bench/scaling.ts`, `--load=${JSON.stringify(spec)}`];
    const [cmd, ...args] = cpu === undefined ? deno : ["taskset", "-c", cpu, ...deno];
    return new Deno.Command(cmd!, { args, stdout: "piped", stderr: "piped" }).output();
  });
  const serverCpu = () => pids.reduce((s, pid) => s + cpuSeconds(pid), 0);
  const mainCpu = () => threadCpuSeconds(pids[0]!).get(pids[0]!)?.seconds ?? NaN;
  let s0 = 0, s1 = 0, m0 = 0, m1 = 0, t0 = 0, t1 = 0;
  let c0: Promise<ModelCounts> | undefined;
  let c1: typeof c0;
  const from = startAt + job.warmupS * 1000;
  const to = from + job.durationS * 1000;
  const edges = [
    new Promise<void>((r) =>
      setTimeout(() => {
        [s0, m0, t0] = [serverCpu(), machineBusySeconds(), mainCpu()];
        if (statsModel) c0 = modelCounts(port, statsModel);
        r();
      }, from - Date.now())
    ),
    new Promise<void>((r) =>
      setTimeout(() => {
        [s1, m1, t1] = [serverCpu(), machineBusySeconds(), mainCpu()];
        if (statsModel) c1 = modelCounts(port, statsModel);
        r();
      }, to - Date.now())
    ),
  ];
  const outs = await Promise.all(procs);
  await Promise.all(edges);
  const results: LoadResult[] = outs.map((o) => {
    if (!o.success) throw new Error(`A load process failed: ${new TextDecoder().decode(o.stderr)}`);
    return JSON.parse(new TextDecoder().decode(o.stdout)) as LoadResult;
  });
  const point: Omit<ScalingPoint, "cores" | "workload" | "server" | "threads"> = {
    connections: job.connections,
    rate: results.reduce((s, r) => s + r.rate, 0),
    p50Us: median(results.map((r) => r.p50Us ?? NaN)),
    // h2load gives no percentiles (its NaN comes back as null through JSON).
    p99Us: Math.max(...results.map((r) => r.p99Us ?? NaN)),
    serverCores: (s1 - s0) / job.durationS,
    mainCores: (t1 - t0) / job.durationS,
    machineCores: (m1 - m0) / job.durationS,
    errors: results.reduce((s, r) => s + r.errors, 0),
    mismatches: results.reduce((s, r) => s + r.mismatches, 0),
  };
  const firstError = results.find((r) => r.firstError)?.firstError;
  if (firstError) point.firstError = firstError;
  if (c0 && c1) {
    const [a, b] = await Promise.all([c0, c1]);
    point.batch = (b.inferences - a.inferences) / (b.executions - a.executions);
    // Failed inferences the load generator could not see (gRPC statuses) count as errors.
    const failed = b.failures - a.failures;
    if (failed !== 0) {
      point.errors += Number.isFinite(failed) ? failed : 1;
      point.firstError ??= `the model's statistics count ${failed} failures`;
    }
  }
  return point;
}

async function withServers<T>(servers: ChildServer[], f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } finally {
    await Promise.all(servers.map((s) => s.stop()));
  }
}

/** ONNX Runtime in-process at batch 64 on cores 0..n-1: the better of the server's options and its defaults. */
async function inProcess(n: number, seconds: number): Promise<ScalingPoint> {
  const out = await new Deno.Command("taskset", {
    args: ["-c", coreList(0, n), Deno.execPath(), "run", "-A", `${ROOT}bench/scaling.ts`, `--raw=${seconds}`],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) throw new Error(`The in-process run failed: ${new TextDecoder().decode(out.stderr)}`);
  const { rate, cpuCores } = JSON.parse(new TextDecoder().decode(out.stdout)) as {
    rate: number;
    cpuCores: number;
  };
  return {
    cores: n,
    workload: "mlp",
    server: "ort",
    threads: n,
    connections: 0,
    rate,
    p50Us: NaN,
    p99Us: NaN,
    serverCores: cpuCores,
    machineCores: NaN,
    batch: 64,
    errors: 0,
    mismatches: 0,
  };
}

async function rawProcess(seconds: number): Promise<{ rate: number; cpuCores: number }> {
  const runs = [
    await inProcessOnce(
      "server options",
      { ...await mlpConfigOptions(), intraOpNumThreads: availableParallelism() },
      64,
      seconds,
    ),
    // One intra-op thread per core it may use: without a count ONNX Runtime pins its threads to cores of its
    // own choosing, past the taskset.
    await inProcessOnce(
      "ONNX Runtime defaults",
      { ...ORT_DEFAULTS, intraOpNumThreads: availableParallelism() },
      64,
      seconds,
    ),
  ];
  const best = runs.reduce((a, b) => (b.rate > a.rate ? b : a));
  return { rate: best.rate, cpuCores: (best.cpuUsPerInference * best.rate) / 1e6 };
}

/** The HTTP thread counts measured at n cores: n, half as many (the `auto` rule), and one (the default). */
function threadCounts(n: number): number[] {
  return [...new Set([n, Math.max(1, Math.floor(n / 2)), 1])];
}

/** The name of a dinfer point by its HTTP threads at n cores. */
function dinferName(threads: number, n: number): string {
  return threads === n ? "dinfer" : threads === 1 ? "dinfer-1" : "dinfer-half";
}

/** A repository holding `simple` with its bundled config (dynamic batching, one intra-op thread). */
async function bundledSimpleRepository(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-bench-simple-batching-" });
  await Deno.mkdir(`${dir}/simple/1`, { recursive: true });
  await Deno.copyFile(`${ROOT}examples/models/simple/1/model.onnx`, `${dir}/simple/1/model.onnx`);
  await Deno.copyFile(`${ROOT}examples/models/simple/config.pbtxt`, `${dir}/simple/config.pbtxt`);
  return dir;
}

async function measureCores(
  n: number,
  total: number,
  opts: {
    durationS: number;
    warmupS: number;
    simpleRepo: string;
    batchingRepo: string;
    expected: number[];
    /** Which workloads: `simple`, `mlp`, `grpc`. */
    workloads: string[];
  },
  log: (p: ScalingPoint) => void,
): Promise<ScalingPoint[]> {
  const points: ScalingPoint[] = [];
  const prefix = ["taskset", "-c", coreList(0, n)];
  const add = (p: ScalingPoint) => (points.push(p), log(p));
  const common = { durationS: opts.durationS, warmupS: opts.warmupS };
  const simpleConns = Math.max(16, 16 * n);
  const mlpConns = Math.max(64, 32 * n);
  const grpcConns = Math.max(4, 4 * n);

  /** Loads servers already started (all on one port) with a workload, records the point, and stops them. */
  const measure = async (
    servers: ChildServer[],
    workload: Workload,
    server: string,
    threads: number,
    grpcPort?: number,
  ) => {
    await withServers(servers, async () => {
      const p = await drive(
        servers[0]!.port,
        servers.map((s) => s.pid),
        n,
        total,
        workload === "simple"
          ? { ...common, workload, connections: simpleConns }
          : workload === "grpc"
          ? { ...common, workload, connections: grpcConns }
          : { ...common, workload, connections: mlpConns, expected: opts.expected },
        workload === "mlp" ? "mlp" : workload === "grpc" ? "simple" : undefined,
        grpcPort,
      );
      add({ cores: n, workload, server, threads, ...p });
    });
  };
  const dinfer = (repo: string, threads: number, extra: string[] = []) =>
    startChildServer([], [`--model-repository=${repo}`, `--http-thread-count=${threads}`, ...extra], {
      prefix,
    });

  if (opts.workloads.includes("simple")) {
    for (const threads of threadCounts(n)) {
      await measure([await dinfer(opts.simpleRepo, threads)], "simple", dinferName(threads, n), threads);
    }
    const half = Math.max(1, Math.floor(n / 2));
    await measure([await dinfer(opts.batchingRepo, half)], "simple", "dinfer-batching", half);
    const peer = await startChildServer([], [], { script: "bench/peer_onnx_server.ts", prefix });
    await measure([peer], "simple", "peer", 1);
    if (n > 1) {
      const port = freePort();
      const peers: ChildServer[] = [];
      try {
        for (let i = 0; i < n; i++) {
          peers.push(
            await startChildServer([], ["--reuse-port", "--intra-op-threads=1"], {
              script: "bench/peer_onnx_server.ts",
              prefix: ["taskset", "-c", String(i)],
              port,
              readyLine: "listening",
            }),
          );
        }
      } catch (err) {
        await Promise.all(peers.map((s) => s.stop()));
        throw err;
      }
      await measure(peers, "simple", `peer-x${n}`, n);
    }
  }
  if (opts.workloads.includes("grpc")) {
    for (const threads of threadCounts(n)) {
      const grpcPort = freePort();
      const s = await startChildServer([], [
        `--model-repository=${opts.simpleRepo}`,
        "--http-thread-count=1",
        `--grpc-port=${grpcPort}`,
        `--grpc-thread-count=${threads}`,
      ], { prefix });
      await measure([s], "grpc", dinferName(threads, n), threads, grpcPort);
    }
  }
  if (opts.workloads.includes("mlp")) {
    for (const threads of threadCounts(n)) {
      await measure([await dinfer(MODELS, threads)], "mlp", dinferName(threads, n), threads);
    }
    if (n > 1) {
      // The listener threads with copies of the model (see the README's HTTP threads), N/2 of them, two at least.
      const threads = Math.max(2, Math.floor(n / 2));
      const copies = await dinfer(MODELS, threads, [MLP_COPIES_FLAG]);
      await measure([copies], "mlp", "dinfer-copies", threads);
    }
    // The batching floor, its worker's ONNX Runtime with as many intra-op threads as dinfer's worker takes.
    const floor = await startChildServer([], [
      `--model-repository=${MODELS}`,
      `--intra-op-threads=${Math.max(1, n - 1)}`,
      "--spinning=0",
    ], { script: "bench/mlp_floor_server.ts", prefix });
    await measure([floor], "mlp", "floor", 1);
    add(await inProcess(n, opts.durationS));
  }
  return points;
}

// ---------------------------------------------------------------------------------------------------------
// The report.

function fmt(n: number | undefined, digits = 0): string {
  return n !== undefined && Number.isFinite(n)
    ? n.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : "-";
}

/** The RESULTS.md section for a run. */
export function render(result: ScalingResult): string {
  const cores = [...new Set(result.points.map((p) => p.cores))].sort((a, b) => a - b);
  const at = (workload: string, server: string, n: number) =>
    result.points.find((p) => p.workload === workload && p.server === server && p.cores === n);
  const lines: string[] = [];
  const m = result.machine;
  lines.push(START, "## Scaling with cores (bench/scaling.ts)", "");
  lines.push(
    `${m.date}, ${m.cpus} CPUs (${m.cpu}), ${m.memoryGiB} GiB, Deno ${m.deno}, server code ${m.commit}. Each server ` +
      `pinned to cores 0..N-1 with taskset; ${result.warmupS} s warm-up, ${result.durationS} s measured per point. ` +
      `Load: ${
        result.loaders.map((l) =>
          `N=${l.cores}: ${l.processes} process${l.processes > 1 ? "es" : ""} ${
            l.pinned ? "on cores of their own" : "sharing the server's cores"
          }`
        ).join("; ")
      } (at most one per connection: gRPC's 4 connections at N=1 take 4). "cores busy" is the server's CPU time ` +
      `over the window divided by its length.`,
    "",
  );
  /** Each point's rate, its ratio to `base` (default: the same server) at the fewest cores, and cores busy. */
  const scaled = (workload: string, server: string, baseServer = server) => {
    const base = at(workload, baseServer, cores[0]!)?.rate;
    return cores.map((n) => {
      const p = at(workload, server, n);
      if (!p) return "-";
      const x = base ? ` (${fmt(p.rate / base, 1)}×)` : "";
      const bad = p.errors + p.mismatches > 0 ? " **errors**" : "";
      return `${fmt(p.rate)}${x}, ${fmt(p.serverCores, 1)} busy${bad}`;
    });
  };
  /** A table's heading and the rows of dinfer at its three thread counts (HTTP threads, or gRPC threads). */
  const dinferRows = (workload: string, kind = "HTTP") => [
    `| server | ${cores.map((n) => `N=${n}`).join(" | ")} |`,
    `|---|${cores.map(() => "---:").join("|")}|`,
    `| dinfer, N ${kind} threads | ${scaled(workload, "dinfer").join(" | ")} |`,
    `| dinfer, N/2 ${kind} threads | ${scaled(workload, "dinfer-half", "dinfer").join(" | ")} |`,
    `| dinfer, 1 ${kind} thread | ${scaled(workload, "dinfer-1", "dinfer").join(" | ")} |`,
  ];
  lines.push("### simple (Triton's config, JSON), requests/s, ×N=1, cores busy", "", ...dinferRows("simple"));
  lines.push(
    `| dinfer, bundled config (dynamic batching), N/2 HTTP threads | ${
      scaled("simple", "dinfer-batching", "dinfer").join(" | ")
    } |`,
  );
  lines.push(`| hand-written peer, one process | ${scaled("simple", "peer").join(" | ")} |`);
  lines.push(
    `| hand-written peer, N processes | ${
      cores.map((n) => {
        const p = at("simple", `peer-x${n}`, n);
        return p ? `${fmt(p.rate)}, ${fmt(p.serverCores, 1)} busy` : "-";
      }).join(" | ")
    } |`,
  );
  const ratio = (a?: ScalingPoint, b?: ScalingPoint) => (a && b ? fmt(a.rate / b.rate, 2) : "-");
  lines.push(
    `| dinfer / peer | ${
      cores.map((n) => ratio(at("simple", "dinfer", n), at("simple", "peer", n))).join(" | ")
    } |`,
  );
  lines.push(
    `| dinfer / N peers | ${
      cores.map((n) =>
        ratio(
          at("simple", "dinfer", n),
          at("simple", `peer-x${n}`, n) ?? at("simple", "peer", n),
        )
      ).join(" | ")
    } |`,
  );
  lines.push(
    "",
    "### MLP 784-1024-1024-10, dynamic batching, binary, inferences/s, ×N=1, cores busy",
    "",
    ...dinferRows("mlp"),
  );
  if (result.points.some((p) => p.server === "dinfer-copies")) {
    lines.push(
      `| dinfer, N/2 HTTP threads (2 at least) with copies of the model (thread-copy-max-bytes) | ${
        scaled("mlp", "dinfer-copies", "dinfer").join(" | ")
      } |`,
    );
  }
  lines.push(
    `| batching floor (bench/mlp_floor_server.ts, N-1 intra-op threads) | ${
      scaled("mlp", "floor").join(" | ")
    } |`,
  );
  lines.push(`| ONNX Runtime in-process, batch 64 | ${scaled("mlp", "ort").join(" | ")} |`);
  lines.push(
    `| dinfer / in-process | ${
      cores.map((n) => ratio(at("mlp", "dinfer", n), at("mlp", "ort", n))).join(" | ")
    } |`,
  );
  lines.push(
    `| dinfer / floor | ${
      cores.map((n) => ratio(at("mlp", "dinfer", n), at("mlp", "floor", n))).join(" | ")
    } |`,
  );
  lines.push(
    `| dinfer's mean batch | ${cores.map((n) => fmt(at("mlp", "dinfer", n)?.batch, 1)).join(" | ")} |`,
  );
  if (result.points.some((p) => p.workload === "grpc")) {
    lines.push(
      "",
      `### simple (Triton's config) over gRPC, ${GRPC_STREAMS} streams per connection, calls/s, ×N=1, cores busy`,
      "",
      ...dinferRows("grpc", "gRPC"),
    );
  }
  lines.push("", "Every point (p50/p99 in µs; gRPC: h2load gives no percentiles; connections in total):", "");
  lines.push(
    "| N | workload | server | threads | conns | rate | p50 | p99 | cores busy | main thread | machine busy | batch | errors |",
  );
  lines.push("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (const p of result.points) {
    lines.push(
      `| ${p.cores} | ${p.workload} | ${p.server} | ${p.threads} | ${p.connections || "-"} | ${
        fmt(p.rate)
      } | ${fmt(p.p50Us)} | ${fmt(p.p99Us)} | ${fmt(p.serverCores, 1)} | ${fmt(p.mainCores, 2)} | ${
        fmt(p.machineCores, 1)
      } | ${fmt(p.batch, 1)} | ${p.errors + p.mismatches}${
        p.firstError ? ` (${p.firstError.slice(0, 80).replaceAll("|", "/")})` : ""
      } |`,
    );
  }
  lines.push(END);
  return lines.join("\n");
}

async function writeSection(md: string): Promise<void> {
  const text = await Deno.readTextFile(RESULTS);
  const a = text.indexOf(START), b = text.indexOf(END);
  const next = a >= 0 && b > a
    ? text.slice(0, a) + md + text.slice(b + END.length)
    : `${text.trimEnd()}\n\n${md}\n`;
  await Deno.writeTextFile(RESULTS, next);
  console.log(`Wrote the scaling section of ${RESULTS}`);
}

function git(...args: string[]): string {
  try {
    const out = new Deno.Command("git", { args, cwd: ROOT, stdout: "piped", stderr: "null" }).outputSync();
    return new TextDecoder().decode(out.stdout).trim();
  } catch {
    return "";
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      cores: { type: "string" },
      duration: { type: "string", default: "2" },
      warmup: { type: "string", default: "1" },
      json: { type: "string" },
      "no-write": { type: "boolean", default: false },
      render: { type: "string" },
      commit: { type: "string" },
      load: { type: "string" },
      raw: { type: "string" },
      workloads: { type: "string", default: "simple,mlp,grpc" },
    },
  });
  if (values.load) {
    console.log(JSON.stringify(await loadProcess(JSON.parse(values.load) as LoadJob)));
    return;
  }
  if (values.raw) {
    console.log(JSON.stringify(await rawProcess(Number(values.raw))));
    return;
  }
  if (values.render) {
    await writeSection(render(JSON.parse(await Deno.readTextFile(values.render)) as ScalingResult));
    return;
  }
  const total = availableParallelism();
  const cores = (values.cores ?? "1,2,4,8,16").split(",").map(Number).filter((n) => n >= 1 && n <= total);
  const durationS = Number(values.duration), warmupS = Number(values.warmup);
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo");
  const memKb = Number(/^MemTotal:\s*([0-9]+)/m.exec(await Deno.readTextFile("/proc/meminfo"))?.[1] ?? 0);
  const result: ScalingResult = {
    machine: {
      cpus: total,
      cpu: /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? "unknown",
      memoryGiB: Math.round(memKb / 1024 / 1024),
      deno: Deno.version.deno,
      date: new Date().toISOString().replace(/\.\d+Z$/, "Z"),
      commit: values.commit ?? (git("rev-parse", "--short", "HEAD") || "unknown"),
    },
    durationS,
    warmupS,
    loaders: cores.map((n) => {
      const { cpus } = loaders(n, total);
      return { cores: n, processes: cpus.length, pinned: cpus[0] !== undefined };
    }),
    points: [],
  };
  const workloads = values.workloads.split(",");
  const simpleRepo = await tritonSimpleRepository();
  const batchingRepo = await bundledSimpleRepository();
  try {
    const expected = await expectedLogits();
    // A first server start and load, not recorded: the first point of a run on a fresh machine came out low.
    await measureCores(
      cores[0]!,
      total,
      { durationS: 1, warmupS: 0.5, simpleRepo, batchingRepo, expected, workloads },
      () => {},
    );
    for (const n of cores) {
      result.points.push(
        ...await measureCores(
          n,
          total,
          { durationS, warmupS, simpleRepo, batchingRepo, expected, workloads },
          (p) =>
            console.log(
              `N=${p.cores} ${p.workload} ${p.server}(${p.threads}) ${fmt(p.rate)}/s p50 ${
                fmt(p.p50Us)
              } µs, ` +
                `${fmt(p.serverCores, 1)} cores busy (main thread ${fmt(p.mainCores, 2)})${
                  p.batch ? `, batch ${fmt(p.batch, 1)}` : ""
                }${p.errors + p.mismatches ? `, ${p.errors + p.mismatches} errors: ${p.firstError}` : ""}`,
            ),
        ),
      );
      if (values.json) await Deno.writeTextFile(values.json, JSON.stringify(result, null, 1));
    }
  } finally {
    await Deno.remove(simpleRepo, { recursive: true });
    await Deno.remove(batchingRepo, { recursive: true });
  }
  if (values.json) await Deno.writeTextFile(values.json, JSON.stringify(result, null, 1));
  if (!values["no-write"]) await writeSection(render(result));
}

if (import.meta.main) await main();
