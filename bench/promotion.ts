/**
 * What the young generation's garbage collections cost a request, and how much of each request outlives them:
 * for each workload, a fresh server with V8's `--trace-gc`, 1 s of warm-up, then a measured run; from the
 * last scavenges the server logged (the child server keeps the last 8,000 characters of its output, about 50
 * lines), per V8 isolate (the main thread's and each listener thread's): how often they came, their mean pause,
 * their share of the wall clock, and the bytes promoted to the old generation per request of the whole server
 * (the growth of the heap after each scavenge over the requests answered since the one before; the median, so
 * that a full collection in between does not count).
 *
 * A server whose requests die young promotes next to nothing; one that keeps each request's objects past two
 * scavenges promotes about all of them, which then costs copying at every scavenge and full collections on
 * V8's worker threads. This is how the Python backend's Map of calls in flight (2.3–2.8 KB a request) and gRPC's
 * closed streams (9.2 KB a call) were found (bench/RESULTS.md).
 *
 * Usage: `deno run -A bench/promotion.ts [--seconds=3] [--workloads=simple-json,python-json,...] [--runs=1]
 * [--v8-flags=FLAG,...] [--write] [-- server flags...]`; `--runs` measures each workload that many times, each
 * on a fresh server (a gRPC server's run reads one of two levels of garbage, see bench/RESULTS.md);
 * `--v8-flags` adds V8 flags to the server's `--trace-gc` (e.g. `--no-page-promotion`); `--write` puts the table
 * in its section of bench/RESULTS.md (between `<!-- promotion:start -->` and `<!-- promotion:end -->`). Workloads: simple-json (16 connections), simple-json-1 (1), simple-binary (16),
 * python-json (8), python-json-1 (1), python-binary (8), mlp (64), simple-grpc (h2load, 16 streams). Python
 * workloads run `DINFER_PYTHON`, else `.venv/bin/python`.
 * @module
 */

import { fileURLToPath } from "node:url";
import { startChildServer } from "./child_server.ts";
import { freePort, runLoad } from "./loadgen.ts";
import { inferRequest, INPUT0, INPUT1 } from "./simple_requests.ts";
import { mlpRequest } from "./mlp_load.ts";
import { findH2load, grpcInferArgs, runH2load } from "./h2load.ts";
import { grpcFrame, simpleInferRequest } from "./grpc_simple.ts";
import { median } from "./stats.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

interface Workload {
  repository: string;
  model: string;
  /** "json" | "binary" over HTTP, "mlp" (binary), or "grpc" through h2load. */
  kind: "json" | "binary" | "mlp" | "grpc";
  connections: number;
}

const WORKLOADS: Record<string, Workload> = {
  "simple-json": { repository: "examples/models", model: "simple", kind: "json", connections: 16 },
  "simple-json-1": { repository: "examples/models", model: "simple", kind: "json", connections: 1 },
  "simple-binary": { repository: "examples/models", model: "simple", kind: "binary", connections: 16 },
  "python-json": { repository: "bench/python_models", model: "add_sub_py", kind: "json", connections: 8 },
  "python-json-1": { repository: "bench/python_models", model: "add_sub_py", kind: "json", connections: 1 },
  "python-binary": { repository: "bench/python_models", model: "add_sub_py", kind: "binary", connections: 8 },
  "mlp": { repository: "bench/models", model: "mlp", kind: "mlp", connections: 64 },
  "simple-grpc": { repository: "examples/models", model: "simple", kind: "grpc", connections: 16 },
};

const dash = Deno.args.indexOf("--");
const own = dash < 0 ? Deno.args : Deno.args.slice(0, dash);
const serverFlags = dash < 0 ? [] : Deno.args.slice(dash + 1);
const option = (name: string) => own.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const seconds = Number(option("seconds") ?? 3);
const runs = Number(option("runs") ?? 1);
if (!Number.isInteger(runs) || runs < 1) {
  throw new Error(`Cannot run ${option("runs")} times: expected a whole number >= 1`);
}
const v8Flags = option("v8-flags");
const write = own.includes("--write");
const START = "<!-- promotion:start -->";
const END = "<!-- promotion:end -->";
const names = (option("workloads") ?? Object.keys(WORKLOADS).join(",")).split(",");
for (const n of names) {
  if (!WORKLOADS[n]) {
    throw new Error(`Cannot run workload '${n}': one of ${Object.keys(WORKLOADS).join(", ")}`);
  }
}
if (!Deno.env.get("DINFER_PYTHON")) Deno.env.set("DINFER_PYTHON", `${ROOT}.venv/bin/python`);

/** One isolate's scavenges during the measured run. */
interface IsolateGc {
  isolate: string;
  scavenges: number;
  everyMs: number;
  meanMs: number;
  share: number;
  promotedPerRequest: number;
}

/** Reads `--trace-gc`'s scavenge lines, by isolate, for a run that answered `rate` requests a second. */
function scavenges(log: string, rate: number): IsolateGc[] {
  const by = new Map<string, { t: number; after: number; ms: number }[]>();
  for (const line of log.split("\n")) {
    const m = line.match(
      /\[\d+:(0x[0-9a-f]+)\]\s+(\d+) ms: Scavenge [0-9.]+ \([0-9.]+\) -> ([0-9.]+) \([^)]*\) MB.*?, ([0-9.]+) \//,
    );
    if (!m) continue;
    const list = by.get(m[1]!) ?? [];
    list.push({ t: Number(m[2]), after: Number(m[3]), ms: Number(m[4]) });
    by.set(m[1]!, list);
  }
  const out: IsolateGc[] = [];
  for (const [isolate, list] of by) {
    if (list.length < 3) continue;
    const span = list.at(-1)!.t - list[0]!.t;
    const growth: number[] = [];
    for (let i = 1; i < list.length; i++) {
      const dt = list[i]!.t - list[i - 1]!.t;
      if (list[i]!.after >= list[i - 1]!.after && dt > 0) {
        growth.push(((list[i]!.after - list[i - 1]!.after) * 1e6) / ((dt / 1000) * rate));
      }
    }
    const totalMs = list.slice(1).reduce((n, s) => n + s.ms, 0);
    out.push({
      isolate,
      scavenges: list.length,
      everyMs: span / (list.length - 1),
      meanMs: totalMs / (list.length - 1),
      share: span > 0 ? totalMs / span : 0,
      promotedPerRequest: growth.length ? median(growth) : NaN,
    });
  }
  return out;
}

/** Runs one workload on a fresh server; returns its rate and the scavenges logged during the measured run. */
async function measure(w: Workload): Promise<{ rate: number; gc: IsolateGc[] }> {
  const grpcPort = w.kind === "grpc" ? freePort() : 0;
  const server = await startChildServer([`--v8-flags=--trace-gc${v8Flags ? `,${v8Flags}` : ""}`], [
    `--model-repository=${ROOT}${w.repository}`,
    ...(grpcPort ? [`--grpc-port=${grpcPort}`] : []),
    ...serverFlags,
  ]);
  try {
    if (w.kind === "grpc") {
      const h2 = findH2load();
      if (!h2) throw new Error("Cannot run simple-grpc: h2load is not installed");
      const body = await Deno.makeTempFile({ prefix: "dinfer-promotion-" });
      try {
        await Deno.writeFile(body, grpcFrame(simpleInferRequest(INPUT0, INPUT1, w.model)));
        await runH2load(["-D", "1", ...grpcInferArgs(grpcPort, body, w.connections)], { path: h2 });
        const res = await runH2load(
          ["-D", String(seconds), ...grpcInferArgs(grpcPort, body, w.connections)],
          {
            path: h2,
          },
        );
        return { rate: res.reqPerSecond, gc: scavenges(server.log(), res.reqPerSecond) };
      } finally {
        await Deno.remove(body);
      }
    }
    const host = `127.0.0.1:${server.port}`;
    const request = w.kind === "mlp"
      ? mlpRequest(host, w.model)
      : inferRequest(w.kind, host, `/v2/models/${w.model}/infer`);
    const target = { hostname: "127.0.0.1", port: server.port };
    await runLoad(target, { request, connections: w.connections, durationS: 1, warmupS: 0 });
    const r = await runLoad(target, { request, connections: w.connections, durationS: seconds, warmupS: 0 });
    return { rate: r.rate, gc: scavenges(server.log(), r.rate) };
  } finally {
    await server.stop();
  }
}

const rows = [
  "| workload | req/s | isolate | scavenges | every ms | mean pause ms | share of wall | promoted B/request |",
  "|---|---:|---|---:|---:|---:|---:|---:|",
];
for (const name of names) {
  for (let run = 1; run <= runs; run++) {
    const { rate, gc } = await measure(WORKLOADS[name]!);
    const label = runs > 1 ? `${name} (${run})` : name;
    for (const g of gc) {
      const promoted = Number.isNaN(g.promotedPerRequest) ? "-" : String(Math.round(g.promotedPerRequest));
      rows.push(
        `| ${label} | ${Math.round(rate)} | ${g.isolate} | ${g.scavenges} | ${g.everyMs.toFixed(0)} | ${
          g.meanMs.toFixed(2)
        } | ${(g.share * 100).toFixed(1)}% | ${promoted} |`,
      );
    }
  }
}
console.log(rows.join("\n"));
if (write) {
  const commit = new TextDecoder().decode(
    (await new Deno.Command("git", { args: ["rev-parse", "--short", "HEAD"], cwd: ROOT }).output()).stdout,
  ).trim();
  const cpu = /model name\s*:\s*(.*)/.exec(Deno.readTextFileSync("/proc/cpuinfo"))?.[1] ?? "unknown CPU";
  const section = `${START}
## Garbage per request (bench/promotion.ts)

Measured ${
    new Date().toISOString()
  } on ${navigator.hardwareConcurrency} CPUs (${cpu}), server code ${commit}${
    serverFlags.length ? `, server flags \`${serverFlags.join(" ")}\`` : ""
  }${v8Flags ? `, V8 flags \`${v8Flags}\`` : ""}${
    runs > 1 ? `, ${runs} fresh servers per workload` : ""
  }: each workload on a fresh server with V8's \`--trace-gc\`, 1 s of warm-up, ${seconds} s measured; the last
scavenges it logged, per V8 isolate. "Promoted" is the old generation's growth per request of the whole server
(the median over those scavenges). A request whose objects die young promotes 0 B; see the notes under the Python
backend and gRPC above for what promoted requests cost.

${rows.join("\n")}
${END}`;
  const path = `${ROOT}bench/RESULTS.md`;
  let text = await Deno.readTextFile(path);
  const a = text.indexOf(START), b = text.indexOf(END);
  text = a >= 0 && b > a
    ? text.slice(0, a) + section + text.slice(b + END.length)
    : `${text.trimEnd()}\n\n${section}\n`;
  await Deno.writeTextFile(path, text);
}
