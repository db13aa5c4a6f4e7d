/**
 * Two servers side by side in finely interleaved windows, for telling a small change from the noise of a shared
 * machine: both servers run for the whole comparison, and short windows of the same closed-loop load alternate
 * between them (A B, B A, A B, ...), so that the machine's speed, which moves by tens of percent within seconds
 * here, weighs on both alike. Each round starts both servers anew, the first one started alternating: of two
 * identical MLP servers running side by side, the one started second read 0.98-1.26 of the other, 1.10 in the
 * median of 12 rounds (2026-11-27, 2 cores). Each pair of windows gives one ratio B/A; the report gives their
 * median, each round's median, the ratio of the totals, and each server's CPU time per request (with its child
 * processes', the Python stubs). An A/A comparison (the same server twice) shows how far apart two identical servers read on the machine at the time: on 2026-11-27, 6 rounds of
 * 4 pairs gave `simple-json` a median of 0.96 (totals 1.015, rounds 0.92-1.06), `mlp` 1.07 (totals 1.05,
 * rounds 0.94-1.18) and `python-json` 1.04 (totals 1.03, rounds 0.97-1.08), so a change smaller than about 10%
 * does not show in one such run here.
 *
 * Usage: `deno run -A bench/ab.ts [--workload=NAME] [--connections=N] [--rounds=3] [--pairs=4] [--window=1]
 * [--models=DIR] [--baseline=DIR] [--a-flags="..."] [--b-flags="..."] [--a-deno-flags="..."]
 * [--b-deno-flags="..."]`. A is the server of `--baseline` (another checkout: DIR/main.ts, with this
 * checkout's native libraries in DIR/build for the ONNX workloads, which the script checks) or else of this
 * checkout, B this checkout's; `--a-flags` and `--b-flags` add server flags (space-separated) to each (a
 * `--model-repository` among them replaces the workload's repository), and `--a-deno-flags` and
 * `--b-deno-flags` Deno's own (`deno run` flags before the script, e.g. `--v8-flags=...`). The workloads:
 * `mlp` (bench/models, single-sample binary requests, 64 connections by default), `simple-json` and
 * `simple-binary` (examples/models, 16 connections by default), `python-json` and `python-binary`
 * (bench/python_models/add_sub_py, the same tensors, 1 connection by default; DINFER_PYTHON or
 * .venv/bin/python runs the stub), `python-grpc` and `simple-grpc` (the same models over gRPC with raw
 * contents, driven by h2load: one HTTP/2 connection, `--connections` streams, 8 and 16 by default; their
 * answers are not checked, the server's statistics are compared with h2load's count instead). `--models`
 * serves another repository with the same models (for example one whose config has more instances). Every
 * 200th answer is checked.
 * @module
 */

import { fileURLToPath } from "node:url";
import { relative } from "node:path";
import { type ChildServer, startChildServer } from "./child_server.ts";
import { freePort, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";
import { mlpRequest } from "./mlp_load.ts";
import { inferRequest, INPUT0, INPUT1, OUTPUT0, OUTPUT1 } from "./simple_requests.ts";
import { processTree, treeCpuSeconds } from "./cpu_usage.ts";
import { findH2load, grpcInferArgs, runH2load } from "./h2load.ts";
import { successCount } from "./python_bench.ts";
import { grpcFrame, simpleInferRequest } from "./grpc_simple.ts";
import { median } from "./stats.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

let workload = "mlp", connections = 0, rounds = 3, pairs = 4, windowS = 1;
let baseline: string | undefined, models: string | undefined;
let aFlags: string[] = [], bFlags: string[] = [];
let aDeno: string[] = [], bDeno: string[] = [];
for (const arg of Deno.args) {
  const at = arg.indexOf("=");
  const k = at < 0 ? arg : arg.slice(0, at);
  const v = at < 0 ? "" : arg.slice(at + 1);
  if (k === "--workload") workload = v;
  else if (k === "--connections") connections = Number(v);
  else if (k === "--pairs") pairs = Number(v);
  else if (k === "--rounds") rounds = Number(v);
  else if (k === "--window") windowS = Number(v);
  else if (k === "--baseline") baseline = v;
  else if (k === "--models") models = v;
  else if (k === "--a-flags") aFlags = v.split(/\s+/).filter(Boolean);
  else if (k === "--b-flags") bFlags = v.split(/\s+/).filter(Boolean);
  else if (k === "--a-deno-flags") aDeno = v.split(/\s+/).filter(Boolean);
  else if (k === "--b-deno-flags") bDeno = v.split(/\s+/).filter(Boolean);
  else throw new Error(`Cannot parse '${arg}': unknown flag`);
}
const WORKLOADS = [
  "mlp",
  "simple-json",
  "simple-binary",
  "simple-grpc",
  "python-json",
  "python-binary",
  "python-grpc",
];
if (!WORKLOADS.includes(workload)) {
  throw new Error(`Cannot run workload '${workload}': expected one of ${WORKLOADS.join(", ")}`);
}
// A checkout without the native libraries (build/, git-ignored) runs ONNX Runtime through another path: a
// baseline without them read 1.14x slower on `simple-json` with the same server code (2026-11-27).
if (baseline && !workload.startsWith("python-")) {
  const has = (dir: string) => {
    try {
      return Deno.statSync(`${dir}/build/shim/libortshim.so`).isFile;
    } catch {
      return false;
    }
  };
  if (has(ROOT) && !has(baseline)) {
    throw new Error(
      `Cannot compare on '${workload}': ${baseline} has no build/shim/libortshim.so, so its ONNX Runtime runs ` +
        `through another path; link this checkout's (ln -s ${ROOT}build ${baseline}/build) or build it there`,
    );
  }
}
const python = workload.startsWith("python-");
const grpc = workload.endsWith("-grpc");
const model = python ? "add_sub_py" : workload === "mlp" ? "mlp" : "simple";
connections ||= workload === "mlp" ? 64 : workload === "python-grpc" ? 8 : python ? 1 : 16;
const repository = models ??
  (workload === "mlp"
    ? `${ROOT}bench/models`
    : python
    ? `${ROOT}bench/python_models`
    : `${ROOT}examples/models`);
if (python && !Deno.env.get("DINFER_PYTHON")) {
  try {
    Deno.statSync(`${ROOT}.venv/bin/python`);
    Deno.env.set("DINFER_PYTHON", `${ROOT}.venv/bin/python`);
  } catch {
    // python3 from PATH; it needs numpy.
  }
}

const decoder = new TextDecoder();

/** The request bytes for a server on `port`. */
function requestFor(port: number): Uint8Array {
  const host = `127.0.0.1:${port}`;
  if (workload === "mlp") return mlpRequest(host, "mlp");
  return inferRequest(
    workload.endsWith("-json") ? "json" : "binary",
    host,
    `/v2/models/${model}/infer`,
  );
}

/** A check of the answers: status 200 and, for `simple`, the right sums (JSON) or the right bytes (binary). */
function check(r: SampledResponse): string | undefined {
  if (r.status !== 200) return `status ${r.status}: ${decoder.decode(r.body).slice(0, 200)}`;
  if (workload.endsWith("-json")) {
    const body = JSON.parse(decoder.decode(r.body)) as { outputs: { name: string; data: number[] }[] };
    const sum = body.outputs.find((o) => o.name === "OUTPUT0")?.data;
    if (JSON.stringify(sum) !== JSON.stringify([...OUTPUT0])) return `OUTPUT0 is ${JSON.stringify(sum)}`;
  } else if (workload.endsWith("-binary")) {
    const tail = r.body.slice(r.body.byteLength - 128);
    const want = new Uint8Array([...new Uint8Array(OUTPUT0.buffer), ...new Uint8Array(OUTPUT1.buffer)]);
    if (tail.some((b, i) => b !== want[i])) return "the binary outputs differ";
  }
  return undefined;
}

interface Side {
  name: string;
  server: ChildServer;
  /** The gRPC port (the -grpc workloads), else 0. */
  grpcPort: number;
  request: Uint8Array;
  rates: number[];
  count: number;
  seconds: number;
  cpu: number;
  errors: number;
  wrong: number;
}

async function start(name: string, flags: string[], denoFlags: string[], script?: string): Promise<Side> {
  const grpcPort = grpc ? freePort() : 0;
  const server = await startChildServer(
    denoFlags,
    [
      // A side's own --model-repository (in --a-flags or --b-flags) replaces the workload's.
      ...(flags.some((f) => f.startsWith("--model-repository=")) ? [] : [`--model-repository=${repository}`]),
      ...(grpc ? [`--grpc-port=${grpcPort}`] : []),
      ...flags,
    ],
    script ? { script } : {},
  );
  return {
    name,
    server,
    grpcPort,
    request: requestFor(server.port),
    rates: [],
    count: 0,
    seconds: 0,
    cpu: 0,
    errors: 0,
    wrong: 0,
  };
}

const h2load = grpc ? findH2load() : undefined;
if (grpc && !h2load) {
  throw new Error(`Cannot run workload '${workload}': h2load is not on PATH (nghttp2-client)`);
}
/** The file h2load sends: one gRPC-framed ModelInferRequest. */
const grpcBody = grpc ? await Deno.makeTempFile({ prefix: "dinfer-ab-grpc-" }) : "";
if (grpc) await Deno.writeFile(grpcBody, grpcFrame(simpleInferRequest(INPUT0, INPUT1, model)));

/** A gRPC window: h2load for the window's length; its successes must all be in the server's statistics. */
async function grpcWindow(side: Side): Promise<void> {
  const tree = processTree(side.server.pid);
  const before = await successCount(side.server.port, model);
  const c0 = treeCpuSeconds(tree);
  const r = await runH2load(
    ["-D", `${Math.round(windowS * 1000)}ms`, ...grpcInferArgs(side.grpcPort, grpcBody, connections)],
    { path: h2load! },
  );
  const c1 = treeCpuSeconds(tree);
  // Calls still in flight when h2load stops are answered after it counted.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const after = await successCount(side.server.port, model);
  // Counts that cannot be read (NaN) fail the check too.
  if (
    after.fail !== before.fail || !(after.success - before.success >= r.succeeded) || r.succeeded < r.done
  ) {
    side.errors += Math.max(1, r.done - r.succeeded, after.fail - before.fail);
    console.error(
      `${side.name}: h2load counted ${r.succeeded} of ${r.done} successes, the server ${
        after.success - before.success
      } successes and ${after.fail - before.fail} failures`,
    );
  }
  side.rates.push(r.succeeded / r.seconds);
  side.count += r.succeeded;
  side.seconds += r.seconds;
  side.cpu += c1 - c0;
}

async function window(side: Side): Promise<void> {
  if (grpc) return grpcWindow(side);
  let c0 = 0, c1 = 0;
  const tree = processTree(side.server.pid);
  const r: LoadResult = await runLoad({ hostname: "127.0.0.1", port: side.server.port }, {
    request: side.request,
    connections,
    durationS: windowS,
    warmupS: 0.3,
    check,
    checkEvery: 200,
    onWindow(edge) {
      // The server and its children (Python stubs).
      if (edge === "start") c0 = treeCpuSeconds(tree);
      else c1 = treeCpuSeconds(tree);
    },
  });
  side.rates.push(r.rate);
  side.count += r.count;
  side.seconds += r.seconds;
  side.cpu += c1 - c0;
  side.errors += r.errors;
  side.wrong += r.mismatches;
  if (r.firstError) console.error(`${side.name}: ${r.firstError}`);
}

const sides: Side[] = [];
const ratios: number[] = [];
for (let round = 0; round < rounds; round++) {
  // Fresh processes every round: two processes of the same program can differ by 10% or more for their whole
  // life on this machine (an A/A comparison of one pair of processes read 1.11), so each round starts both anew.
  const startA = () =>
    start(
      baseline ? `A (${baseline})` : "A",
      aFlags,
      aDeno,
      baseline ? relative(ROOT, `${baseline}/main.ts`) : undefined,
    );
  const startB = () => start("B", bFlags, bDeno);
  let a: Side | undefined, b: Side | undefined;
  try {
    // Which server starts first alternates too.
    if (round % 2 === 0) {
      a = await startA();
      b = await startB();
    } else {
      b = await startB();
      a = await startA();
    }
    // One window each first, not counted: both servers warm (JIT, ONNX Runtime's arenas) before any pair, in
    // the order they started.
    for (const s of round % 2 === 0 ? [a, b] : [b, a]) await window(s);
    for (const s of [a, b]) {
      Object.assign(s, { rates: [], count: 0, seconds: 0, cpu: 0, errors: 0, wrong: 0 });
    }
    for (let i = 0; i < pairs; i++) {
      for (const s of (i + round) % 2 === 0 ? [a, b] : [b, a]) await window(s);
    }
    ratios.push(...a.rates.map((r, i) => b!.rates[i]! / r));
    sides.push(a, b);
  } finally {
    await a?.server.stop();
    await b?.server.stop();
  }
}
if (grpc) await Deno.remove(grpcBody);
const total = (name: string) => {
  const mine = sides.filter((s) => s.name === name);
  const sum = (k: "count" | "seconds" | "cpu" | "errors" | "wrong") => mine.reduce((n, s) => n + s[k], 0);
  return {
    rates: mine.flatMap((s) => s.rates),
    count: sum("count"),
    seconds: sum("seconds"),
    cpu: sum("cpu"),
    errors: sum("errors"),
    wrong: sum("wrong"),
  };
};
const f = (x: number) => x.toFixed(0);
const aName = sides.find((s) => s.name !== "B")!.name;
const A = total(aName), B = total("B");
for (const [name, s] of [[aName, A], ["B", B]] as const) {
  console.log(
    `${name}: ${f(s.count / s.seconds)} req/s over ${rounds} x ${pairs} windows of ${windowS} s (${
      s.rates.map(f).join(" ")
    }), server CPU ${
      (1e6 * s.cpu / Math.max(1, s.count)).toFixed(1)
    } µs/req, errors ${s.errors}, wrong ${s.wrong}`,
  );
}
const sorted = [...ratios].sort((x, y) => x - y);
const perRound = Array.from({ length: rounds }, (_, r) => median(ratios.slice(r * pairs, (r + 1) * pairs)));
console.log(
  `B/A: median of the pairs ${median(ratios).toFixed(3)} (pairs ${
    sorted.map((r) => r.toFixed(2)).join(" ")
  }; ` +
    `per round ${perRound.map((r) => r.toFixed(2)).join(" ")}), totals ${
      ((B.count / B.seconds) / (A.count / A.seconds)).toFixed(3)
    }, CPU per request ${
      ((B.cpu / Math.max(1, B.count)) / (A.cpu / Math.max(1, A.count))).toFixed(3)
    } (${workload}, ${connections} connections)`,
);
