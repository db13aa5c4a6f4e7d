/**
 * The Python backend benchmark: one `model.py` (bench/python_models/add_sub_py: INT32 [1,16] sum and
 * difference, max_batch_size 0, one CPU instance) served from one repository by dinfer and by the real
 * Triton 2.51 (PyPI's `nvidia-pytriton==0.7.0` bundles `tritonserver` with its Python backend), measured in
 * alternating rounds over HTTP JSON, HTTP binary (as tritonclient sends) and gRPC at 1 and 8 connections.
 * Medians of the rounds, dinfer/Triton ratios, written to a section of bench/RESULTS.md.
 *
 * `deno run -A bench/python_bench.ts` (also the end of `./dinfer bench`). Flags: `--rounds=<n>` (default 3),
 * `--duration=<s>` measured seconds per point (default 3), `--warmup=<s>` (default 1),
 * `--connections=1,8`, `--protocols=json,binary,grpc,grpc-h2load` (default all), `--quick` (1 round of 1 s), `--triton-venv=<dir>` (default `$TRITON_VENV` or
 * `/tmp/triton-venv`), `--no-write`, `--out=<path>`.
 *
 * Without the Triton venv the Triton column is skipped and the way to create the venv is printed.
 * @module
 */

import { inferRequest, INPUT0, INPUT1, OUTPUT0, OUTPUT1 } from "./simple_requests.ts";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { freePort, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";
import { type ChildServer, startChildServer } from "./child_server.ts";
import { processTree, treeCpuSeconds, waitQuiet } from "./cpu_usage.ts";
import { findH2load, grpcInferArgs, runH2load } from "./h2load.ts";
import { grpcFrame, grpcInferOnce, simpleInferRequest } from "./grpc_simple.ts";
import { median } from "./stats.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RESULTS = `${ROOT}bench/RESULTS.md`;
const MODEL = "add_sub_py";
const MODEL_DIR = `${ROOT}bench/python_models/${MODEL}`;
const SECTION_START = "<!-- python_bench:start -->";
const SECTION_END = "<!-- python_bench:end -->";
const TARGET_RATIO = 1.5;

/** What profiles of the Python backend showed; measured by hand, not by this run. */
const FINDINGS =
  `**Where a Python call's time went** (profiles taken by hand on this machine on 2026-11-24, add_sub_py,
not by this run; the machine's load varied from 5 to 18, so the figures are indicative):

- *Before the redesign*, per call the server wrote each input and read each output in the instance's
  shared file with a seek each (strace -c: 4 lseek, 2 read, 2 write besides one sendto and one recvfrom),
  and sent a JSON message; the stub's reader thread read it (2 recvfrom: length, then body) and handed it to
  the main thread through a queue (5.6 futex calls per call, a thread wake-up and GIL hand-over), plus an
  fstat per call. py-spy: the stub's main thread spent half its time waiting on that queue. The server
  answered the next request only after earlier answers' continuations had run (two microtask hops before the
  write), and an instance took one batch at a time, so the stub sat idle while the server encoded the
  previous answer and read the next request. The backend alone (\`bench/python_ipc.ts\`): 1.7k calls/s,
  p50 400 µs at 1 in flight; 1.9k/s at 8.
- *Then*: one frame per direction (length, header length, tag, JSON header, tensor bytes inline up to 64 KiB;
  larger tensors still through the shared file), one sendto and usually one recvfrom per call in the stub,
  no futex on the path (the thread that waits reads the socket itself), an execute header of a repeated
  form parsed once and a result header encoded once (they were 18 µs of the stub's 60 µs of Python per call,
  thread CPU time), the write issued in the same turn, and two batches in flight per instance (the stub
  finds the next one waiting).
- *Now* (2026-11-24, same machine): strace -c shows the floor's syscalls already (one sendto and one
  recvfrom per call each side, one epoll_wait in Deno), so what was left was work per call. The stub's
  Python per add_sub call, timed in a loop without the socket: 12-15 µs, of which the model's own execute
  3 µs; it builds requests and numpy views from a plan kept with the cached execute header, makes its
  tensors and requests without argument checks, and recognizes a plain result (contiguous arrays of
  fixed-size types) and its cached header without preparing each tensor: 8 µs. Deno's --cpu-prof of the
  backend alone at 8 in flight: garbage collection 23 % and the frame build 17 % of the busy time, from a
  new buffer per frame, a copy per output and an empty buffer per read; frames are now cut from a slab and
  outputs are views over one copy of the payload. /proc's context-switch counts in the server at 8
  connections: one involuntary switch of the JS thread per request (the stub, woken on the same core,
  runs before the server goes on); frames sent in one run of microtasks now go out in one write, the stub
  answers the calls it has already read in one write (when each takes under 100 µs), and an instance takes
  four batches instead of two, so that each side wakes once for several calls. The backend alone
  (\`bench/python_ipc.ts\`, measured against the previous code in alternating runs): at 1 in flight p50
  36 → 28 µs, Deno 21 → 17 µs and stub 26 → 17 µs CPU per call; at 8 in flight p50 270 → 125 µs, Deno
  23 → 12 µs, stub 22 → 12 µs. What remains per call is the socket calls themselves (py-spy: the stub is
  in recv or send for 85 % of its samples at 1 in flight, in the model's execute and the stub's code 7 %).
- *Wake-ups* (2026-11-25, add_sub_py at 1 HTTP JSON connection): perf showed a third of the stub's and of
  the server's CPU in the scheduler (finish_task_switch, the wake-up of the other process), and /proc's
  counts two voluntary switches of the stub per request where one is needed: the reader of a Unix socket
  wakes its writer whenever it takes data (room to write again), so the stub, asleep in recv, was woken when
  the server read its answer, and the server's event loop was woken when the stub read the call (2.68
  epoll_wait per request instead of 2). The server's frames now go through a pipe (reading a pipe wakes the
  writer only when it was full), written with a plain write while they surely fit in it, the stub's still over
  the socket: per request 2.03 epoll_wait, 3.16 instead of 3.73 context switches (server and stub), stub
  1 switch. Server + stub CPU per inference against the previous code, fresh servers, alternating rounds:
  -12 to -16 % at 1 connection, -4 to -8 % at 8 (HTTP JSON); gRPC -7 % and -10 %.
- *Placement* (2026-11-27, add_sub_py, HTTP JSON, 1 connection, \`perf\`): at one connection both cores are
  two-thirds idle and each request passes four hand-offs (load generator → server → stub → server → load
  generator). \`perf sched timehist\`: a task woken on the other, idle vCPU waits 26–30 µs before it runs,
  one woken on the waker's own CPU 3–4 µs; the kernel had put the floor's echo process beside its server,
  dinfer's stub beside the load generator. With the server and its Python process pinned to one core and the
  load generator to the other (taskset), three alternating rounds: dinfer 3,682–3,880 → 4,004–4,452 req/s
  (1.09–1.16×), the floor 5,883–6,703 → 7,684–7,825 (1.16–1.33×). dinfer stays at 0.57–0.58 of the floor
  either way, so its gap to the floor is work, not placement: per request about 43 µs of JavaScript on the
  server's main thread (a CPU profile: JSON decoding 14 %, the pipe write 15 %, the backend's frames and
  answers 20 %) and 49 µs of stub CPU (half of it in the interpreter, a third in the kernel), where the
  floor's echo takes 14 µs. Not pursued further: the floor itself is 1.58–1.64× Triton at one connection,
  so 1.5× would leave dinfer about 14 µs per request beyond fixed bytes and one echo.
- *Wake-ups* (2026-11-27, \`perf record\` of the stub under \`bench/python_ipc.ts\`, 1 call in flight): a
  quarter of the stub's CPU was the kernel waking the server from its send (16.5 %) and switching back in
  after its read slept (10.5 %), beside half in the interpreter. The stub now spins for its next message
  before it sleeps (800 µs, see \`wait_spin_us\` in the README), and the floor's echo does the same. The
  backend alone: 14,900 calls/s at p50 56 µs against 8,200–9,600 at 88–113 µs. \`bench/ab.ts\` against the
  server without it, CPU of server and stub together, with a 200 µs spin: 1.45× the requests per second at
  1 connection over HTTP JSON (1.18× the CPU per request), 1.34× over HTTP binary (1.26×), 1.06× at 8
  connections over HTTP binary (1.03×); 400 µs against 200: 1.25× and 1.32× at 1 connection, 1.12× at 8,
  with 0.86–0.92× the CPU; 800 µs against 400: 1.03–1.11× at 1 connection over gRPC, HTTP JSON and binary,
  where a gRPC call's longer round trip had most 400 µs spins end in a sleep (see \`waitSpinUs\`).
- *Spins under concurrency* (2026-11-27, \`bench/ab.ts\`, 3 rounds each): where several requests arrive
  together, a spinning stub cost more than it saved (HTTP JSON at 8 connections: stubs that never spun served
  1.15–1.20× the requests, HTTP binary 1.08×, gRPC through h2load 1.10×, at 0.82–0.90× the CPU per request),
  although the machine still had half a core idle (\`/proc/stat\`). A spin that lost its core to other tasks
  (the thread's run delay in \`/proc/thread-self/schedstat\`) did not tell the cases apart: at 1 connection
  30–60 % of the spins lost about a third of their length in some runs (the server woken on the stub's core)
  and none in others. The server's count of requests per event-loop turn does: a stub spun only while
  requests arrived one at a time (the average of arrivals per turn under 1.05). Against the previous code:
  HTTP JSON at 2, 4 and 8 connections 1.07–1.12×, 1.12–1.19× and 1.04–1.07× at 0.80–0.90× the CPU, HTTP
  binary at 8 1.05–1.07× at 0.90×, gRPC at 8 1.00× at 0.92×; at 1 connection 0.96–1.08× (noise). The
  server now counts the requests inside the models instead (a request that finds none other inside arrives
  alone; see \`spinAllowance\`), which read 1.03–1.17× the requests at 0.89–0.95× the CPU against the count
  per turn at 1, 2 and 8 connections. The floor's echo still spins at every point.
- *Two writes per binary answer* (2026-11-27): Deno's HTTP/1.1 writer sends a response's head and body in one
  write only when together they fit its 512-byte write buffer. add_sub_py's binary answer is 155 bytes of head
  (with a 37-byte \`date\` header, which Deno always adds and Triton does not send) and 367 of body, so it goes
  out in two \`sendto\` calls (strace: two per request, one for the JSON answer) and the client reads it in
  two; Triton's whole answer is 485 bytes. Answering without \`content-type\` (which brings it to 482 bytes),
  \`bench/ab.ts\` at 1 connection read 1.17× (totals 1.20×) with 0.83× the CPU per request. dinfer keeps
  Triton's headers (a client may tell JSON from binary answers by their content type); the floor's answer has
  the same bytes and pays the same.
- *Promoted requests* (2026-11-27, \`--v8-flags=--trace-gc\` and V8's sampling heap profiler): every request's
  objects (the decoded request, its tensors and frames, the answer) outlived the young generation's
  collections and were promoted to the old generation: 2.3–2.8 KB a request over HTTP at 8 connections,
  scavenges 4–5% of the main thread, and V8's worker threads busy 8.7 µs a request with the full collections
  that followed (2.3 µs for \`simple\`). The floor and the backend driven alone promoted nothing. The stub's
  calls in flight were kept in a Map keyed by call id, which, with one id in and one out per call, rebuilds
  its table every few calls; kept in a ring of slots instead (\`IdTable\`, \`server/core/id_table.ts\`), no
  request is promoted. \`bench/ab.ts\` against the Map, 3–4 rounds: HTTP JSON at 8 connections 1.22× the
  requests (0.78× the CPU per request), HTTP binary 1.11× (0.85×), gRPC 1.13× (0.86×); at 1 connection within
  the noise (1.01–1.06×).
- *Outside the backend*: at 8 connections one JS thread parses HTTP, schedules and exchanges messages with
  the stub, and under load that thread is the bottleneck. dinfer's gRPC frontend (@grpc/grpc-js over
  \`node:http2\`) costs several times Triton's C++ gRPC per call (CPU column), whichever client drives it.
- *Calls that arrive together* (2026-11-28, gRPC through h2load, one connection with 8 streams): the 8 calls
  arrive in one read, and the server's frames for the stub went out in one write after the last of them was
  decoded (8.0 frames per write, counted in the server): the stub idled while the server decoded, the server
  while the stub ran them, and the main thread was busy 66% of the time at 85-95 µs per call. A call that finds
  the stub with no other call now goes out at once (3.8 frames per write), and the stub runs it while the
  server decodes the rest. \`bench/ab.ts\` against the code before, 3 rounds of 4 pairs: 1.23x (totals
  1.20x) at the same CPU per request; HTTP at 1 and 8 connections and gRPC at 1 stream within the noise
  (0.94-1.11x).
- *Held answers* (2026-12-07): the stub no longer holds a quick call's answer for one write with the next call's
  (the 100 µs rule above). Measured against holding on the code of the day, the hold had stopped paying: the
  backend alone at 8 in flight (\`bench/python_ipc.ts\`, three alternating pairs) 44.9k, 49.7k and 45.6k calls/s
  without it against 34.1k, 41.8k and 43.1k with it, p50 122-128 against 162-203 µs, stub CPU 19-21 against
  22-27 µs per call; \`bench/ab.ts\` (3 rounds of 4 pairs, medians of the pairs without over with, totals in
  brackets): HTTP binary at 8 connections 1.01x (1.01x) and gRPC at 8 streams 1.03x (1.04x) with the hold's
  threshold set to 0, HTTP JSON at 8 connections 1.11x (1.03x) with the hold removed; CPU per request within 4%. A held answer was lost when the next call killed the stub by a signal (a crash in native code, the
  kernel's OOM killer), where each answer now leaves before the next call runs.`;

const EXPECTED: Record<string, Int32Array> = { OUTPUT0, OUTPUT1 };
const decoder = new TextDecoder();

type Protocol = "json" | "binary" | "grpc" | "grpc-h2load";
type ServerName = "dinfer" | "triton" | "floor";

interface Flags {
  rounds: number;
  durationS: number;
  warmupS: number;
  connections: number[];
  protocols: Protocol[];
  tritonVenv: string;
  write: boolean;
  out: string;
}

function parseFlags(args: string[]): Flags {
  const flags: Flags = {
    rounds: 3,
    durationS: 3,
    warmupS: 1,
    connections: [1, 8],
    protocols: [...PROTOCOLS],
    tritonVenv: Deno.env.get("TRITON_VENV") || "/tmp/triton-venv",
    write: true,
    out: RESULTS,
  };
  for (const arg of args) {
    const [k, v] = arg.split("=", 2) as [string, string | undefined];
    const num = () => {
      const n = Number(v);
      if (!Number.isFinite(n) || n <= 0) throw new Error(`Cannot parse '${arg}': expected a positive number`);
      return n;
    };
    if (k === "--rounds") flags.rounds = Math.round(num());
    else if (k === "--duration") flags.durationS = num();
    else if (k === "--warmup") flags.warmupS = num();
    else if (k === "--connections") flags.connections = (v ?? "").split(",").map(Number);
    else if (k === "--protocols") flags.protocols = (v ?? "").split(",") as Protocol[];
    else if (k === "--quick") Object.assign(flags, { rounds: 1, durationS: 1, warmupS: 0.3 });
    else if (k === "--triton-venv" && v) flags.tritonVenv = v;
    else if (k === "--no-write") flags.write = false;
    else if (k === "--out" && v) flags.out = v;
    else throw new Error(`Cannot parse '${arg}': unknown flag`);
  }
  if (flags.connections.some((c) => !Number.isInteger(c) || c < 1)) {
    throw new Error(`Cannot parse '--connections': expected positive integers`);
  }
  const unknown = flags.protocols.filter((p) => !PROTOCOLS.includes(p));
  if (unknown.length || !flags.protocols.length) {
    throw new Error(`Cannot parse '--protocols': expected some of ${PROTOCOLS.join(", ")}`);
  }
  return flags;
}

// ---------------------------------------------------------------------------------------------------------
// Requests and checks

interface OutputJson {
  name: string;
  datatype: string;
  shape: number[];
  data?: number[];
  parameters?: { binary_data_size?: number };
}

function compare(o: OutputJson, got: ArrayLike<number>): string | undefined {
  if (o.datatype !== "INT32" || o.shape.join(",") !== "1,16") {
    return `'${o.name}' is ${o.datatype} [${o.shape}], expected INT32 [1,16]`;
  }
  const want = EXPECTED[o.name];
  if (!want) return `unexpected output '${o.name}'`;
  if (got.length !== 16) return `'${o.name}' has ${got.length} values`;
  for (let i = 0; i < 16; i++) {
    if (got[i] !== want[i]) return `'${o.name}'[${i}] is ${got[i]}, expected ${want[i]}`;
  }
  return undefined;
}

function checkJson(r: SampledResponse): string | undefined {
  if (r.status !== 200) return `status ${r.status}: ${decoder.decode(r.body).slice(0, 200)}`;
  const outputs = (JSON.parse(decoder.decode(r.body)) as { outputs?: OutputJson[] }).outputs ?? [];
  if (outputs.length !== 2) return `${outputs.length} outputs, expected 2`;
  for (const o of outputs) {
    const why = compare(o, o.data ?? []);
    if (why) return why;
  }
  return undefined;
}

function checkBinary(r: SampledResponse): string | undefined {
  if (r.status !== 200) return `status ${r.status}: ${decoder.decode(r.body).slice(0, 200)}`;
  const m = /inference-header-content-length:\s*(\d+)/.exec(r.headers);
  if (!m) return "no Inference-Header-Content-Length header";
  const headerLength = Number(m[1]);
  const outputs = (JSON.parse(decoder.decode(r.body.subarray(0, headerLength))) as { outputs?: OutputJson[] })
    .outputs ?? [];
  if (outputs.length !== 2) return `${outputs.length} outputs, expected 2`;
  let at = headerLength;
  for (const o of outputs) {
    const n = o.parameters?.binary_data_size ?? 0;
    const bytes = r.body.slice(at, at + n);
    at += n;
    const why = compare(o, new Int32Array(bytes.buffer, 0, Math.floor(n / 4)));
    if (why) return why;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------
// The servers

interface Server {
  name: ServerName;
  http: number;
  grpc: number;
  pid: number;
  stop(): Promise<void>;
  log(): string;
  /** How the process ended, or undefined while it runs. */
  exited(): string | undefined;
}

async function makeRepository(): Promise<string> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-pybench-" });
  await Deno.mkdir(join(repo, MODEL, "1"), { recursive: true });
  await Deno.copyFile(join(MODEL_DIR, "config.pbtxt"), join(repo, MODEL, "config.pbtxt"));
  await Deno.copyFile(join(MODEL_DIR, "1", "model.py"), join(repo, MODEL, "1", "model.py"));
  return repo;
}

async function startDinfer(repo: string): Promise<Server> {
  const grpc = freePort();
  if (!Deno.env.get("DINFER_PYTHON")) {
    try {
      Deno.statSync(`${ROOT}.venv/bin/python`);
      Deno.env.set("DINFER_PYTHON", `${ROOT}.venv/bin/python`);
    } catch {
      // python3 from PATH; it needs numpy.
    }
  }
  const s = await startChildServer([], [`--model-repository=${repo}`, `--grpc-port=${grpc}`]);
  return childServer("dinfer", s, grpc);
}

/** A benchmark child process as one of the compared servers. */
function childServer(name: ServerName, s: ChildServer, grpc: number): Server {
  return {
    name,
    http: s.port,
    grpc,
    pid: s.pid,
    stop: () => s.stop(),
    log: () => s.log(),
    exited: () => s.exitCode() === undefined ? undefined : `exited with code ${s.exitCode()}`,
  };
}

/**
 * The floor of any server on dinfer's stack that hands each request to one Python process: the transport
 * floor server (fixed answers) waiting for one 512-byte frame's round trip through a minimal Python echo.
 */
async function startFloor(): Promise<Server> {
  const grpc = freePort();
  const s = await startChildServer([], [
    `--grpc-port=${grpc}`,
    `--model=${MODEL}`,
    `--python=${Deno.env.get("DINFER_PYTHON") ?? "python3"}`,
  ], { script: "bench/transport_floor_server.ts" });
  return childServer("floor", s, grpc);
}

/** Where the Triton of the venv lives, or why it cannot run. */
interface TritonInstall {
  binary: string;
  backends: string;
  libs: string;
  venv: string;
}

const TRITON_HOWTO = (venv: string) =>
  [
    `python3 -m venv ${venv}`,
    `${venv}/bin/pip install nvidia-pytriton==0.7.0`,
    `T=$(echo ${venv}/lib/python3*/site-packages/pytriton/tritonserver)`,
    `cp $T/python_backend_stubs/$(${venv}/bin/python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')/triton_python_backend_stub $T/backends/python/`,
  ].join("\n  ");

function findTriton(venv: string): TritonInstall | string {
  let sitePackages: string | undefined;
  try {
    for (const e of Deno.readDirSync(join(venv, "lib"))) {
      const sp = join(venv, "lib", e.name, "site-packages");
      try {
        if (Deno.statSync(join(sp, "pytriton", "tritonserver", "bin", "tritonserver")).isFile) {
          sitePackages = sp;
        }
      } catch {
        // Not this Python.
      }
    }
  } catch {
    return `there is no venv at '${venv}'`;
  }
  if (!sitePackages) return `'${venv}' has no pytriton/tritonserver/bin/tritonserver`;
  const t = join(sitePackages, "pytriton", "tritonserver");
  try {
    Deno.statSync(join(t, "backends", "python", "triton_python_backend_stub"));
  } catch {
    return `'${t}/backends/python' has no triton_python_backend_stub (copy it from python_backend_stubs/<py>/)`;
  }
  return {
    binary: join(t, "bin", "tritonserver"),
    backends: join(t, "backends"),
    libs: join(sitePackages, "nvidia_pytriton.libs"),
    venv,
  };
}

async function startTriton(t: TritonInstall, repo: string): Promise<Server> {
  const http = freePort(), grpc = freePort(), metrics = freePort();
  const child = new Deno.Command(t.binary, {
    args: [
      `--model-repository=${repo}`,
      `--backend-directory=${t.backends}`,
      `--http-port=${http}`,
      `--grpc-port=${grpc}`,
      `--metrics-port=${metrics}`,
      "--log-info=false",
    ],
    env: {
      LD_LIBRARY_PATH: [t.libs, Deno.env.get("LD_LIBRARY_PATH")].filter(Boolean).join(":"),
      // The stub's embedded interpreter ignores PYTHONPATH; it finds its prefix from \`python3\` on PATH, so the
      // venv's \`bin\` first gives it the venv's site-packages (numpy).
      PATH: [join(t.venv, "bin"), Deno.env.get("PATH")].filter(Boolean).join(":"),
    },
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
  let how: string | undefined;
  const status = child.status.then((s) => {
    exited = true;
    how = s.signal ? `was killed by ${s.signal}` : `exited with code ${s.code}`;
    return s;
  });
  const server: Server = {
    name: "triton",
    http,
    grpc,
    pid: child.pid,
    async stop() {
      if (!exited) child.kill("SIGTERM");
      const timer = setTimeout(() => !exited && child.kill("SIGKILL"), 10_000);
      await status;
      clearTimeout(timer);
      await drained;
    },
    log: () => output,
    exited: () => how,
  };
  const deadline = performance.now() + 120_000;
  while (performance.now() < deadline && !exited) {
    try {
      const res = await fetch(`http://127.0.0.1:${http}/v2/models/${MODEL}/ready`);
      await res.body?.cancel();
      if (res.status === 200) return server;
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  await server.stop();
  throw new Error(`Cannot start Triton: '${MODEL}' was not ready within 120 s: ${output}`);
}

// ---------------------------------------------------------------------------------------------------------
// Measurement

interface Point {
  server: ServerName;
  protocol: Protocol;
  connections: number;
  round: number;
  rate: number;
  p50Us: number;
  /** CPU of the server and its stub processes per inference, in µs (see the method). */
  cpuUs: number;
  errors: number;
  mismatches: number;
  firstError?: string;
}

async function httpPoint(
  s: Server,
  protocol: "json" | "binary",
  c: number,
  flags: Flags,
): Promise<LoadResult> {
  const host = `127.0.0.1:${s.http}`;
  const request = inferRequest(protocol, host, `/v2/models/${MODEL}/infer`);
  return await runLoad({ hostname: "127.0.0.1", port: s.http }, {
    request,
    connections: c,
    durationS: flags.durationS,
    warmupS: flags.warmupS,
    check: protocol === "json" ? checkJson : checkBinary,
    checkEvery: 500,
  });
}

async function grpcPoint(s: Server, c: number, flags: Flags): Promise<LoadResult> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--quiet",
      `${ROOT}bench/grpc_load.ts`,
      `127.0.0.1:${s.grpc}`,
      String(c),
      String(flags.durationS),
      String(flags.warmupS),
      MODEL,
    ],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = decoder.decode(out.stdout).trim();
  if (out.code !== 0 || !text) {
    throw new Error(
      `Cannot run bench/grpc_load.ts: exit ${out.code}: ${decoder.decode(out.stderr).slice(-2000)}`,
    );
  }
  return JSON.parse(text.split("\n").at(-1)!) as LoadResult;
}

/** Checks one gRPC call with the bytes h2load sends (h2load does not read the gRPC status). */
async function checkGrpcOnce(s: Server, message: Uint8Array): Promise<string | undefined> {
  try {
    const outputs = await grpcInferOnce(`127.0.0.1:${s.grpc}`, message);
    if (outputs.length !== 2) return `${outputs.length} outputs, expected 2`;
    for (const o of outputs) {
      const why = compare(o, new Int32Array(Uint8Array.prototype.slice.call(o.contents).buffer));
      if (why) return why;
    }
    return undefined;
  } catch (err) {
    return `the call failed: ${(err as Error).message}`;
  }
}

/**
 * A model's success and failure counts (dinfer and Triton both answer Triton's statistics extension).
 * @param port the server's HTTP port on 127.0.0.1
 * @param model the model (default add_sub_py)
 */
export async function successCount(port: number, model = MODEL): Promise<{ success: number; fail: number }> {
  const body = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/stats`).then((r) => r.json()) as {
    model_stats: { inference_stats: Record<string, { count: number }> }[];
  };
  const stats = body.model_stats[0]?.inference_stats ?? {};
  return { success: Number(stats.success?.count ?? NaN), fail: Number(stats.fail?.count ?? NaN) };
}

/**
 * gRPC through h2load (a C client: one HTTP/2 connection, N streams in flight): a warm-up run, then a
 * measured one. The server's statistics must count at least h2load's successes and no failure.
 */
async function h2loadPoint(s: Server, c: number, flags: Flags, h2load: string): Promise<LoadResult> {
  const message = simpleInferRequest(INPUT0, INPUT1, MODEL);
  const file = await Deno.makeTempFile({ prefix: "dinfer-pybench-grpc-" });
  try {
    await Deno.writeFile(file, grpcFrame(message));
    const args = grpcInferArgs(s.grpc, file, c);
    const ms = (x: number) => `${Math.max(1, Math.round(x * 1000))}ms`;
    await runH2load(["-D", ms(flags.warmupS), ...args], { path: h2load });
    const before = await successCount(s.http);
    const r = await runH2load(["-D", ms(flags.durationS), ...args], { path: h2load });
    // Calls still in flight when h2load stops are answered after it counted.
    await new Promise((done) => setTimeout(done, 200));
    const after = await successCount(s.http);
    const why = after.fail !== before.fail
      ? `the server counted ${after.fail - before.fail} failures`
      : after.success - before.success < r.succeeded
      ? `the server counted ${after.success - before.success} successes, h2load ${r.succeeded}`
      : await checkGrpcOnce(s, message);
    return {
      connections: c,
      count: r.succeeded,
      seconds: r.seconds,
      rate: r.succeeded / r.seconds,
      p50Us: r.meanUs, // h2load prints no percentiles: the mean stands in
      p90Us: NaN,
      p99Us: NaN,
      meanUs: r.meanUs,
      errors: r.failed + r.errored + r.timeout,
      checked: 1,
      mismatches: why ? 1 : 0,
      ...(why ? { firstError: why } : {}),
    };
  } finally {
    await Deno.remove(file).catch(() => {});
  }
}

async function measurePoint(
  s: Server,
  protocol: Protocol,
  c: number,
  round: number,
  flags: Flags,
): Promise<Point> {
  await waitQuiet(2, { ours: [s.pid] });
  const tree = processTree(s.pid);
  const cpu0 = treeCpuSeconds(tree);
  let r: LoadResult;
  try {
    r = protocol === "grpc"
      ? await grpcPoint(s, c, flags)
      : protocol === "grpc-h2load"
      ? await h2loadPoint(s, c, flags, findH2load()!)
      : await httpPoint(s, protocol, c, flags);
  } catch (err) {
    // A point that could not be measured counts as an error, never as a rate.
    const why = (err as Error).message;
    r = {
      connections: c,
      count: 0,
      seconds: 0,
      rate: NaN,
      p50Us: NaN,
      p90Us: NaN,
      p99Us: NaN,
      meanUs: NaN,
      errors: 1,
      checked: 0,
      mismatches: 0,
      firstError: why,
    };
  }
  const cpuUs = ((treeCpuSeconds(tree) - cpu0) * 1e6) / (r.rate * (flags.durationS + flags.warmupS));
  const p: Point = {
    server: s.name,
    protocol,
    connections: c,
    round,
    rate: r.rate,
    p50Us: r.p50Us,
    cpuUs,
    errors: r.errors,
    mismatches: r.mismatches,
    ...(r.firstError ? { firstError: r.firstError } : {}),
  };
  console.log(
    `  round ${round} ${s.name.padEnd(6)} ${protocol.padEnd(6)} c=${String(c).padEnd(2)} ${
      fmt(p.rate).padStart(6)
    } infer/s  p50 ${fmt(p.p50Us).padStart(5)} µs  cpu ${fmt(p.cpuUs).padStart(4)} µs/infer${
      p.errors || p.mismatches ? `  ERRORS ${p.errors}/${p.mismatches}: ${p.firstError}` : ""
    }`,
  );
  return p;
}

// ---------------------------------------------------------------------------------------------------------
// Report

function fmt(n: number, digits = 0): string {
  return Number.isFinite(n) ? n.toFixed(digits) : "-";
}

async function machine(): Promise<string> {
  const cpu = (await Deno.readTextFile("/proc/cpuinfo").catch(() => "")).match(/model name\s*:\s*(.*)/)?.[1];
  const cores = navigator.hardwareConcurrency;
  const mem = (await Deno.readTextFile("/proc/meminfo").catch(() => "")).match(/MemTotal:\s*(\d+)/)?.[1];
  const py = await new Deno.Command(Deno.env.get("DINFER_PYTHON") || "python3", {
    args: ["-V"],
    stdout: "piped",
  })
    .output().then((o) => decoder.decode(o.stdout).trim()).catch(() => "?");
  return `${cpu ?? "unknown CPU"}, ${cores} cores, ${mem ? (Number(mem) / 1048576).toFixed(0) : "?"} GiB, ` +
    `Linux ${Deno.osRelease()}, Deno ${Deno.version.deno}, dinfer's stubs on ${py}`;
}

const PROTOCOLS: Protocol[] = ["json", "binary", "grpc", "grpc-h2load"];

const PROTOCOL_NAMES: Record<Protocol, string> = {
  json: "HTTP JSON",
  binary: "HTTP binary",
  grpc: "gRPC",
  "grpc-h2load": "gRPC, h2load (mean µs)",
};

/** dinfer's rate over Triton's in each round of a point, as text (rounds where either has none are left out). */
function perRound(d: Point[], t: Point[]): string[] {
  return d.flatMap((p) => {
    const q = t.find((x) => x.round === p.round);
    return q ? [fmt(p.rate / q.rate, 2)] : [];
  });
}

function markdown(
  points: Point[],
  flags: Flags,
  info: { machine: string; triton: string; skipped?: string; ipc: string; notes: string[] },
) {
  const protocols = PROTOCOLS.filter((p) => points.some((x) => x.protocol === p));
  const rows: string[] = [];
  const ratios: number[] = [];
  // Points where even the floor stays below the target ratio.
  const unsound: string[] = [];
  for (const protocol of protocols) {
    for (const c of flags.connections) {
      const of = (server: ServerName) =>
        points.filter((p) => p.server === server && p.protocol === protocol && p.connections === c);
      const d = of("dinfer"), t = of("triton"), f = of("floor");
      const dr = median(d.map((p) => p.rate)), tr = median(t.map((p) => p.rate));
      const fr = median(f.map((p) => p.rate));
      const ratio = dr / tr;
      const floorRatio = fr / tr;
      if (Number.isFinite(ratio)) ratios.push(ratio);
      if (Number.isFinite(floorRatio) && floorRatio < TARGET_RATIO) {
        unsound.push(
          `${PROTOCOL_NAMES[protocol]} at ${c} connection${c > 1 ? "s" : ""} (${fmt(floorRatio, 2)})`,
        );
      }
      const wrong = [...d, ...t, ...f].some((p) => p.errors || p.mismatches);
      rows.push(
        `| ${PROTOCOL_NAMES[protocol]} | ${c} | ${fmt(dr)} | ${fmt(median(d.map((p) => p.p50Us)))} | ${
          fmt(median(d.map((p) => p.cpuUs)))
        } | ${t.length ? fmt(tr) : "skipped"} | ${t.length ? fmt(median(t.map((p) => p.p50Us))) : "-"} | ${
          t.length ? fmt(median(t.map((p) => p.cpuUs))) : "-"
        } | ${f.length ? fmt(fr) : "-"} | ${f.length ? fmt(median(f.map((p) => p.cpuUs))) : "-"} | ${
          Number.isFinite(floorRatio) ? fmt(floorRatio, 2) : "-"
        } | ${
          Number.isFinite(ratio)
            ? `${fmt(ratio, 2)}${ratio >= TARGET_RATIO ? "" : " (below 1.5)"} [${perRound(d, t).join(" ")}]`
            : "-"
        }${wrong ? " **errors**" : ""} |`,
      );
    }
  }
  const met = ratios.length === protocols.length * flags.connections.length &&
    ratios.every((r) => r >= TARGET_RATIO) && !points.some((p) => p.errors || p.mismatches);
  const rounds = flags.connections.length * protocols.length;
  return `${SECTION_START}
## Python backend: dinfer against Triton 2.51

\`deno run -A bench/python_bench.ts\` (also run by \`./dinfer bench\`), ${new Date().toISOString()}.

**Machine**: ${info.machine}. Triton: ${info.triton}.

**Model**: \`bench/python_models/add_sub_py\` (INT32 [1,16] INPUT0, INPUT1 -> OUTPUT0 = sum, OUTPUT1 =
difference; max_batch_size 0; one KIND_CPU instance; backend "python"), copied into one temporary repository
that both servers load unchanged.

**Floor**: \`bench/transport_floor_server.ts --python=...\` answers every request with fixed bytes after one
round trip of a 512-byte frame through a minimal Python echo process (one process, frames in order), reading
the request's bytes but not decoding them: the least any server on dinfer's stack (Deno.serve, @grpc/grpc-js,
one Python process per model instance) can do per request. Its rate over Triton's bounds the ratio any such
server can reach.

**Method**: the three servers run at once (idle while another is measured), started afresh for each round in a
rotated order (the first one started moves along each round). ${flags.rounds} round(s); in each,
every point (${rounds} points: HTTP JSON, HTTP binary as tritonclient sends it, gRPC with raw contents;
${flags.connections.join(" and ")} connections) is measured on the three servers one after the other, the
servers' order alternating from one round to the next. HTTP load: \`bench/loadgen.ts\` (closed loop, one request in flight per keep-alive
connection); gRPC: \`bench/grpc_load.ts\` (@grpc/grpc-js, N calls in flight on one channel, in a Deno process
of its own on the same cores) and, when h2load is installed, h2load (a C client: one HTTP/2 connection, N
streams; its rows give the mean latency, as h2load prints no percentiles; each such point is checked by the
model's statistics, which must count at least h2load's successes and no failure, and by one decoded call
with the same bytes). ${flags.warmupS} s
warm-up and ${flags.durationS} s measured per point; every 500th answer is checked against the expected
values. CPU per inference: user + system time of the server process and its descendants (the Python stubs)
over the whole point, warm-up included, divided by the measured rate times the point's length (an
estimate). The table shows medians over the rounds; the ratio is dinfer's median rate over Triton's (target ≥
${TARGET_RATIO}), followed by each round's own ratio in brackets.${
    info.skipped ? `\n\n**Triton skipped**: ${info.skipped}` : ""
  }${info.notes.map((n) => `\n\n**Note**: ${n}.`).join("")}

| protocol | connections | dinfer infer/s | dinfer p50 µs | dinfer CPU µs/infer | Triton infer/s | Triton p50 µs | Triton CPU µs/infer | floor infer/s | floor CPU µs/infer | floor / Triton | dinfer / Triton |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|
${rows.join("\n")}

Target (≥ ${TARGET_RATIO}x Triton at every point): **${
    info.skipped ? "not measured" : met ? "met" : "not met"
  }**.${
    unsound.length
      ? ` The floor itself stays below ${TARGET_RATIO}x Triton at: ${
        unsound.join(", ")
      }; there no server on ` +
        `this stack can meet the target.`
      : ""
  }

${info.ipc}

${FINDINGS}

<details><summary>Every round</summary>

| round | server | protocol | connections | infer/s | p50 µs | CPU µs/infer | errors |
|---:|---|---|---:|---:|---:|---:|---:|
${
    points.map((p) =>
      `| ${p.round} | ${p.server} | ${PROTOCOL_NAMES[p.protocol]} | ${p.connections} | ${fmt(p.rate)} | ${
        fmt(p.p50Us)
      } | ${fmt(p.cpuUs)} | ${p.errors + p.mismatches} |`
    ).join("\n")
  }

</details>
${SECTION_END}`;
}

/** Runs one of the IPC benchmarks and returns the JSON lines it printed. */
async function ipcLines(script: string, args: string[]): Promise<Record<string, number>[]> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--quiet", `${ROOT}${script}`, ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (out.code !== 0) {
    console.log(`${script} failed (exit ${out.code}): ${decoder.decode(out.stderr).slice(-1000)}`);
    return [];
  }
  const lines = decoder.decode(out.stdout).trim().split("\n").filter((l) => l.startsWith("{"));
  for (const l of lines) console.log(`  ${l}`);
  return lines.map((l) => JSON.parse(l) as Record<string, number>);
}

function ipcMarkdown(ipc: Record<string, number>[], floor: Record<string, number>[]): string {
  const rows = ipc.map((r) =>
    `| backend alone, ${r.inflight} in flight | ${fmt(r.rate ?? NaN)} | ${fmt(r.p50Us ?? NaN)} (p50) | ${
      fmt(r.denoCpuUs ?? NaN)
    } | ${fmt(r.stubCpuUs ?? NaN)} |`
  );
  const f = [...floor].sort((a, b) => (a.meanUs ?? 0) - (b.meanUs ?? 0))[Math.floor(floor.length / 2)];
  if (f) {
    rows.push(
      `| floor: a Python echo of one 512-byte frame (median of ${floor.length} runs) | ${
        fmt(f.roundTripsPerS ?? NaN)
      } | ${fmt(f.meanUs ?? NaN)} (mean) | ${fmt(f.denoCpuUs ?? NaN)} | ${fmt(f.pythonCpuUs ?? NaN)} |`,
    );
  }
  return `**The Python backend's messages alone**, after the rounds, with the servers stopped:
\`bench/python_ipc.ts\` drives one add_sub_py stub straight through the backend (no HTTP, no scheduler; with N
in flight the stub finds the next calls waiting, as the server's pipeline depth of 4 lets it), and
\`bench/python_ipc_floor.ts\` is the least any such design costs: a minimal Python process that echoes
length-prefixed frames over the same kind of Unix socket, driven with the same Deno calls (one write, reads
until the frame is back). CPU is per call, from /proc.

| what | calls/s | µs | Deno CPU µs/call | Python CPU µs/call |
|---|---:|---:|---:|---:|
${rows.join("\n")}`;
}

/** Replaces this benchmark's section of the results file (or appends it), keeping everything else. */
async function writeSection(path: string, section: string): Promise<void> {
  let text = "";
  try {
    text = await Deno.readTextFile(path);
  } catch {
    text = "# Benchmark results\n";
  }
  const a = text.indexOf(SECTION_START), b = text.indexOf(SECTION_END);
  text = a >= 0 && b > a
    ? text.slice(0, a) + section + text.slice(b + SECTION_END.length)
    : `${text.trimEnd()}\n\n${section}\n`;
  await Deno.writeTextFile(path, text);
}

async function main(args: string[]): Promise<void> {
  const flags = parseFlags(args);
  const repo = await makeRepository();
  const servers: Server[] = [];
  let skipped: string | undefined;
  let tritonInfo = "not run";
  try {
    const t = findTriton(flags.tritonVenv);
    if (typeof t === "string") {
      skipped =
        `Triton was not measured: ${t}. Create its venv with\n\n  ${TRITON_HOWTO(flags.tritonVenv)}\n\n` +
        `(or name another one with \`--triton-venv=<dir>\` / \`TRITON_VENV\`).`;
      console.log(`\n${skipped}\n`);
    } else {
      tritonInfo = `\`${t.binary}\` (nvidia-pytriton 0.7.0) with its Python backend, started with ` +
        `\`--log-info=false\` and otherwise default settings`;
    }
    const starters: (() => Promise<Server>)[] = [
      () => startDinfer(repo),
      () => startFloor(),
      ...(typeof t === "string" ? [] : [() => startTriton(t, repo)]),
    ];
    const points: Point[] = [];
    const notes: string[] = [];
    const h2load = findH2load();
    const protocols = flags.protocols.filter((p) => p !== "grpc-h2load" || h2load);
    if (!h2load) {
      console.log("h2load is not on PATH (Debian package nghttp2-client): no gRPC points through it");
    }
    for (let round = 1; round <= flags.rounds; round++) {
      // Fresh servers every round, started in a rotated order: of two identical servers running side by side,
      // the one started second often reads faster on this machine (bench/ab.ts), which no single start order
      // may favour.
      const k = (round - 1) % starters.length;
      for (const start of [...starters.slice(k), ...starters.slice(0, k)]) servers.push(await start());
      const named = ["dinfer", "floor", "triton"].flatMap((n) => servers.filter((s) => s.name === n));
      console.log(
        `Python backend benchmark, round ${round}: ${
          servers.map((s) => `${s.name} http ${s.http} grpc ${s.grpc}`).join("; ")
        }`,
      );
      // Each point is measured on every server back to back, so that the servers of one point are compared
      // within seconds of each other (this machine's speed drifts over a run).
      const order = round % 2 ? named : [...named].reverse();
      for (const protocol of protocols) {
        for (const c of flags.connections) {
          for (const s of order) {
            const gone = s.exited();
            if (gone) {
              // A server that ended (or was ended) between points: its remaining points are not measured.
              const note =
                `${s.name} ${gone} in round ${round}; its later points of the round were not measured`;
              if (!notes.includes(note)) {
                notes.push(note);
                console.log(`\n${note}. Its last output:\n${s.log().slice(-3000)}\n`);
              }
              continue;
            }
            points.push(await measurePoint(s, protocol, c, round, flags));
          }
        }
      }
      for (const s of servers) await s.stop();
      servers.length = 0;
    }
    console.log(
      "The backend's messages alone (bench/python_ipc.ts) and their floor (bench/python_ipc_floor.ts)",
    );
    const ipc = await ipcLines("bench/python_ipc.ts", [String(flags.durationS), "1,8"]);
    const floor = await ipcLines("bench/python_ipc_floor.ts", [
      Deno.env.get("DINFER_PYTHON") ?? "python3",
      String(flags.durationS),
    ]);
    const section = markdown(points, flags, {
      machine: await machine(),
      triton: tritonInfo,
      skipped,
      ipc: ipcMarkdown(ipc, floor),
      notes,
    });
    console.log(`\n${section}`);
    if (flags.write) {
      await writeSection(flags.out, section);
      console.log(`\nWrote the Python backend section of ${flags.out}`);
    }
  } finally {
    for (const s of servers) await s.stop();
    await Deno.remove(repo, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) await main(Deno.args);
