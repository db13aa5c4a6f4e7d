/**
 * The reliability suite: a server process is fuzzed with structured HTTP and gRPC messages (infer, repository,
 * shared memory, logging, trace), flooded with connections, held by slowloris connections, has its Python stubs
 * killed, models reloaded under load, and is stopped with SIGTERM under load. It prints one table: inputs tried,
 * crashes, hangs, 5xx answers to client errors, requests lost, and the server's RSS before and after.
 *
 * Run: `./dinfer reliability [--quick] [--seed=N]` (or `deno run -A bench/reliability.ts`). The quick parts run
 * in CI and `./dinfer test all` (tests/slow/reliability_test.ts).
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { fileURLToPath } from "node:url";
import { lookupType } from "../server/core/protos.ts";
import { readUntilClosed } from "./loadgen.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const EXAMPLES = `${ROOT}examples/models`;
const FIXTURES = `${ROOT}tests/fixtures/models`;
const PYTHON_MODELS = `${ROOT}tests/fixtures/python_models`;

/** One row of the result table. */
export interface Row {
  part: string;
  inputs: number;
  crashes: number;
  hangs: number;
  serverErrors: number;
  lost: number;
  note: string;
  /** The server's RSS after the part, in MB (0 when the part ran on a server of its own). */
  rssMb?: number;
}

/** What a run found. */
export interface Report {
  rows: Row[];
  rssBeforeMb: number;
  rssAfterMb: number;
  /** Up to 20 examples of 5xx answers, hangs and losses, for a report. */
  examples: string[];
}

/** Options of {@linkcode runReliability}. */
export interface ReliabilityOptions {
  /** Fewer inputs and shorter phases (the test suite's run). */
  quick?: boolean;
  /** The fuzzer's seed. */
  seed?: number;
  /** The Python interpreter for the Python backend (stub kills); the stub phase is skipped without one. */
  python?: string;
  /** Progress lines. */
  log?: (line: string) => void;
}

function freePorts(n: number): number[] {
  const ls = Array.from({ length: n }, () => Deno.listen({ hostname: "127.0.0.1", port: 0 }));
  const ports = ls.map((l) => (l.addr as Deno.NetAddr).port);
  for (const l of ls) l.close();
  return ports;
}

interface Server {
  child: Deno.ChildProcess;
  http: string;
  grpc: string;
  pid: number;
  exited: () => boolean;
  status: Promise<Deno.CommandStatus>;
  stop(): Promise<void>;
}

async function startServer(flags: string[]): Promise<Server> {
  const [http, grpcPort, metrics] = freePorts(3);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "main.ts",
      `--http-port=${http}`,
      `--grpc-port=${grpcPort}`,
      `--metrics-port=${metrics}`,
      "--http-address=127.0.0.1",
      "--grpc-address=127.0.0.1",
      "--metrics-address=127.0.0.1",
      "--log-info=false",
      "--log-warning=false",
      "--log-error=false",
      ...flags,
    ],
    cwd: ROOT,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  let done = false;
  const status = child.status.then((s) => {
    done = true;
    return s;
  });
  const url = `http://127.0.0.1:${http}`;
  for (let i = 0; i < 600; i++) {
    if (done) throw new Error("The server exited while starting");
    try {
      const r = await fetch(`${url}/v2/health/live`);
      await r.body?.cancel();
      if (r.status === 200) break;
    } catch {
      // Not yet.
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    child,
    http: url,
    grpc: `127.0.0.1:${grpcPort}`,
    pid: child.pid,
    exited: () => done,
    status,
    stop: async () => {
      if (!done) child.kill("SIGTERM");
      const timer = setTimeout(() => !done && child.kill("SIGKILL"), 40_000);
      await status;
      clearTimeout(timer);
    },
  };
}

function rssMb(pid: number): number {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(Deno.readTextFileSync(`/proc/${pid}/status`));
    return m ? Math.round(Number(m[1]) / 1024) : 0;
  } catch {
    return 0;
  }
}

/** A small seeded PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WEIRD: unknown[] = [
  null,
  true,
  -1,
  0,
  1e400,
  -1e400,
  2 ** 64,
  1.5,
  "",
  "x".repeat(1000),
  "\u0000",
  "../../etc/passwd",
  [],
  {},
  [[[[[[]]]]]],
  { a: { b: { c: 1 } } },
  "TYPE_FP32",
  "INT32",
  "BYTES",
  [1e12],
  [-1],
  [1, 1e12],
];

/** A random change somewhere in a JSON value: a replaced, removed or added field or element. */
function mutate(value: unknown, rnd: () => number, depth = 0): unknown {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  if (depth > 6 || value === null || typeof value !== "object" || rnd() < 0.25) {
    return rnd() < 0.1 ? "[".repeat(5000) : pick(WEIRD);
  }
  if (Array.isArray(value)) {
    const out = [...value];
    const action = rnd();
    if (out.length > 0 && action < 0.6) {
      const i = Math.floor(rnd() * out.length);
      out[i] = mutate(out[i], rnd, depth + 1);
    } else if (out.length > 0 && action < 0.8) out.splice(Math.floor(rnd() * out.length), 1);
    else out.push(pick(WEIRD));
    return out;
  }
  const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  const keys = Object.keys(out);
  const action = rnd();
  if (keys.length > 0 && action < 0.6) {
    const k = pick(keys);
    out[k] = mutate(out[k], rnd, depth + 1);
  } else if (keys.length > 0 && action < 0.8) delete out[pick(keys)];
  else out[pick(["parameters", "inputs", "outputs", "binary_data", "shape", "data", "extra"])] = pick(WEIRD);
  return out;
}

const INFER_SIMPLE = {
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(2) },
  ],
  outputs: [{ name: "OUTPUT0", parameters: { binary_data: false } }],
};
const INFER_STRING = {
  inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1, 2], data: ["a", "b"] }],
};
const INFER_FP32 = { inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 3], data: [1, 2, 3] }] };

/** HTTP requests to fuzz: method, path, a valid body to start from. */
const HTTP_SEEDS: [string, string, unknown][] = [
  ["POST", "/v2/models/simple/infer", INFER_SIMPLE],
  ["POST", "/v2/models/identity_string/infer", INFER_STRING],
  ["POST", "/v2/models/identity_fp32/infer", INFER_FP32],
  ["POST", "/v2/models/simple_sequence/infer", {
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [1] }],
    parameters: { sequence_id: 7, sequence_start: true },
  }],
  ["POST", "/v2/repository/index", { ready: true }],
  ["POST", "/v2/repository/models/identity_int8/load", {
    parameters: { config: JSON.stringify({ name: "identity_int8", max_batch_size: 2 }) },
  }],
  ["POST", "/v2/repository/models/nosuch/unload", { parameters: { unload_dependents: true } }],
  ["POST", "/v2/systemsharedmemory/region/r/register", { key: "/nosuch", offset: 0, byte_size: 8 }],
  ["POST", "/v2/systemsharedmemory/region/r/unregister", {}],
  ["POST", "/v2/logging", { log_verbose_level: 0 }],
  ["POST", "/v2/trace/setting", { trace_rate: "1000" }],
  ["POST", "/v2/models/simple/trace/setting", { trace_level: ["OFF"] }],
];
const HTTP_GETS = ["/v2", "/v2/models/simple", "/v2/models/simple/config", "/v2/models/stats", "/v2/logging"];

/** Whether a status is a server error that a client's input caused (a bug): 5xx except 501 and 503. */
function serverError(status: number): boolean {
  return status >= 500 && status !== 501 && status !== 503;
}

async function timed<T>(p: Promise<T>, ms: number): Promise<T | "hang"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const t = new Promise<"hang">((r) => (timer = setTimeout(() => r("hang"), ms)));
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

async function fuzzHttp(server: Server, n: number, rnd: () => number, examples: string[]): Promise<Row> {
  const row: Row = { part: "HTTP fuzz", inputs: 0, crashes: 0, hangs: 0, serverErrors: 0, lost: 0, note: "" };
  const enc = new TextEncoder();
  const one = async () => {
    let method = "POST", path: string, body: BodyInit | undefined, headers: Record<string, string> = {};
    const kind = rnd();
    if (kind < 0.1) {
      method = "GET";
      path = HTTP_GETS[Math.floor(rnd() * HTTP_GETS.length)]!;
    } else {
      const [m, p, seed] = HTTP_SEEDS[Math.floor(rnd() * HTTP_SEEDS.length)]!;
      method = m;
      path = p;
      const json = JSON.stringify(rnd() < 0.9 ? mutate(seed, rnd) : seed);
      if (kind < 0.2) {
        // Binary form with a header length that may lie.
        const bytes = enc.encode(json);
        const extra = new Uint8Array(Math.floor(rnd() * 64)).map(() => Math.floor(rnd() * 256));
        headers = { "inference-header-content-length": String(Math.floor(rnd() * (bytes.length + 80))) };
        body = new Uint8Array([...bytes, ...extra]);
      } else if (kind < 0.25) {
        body = json.slice(0, Math.floor(rnd() * json.length)); // truncated
      } else {
        body = json;
      }
    }
    row.inputs++;
    const r = await timed(
      fetch(server.http + path, { method, body, headers }).then(async (res) => {
        await res.arrayBuffer();
        return res.status;
      }).catch((e) => `error: ${(e as Error).message}`),
      15_000,
    );
    if (r === "hang") {
      row.hangs++;
      if (examples.length < 20) examples.push(`HTTP hang: ${method} ${path}`);
    } else if (typeof r === "string") {
      if (server.exited()) row.crashes = 1;
      else row.lost++;
      if (examples.length < 20) examples.push(`HTTP ${method} ${path}: ${r}`);
    } else if (serverError(r)) {
      row.serverErrors++;
      if (examples.length < 20) examples.push(`HTTP ${r}: ${method} ${path} ${String(body).slice(0, 200)}`);
    }
  };
  const workers = 8;
  await Promise.all(Array.from({ length: workers }, async (_, w) => {
    for (let i = w; i < n && !server.exited(); i += workers) await one();
  }));
  if (server.exited()) row.crashes = 1;
  return row;
}

const GRPC_SEEDS: [string, Record<string, unknown>][] = [
  ["ModelInfer", {
    model_name: "simple",
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], contents: { int_contents: Array(16).fill(1) } },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], contents: { int_contents: Array(16).fill(2) } },
    ],
  }],
  ["ModelInfer", {
    model_name: "identity_string",
    inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1, 1] }],
    raw_input_contents: [Buffer.from([1, 0, 0, 0, 97])],
  }],
  ["ModelMetadata", { name: "simple" }],
  ["ModelConfig", { name: "simple" }],
  ["ModelStatistics", { name: "simple" }],
  ["RepositoryIndex", { ready: true }],
  ["RepositoryModelUnload", { model_name: "nosuch" }],
  ["SystemSharedMemoryRegister", { name: "r", key: "/nosuch", offset: 0, byte_size: 8 }],
  ["SystemSharedMemoryStatus", {}],
  ["LogSettings", { settings: { log_verbose_level: { uint32_param: 0 } } }],
  ["TraceSetting", { settings: { trace_rate: { value: ["1000"] } } }],
];

async function fuzzGrpc(server: Server, n: number, rnd: () => number, examples: string[]): Promise<Row> {
  const row: Row = { part: "gRPC fuzz", inputs: 0, crashes: 0, hangs: 0, serverErrors: 0, lost: 0, note: "" };
  const client = new grpc.Client(server.grpc, grpc.credentials.createInsecure());
  const one = async () => {
    const [method, seed] = GRPC_SEEDS[Math.floor(rnd() * GRPC_SEEDS.length)]!;
    const type = lookupType(`${method}Request`);
    let bytes: Uint8Array;
    const kind = rnd();
    if (kind < 0.5) {
      // A valid message with a changed field (values that protobuf cannot take fall back to the seed).
      try {
        bytes = type.encode(type.fromObject(mutate(seed, rnd) as Record<string, unknown>)).finish();
      } catch {
        bytes = type.encode(type.fromObject(seed)).finish();
      }
    } else {
      // Wire-level damage: flipped bytes, cut short, random tails.
      bytes = new Uint8Array(type.encode(type.fromObject(seed)).finish());
      const flips = 1 + Math.floor(rnd() * 4);
      for (let i = 0; i < flips && bytes.length > 0; i++) {
        bytes[Math.floor(rnd() * bytes.length)] = rnd() * 256;
      }
      if (rnd() < 0.3) bytes = bytes.subarray(0, Math.floor(rnd() * bytes.length));
    }
    row.inputs++;
    const r = await timed(
      new Promise<number>((resolve) => {
        client.makeUnaryRequest(
          `/inference.GRPCInferenceService/${method}`,
          (b: Uint8Array) => Buffer.from(b),
          (b: Buffer) => b,
          bytes,
          { deadline: Date.now() + 15_000 },
          (err) => resolve(err?.code ?? 0),
        );
      }),
      16_000,
    );
    if (r === "hang" || r === grpc.status.DEADLINE_EXCEEDED) {
      row.hangs++;
      if (examples.length < 20) examples.push(`gRPC hang: ${method}`);
    } else if (r === grpc.status.INTERNAL || r === grpc.status.UNKNOWN) {
      row.serverErrors++;
      if (examples.length < 20) {
        examples.push(`gRPC status ${r}: ${method} ${Buffer.from(bytes).toString("hex").slice(0, 200)}`);
      }
    } else if (r === grpc.status.UNAVAILABLE && server.exited()) {
      row.crashes = 1;
    }
  };
  const workers = 8;
  await Promise.all(Array.from({ length: workers }, async (_, w) => {
    for (let i = w; i < n && !server.exited(); i += workers) await one();
  }));
  client.close();
  if (server.exited()) row.crashes = 1;
  return row;
}

async function alive(server: Server): Promise<boolean> {
  const r = await timed(
    fetch(`${server.http}/v2/health/live`).then(async (res) => {
      await res.body?.cancel();
      return res.status === 200;
    }).catch(() => false),
    10_000,
  );
  return r === true;
}

/** The HTTP connection limit and header timeout of the suite's server (the flood goes past the limit). */
function connectionFlags(quick: boolean): string[] {
  return [`--http-max-connections=${quick ? 200 : 2000}`, `--http-header-timeout-secs=${HEADER_TIMEOUT_S}`];
}
const HEADER_TIMEOUT_S = 2;

async function flood(server: Server, connections: number, limit: number): Promise<Row> {
  const row: Row = {
    part: "connection flood",
    inputs: connections,
    crashes: 0,
    hangs: 0,
    serverErrors: 0,
    lost: 0,
    note: "",
  };
  const port = Number(new URL(server.http).port);
  const conns: Deno.Conn[] = [];
  let failed = 0;
  for (let i = 0; i < connections; i++) {
    try {
      conns.push(await Deno.connect({ hostname: "127.0.0.1", port }));
    } catch {
      failed++;
    }
  }
  // Past --http-max-connections a connection is answered 503 and closed at once; the others stay open.
  const seen = await Promise.all(conns.map((c) => readUntilClosed(c, 1_000)));
  const refused = seen.filter((r) => r.closed && r.text.startsWith("HTTP/1.1 503 ")).length;
  const held = seen.filter((r) => !r.closed).length;
  const other = seen.length - refused - held;
  // A new connection while the flood holds the server's connections.
  let during = "not connected";
  try {
    const c = await Deno.connect({ hostname: "127.0.0.1", port });
    await c.write(new TextEncoder().encode("GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"));
    const { text } = await readUntilClosed(c, 2_000);
    during = text.split("\r\n")[0] || "no answer";
    c.close();
  } catch (err) {
    during = (err as Error).message;
  }
  for (const c of conns) {
    try {
      c.close();
    } catch {
      // Closed by the server.
    }
  }
  await new Promise((r) => setTimeout(r, 500));
  const after = await alive(server);
  if (server.exited()) row.crashes = 1;
  else if (!after) row.hangs = 1;
  row.note = `limit ${limit}: ${held} held, ${refused} answered 503 and closed, ${other} closed otherwise, ` +
    `${failed} not connected; a new connection while full: ${during}; answering after: ${after}`;
  return row;
}

async function slowloris(server: Server, connections: number): Promise<Row> {
  const row: Row = {
    part: "slowloris",
    inputs: connections,
    crashes: 0,
    hangs: 0,
    serverErrors: 0,
    lost: 0,
    note: "",
  };
  const port = Number(new URL(server.http).port);
  const conns: Deno.Conn[] = [];
  for (let i = 0; i < connections; i++) {
    try {
      const c = await Deno.connect({ hostname: "127.0.0.1", port });
      await c.write(new TextEncoder().encode("POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"));
      conns.push(c);
    } catch {
      break;
    }
  }
  const ok = await alive(server);
  // The server closes each after --http-header-timeout-secs (checked a few times per timeout).
  const seen = await Promise.all(conns.map((c) => readUntilClosed(c, HEADER_TIMEOUT_S * 1000 + 3_000)));
  const closed = seen.filter((r) => r.closed).length;
  for (const c of conns) {
    try {
      c.close();
    } catch {
      // Closed by the server.
    }
  }
  if (server.exited()) row.crashes = 1;
  else if (!ok || closed < conns.length) row.hangs = 1;
  row.note =
    `${conns.length} half-sent requests held; others answered: ${ok}; ${closed} closed by the server ` +
    `within --http-header-timeout-secs=${HEADER_TIMEOUT_S} + 3 s`;
  return row;
}

/** Steady inference load; resolves with [sent, answered 200, other answers] once `stop()` is called. */
function load(url: string, workers: number) {
  let stopped = false;
  let sent = 0, ok = 0;
  const bad: string[] = [];
  const body = JSON.stringify(INFER_SIMPLE);
  const runs = Array.from({ length: workers }, async () => {
    while (!stopped) {
      sent++;
      try {
        const r = await fetch(`${url}/v2/models/simple/infer`, { method: "POST", body });
        const text = await r.text();
        if (r.status === 200) ok++;
        else bad.push(`${r.status} ${text.slice(0, 200)}`);
      } catch (err) {
        bad.push((err as Error).message);
        if (stopped) break;
      }
    }
  });
  return {
    stop: async () => {
      stopped = true;
      await Promise.all(runs);
      return { sent, ok, bad };
    },
    stopAfter: () => {
      stopped = true;
    },
    done: () => Promise.all(runs).then(() => ({ sent, ok, bad })),
  };
}

async function reloadUnderLoad(server: Server, reloads: number, examples: string[]): Promise<Row> {
  const row: Row = {
    part: "reload under load",
    inputs: 0,
    crashes: 0,
    hangs: 0,
    serverErrors: 0,
    lost: 0,
    note: "",
  };
  const l = load(server.http, 4);
  for (let i = 0; i < reloads; i++) {
    const r = await fetch(`${server.http}/v2/repository/models/simple/load`, { method: "POST", body: "{}" });
    await r.body?.cancel();
    if (r.status !== 200) row.serverErrors++;
  }
  const { sent, ok, bad } = await l.stop();
  row.inputs = sent + reloads;
  row.lost = sent - ok;
  for (const b of bad.slice(0, 3)) if (examples.length < 20) examples.push(`reload: ${b}`);
  if (server.exited()) row.crashes = 1;
  row.note = `${reloads} reloads of 'simple' during ${sent} requests`;
  return row;
}

async function stubKills(server: Server, kills: number, examples: string[]): Promise<Row> {
  const row: Row = {
    part: "stub kills",
    inputs: kills,
    crashes: 0,
    hangs: 0,
    serverErrors: 0,
    lost: 0,
    note: "",
  };
  const action = async (n: number) => {
    const r = await fetch(`${server.http}/v2/models/crash_py/infer`, {
      method: "POST",
      body: JSON.stringify({ inputs: [{ name: "ACTION", datatype: "INT32", shape: [1], data: [n] }] }),
    });
    return { status: r.status, json: await r.json().catch(() => undefined) };
  };
  let recovered = 0;
  for (let i = 0; i < kills; i++) {
    let r = await action(0);
    for (let w = 0; r.status !== 200 && w < 100; w++) {
      await new Promise((res) => setTimeout(res, 50));
      r = await action(0);
    }
    if (r.status !== 200) {
      row.lost++;
      continue;
    }
    const pid = r.json.outputs[0].data[0] as number;
    Deno.kill(pid, "SIGKILL");
    const after = await action(0);
    const error = String(after.json?.error ?? "");
    if (after.status === 200 || /the Python stub (has died|was killed by SIGKILL)/.test(error)) recovered++;
    else if (examples.length < 20) examples.push(`stub kill: ${after.status} ${error}`);
  }
  if (server.exited()) row.crashes = 1;
  row.serverErrors = kills - recovered - row.lost;
  row.note = `each answered 200 or 'the Python stub has died / was killed'`;
  return row;
}

async function sigtermUnderLoad(flags: string[], examples: string[]): Promise<Row> {
  const row: Row = {
    part: "SIGTERM under load",
    inputs: 0,
    crashes: 0,
    hangs: 0,
    serverErrors: 0,
    lost: 0,
    note: "",
  };
  const server = await startServer(flags);
  const l = load(server.http, 8);
  await new Promise((r) => setTimeout(r, 1000));
  server.child.kill("SIGTERM");
  l.stopAfter();
  const { sent, ok, bad } = await l.done();
  const status = await timed(server.status, 40_000);
  row.inputs = sent;
  // A request sent after the listener closed is refused (not lost); lost are 5xx answers or cut connections.
  const lost = bad.filter((b) => !/Connection refused|error trying to connect|tcp connect error/i.test(b));
  row.lost = lost.length;
  for (const b of lost.slice(0, 3)) if (examples.length < 20) examples.push(`SIGTERM: ${b}`);
  if (status === "hang") {
    row.hangs = 1;
    server.child.kill("SIGKILL");
  } else if (status.code !== 0) row.crashes = 1;
  row.note = `${ok} answered, ${bad.length - lost.length} refused after the listener closed; exit ${
    status === "hang" ? "hang" : status.code
  }`;
  return row;
}

/**
 * Runs the suite against fresh server processes.
 * @param options quick mode, seed, Python interpreter, progress
 * @returns the table and the server's RSS
 */
export async function runReliability(options: ReliabilityOptions = {}): Promise<Report> {
  const quick = options.quick ?? false;
  const rnd = prng(options.seed ?? 1);
  const log = options.log ?? (() => {});
  const examples: string[] = [];
  const flags = [
    `--model-repository=${EXAMPLES}`,
    `--model-repository=${FIXTURES}`,
    ...(options.python
      ? [`--model-repository=${PYTHON_MODELS}`, `--backend-config=python,python-executable=${options.python}`]
      : []),
    "--model-control-mode=explicit",
    "--load-model=simple",
    "--load-model=simple_sequence",
    "--load-model=identity_string",
    "--load-model=identity_fp32",
    "--load-model=identity_int8",
    ...(options.python ? ["--load-model=crash_py"] : []),
    "--strict-readiness=false",
    ...connectionFlags(quick),
  ];
  const server = await startServer(flags);
  try {
    return await runAgainst(server, flags, {
      quick,
      rnd,
      log,
      examples,
      python: options.python !== undefined,
    });
  } finally {
    await server.stop();
  }
}

async function runAgainst(
  server: Server,
  flags: string[],
  run: {
    quick: boolean;
    rnd: () => number;
    log: (line: string) => void;
    examples: string[];
    python: boolean;
  },
): Promise<Report> {
  const { quick, rnd, log, examples } = run;
  const rows: Row[] = [];
  // Warm up, then take the RSS before the fuzzing.
  for (let i = 0; i < 200; i++) {
    const r = await fetch(`${server.http}/v2/models/simple/infer`, {
      method: "POST",
      body: JSON.stringify(INFER_SIMPLE),
    });
    await r.body?.cancel();
  }
  const rssBeforeMb = rssMb(server.pid);
  try {
    log("HTTP fuzz");
    rows.push({ ...await fuzzHttp(server, quick ? 1500 : 8000, rnd, examples), rssMb: rssMb(server.pid) });
    log("gRPC fuzz");
    rows.push({ ...await fuzzGrpc(server, quick ? 1000 : 6000, rnd, examples), rssMb: rssMb(server.pid) });
    log("connection flood");
    rows.push({ ...await flood(server, quick ? 300 : 3000, quick ? 200 : 2000), rssMb: rssMb(server.pid) });
    log("slowloris");
    rows.push({ ...await slowloris(server, quick ? 100 : 1000), rssMb: rssMb(server.pid) });
    log("reload under load");
    rows.push({ ...await reloadUnderLoad(server, quick ? 5 : 30, examples), rssMb: rssMb(server.pid) });
    if (run.python) {
      log("stub kills");
      rows.push({ ...await stubKills(server, quick ? 2 : 10, examples), rssMb: rssMb(server.pid) });
    }
  } finally {
    await new Promise((r) => setTimeout(r, 2000));
  }
  // An idle server gives memory back within about two seconds (server/core/memory.ts); on a loaded machine its
  // timer may run late, so the RSS is read again for up to 10 s more until it is back within 20%.
  let rssAfterMb = rssMb(server.pid);
  for (let waited = 0; rssAfterMb > rssBeforeMb * 1.2 && waited < 10_000; waited += 250) {
    await new Promise((r) => setTimeout(r, 250));
    rssAfterMb = rssMb(server.pid);
  }
  await server.stop();
  log("SIGTERM under load");
  rows.push(await sigtermUnderLoad(flags.filter((f) => !/python|crash_py/.test(f)), examples));
  return { rows, rssBeforeMb, rssAfterMb, examples };
}

/**
 * The report as a table.
 * @param report what a run found
 */
export function formatReport(report: Report): string {
  const head = ["part", "inputs", "crashes", "hangs", "5xx", "lost", "RSS MB", "note"];
  const lines = report.rows.map((r) =>
    [r.part, r.inputs, r.crashes, r.hangs, r.serverErrors, r.lost, r.rssMb ? r.rssMb : "", r.note].map(String)
  );
  const total = report.rows.reduce(
    (t, r) => [t[0]! + r.inputs, t[1]! + r.crashes, t[2]! + r.hangs, t[3]! + r.serverErrors, t[4]! + r.lost],
    [0, 0, 0, 0, 0],
  );
  lines.push([
    "total",
    ...total.map(String),
    String(report.rssAfterMb),
    `RSS ${report.rssBeforeMb} MB before the fuzzing, ${report.rssAfterMb} MB after the last part and 2 to 12 s of rest`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cells: string[]) => "| " + cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ") + " |";
  return [fmt(head), fmt(widths.map((w) => "-".repeat(w))), ...lines.map(fmt)].join("\n") +
    (report.examples.length > 0 ? "\n\nExamples:\n" + report.examples.map((e) => `- ${e}`).join("\n") : "");
}

if (import.meta.main) {
  const quick = Deno.args.includes("--quick");
  const seed = Number(Deno.args.find((a) => a.startsWith("--seed="))?.slice(7) ?? "1");
  const python = Deno.env.get("DINFER_PYTHON") ?? `${ROOT}.venv/bin/python`;
  const havePython = (() => {
    try {
      Deno.statSync(python);
      return true;
    } catch {
      return false;
    }
  })();
  const report = await runReliability({
    quick,
    seed,
    python: havePython ? python : undefined,
    log: (l) => console.error(`- ${l}`),
  });
  console.log(formatReport(report));
  Deno.exit(0);
}
