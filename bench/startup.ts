/**
 * Start-up time and idle memory: how long `main.ts` takes from the process's start until
 * `GET /v2/health/ready` answers 200 with the bundled models (`examples/models`; HTTP, gRPC and metrics on, the
 * default flags otherwise), and its resident memory once idle. The floor is Deno itself: a script that only
 * answers the same readiness request with `Deno.serve`, started the same way, in alternating rounds.
 *
 * Usage: `deno run -A bench/startup.ts [--rounds=5] [--idle-secs=3] [--no-write] [--out=<path>]`; writes its
 * section (between `<!-- startup:start -->` and `<!-- startup:end -->`) of bench/RESULTS.md, or of the file
 * `--out` names.
 * @module
 */

import { parseArgs } from "node:util";
import { freePort } from "./loadgen.ts";
import { upperMedian as median } from "./stats.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const START = "<!-- startup:start -->";
const END = "<!-- startup:end -->";
/** The limits: ready within 1 s, idle RSS at most 150 MB. */
const READY_LIMIT_MS = 1000;
const RSS_LIMIT_MB = 150;

const { values } = parseArgs({
  args: Deno.args,
  options: {
    rounds: { type: "string", default: "5" },
    "idle-secs": { type: "string", default: "3" },
    "no-write": { type: "boolean", default: false },
    out: { type: "string", default: `${ROOT}bench/RESULTS.md` },
  },
});
const RESULTS = values.out;
const rounds = Number(values.rounds);
const idleMs = Number(values["idle-secs"]) * 1000;

/** The floor: Deno.serve answering readiness, nothing else. */
const FLOOR_SCRIPT = `const port = Number(Deno.args[0]);
Deno.serve({ port, hostname: "127.0.0.1", onListen() {} }, () => new Response(null, { status: 200 }));
`;

/** One start: ms from spawn to the first 200 on readiness, and the RSS (MB) after idling. */
interface StartSample {
  readyMs: number;
  rssMb: number;
  /** The RSS of the process's children (Python stubs), MB. */
  childrenMb: number;
}

/** Resident set size of a process, MB (0 when it is gone). */
function rssMb(pid: number): number {
  try {
    const status = Deno.readTextFileSync(`/proc/${pid}/status`);
    const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    return kb / 1024;
  } catch {
    return 0;
  }
}

/** The pids of a process's children. */
function children(pid: number): number[] {
  try {
    const tasks = Deno.readDirSync(`/proc/${pid}/task`);
    const out: number[] = [];
    for (const t of tasks) {
      const text = Deno.readTextFileSync(`/proc/${pid}/task/${t.name}/children`).trim();
      if (text) out.push(...text.split(/\s+/).map(Number));
    }
    return out;
  } catch {
    return [];
  }
}

async function startOnce(args: string[], port: number): Promise<StartSample> {
  const t0 = performance.now();
  const child = new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  let readyMs = NaN;
  try {
    while (performance.now() - t0 < 30_000) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/v2/health/ready`);
        await res.body?.cancel();
        if (res.status === 200) {
          readyMs = performance.now() - t0;
          break;
        }
      } catch { /* not listening yet */ }
      await new Promise((r) => setTimeout(r, 2));
    }
    if (Number.isNaN(readyMs)) throw new Error(`not ready within 30 s: ${args.join(" ")}`);
    await new Promise((r) => setTimeout(r, idleMs));
    const kids = children(child.pid);
    return {
      readyMs,
      rssMb: rssMb(child.pid),
      childrenMb: kids.reduce((sum, pid) => sum + rssMb(pid), 0),
    };
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await child.stderr.cancel();
  }
}

const dir = await Deno.makeTempDir({ prefix: "dinfer-bench-startup-" });
const floorPath = `${dir}/floor.ts`;
await Deno.writeTextFile(floorPath, FLOOR_SCRIPT);
const samples: Record<"dinfer" | "floor", StartSample[]> = { dinfer: [], floor: [] };
try {
  for (let r = 0; r < rounds; r++) {
    const order = r % 2 === 0 ? ["dinfer", "floor"] as const : ["floor", "dinfer"] as const;
    for (const name of order) {
      const port = freePort();
      const args = name === "dinfer"
        ? [
          "run",
          "-A",
          "main.ts",
          `--http-port=${port}`,
          `--grpc-port=${freePort()}`,
          `--metrics-port=${freePort()}`,
          "--http-address=127.0.0.1",
          "--grpc-address=127.0.0.1",
          "--metrics-address=127.0.0.1",
          "--log-info=false",
        ]
        : ["run", "-A", floorPath, String(port)];
      samples[name].push(await startOnce(args, port));
    }
  }
} finally {
  await Deno.remove(dir, { recursive: true });
}

const cpus = navigator.hardwareConcurrency;
const model = /model name\s*:\s*(.*)/.exec(Deno.readTextFileSync("/proc/cpuinfo"))?.[1] ?? "unknown CPU";
const commit = new TextDecoder().decode(
  (await new Deno.Command("git", { args: ["rev-parse", "--short", "HEAD"], cwd: ROOT }).output()).stdout,
).trim();
const row = (name: "dinfer" | "floor", label: string) => {
  const s = samples[name];
  const list = (k: keyof StartSample) => s.map((x) => x[k].toFixed(0)).join(" ");
  return `| ${label} | ${median(s.map((x) => x.readyMs)).toFixed(0)} [${list("readyMs")}] | ${
    median(s.map((x) => x.rssMb)).toFixed(0)
  } [${list("rssMb")}] | ${median(s.map((x) => x.childrenMb)).toFixed(0)} |`;
};
const ready = median(samples.dinfer.map((x) => x.readyMs));
const rss = median(samples.dinfer.map((x) => x.rssMb));
const section = `${START}
## Start-up and idle memory

Measured ${new Date().toISOString()} on ${cpus} CPUs (${model}), server code ${commit}, by
\`deno run -A bench/startup.ts\`: ${rounds} alternating rounds; each starts the program fresh and polls
\`GET /v2/health/ready\` every 2 ms from the spawn until it answers 200, then reads the resident set size
(VmRSS) after ${
  idleMs / 1000
} s idle. dinfer serves the bundled models (\`examples/models\`) with HTTP, gRPC and
metrics on; the floor is Deno alone (a script whose \`Deno.serve\` answers readiness). Medians, each round in
brackets.

| program | ready ms | idle RSS MB | children's RSS MB |
|---|---:|---:|---:|
${row("dinfer", "dinfer")}
${row("floor", "floor: Deno.serve alone")}

Limits (no regression): ready within ${READY_LIMIT_MS} ms: **${ready <= READY_LIMIT_MS ? "met" : "not met"}**
(${ready.toFixed(0)} ms); idle RSS at most ${RSS_LIMIT_MB} MB: **${rss <= RSS_LIMIT_MB ? "met" : "not met"}**
(${rss.toFixed(0)} MB).
${END}`;
console.log(section);

if (!values["no-write"]) {
  let text = "";
  try {
    text = await Deno.readTextFile(RESULTS);
  } catch { /* a new file */ }
  const a = text.indexOf(START), b = text.indexOf(END);
  text = a >= 0 && b > a
    ? text.slice(0, a) + section + text.slice(b + END.length)
    : `${text.trimEnd()}\n\n${section}\n`;
  await Deno.writeTextFile(RESULTS, text);
}
