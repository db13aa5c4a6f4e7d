/**
 * Where the server's main thread spends its time under the MLP benchmark's load: the server started with
 * `--inspect`, the load of bench/mlp_bench.ts (64 connections, single-sample binary requests) from a process of
 * its own, and a CPU profile of the main thread over the measured window (bench/cpu_profile.ts), printed as the
 * functions and files with the most self time, beside the point's throughput, mean batch and CPU per inference.
 *
 * Usage: `deno run -A bench/mlp_profile.ts [--model=mlp] [--duration=4] [--top=40] [--out=FILE.cpuprofile]
 * [--models=REPOSITORY] [-- server flags...]`.
 * @module
 */

import { fileURLToPath } from "node:url";
import { startChildServer } from "./child_server.ts";
import { startProfiler, summarizeProfile } from "./cpu_profile.ts";
import { freePort } from "./loadgen.ts";
import type { LoadReport, LoadSpec } from "./mlp_load.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

let model = "mlp", durationS = 4, top = 40, out = "", models = `${ROOT}bench/models`;
const serverArgs: string[] = [];
let rest = false;
for (const arg of Deno.args) {
  if (rest) {
    serverArgs.push(arg);
    continue;
  }
  const [k, v] = arg.split("=");
  if (k === "--") rest = true;
  else if (k === "--model") model = v!;
  else if (k === "--duration") durationS = Number(v);
  else if (k === "--top") top = Number(v);
  else if (k === "--out") out = v!;
  else if (k === "--models") models = v!;
  else throw new Error(`Cannot parse '${arg}': unknown flag`);
}

const inspector = `127.0.0.1:${freePort()}`;
const server = await startChildServer([`--inspect=${inspector}`], [
  `--model-repository=${models}`,
  ...serverArgs,
]);
try {
  const spec: LoadSpec = {
    port: server.port,
    serverPid: server.pid,
    model,
    connections: 64,
    durationS,
    warmupS: 1,
    expected: [],
  };
  const load = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "bench/mlp_load.ts", JSON.stringify(spec)],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  await new Promise((r) => setTimeout(r, 1000));
  const profiler = await startProfiler(inspector, { intervalUs: 100 });
  await new Promise((r) => setTimeout(r, durationS * 1000 - 200));
  const profile = await profiler.stop();
  const result = await load;
  const text = new TextDecoder().decode(result.stdout).trim();
  if (!text.startsWith("{")) {
    throw new Error(`The load process failed: ${new TextDecoder().decode(result.stderr)}`);
  }
  const report = JSON.parse(text) as LoadReport;
  if (out) await Deno.writeTextFile(out, JSON.stringify(profile));
  const s = summarizeProfile(profile);
  const n = report.load.count;
  console.log(
    `${model}: ${report.load.rate.toFixed(0)} infer/s, mean batch ${
      (report.inferences / Math.max(1, report.executions)).toFixed(1)
    }, server CPU ${(1e6 * report.cpu.server / n).toFixed(1)} µs/infer (main ${
      (1e6 * report.cpu.serverMain / n).toFixed(1)
    }), threads ${
      Object.entries(report.cpu.serverThreads).map(([k, v]) => `${k} ${(1e6 * v / n).toFixed(1)}`).join(", ")
    }, load ${(1e6 * report.cpu.load / n).toFixed(1)} µs/req, errors ${report.load.errors}, ` +
      `other CPU ${
        (100 * (report.cpu.machine - report.cpu.server - report.cpu.load) / durationS).toFixed(0)
      }%`,
  );
  console.log(`profile: wall ${s.wallMs.toFixed(0)} ms, busy ${s.busyMs.toFixed(0)} ms`);
  console.log("\nself%  total%  function");
  for (const r of s.functions.slice(0, top)) {
    console.log(`${r.selfPct.toFixed(1).padStart(5)}  ${r.totalPct.toFixed(1).padStart(6)}  ${r.name}`);
  }
  console.log("\nself%  total%  file");
  for (const r of s.files.slice(0, 25)) {
    console.log(`${r.selfPct.toFixed(1).padStart(5)}  ${r.totalPct.toFixed(1).padStart(6)}  ${r.name}`);
  }
} finally {
  await server.stop();
}
