/**
 * The MLP benchmark's server points in alternating rounds, for comparing server variants on a shared machine:
 * each round measures every variant once (64 connections, single-sample binary requests, bench/mlp_load.ts in
 * a process of its own), and the medians per variant are printed with their ratio to the combined limit
 * 1 / (1/raw + 1/bare), raw being ONNX Runtime in-process at batch 64 measured before the rounds.
 *
 * Usage: `deno run -A bench/mlp_rounds.ts [--rounds=3] [--duration=3] [--connections=64] [--baseline=DIR]
 * [--only=SUBSTRING,...] [--models=REPOSITORY] [-- server flags...]` (with `--connections=1`, the p50 latency of
 * a lone request is the number to read; `--baseline` adds the default server of another checkout, DIR/main.ts,
 * as one more variant, to compare a change with what it replaces in the same run; `--only` keeps the variants
 * whose name contains one of the substrings, the bare exchange always; the server flags after `--` go to every
 * dinfer variant; the hand-written peer, bench/mlp_peer_server.ts, runs as a variant with ONNX Runtime's
 * default threads and with one intra-op thread, and so does the batching floor, bench/mlp_floor_server.ts).
 * Besides throughput, each variant's line gives the CPU per inference of the server's main thread, of its
 * instance worker threads (`worker-N`, with the ONNX Runtime pool threads they start) and of
 * V8's helper threads (garbage collection), the share of the wall time the instance spent executing, and the
 * CPU other processes used meanwhile (a point where they used more than a quarter of a core is measured again,
 * up to 3 times, and the least disturbed one is kept).
 * @module
 */

import * as ort from "onnxruntime-node";
import { fileURLToPath } from "node:url";
import { relative } from "node:path";
import { startChildServer } from "./child_server.ts";
import { MLP_COPIES_FLAG } from "./mlp_bench.ts";
import { type LoadReport, type LoadSpec, mlpInput } from "./mlp_load.ts";
import { upperMedian as median } from "./stats.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const MODELS_DEFAULT = `${ROOT}bench/models`;

let rounds = 3, durationS = 3, connections = 64;
let baseline: string | undefined, models = MODELS_DEFAULT;
let only: string[] = [];
const serverFlags: string[] = [];
let rest = false;
for (const arg of Deno.args) {
  if (rest) {
    serverFlags.push(arg);
    continue;
  }
  const [k, v] = arg.split("=");
  if (k === "--") rest = true;
  else if (k === "--only") only = v!.split(",");
  else if (k === "--models") models = v!;
  else if (k === "--rounds") rounds = Number(v);
  else if (k === "--duration") durationS = Number(v);
  else if (k === "--connections") connections = Number(v);
  else if (k === "--baseline") baseline = v;
  else throw new Error(`Cannot parse '${arg}': unknown flag`);
}

let VARIANTS: { name: string; args: string[]; script?: string }[] = [
  { name: "dinfer (instance on a worker thread)", args: [] },
  {
    name: "dinfer, instance on the main thread",
    args: ["--backend-config=onnxruntime,instance-thread=main"],
  },
  { name: "dinfer, 2 HTTP threads", args: ["--http-thread-count=2"] },
  {
    name: "dinfer, 2 HTTP threads with copies of the model",
    args: ["--http-thread-count=2", MLP_COPIES_FLAG],
  },
  {
    name: "dinfer, 2 HTTP threads with copies of the model, instance on the main thread",
    args: [
      "--http-thread-count=2",
      MLP_COPIES_FLAG,
      "--backend-config=onnxruntime,instance-thread=main",
    ],
  },
  { name: "hand-written peer", args: [], script: "bench/mlp_peer_server.ts" },
  {
    name: "hand-written peer, 1 intra-op thread",
    args: ["--intra-op-threads=1"],
    script: "bench/mlp_peer_server.ts",
  },
  { name: "batching floor", args: [], script: "bench/mlp_floor_server.ts" },
  {
    name: "batching floor, 1 intra-op thread",
    args: ["--intra-op-threads=1"],
    script: "bench/mlp_floor_server.ts",
  },
  {
    name: "batching floor, 2 intra-op threads that do not spin",
    args: ["--intra-op-threads=2", "--spinning=0"],
    script: "bench/mlp_floor_server.ts",
  },
  { name: "bare exchange", args: [], script: "bench/mlp_bare_server.ts" },
];
if (baseline) {
  VARIANTS.unshift({ name: `baseline ${baseline}`, args: [], script: relative(ROOT, `${baseline}/main.ts`) });
}

VARIANTS = VARIANTS.filter((v) => v.script || only.length === 0 || only.some((o) => v.name.includes(o)))
  .map((v) => (v.script ? v : { ...v, args: [...v.args, ...serverFlags] }));

async function raw(seconds: number): Promise<number> {
  const session = await ort.InferenceSession.create(`${MODELS_DEFAULT}/mlp/1/model.onnx`, {
    logSeverityLevel: 3,
  });
  const x = new Float32Array(64 * 784);
  for (let b = 0; b < 64; b++) x.set(mlpInput(), b * 784);
  const feeds = { input: new ort.Tensor("float32", x, [64, 784]) };
  for (let i = 0; i < 5; i++) await session.run(feeds);
  let runs = 0;
  const start = performance.now();
  while (performance.now() - start < seconds * 1000) {
    await session.run(feeds);
    runs++;
  }
  const rate = (runs * 64) / ((performance.now() - start) / 1000);
  await session.release();
  return rate;
}

async function point(v: (typeof VARIANTS)[number]): Promise<LoadReport> {
  const server = await startChildServer(
    [],
    [`--model-repository=${models}`, ...v.args],
    v.script ? { script: v.script } : {},
  );
  try {
    const spec: LoadSpec = {
      port: server.port,
      serverPid: server.pid,
      model: "mlp",
      connections,
      durationS,
      warmupS: 1,
      expected: [],
    };
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "bench/mlp_load.ts", JSON.stringify(spec)],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout).trim();
    if (!text.startsWith("{")) {
      throw new Error(`The load process failed: ${new TextDecoder().decode(out.stderr)}`);
    }
    return JSON.parse(text) as LoadReport;
  } finally {
    await server.stop();
  }
}

/** Other processes' CPU (percent of one core) above which a point is measured again. */
const DISTURBED_PCT = 25;
/** What other processes used during a point, in percent of one core. */
const otherPct = (p: LoadReport) =>
  (100 * Math.max(0, p.cpu.machine - p.cpu.server - p.cpu.load)) / durationS;
const others = new Map<string, number[]>(VARIANTS.map((v) => [v.name, []]));
const raws: number[] = [];
const rates = new Map<string, number[]>(VARIANTS.map((v) => [v.name, []]));
const batches = new Map<string, number[]>(VARIANTS.map((v) => [v.name, []]));
const p50s = new Map<string, number[]>(VARIANTS.map((v) => [v.name, []]));
const cpu = new Map<string, number[]>(VARIANTS.map((v) => [v.name, []]));
/** Per variant and round: µs of CPU per inference of the main thread, the worker threads, V8's helpers. */
const threads = new Map<string, { main: number[]; worker: number[]; v8: number[]; busy: number[] }>(
  VARIANTS.map((v) => [v.name, { main: [], worker: [], v8: [], busy: [] }]),
);
for (let r = 0; r < rounds; r++) {
  raws.push(await raw(durationS));
  for (const v of VARIANTS) {
    // A point disturbed by other processes (other sessions share the machine) is measured again, up to 3
    // times, and the least disturbed one is kept.
    let p = await point(v);
    for (let retry = 0; retry < 2 && otherPct(p) > DISTURBED_PCT; retry++) {
      const again = await point(v);
      if (otherPct(again) < otherPct(p)) p = again;
    }
    others.get(v.name)!.push(otherPct(p));
    rates.get(v.name)!.push(p.load.rate);
    p50s.get(v.name)!.push(p.load.p50Us);
    batches.get(v.name)!.push(p.inferences / Math.max(1, p.executions));
    const n = Math.max(1, p.load.count);
    cpu.get(v.name)!.push((1e6 * p.cpu.server) / n);
    const t = threads.get(v.name)!;
    const named = (prefix: string) =>
      Object.entries(p.cpu.serverThreads).filter(([k]) => k.startsWith(prefix)).reduce(
        (a, [, s]) => a + s,
        0,
      );
    t.main.push((1e6 * p.cpu.serverMain) / n);
    t.worker.push((1e6 * named("worker-")) / n);
    t.v8.push((1e6 * named("V8 ")) / n);
    t.busy.push(p.executionSeconds / durationS);
    console.error(`round ${r + 1}: ${v.name}: ${p.load.rate.toFixed(0)}/s, errors ${p.load.errors}`);
  }
}
const rawRate = median(raws);
const bare = median(rates.get("bare exchange")!);
const combined = 1 / (1 / rawRate + 1 / bare);
console.log(
  `raw ONNX Runtime in-process (batch 64): ${rawRate.toFixed(0)}/s (rounds: ${
    raws.map((x) => x.toFixed(0)).join(", ")
  })`,
);
console.log(`combined limit 1/(1/raw + 1/bare): ${combined.toFixed(0)}/s`);
for (const v of VARIANTS) {
  const rs = rates.get(v.name)!;
  console.log(
    `${v.name}: median ${median(rs).toFixed(0)}/s (${rs.map((x) => x.toFixed(0)).join(", ")}), ` +
      `${(median(rs) / combined).toFixed(2)} of the combined limit, mean batch ${
        median(batches.get(v.name)!).toFixed(1)
      }, ` +
      `server CPU ${median(cpu.get(v.name)!).toFixed(0)} µs/infer (main ${
        median(threads.get(v.name)!.main).toFixed(0)
      }, workers ${median(threads.get(v.name)!.worker).toFixed(0)}, V8 helpers ${
        median(threads.get(v.name)!.v8).toFixed(0)
      }), executing ${(100 * median(threads.get(v.name)!.busy)).toFixed(0)}% of the time, p50 ${
        median(p50s.get(v.name)!).toFixed(0)
      } µs, other processes ${median(others.get(v.name)!).toFixed(0)}%`,
  );
}
