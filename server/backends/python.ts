/**
 * The Python backend (`backend: "python"`, `<version>/model.py`): runs Triton-style `TritonPythonModel`
 * classes unchanged, one stub process per model instance (server/backends/python/stub.py). Messages go as
 * frames, the server's through a pipe (a FIFO the stub makes) and the stub's over a Unix socket: a 4-byte
 * little-endian length of the rest, a 4-byte length of the JSON header, a 4-byte tag (an execute call's id,
 * also on its result; else 0), the header, then the payload. A pipe from the server, because the reader of a
 * Unix socket wakes its writer whenever it takes data (room to write again): each call would wake the event
 * loop once more, and a stub waiting on its socket once more too. A frame goes into the pipe with a plain
 * write (no promise, no thread) when it is sure to fit: the pages of what the stub has not yet answered and
 * the frame's own stay within the pipe's size, which the stub reports; otherwise a thread writes it. Small tensors
 * (up to 64 KiB per message in all) travel inline in the payload, so that a request costs one write and one
 * read each way; larger ones go through a shared-memory file per instance, which the stub maps so that its
 * numpy inputs are views, not copies. A call that finds the stub with nothing to do is written at once; the
 * frames sent while it has calls, in the same run of microtasks, go out in one write, and the stub answers
 * quick calls that it has already read in one write too, so that under load each side wakes once for several
 * calls. A stub looks for its next message for a while (800 µs by default) before it sleeps,
 * where its recent waits were about as short and a core is free for it (see waitSpinUs).
 *
 * The interpreter: the model parameter `python_executable` (or `EXECUTION_ENV_PATH`, an unpacked environment
 * folder whose `bin/python3` is used), else `--backend-config=python,python-executable=...`, else the
 * `DINFER_PYTHON` environment variable, else `python3` from PATH. An execution that takes longer than
 * `execute_timeout_ms` (parameter, or `--backend-config=python,execute-timeout-ms=...`; 0, the default, waits
 * forever) kills the stub; a stub that dies fails its in-flight requests and is started again. The spin before
 * a stub sleeps: parameter `wait_spin_us`, else `--backend-config=python,wait-spin-us=...` (0 never spins).
 * @module
 */

import { concatBytes } from "../core/bytes.ts";
import { BytesTensor } from "../core/bytes_tensor.ts";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import {
  type Datatype,
  elementCount,
  elementSize,
  fromConfigType,
  parseJsonExact,
  rawJSON,
} from "../core/dtypes.ts";
import {
  type ErrorCode,
  internal,
  invalidArg,
  ServerError,
  unavailable,
  unsupported,
} from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { InferRequest, ParamValue, Tensor } from "../core/types.ts";
import { printError } from "../logging.ts";
import {
  type Backend,
  type BackendInstance,
  type BackendOutputs,
  type BackendRequest,
  type InstanceContext,
  RescheduledRequest,
  RESPONSE_PARAMETERS,
  type ServerAccess,
} from "./backend.ts";
import { Slab } from "../core/slab.ts";
import { IdTable } from "../core/id_table.ts";
import { SmallCache } from "../core/small_cache.ts";
import { settleWithin } from "../core/clock.ts";
import { SpinBackoff, spinUntilReadable, unixSocketFd } from "../core/fd_poll.ts";

/** Request parameters the server acts on itself; as in Triton, the model's `request.parameters()` leaves them out. */
const SERVER_PARAMETERS = new Set(["priority", "timeout", "sequence_id", "sequence_start", "sequence_end"]);

const STUB_PATH = fileURLToPath(new URL("./python/stub.py", import.meta.url));
const ALIGN = 64;
const INITIAL_SHM_BYTES = 1 << 20;
/** Tensors of one message travel inline up to this many bytes in all (the stub uses the same limit). */
const INLINE_MAX = 64 * 1024;
const START_TIMEOUT_MS = 120_000;
/** Batches an instance takes before the first is answered (see `PythonInstance.pipelineDepth`). */
const PIPELINE_DEPTH = 8;
const FINALIZE_TIMEOUT_MS = 10_000;
const ERROR_CODES = new Set<string>([
  "INVALID_ARG",
  "NOT_FOUND",
  "UNAVAILABLE",
  "UNSUPPORTED",
  "INTERNAL",
  "ALREADY_EXISTS",
  "CANCELLED",
  "UNKNOWN",
]);

/** Padding bytes (read only). */
const ZEROS = new Uint8Array(8);
/** Frames are cut from slabs of this size (see `Stub.#slab`). */
const SLAB_BYTES = 256 * 1024;
const EMPTY = new Uint8Array(0);

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function getUint32(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}

function putUint32(b: Uint8Array, at: number, v: number): void {
  b[at] = v;
  b[at + 1] = v >>> 8;
  b[at + 2] = v >>> 16;
  b[at + 3] = v >>> 24;
}

/** Frames as one buffer: a view when they follow each other in one buffer, else a copy. */
function joinFrames(frames: readonly Uint8Array[]): Uint8Array {
  const first = frames[0]!;
  if (frames.length === 1) return first;
  let end = first.byteOffset + first.byteLength;
  let total = first.byteLength;
  let contiguous = true;
  for (let i = 1; i < frames.length; i++) {
    const f = frames[i]!;
    contiguous &&= f.buffer === first.buffer && f.byteOffset === end;
    end = f.byteOffset + f.byteLength;
    total += f.byteLength;
  }
  if (contiguous) return new Uint8Array(first.buffer, first.byteOffset, total);
  return concatBytes(frames, total);
}

function align(n: number): number {
  return Math.ceil(n / ALIGN) * ALIGN;
}

function parameter(config: ModelConfig, key: string): string {
  return config.parameters?.[key]?.string_value ?? "";
}

/**
 * The interpreter a model's stubs run with (see the module doc for the order).
 * @param config the model config
 * @param backendConfig `--backend-config=python,...` settings
 */
export function pythonExecutable(config: ModelConfig, backendConfig: Record<string, string>): string {
  const own = parameter(config, "python_executable");
  if (own) return own;
  const env = parameter(config, "EXECUTION_ENV_PATH");
  if (env) {
    if (/\.(tar\.gz|tgz|tar)$/.test(env)) {
      throw unsupported(
        `Cannot load '${config.name}': EXECUTION_ENV_PATH '${env}' is an archive; unpack it and name the folder`,
      );
    }
    return join(env.replace("$$TRITON_MODEL_DIRECTORY", ""), "bin", "python3");
  }
  return backendConfig["python-executable"] || Deno.env.get("DINFER_PYTHON") || "python3";
}

function executeTimeoutMs(config: ModelConfig, backendConfig: Record<string, string>): number {
  const v = parameter(config, "execute_timeout_ms") || backendConfig["execute-timeout-ms"] || "0";
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) {
    throw invalidArg(
      `Cannot load '${config.name}': execute_timeout_ms is '${v}', expected milliseconds >= 0`,
    );
  }
  return n;
}

/** The longest a stub spins for the next message by default (see waitSpinUs), in µs. */
export const DEFAULT_WAIT_SPIN_US = 800;
/** The longest spin a config may ask for, in µs. */
const MAX_WAIT_SPIN_US = 10_000;

/**
 * How long a stub, its last message handled, keeps looking for the next one before it sleeps, in µs: the
 * parameter `wait_spin_us`, else `--backend-config=python,wait-spin-us=...`, else DEFAULT_WAIT_SPIN_US; 0 never
 * spins. A stub that sleeps costs a wake-up per message on both sides (the server's write wakes it, and its
 * answer lands on a server that had nothing else to do): on a virtual machine a wake-up on an idle core takes
 * tens of µs. A stub spins only while requests arrive one at a time and the server's stubs are at most half
 * the cores (spinAllowance), only when the machine's tasks ready to run exceed the cores by at most one (the
 * stub reads /proc/loadavg; see `_CORE_SLACK` in stub.py), and only while its recent waits averaged under 1.5
 * times the spin (the next wait is likely alike; `SPIN_COVER` in stub.py), so that a model called now and then sleeps between calls and a busy machine's cores go to the
 * threads with work. bench/ab.ts against the same server without spinning (add_sub_py, one instance, 2 cores,
 * 2026-11-27; CPU of the server and its stub together), with 200 µs: at 1 connection 1.45x the requests per
 * second over HTTP JSON with 1.18x the CPU per request, 1.34x over HTTP binary with 1.26x; at 8 connections
 * over HTTP binary 1.06x with 1.03x.
 * 400 µs against 200: 1.25x over HTTP JSON and 1.32x over HTTP binary at 1 connection, 1.12x at 8, each
 * with 0.86-0.92x the CPU per request (fewer spins that end in a sleep); 800 against 400: 1.08x at 1
 * connection (HTTP binary); 100 against 200: 0.79x. Over gRPC at 1 connection a call's round trip is longer:
 * the stub waited about 600 µs between calls, so that a 400 µs spin ended in a sleep for more than half of them
 * (counted in the stub, h2load), and the wake-up that the spin was for cost the server's write 29 µs per call
 * against 9 with 800 µs. 800 (and a spin only where the recent waits averaged under 1.5 times it, SPIN_COVER in
 * stub.py, instead of twice) against 400 (3 rounds of 4 pairs, 2026-11-27, medians of the pairs, totals in
 * brackets): gRPC at 1 connection 1.07x (1.11x), HTTP JSON 1.05x (1.03x), HTTP binary 1.07x (1.07x), HTTP JSON
 * at 2 connections 1.03x (1.02x), each at 0.94-0.99x the CPU per request.
 * @param config the model config
 * @param backendConfig `--backend-config=python,...` settings
 */
export function waitSpinUs(config: ModelConfig, backendConfig: Record<string, string>): number {
  const v = parameter(config, "wait_spin_us") || backendConfig["wait-spin-us"] ||
    String(DEFAULT_WAIT_SPIN_US);
  const n = Number(v);
  if (!/^[0-9]+$/.test(v) || n > MAX_WAIT_SPIN_US) {
    throw invalidArg(
      `Cannot load '${config.name}': wait_spin_us is '${v}', expected whole microseconds from 0 to ${MAX_WAIT_SPIN_US}`,
    );
  }
  return n;
}

/** The longest the server's thread spins for a lone call's answer, µs (see Stub.#spinForAnswer). */
const SERVER_SPIN_US = 200;
/** The most lone calls that go without a spin after spins that missed their answers (see Stub.#spinForAnswer). */
const MAX_SPIN_SKIP = 64;

/** How long the answers a stub wrote before it exited may take to be read, once it has exited. */
const EXIT_DRAIN_MS = 1000;

/** The stub processes of this server process that have started and not exited (all models). */
let liveStubs = 0;

/**
 * How long a stub may spin now, in µs: as configured while requests arrive one at a time and the stubs running
 * are at most half the cores, else 0.
 *
 * - Requests that overlap (one arrives while another is inside a model, see ArrivalCounter.alone) wait behind
 *   each other: the server is busy with the next ones while a stub wakes, so a stub that sleeps delays no one,
 *   and a spin takes a core that the server's threads and its clients need. Against stubs that spun whatever the
 *   arrivals (add_sub_py, one instance, 2 cores, bench/ab.ts, 2026-11-27, 3 rounds each; CPU of the server and
 *   its stub): HTTP JSON at 2, 4 and 8 connections 1.07-1.12x, 1.12-1.19x and 1.04-1.07x the requests at 0.80x,
 *   0.80x and 0.90x the CPU per request, HTTP binary at 8 1.05-1.07x at 0.90x, gRPC (h2load) at 8 1.00x at
 *   0.92x; at one connection, where every request arrives alone, 0.96-1.08x (noise). Those figures are of an
 *   earlier signal, arrivals per event-loop turn, which cost an end-of-turn callback per request at one
 *   connection; the requests inside the models are counted on the way instead, and against it (3 rounds of 4
 *   pairs, 2026-11-27, a noisy machine: medians of the pairs, totals in brackets, CPU per request) HTTP JSON
 *   read 1.13x (1.03x) at 0.95x at 1 connection, 1.05x (1.05x) at 0.93x at 2 and 1.17x (1.12x) at 0.89x at
 *   8, HTTP binary 1.10x (1.05x) at 0.93x at 1.
 * - Spinning stubs hold cores that the server and the stubs with work need: with four instances of one model on
 *   2 cores, stubs that spun after each call served 0.70x the requests of stubs that slept (bench/ab.ts,
 *   python-json, 8 connections, 2026-11-27).
 * @param configured the model's setting (waitSpinUs)
 * @param stubs the stubs running
 * @param cores the cores this process may use (navigator.hardwareConcurrency follows its CPU affinity)
 * @param alone whether requests have been arriving one at a time (true where the server does not count them)
 */
export function spinAllowance(configured: number, stubs: number, cores: number, alone = true): number {
  return alone && stubs <= Math.floor(cores / 2) ? configured : 0;
}

function shmDir(): string {
  try {
    if (Deno.statSync("/dev/shm").isDirectory) return "/dev/shm";
  } catch {
    // No /dev/shm (macOS): a temporary folder serves, through the page cache.
  }
  return Deno.env.get("TMPDIR") || "/tmp";
}

/**
 * A tensor's place, as the stub and the server describe it to each other: in the message's payload when
 * `inline`, else in a shared file.
 */
interface TensorDesc {
  name: string;
  datatype: Datatype;
  shape: number[];
  offset: number;
  nbytes: number;
  inline?: boolean;
}

/** One response of a decoupled request, sent by the stub whenever the model sends it. */
interface StubStreamResponse {
  op: "response";
  id: number;
  index: number;
  flags: number;
  file?: string;
  outputs?: TensorDesc[];
  error?: { message: string; code: string };
  parameters?: Record<string, unknown>;
}

/** What the stub answers for one request. */
interface StubResponse {
  /** Set when the model gave the request back to be run again (`set_release_flags`). */
  rescheduled?: boolean;
  outputs?: TensorDesc[];
  error?: { message: string; code: string };
  /** The response's parameters (`InferenceResponse(parameters=...)`): booleans, integers and strings. */
  parameters?: Record<string, unknown>;
}

/** A message from the stub. */
type StubMessage =
  | { op: "ready"; pipe_pages: number; page_size: number }
  | { op: "init_error"; message: string; trace: string }
  | { op: "result"; responses: StubResponse[] }
  | { op: "error"; message: string; trace: string }
  | { op: "finalized" }
  | StubStreamResponse
  | { op: "log"; level: number; message: string }
  | {
    op: "bls";
    decoupled?: boolean;
    id: number;
    model: string;
    version: string;
    request_id: string;
    /**
     * The sequence the call belongs to (0 or "" for none; a bigint beyond 2^53, as the stub's messages are read
     * exactly), and its start and end flags (1, 2).
     */
    correlation_id?: number | bigint | string;
    flags?: number;
    /** The call's timeout in µs (0 for none). */
    timeout?: number;
    parameters: Record<string, ParamValue>;
    outputs: string[];
    inputs: TensorDesc[];
    /** The shared file of large inputs; absent when they are inline. */
    file?: string;
  }
  | ModelCall
  | MetricCall;

/**
 * A model's call on its own metrics (pb_utils.MetricFamily): `family` and `metric` make one and `value` reads
 * one, answered by a `metric_result` message with the call's id (`handle`, `value` or `error`); `increment`,
 * `set`, `observe` and `drop` are not answered (the stub checks what it can first).
 */
interface MetricCall {
  op: "metric";
  id?: number;
  action: "family" | "metric" | "value" | "increment" | "set" | "observe" | "drop";
  name?: string;
  description?: string;
  kind?: "counter" | "gauge" | "histogram";
  family?: number;
  labels?: Record<string, string>;
  buckets?: number[] | null;
  metric?: number;
  value?: number;
  /** drop: the handles let go of. */
  handles?: number[];
}

/**
 * A model's call to manage the server's models (pb_utils.is_model_ready, load_model, unload_model), answered
 * by a `model_result` message with its id: `ready`, or `error`.
 */
interface ModelCall {
  op: "model";
  id: number;
  action: "ready" | "load" | "unload";
  model: string;
  version?: string;
  /** load: the config override (JSON), and the files, their bytes one after the other in the payload. */
  config?: string;
  files?: { name: string; nbytes: number }[];
  /** unload: whether an ensemble's composing models go with it. */
  unload_dependents?: boolean;
}

/** How often finalize looks whether the decoupled requests still sending have finished, and for how long. */
const SENDERS_POLL_MS = 20;
const SENDERS_WAIT_MS = 60_000;

/** An unload a model asks for goes on after its answer (as in Triton): the answer waits this long at most. */
const UNLOAD_ANSWER_MS = 50;

function writeAt(file: Deno.FsFile, offset: number, bytes: Uint8Array): void {
  file.seekSync(offset, Deno.SeekMode.Start);
  let done = 0;
  while (done < bytes.byteLength) done += file.writeSync(bytes.subarray(done));
}

function readAt(file: Deno.FsFile, offset: number, nbytes: number): Uint8Array {
  const out = new Uint8Array(nbytes);
  file.seekSync(offset, Deno.SeekMode.Start);
  let done = 0;
  while (done < nbytes) {
    const n = file.readSync(out.subarray(done));
    if (n === null || n === 0) throw internal(`Cannot read Python tensor bytes: the shared file ends early`);
    done += n;
  }
  return out;
}

/**
 * Keeps a response's parameters, as the stub sent them, on the map of its outputs (see RESPONSE_PARAMETERS):
 * booleans, strings and integers (those beyond 2^53 as bigints); the stub refuses other values.
 */
function withParameters(out: Map<string, Tensor>, parameters: Record<string, unknown>): BackendOutputs {
  const kept: Record<string, ParamValue> = {};
  let any = false;
  for (const [k, v] of Object.entries(parameters)) {
    if (typeof v === "string" || typeof v === "boolean" || typeof v === "bigint" || Number.isInteger(v)) {
      kept[k] = v as ParamValue;
      any = true;
    }
  }
  if (any) (out as BackendOutputs)[RESPONSE_PARAMETERS] = kept;
  return out;
}

/**
 * Parameters (of a request, of a response) as a message to the stub carries them: integers beyond 2^53 written
 * as their digits, which Python reads as ints, and the keys of `leaveOut` left out; the record itself where
 * neither changes it.
 */
function wireParameters(
  parameters: Readonly<Record<string, ParamValue>>,
  leaveOut?: ReadonlySet<string>,
): Readonly<Record<string, unknown>> {
  for (const [k, v] of Object.entries(parameters)) {
    if (typeof v === "bigint" || leaveOut?.has(k)) {
      return Object.fromEntries(
        Object.entries(parameters).filter(([k]) => !leaveOut?.has(k)).map((
          [k, v],
        ) => [k, typeof v === "bigint" ? rawJSON(v.toString()) : v]),
      );
    }
  }
  return parameters;
}

/** Writes tensors one after another from `start`; returns their descriptions and the end offset. */
function writeTensors(
  file: Deno.FsFile,
  start: number,
  tensors: Iterable<Tensor>,
  size: number,
): { descs: TensorDesc[]; end: number; size: number } {
  const parts: { t: Tensor; bytes: Uint8Array; offset: number }[] = [];
  let offset = align(start);
  for (const t of tensors) {
    const bytes = t.data instanceof Uint8Array ? t.data : t.data.data;
    parts.push({ t, bytes, offset });
    offset = align(offset + bytes.byteLength);
  }
  if (offset > size) {
    size = Math.max(offset, size * 2);
    file.truncateSync(size);
  }
  for (const p of parts) writeAt(file, p.offset, p.bytes);
  const descs = parts.map((p) => ({
    name: p.t.name,
    datatype: p.t.datatype,
    shape: p.t.shape,
    offset: p.offset,
    nbytes: p.bytes.byteLength,
  }));
  return { descs, end: offset, size };
}

/** One request as an execute header describes it to the stub. */
interface WireRequest {
  id: string;
  correlation_id: unknown;
  flags: number;
  parameters: Record<string, unknown>;
  inputs: TensorDesc[];
  outputs: readonly string[];
}

/** What an execute header says (see Stub's #executeHead). */
interface ExecuteForm {
  spin: number;
  shm: boolean;
  shmSize: number;
  end: number;
  requests: WireRequest[];
}

/** The execute headers a stub's server side keeps for calls of the same form (see Stub.#executeHead). */
const EXECUTE_HEADS = 4;

/** The length of a frame's header of `n` bytes, padded so that the payload after it starts 8-aligned (12 + h). */
function padded(n: number): number {
  return ((n + 4 + 7) & ~7) - 4;
}

/** Whether two execute headers would be the same text. */
function sameForm(a: ExecuteForm, b: ExecuteForm): boolean {
  if (
    a.spin !== b.spin || a.shm !== b.shm || a.shmSize !== b.shmSize || a.end !== b.end ||
    a.requests.length !== b.requests.length
  ) {
    return false;
  }
  for (let i = 0; i < a.requests.length; i++) {
    const x = a.requests[i]!, y = b.requests[i]!;
    if (
      x.id !== y.id || x.correlation_id !== y.correlation_id || x.flags !== y.flags ||
      !sameValues(x.parameters, y.parameters) || !sameValues(x.outputs, y.outputs) ||
      x.inputs.length !== y.inputs.length
    ) {
      return false;
    }
    for (let j = 0; j < x.inputs.length; j++) {
      const d = x.inputs[j]!, e = y.inputs[j]!;
      if (
        d.name !== e.name || d.datatype !== e.datatype || d.offset !== e.offset || d.nbytes !== e.nbytes ||
        d.inline !== e.inline || !sameValues(d.shape, e.shape)
      ) {
        return false;
      }
    }
  }
  return true;
}

/** Whether two arrays, or two records, hold the same keys with the same values (===), in the same order. */
function sameValues(
  a: Record<string, unknown> | readonly unknown[],
  b: Record<string, unknown> | readonly unknown[],
): boolean {
  if (a === b) return true;
  const ka = Object.keys(a), kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (let i = 0; i < ka.length; i++) {
    const k = ka[i]!;
    if (k !== kb[i] || (a as Record<string, unknown>)[k] !== (b as Record<string, unknown>)[k]) return false;
  }
  return true;
}

/** A copy of `form` that the requests it came from cannot change. */
function ownForm(form: ExecuteForm): ExecuteForm {
  return {
    ...form,
    requests: form.requests.map((r) => ({
      ...r,
      parameters: { ...r.parameters },
      inputs: r.inputs.map((d) => ({ ...d, shape: [...d.shape] })),
      outputs: [...r.outputs],
    })),
  };
}

/** Tensors laid out for a message's payload: their descriptions, the parts and the payload size. */
interface Packed {
  descs: TensorDesc[];
  parts: Uint8Array[];
  size: number;
}

/** The bytes of tensors as they travel (BYTES serialized), with their total size rounded up to 8 each. */
function tensorBytes(tensors: Iterable<Tensor>): { t: Tensor; bytes: Uint8Array }[] {
  const out: { t: Tensor; bytes: Uint8Array }[] = [];
  for (const t of tensors) {
    out.push({
      t,
      bytes: t.data instanceof Uint8Array ? t.data : t.data.data,
    });
  }
  return out;
}

function inlineSize(items: readonly { bytes: Uint8Array }[]): number {
  let n = 0;
  for (const i of items) n += (i.bytes.byteLength + 7) & ~7;
  return n;
}

/** Lays tensors out inline, after `packed.size` bytes of payload (8-aligned each). */
function packInline(items: readonly { t: Tensor; bytes: Uint8Array }[], packed: Packed): TensorDesc[] {
  const descs: TensorDesc[] = [];
  for (const { t, bytes } of items) {
    descs.push({
      name: t.name,
      datatype: t.datatype,
      shape: t.shape,
      offset: packed.size,
      nbytes: bytes.byteLength,
      inline: true,
    });
    packed.parts.push(bytes);
    packed.size += bytes.byteLength;
    const pad = -bytes.byteLength & 7;
    if (pad) {
      packed.parts.push(ZEROS.subarray(0, pad));
      packed.size += pad;
    }
  }
  packed.descs.push(...descs);
  return descs;
}

/**
 * Reads a tensor the other side described: from the payload when inline (a view: the caller passes a payload
 * of its own, see {@linkcode ownPayload}), else from the file.
 */
function readTensor(
  file: Deno.FsFile | undefined,
  d: TensorDesc,
  what: string,
  payload?: Uint8Array,
): Tensor {
  let bytes: Uint8Array;
  if (d.inline) {
    if (!payload || d.offset < 0 || d.offset + d.nbytes > payload.byteLength) {
      throw internal(`Cannot read ${what}: its bytes lie outside the message`);
    }
    bytes = payload.subarray(d.offset, d.offset + d.nbytes);
  } else {
    if (!file) throw internal(`Cannot read ${what}: the message names no shared file`);
    bytes = readAt(file, d.offset, d.nbytes);
  }
  const want = d.datatype === "BYTES" ? bytes.byteLength : elementCount(d.shape) * elementSize(d.datatype);
  if (bytes.byteLength !== want) {
    // A model's array of another dtype than the one it named (float64 bytes called FP32): refused, not misread.
    throw internal(
      `Cannot read ${what}: it has ${bytes.byteLength} bytes, expected ${want} for shape [${
        d.shape.join(",")
      }] of ${d.datatype}`,
    );
  }
  const data = d.datatype === "BYTES" ? BytesTensor.fromWire(bytes, elementCount(d.shape), what) : bytes;
  return { name: d.name, datatype: d.datatype, shape: d.shape, data };
}

/**
 * The payload of a message, copied once when any of `descs` lies in it (the read buffer is reused): the
 * tensors are views over the copy, which starts 8-aligned as their offsets are.
 */
function ownPayload(descs: readonly TensorDesc[] | undefined, payload: Uint8Array): Uint8Array | undefined {
  if (descs) {
    for (const d of descs) if (d.inline) return payload.byteLength ? payload.slice() : payload;
  }
  return undefined;
}

/** An error as the stub reads it: its code name and message. */
function wireError(err: unknown): { code: string; message: string } {
  const e = err instanceof ServerError ? err : internal(String((err as Error)?.message ?? err));
  return { code: e.code, message: e.message };
}

function errorOf(e: { message: string; code: string }): ServerError {
  const code = (ERROR_CODES.has(e.code) ? e.code : "INTERNAL") as ErrorCode;
  return new ServerError(code, e.message);
}

/** What a stub needs to start. */
interface StubOptions {
  python: string;
  /** How long the stub spins for its next message (see waitSpinUs), in µs. */
  waitSpinUs: number;
  config: ModelConfig;
  ctx: InstanceContext;
  /**
   * What the server lends the model (BLS calls, its log, its models, its metrics; see PythonBackend.bind), or
   * undefined before a registry binds the backend.
   */
  server: ServerAccess | undefined;
}

/** Whether a file name is one the stub made for us in the shared-memory folder, with the given prefix. */
function stubFile(path: string, prefix: string): boolean {
  const base = path.split("/").pop() ?? "";
  return path === join(shmDir(), base) && base.startsWith(prefix) && !base.includes("..");
}

/**
 * Removes the files left by a stub process that exited: responses and BLS requests it made and never handed
 * over, and streamed BLS responses written for it that it never read.
 */
function removeStubFiles(pid: number): void {
  const dir = shmDir();
  const prefixes = [`dinfer-resp-${pid}-`, `dinfer-bls-${pid}-`, `dinfer-blsr-${pid}-`];
  try {
    for (const e of Deno.readDirSync(dir)) {
      if (!prefixes.some((p) => e.name.startsWith(p))) continue;
      try {
        Deno.removeSync(join(dir, e.name));
      } catch {
        // Taken meanwhile.
      }
    }
  } catch {
    // The folder cannot be listed: nothing to clean.
  }
}

/** Reads the tensors of a file the other side wrote, then removes the file. */
function takeTensors(path: string, descs: readonly TensorDesc[], what: string): Map<string, Tensor> {
  const out = new Map<string, Tensor>();
  try {
    using file = Deno.openSync(path, { read: true });
    for (const d of descs) out.set(d.name, readTensor(file, d, `output '${d.name}' of ${what}`));
  } finally {
    try {
      Deno.removeSync(path);
    } catch {
      // Gone already.
    }
  }
  return out;
}

interface Pending {
  /** Takes the answer; its payload is only valid during the call. */
  resolve: (m: StubMessage, payload: Uint8Array) => void;
  reject: (e: Error) => void;
}

/** Creates (or empties) a file only the server's user can read and write: the tensors in it are no other local user's business. */
function createPrivateFile(path: string): Deno.FsFile {
  return Deno.openSync(path, { read: true, write: true, create: true, truncate: true, mode: 0o600 });
}

/** One stub process with its socket and shared file. */
class Stub {
  readonly #opts: StubOptions;
  readonly #dir: string;
  readonly #shmPath: string;
  readonly #shm: Deno.FsFile;
  #shmSize = INITIAL_SHM_BYTES;
  /** Parsed result headers by their text (see `#frames`). */
  #resultHeads = new SmallCache<string, StubMessage>(64);
  /** Whether an execute call in flight may use the shared file (see `execute`). */
  #shmHeld = false;
  #listener: Deno.Listener | undefined;
  /** The stub's messages come in on this socket. */
  #conn: Deno.Conn | undefined;
  /** The read loop of `#conn`, which ends when the stub's end of the socket closes. */
  #reading: Promise<void> | undefined;
  /** The server's messages go out through this pipe (see the module doc). */
  #commands: Deno.FsFile | undefined;
  /** The pipe's size in pages and its page size, as the stub reported them when ready (one page before). */
  #pipePages = 1;
  #pageSize = 4096;
  /** Pages the writes into the pipe have taken so far, and those the stub has certainly read (see `#pipeRoom`). */
  #pipeWritten = 0;
  #pipeRead = 0;
  /** `#pipeWritten` after the write of each execute call not yet answered, by id, and of the control call. */
  #readAt = new IdTable<number>();
  #controlReadAt = 0;
  /** The tags of the frames in `#outbox` (-1: a control call). */
  #outboxTags: number[] = [];
  /** The latest execute headers and their forms, the latest used first (see #executeHead). */
  #executeHeads: { form: ExecuteForm; head: Uint8Array }[] = [];
  #child: Deno.ChildProcess | undefined;
  #writes: Promise<void> = Promise.resolve();
  /**
   * The slab frames are cut from, so that a message costs no buffer of its own: `#send` takes room for the
   * largest frame it may write and keeps what it wrote, so that frames follow each other with no gap and those
   * written together are one view of the slab.
   */
  #slab = new Slab(SLAB_BYTES);
  /** Frames waiting for the microtask that writes them (see `#send`), and that write's promise. */
  #outbox: Uint8Array[] = [];
  #flush: Promise<void> | undefined;
  /** Frames being written or waiting to be. */
  #writing = 0;
  /** Execute ids start at 1: a frame's tag 0 means none. */
  #nextId = 1;
  #pending = new IdTable<Pending>();
  /** The response senders of decoupled requests that have not sent their final flag, by `<execute>:<index>`. */
  #senders = new Map<string, NonNullable<BackendRequest["send"]>>();
  #control: Pending | undefined;
  /** The descriptor of `#conn` in this process, for #spinForAnswer; -1 where unknown or closed. */
  #answerFd = -1;
  /** Which lone calls spin for their answers (see #spinForAnswer). */
  readonly #answerSpins = new SpinBackoff(MAX_SPIN_SKIP);
  /** Why the stub is gone; undefined while it runs. */
  exitReason: string | undefined;
  /** Whether the stub was killed or has exited: it takes no more requests. */
  dead = false;
  readonly exited: Promise<void>;
  #markExited!: () => void;

  private constructor(opts: StubOptions, dir: string) {
    this.#opts = opts;
    this.#dir = dir;
    this.#shmPath = join(shmDir(), `dinfer-py-${Deno.pid}-${crypto.randomUUID()}`);
    this.#shm = createPrivateFile(this.#shmPath);
    this.#shm.truncateSync(this.#shmSize);
    this.exited = new Promise((r) => (this.#markExited = r));
  }

  /** Starts a stub and initializes the model in it. */
  static async start(opts: StubOptions): Promise<Stub> {
    const dir = await Deno.makeTempDir({ prefix: `dinfer-py-${Deno.pid}-` });
    const stub = new Stub(opts, dir);
    // A cancelled load stops the stub at once, whatever `initialize()` is doing.
    const signal = opts.ctx.signal;
    const cancel = () => void stub.kill();
    signal?.addEventListener("abort", cancel, { once: true });
    try {
      signal?.throwIfAborted();
      await stub.#start();
      signal?.throwIfAborted();
      return stub;
    } catch (err) {
      await stub.kill();
      throw signal?.aborted ? signal.reason : err;
    } finally {
      signal?.removeEventListener("abort", cancel);
    }
  }

  /** How long the stub may spin after this call, in µs (see spinAllowance). */
  #spinUs(): number {
    const configured = this.#opts.waitSpinUs;
    if (configured === 0) return 0;
    const alone = this.#opts.ctx.arrivals?.alone() ?? true;
    return spinAllowance(configured, liveStubs, navigator.hardwareConcurrency || 1, alone);
  }

  get #what(): string {
    return this.#whatText ??= `'${this.#opts.config.name}' instance '${this.#opts.ctx.instanceName}'`;
  }

  #whatText: string | undefined;

  /** Whether the server's thread can look at this stub's socket for a lone call's answer (#spinForAnswer). */
  get looksForAnswers(): boolean {
    return this.#answerFd >= 0;
  }

  /**
   * After writing a call that the stub takes alone (no other call in flight, the stub allowed to spin: requests
   * arriving one at a time), the server's thread spins until the stub's socket has the answer, for up to
   * SERVER_SPIN_US, instead of sleeping in the event loop: the stub answers a quick model in tens of µs, and a
   * thread that sleeps pays a wake-up that costs more on a virtual machine. The event loop then finds the answer
   * waiting. A spin that ends without the answer makes the next lone calls go without one, twice as many after
   * each such spin (up to MAX_SPIN_SKIP): a slow model's calls pay a fraction of a spin each. Measured on 2 cores
   * (2026-12-07, add_sub_py, against the same server without it): the backend alone (bench/python_ipc.ts, 1 call
   * in flight) 16k -> 25-31k calls/s, p50 51 -> 25-30 µs; bench/ab.ts python-json at 1 connection 1.14x (3
   * rounds of 4 pairs; totals 1.11x, CPU per request 0.98x), python-grpc at 1 stream 1.05x, python-json at 8
   * connections 1.03x (no spin there: the requests overlap).
   */
  #spinForAnswer(): void {
    if (this.#answerSpins.take()) {
      this.#answerSpins.spun(spinUntilReadable(this.#answerFd, SERVER_SPIN_US) >= 0);
    }
  }

  async #start(): Promise<void> {
    const { python, config, ctx } = this.#opts;
    const socketPath = join(this.#dir, "control.sock");
    const commandsPath = join(this.#dir, "commands.fifo");
    this.#listener = Deno.listen({ transport: "unix", path: socketPath });
    try {
      this.#child = new Deno.Command(python, {
        args: [STUB_PATH, "serve", socketPath, ctx.modelPath, this.#shmPath, commandsPath],
        cwd: ctx.versionDir,
        stdin: "null",
        stdout: "inherit",
        stderr: "inherit",
        env: { PYTHONUNBUFFERED: "1", PYTHONDONTWRITEBYTECODE: "1" },
      }).spawn();
    } catch (err) {
      throw unavailable(
        `Cannot load ${this.#what}: cannot start Python '${python}': ${(err as Error).message}`,
      );
    }
    const pid = this.#child.pid;
    liveStubs++;
    this.#child.status.then(async (s) => {
      liveStubs--;
      this.dead = true;
      this.exitReason = s.signal ? `was killed by ${s.signal}` : `exited with code ${s.code}`;
      // What the stub wrote before it exited is read first (the read loop ends at the socket's end), so that
      // the calls it answered are not failed with the one that made it exit.
      if (this.#reading) await settleWithin(this.#reading, EXIT_DRAIN_MS);
      this.#failAll(`the Python stub ${this.exitReason}`);
      this.#opts.server?.metrics?.release(this);
      this.#answerFd = -1;
      this.#conn?.close();
      this.#closeCommands();
      removeStubFiles(pid);
      this.#markExited();
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    const accepting = this.#listener.accept();
    accepting.catch(() => {}); // Closing the listener after a failed start rejects it.
    const conn = await Promise.race([
      accepting,
      this.exited.then(() => {
        throw unavailable(
          `Cannot load ${this.#what}: the Python stub (${python}) ${this.exitReason} before connecting`,
        );
      }),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(unavailable(`Cannot load ${this.#what}: the Python stub did not connect in time`)),
          START_TIMEOUT_MS,
        );
      }),
    ]).finally(() => clearTimeout(timer));
    this.#conn = conn;
    this.#listener.close();
    this.#listener = undefined;
    this.#answerFd = unixSocketFd(socketPath);
    this.#reading = this.#readLoop(conn);
    this.#commands = await this.#openCommands(commandsPath);
    const args = {
      model_config: JSON.stringify(config),
      model_instance_kind: ctx.kind.replace(/^KIND_/, ""),
      model_instance_name: ctx.instanceName,
      model_instance_device_id: String(ctx.deviceId),
      model_repository: ctx.modelDir,
      model_version: String(ctx.version),
      model_name: config.name,
    };
    const reply = await this.#controlCall({ op: "init", args });
    if (reply.op === "init_error") {
      throw invalidArg(`Cannot load ${this.#what}: initialize failed: ${reply.message}`);
    }
  }

  /**
   * Opens the stub's pipe for writing. The stub made it and holds its reading end before it connects, so the
   * open does not wait, unless the stub has died since: then a reader of our own ends the wait.
   */
  async #openCommands(path: string): Promise<Deno.FsFile> {
    let failed = false;
    const opening = Deno.open(path, { write: true });
    opening.catch(() => (failed = true));
    const gone = this.exited.then(() => {
      throw unavailable(`Cannot load ${this.#what}: the Python stub ${this.exitReason} before it was ready`);
    });
    try {
      return await Promise.race([opening, gone]);
    } catch (err) {
      // Opening a reader waits for a writer: ours, waiting or open (not when the open failed).
      const reader = failed ? undefined : Deno.open(path, { read: true }).catch(() => undefined);
      (await opening.catch(() => undefined))?.close();
      (await reader)?.close();
      if (err instanceof ServerError) throw err;
      throw unavailable(
        `Cannot load ${this.#what}: cannot open the Python stub's pipe: ${(err as Error).message}`,
      );
    } finally {
      gone.catch(() => {});
    }
  }

  #closeCommands(): void {
    try {
      this.#commands?.close();
    } catch {
      // Closed before.
    }
    this.#commands = undefined;
  }

  #controlCall(msg: unknown): Promise<StubMessage> {
    return new Promise((resolve, reject) => {
      if (this.exitReason) {
        reject(internal(`Cannot run ${this.#what}: the Python stub ${this.exitReason}`));
        return;
      }
      this.#control = { resolve, reject };
      this.#send(msg, undefined, 0, true).catch(reject);
    });
  }

  #failAll(why: string): void {
    const err = internal(`Cannot run ${this.#what}: ${why}`);
    for (const p of this.#pending.values()) p.reject(err);
    this.#pending.clear();
    const senders = [...this.#senders.values()];
    this.#senders.clear();
    for (const send of senders) send(err, true);
    this.#control?.reject(err);
    this.#control = undefined;
  }

  /**
   * Sends one frame: the header `msg` and the payload `packed` (inline tensors), in one write.
   * @param msg the header
   * @param packed the payload parts and their size
   * @param tag the frame's tag: an execute call's id, else 0
   * @param control whether it is a control call (answered by the next message with no tag)
   */
  #send(msg: unknown, packed?: Packed, tag = 0, control = false): Promise<void> {
    return this.#sendHead(JSON.stringify(msg), packed, tag, control);
  }

  /** {@linkcode #send} with the header's JSON text, or its bytes padded as a frame holds them (see #executeHead). */
  #sendHead(head: string | Uint8Array, packed?: Packed, tag = 0, control = false): Promise<void> {
    // The header is padded with spaces so that the payload starts 8-aligned in the frame (12 + h).
    const headMax = typeof head === "string" ? head.length * 3 + 8 : head.byteLength;
    const size = packed?.size ?? 0;
    const frame = this.#slab.room(12 + headMax + size);
    let h: number;
    if (typeof head === "string") {
      const written = encoder.encodeInto(head, frame.subarray(12, 12 + headMax)).written;
      h = padded(written);
      frame.fill(0x20, 12 + written, 12 + h);
    } else {
      frame.set(head, 12);
      h = head.byteLength;
    }
    let at = 12 + h;
    if (packed) {
      for (const part of packed.parts) {
        frame.set(part, at);
        at += part.byteLength;
      }
    }
    putUint32(frame, 0, 8 + h + size);
    putUint32(frame, 4, h);
    putUint32(frame, 8, tag);
    this.#slab.keep(frame, at);
    if (!this.#commands) {
      return Promise.reject(internal(`Cannot run ${this.#what}: the Python stub is not connected`));
    }
    this.#outbox.push(frame.subarray(0, at));
    this.#outboxTags.push(control ? -1 : tag);
    // A call that finds the stub with no other call goes out at once, so that the stub works on it while the
    // server reads the requests that came with it. The frames sent while the stub has calls, until the
    // microtasks queued before them have run, go out in one write, so that the stub wakes once for them (the
    // answers of two calls arrive in one read, and the calls they free are sent in the same turn). Eight gRPC
    // calls in flight on one connection arrive in one read: all of them went to the stub in one write once the
    // server had decoded the last, the stub idle meanwhile and the server idle while it ran them.
    if (this.#outbox.length === 1 && this.#pending.size <= 1) return this.#flushOutbox();
    this.#flush ??= Promise.resolve().then(() => this.#flushOutbox());
    return this.#flush;
  }

  #flushOutbox(): Promise<void> {
    const frames = this.#outbox;
    const tags = this.#outboxTags;
    this.#outbox = [];
    this.#outboxTags = [];
    this.#flush = undefined;
    const bytes = joinFrames(frames);
    const commands = this.#commands;
    if (!commands) {
      return Promise.reject(internal(`Cannot run ${this.#what}: the Python stub is not connected`));
    }
    // A write takes the pages its bytes fill, and at most one more: it starts a page of its own when it does
    // not fit in what the last one has left.
    const pages = Math.ceil(bytes.byteLength / this.#pageSize) + 1;
    const room = this.#pipeRoom(pages);
    const before = this.#pipeWritten;
    this.#pipeWritten += pages;
    // An answer to the last frame of the write shows that the stub read all of it; to another, the writes
    // before (a read may stop inside a write).
    tags.forEach((tag, i) => {
      const at = i === tags.length - 1 ? this.#pipeWritten : before;
      if (tag > 0) this.#readAt.set(tag, at);
      else if (tag < 0) this.#controlReadAt = at;
    });
    if (room) {
      try {
        this.#writeNow(commands, bytes);
        return Promise.resolve();
      } catch (err) {
        return Promise.reject(this.#writeError(err));
      }
    }
    // Not sure to fit, or behind writes still in flight: written by a thread, after the frames before them.
    const write = this.#writing === 0
      ? this.#writeAll(commands, bytes)
      : this.#writes.then(() => this.#writeAll(commands, bytes));
    this.#writing++;
    this.#writes = write.then(this.#wrote, this.#wrote);
    return write;
  }

  /**
   * Whether a write of `pages` pages fits in the pipe now, so that a plain write does not wait: no write is in
   * flight, and the pages of the frames the stub may not have read yet (those after the last call it
   * answered; it reads in order) leave room for it.
   */
  #pipeRoom(pages: number): boolean {
    return this.#writing === 0 && this.#pipeWritten - this.#pipeRead + pages <= this.#pipePages;
  }

  /** Marks what the stub has read, by the call it answered (an execute id, or 0 for the control call). */
  #answered(tag: number): void {
    const at = tag === 0 ? this.#controlReadAt : this.#readAt.get(tag);
    if (tag !== 0) this.#readAt.delete(tag);
    if (at !== undefined && at > this.#pipeRead) this.#pipeRead = at;
  }

  #writeNow(commands: Deno.FsFile, bytes: Uint8Array): void {
    let done = 0;
    while (done < bytes.byteLength) done += commands.writeSync(bytes.subarray(done));
  }

  #writeError(err: unknown): unknown {
    // The stub's end of the pipe is gone: the process died (its exit status may not be known yet).
    if (err instanceof Deno.errors.BrokenPipe || err instanceof Deno.errors.BadResource) {
      return internal(`Cannot run ${this.#what}: the Python stub has died`);
    }
    return err;
  }

  readonly #wrote = () => {
    this.#writing--;
  };

  async #writeAll(commands: Deno.FsFile, bytes: Uint8Array): Promise<void> {
    let done = 0;
    try {
      while (done < bytes.byteLength) done += await commands.write(bytes.subarray(done));
    } catch (err) {
      throw this.#writeError(err);
    }
  }

  async #readLoop(conn: Deno.Conn): Promise<void> {
    // Bytes of an incomplete frame, carried over to the next read.
    let rest = EMPTY;
    const chunk = new Uint8Array(1 << 16);
    try {
      while (true) {
        if (rest.byteLength >= 4) {
          // A frame larger than the chunk is read straight into a buffer of its own size.
          const len = getUint32(rest, 0);
          if (4 + len > chunk.byteLength) {
            const whole = new Uint8Array(4 + len);
            whole.set(rest);
            let filled = rest.byteLength;
            while (filled < whole.byteLength) {
              const n = await conn.read(whole.subarray(filled));
              if (n === null) return;
              filled += n;
            }
            this.#frames(whole);
            rest = EMPTY;
            continue;
          }
        }
        const n = await conn.read(chunk);
        if (n === null) break;
        let buf: Uint8Array;
        if (rest.byteLength === 0) buf = chunk.subarray(0, n);
        else {
          buf = new Uint8Array(rest.byteLength + n);
          buf.set(rest);
          buf.set(chunk.subarray(0, n), rest.byteLength);
        }
        // What remains is copied: the chunk is read into again.
        const used = this.#frames(buf);
        rest = used === buf.byteLength ? EMPTY : buf.slice(used);
      }
    } catch {
      // The connection closed under us: the exit handler fails what is pending.
    }
  }

  /** Handles the complete frames at the start of `buf`; returns how many bytes they took. */
  #frames(buf: Uint8Array): number {
    let at = 0;
    while (buf.byteLength - at >= 12) {
      const len = getUint32(buf, at);
      if (buf.byteLength - at < 4 + len) break;
      const h = getUint32(buf, at + 4);
      const tag = getUint32(buf, at + 8);
      const text = decoder.decode(buf.subarray(at + 12, at + 12 + h));
      // Results of one form have one header (the id is the tag): parsed once, then shared read-only.
      let msg = this.#resultHeads.get(text);
      if (!msg) {
        try {
          // Exact: a parameter (of a response, of a BLS call) or a correlation id may be an integer beyond 2^53.
          msg = parseJsonExact(text) as StubMessage;
        } catch (err) {
          // A header that does not parse fails its own call alone (its tag names it); the frames after it
          // are read as before.
          const message = `the Python stub sent a message that is not JSON: ${(err as Error).message}`;
          this.#log(2, message);
          msg = { op: "error", message, trace: "" };
        }
        if (msg.op === "result") this.#resultHeads.set(text, msg);
      }
      const payload = buf.subarray(at + 12 + h, at + 4 + len);
      at += 4 + len;
      try {
        this.#onMessage(msg, payload, tag);
      } catch (err) {
        // One message that cannot be handled must not stop the stub's other requests.
        this.#log(2, `cannot handle a '${msg.op}' message from the stub: ${(err as Error).message}`);
      }
    }
    return at;
  }

  /** Handles a message; its payload is only valid during the call (tensors are copied out of it). */
  #onMessage(msg: StubMessage, payload: Uint8Array, tag: number): void {
    if (msg.op === "result" || msg.op === "error") {
      this.#answered(tag);
      const p = this.#pending.get(tag);
      this.#pending.delete(tag);
      p?.resolve(msg, payload);
    } else if (msg.op === "response") {
      this.#response(msg, payload);
    } else if (msg.op === "log") {
      this.#log(msg.level, msg.message);
    } else if (msg.op === "bls") {
      let request: InferRequest | Error;
      try {
        request = this.#blsRequest(msg, payload);
      } catch (err) {
        request = err as Error;
      }
      (msg.decoupled ? this.#blsStream(msg, request) : this.#bls(msg, request)).catch(() => {});
    } else if (msg.op === "model") {
      this.#modelCall(msg, payload).catch(() => {});
    } else if (msg.op === "metric") {
      this.#metricCall(msg);
    } else {
      this.#answered(0);
      if (msg.op === "ready" && msg.pipe_pages > 0 && msg.page_size > 0) {
        this.#pipePages = msg.pipe_pages;
        this.#pageSize = msg.page_size;
      }
      const c = this.#control;
      this.#control = undefined;
      c?.resolve(msg, payload);
    }
  }

  /** A response of a decoupled request: read its tensors and hand it to the request's sender. */
  #response(msg: StubStreamResponse, payload: Uint8Array): void {
    const key = `${msg.id}:${msg.index}`;
    const send = this.#senders.get(key);
    const final = (msg.flags & 1) !== 0;
    if (final) this.#senders.delete(key);
    let out: Map<string, Tensor> | Error | undefined;
    try {
      if (msg.error) out = errorOf(msg.error);
      else if (msg.file !== undefined) {
        if (!stubFile(msg.file, "dinfer-resp-")) throw internal(`bad response file '${msg.file}'`);
        out = takeTensors(msg.file, msg.outputs ?? [], this.#what);
      } else if (msg.outputs !== undefined) {
        out = new Map();
        const own = ownPayload(msg.outputs, payload);
        for (const d of msg.outputs) {
          out.set(d.name, readTensor(undefined, d, `output '${d.name}' of ${this.#what}`, own));
        }
      }
      if (out instanceof Map && msg.parameters) out = withParameters(out, msg.parameters);
    } catch (err) {
      out = internal(`Cannot read a response of ${this.#what}: ${(err as Error).message}`);
    }
    send?.(out, final);
  }

  #log(level: number, message: string): void {
    const log = this.#opts.server?.logger;
    const line = `${this.#opts.config.name}: ${message}`;
    if (!log) printError(line);
    else if (level === 1) log.warning(line);
    else if (level === 2) log.error(line);
    else if (level === 3) log.verbose(1, line);
    else log.info(line);
  }

  /**
   * The request a BLS message describes, its inputs read from the payload or the stub's file (which must be
   * one the stub made in the shared-memory folder).
   */
  #blsRequest(msg: Extract<StubMessage, { op: "bls" }>, payload: Uint8Array): InferRequest {
    let file: Deno.FsFile | undefined;
    if (msg.file !== undefined) {
      if (!stubFile(msg.file, "dinfer-bls-")) throw invalidArg(`Cannot run BLS: bad file '${msg.file}'`);
      file = Deno.openSync(msg.file, { read: true });
    }
    try {
      const own = ownPayload(msg.inputs, payload);
      const inputs = msg.inputs.map((d) => readTensor(file, d, `BLS input '${d.name}'`, own));
      // Integers beyond 2^53 are bigints here (the stub's messages are read exactly).
      const parameters: Record<string, ParamValue> = {};
      for (const [k, v] of Object.entries(msg.parameters ?? {})) {
        if (["string", "number", "boolean", "bigint"].includes(typeof v)) parameters[k] = v;
      }
      // A BLS call to a sequence model says its sequence as Triton's C API does: a correlation id and flags.
      const id = msg.correlation_id;
      if (
        typeof id === "bigint" || (typeof id === "number" && id !== 0) ||
        (typeof id === "string" && id !== "")
      ) {
        parameters.sequence_id = id;
      }
      const flags = typeof msg.flags === "number" ? msg.flags : 0;
      if (flags & 1) parameters.sequence_start = true;
      if (flags & 2) parameters.sequence_end = true;
      if (typeof msg.timeout === "number" && msg.timeout > 0) parameters.timeout = msg.timeout;
      return {
        model: msg.model,
        version: msg.version,
        id: msg.request_id,
        inputs,
        outputs: msg.outputs.map((name) => ({ name, classification: 0, parameters: {} })),
        parameters,
      };
    } finally {
      file?.close();
    }
  }

  /** A decoupled BLS call: each response goes back inline (or, when large, in its own file), the last one flagged final. */
  async #blsStream(msg: Extract<StubMessage, { op: "bls" }>, request: InferRequest | Error): Promise<void> {
    const reply = (extra: Record<string, unknown>) => this.#send({ op: "bls_stream", id: msg.id, ...extra });
    const server = this.#opts.server;
    try {
      if (request instanceof Error) throw request;
      if (!server) throw unavailable(`Cannot run BLS from ${this.#what}: no server to call`);
    } catch (err) {
      await reply({ final: true, error: wireError(err) });
      return;
    }
    let n = 0;
    let finalSent = false;
    try {
      await server.inferStream(request, (response, final) => {
        finalSent ||= final;
        if (this.dead) return; // the stub is gone: nobody would read or remove a file
        if (response === undefined) {
          this.#send({ op: "bls_stream", id: msg.id, final }).catch(() => {});
        } else if (response instanceof Error) {
          this.#send({ op: "bls_stream", id: msg.id, final, error: wireError(response) }).catch(() => {});
        } else {
          const items = tensorBytes(response.outputs);
          const parameters = wireParameters(response.parameters);
          if (inlineSize(items) <= INLINE_MAX) {
            const packed: Packed = { descs: [], parts: [], size: 0 };
            const outputs = packInline(items, packed);
            this.#send({ op: "bls_stream", id: msg.id, final, outputs, parameters }, packed).catch(() => {});
            return;
          }
          const path = join(
            shmDir(),
            `dinfer-blsr-${this.#child?.pid}-${msg.id}-${n++}-${crypto.randomUUID()}`,
          );
          try {
            using file = createPrivateFile(path);
            const { descs } = writeTensors(file, 0, response.outputs, 0);
            this.#send({ op: "bls_stream", id: msg.id, final, file: path, outputs: descs, parameters })
              .catch(() => Deno.remove(path).catch(() => {}));
          } catch (err) {
            Deno.remove(path).catch(() => {});
            this.#send({ op: "bls_stream", id: msg.id, final, error: wireError(err) }).catch(() => {});
          }
        }
      });
    } catch (err) {
      await reply({ final: true, error: wireError(err) });
      return;
    }
    if (!finalSent) await reply({ final: true });
  }

  /** A BLS call: the outputs go back inline, or into the stub's file when large and it sent one. */
  async #bls(msg: Extract<StubMessage, { op: "bls" }>, request: InferRequest | Error): Promise<void> {
    const reply = (extra: Record<string, unknown>, packed?: Packed) =>
      this.#send({ op: "bls_result", id: msg.id, ...extra }, packed);
    const server = this.#opts.server;
    try {
      if (request instanceof Error) throw request;
      if (!server) throw unavailable(`Cannot run BLS from ${this.#what}: no server to call`);
      const response = await server.infer(request);
      const items = tensorBytes(response.outputs);
      const parameters = wireParameters(response.parameters);
      if (msg.file === undefined || inlineSize(items) <= INLINE_MAX) {
        const packed: Packed = { descs: [], parts: [], size: 0 };
        const outputs = packInline(items, packed);
        await reply({ outputs, parameters }, packed);
        return;
      }
      using file = await Deno.open(msg.file, { read: true, write: true });
      const size = (await file.stat()).size;
      const { descs } = writeTensors(file, 0, response.outputs, size);
      await reply({ outputs: descs, parameters });
    } catch (err) {
      await reply({ error: wireError(err) });
    }
  }

  /** Carries out a model's call on its metrics (see MetricCall). */
  #metricCall(msg: MetricCall): void {
    const metrics = this.#opts.server?.metrics;
    const answer = (extra: Record<string, unknown>) => {
      if (msg.id !== undefined) this.#send({ op: "metric_result", id: msg.id, ...extra }).catch(() => {});
    };
    try {
      if (!metrics) throw unavailable(`Cannot make metrics in ${this.#what}: the server keeps none`);
      switch (msg.action) {
        case "family":
          answer({
            handle: metrics.family(this, String(msg.name), String(msg.description ?? ""), msg.kind!),
          });
          return;
        case "metric":
          answer({
            handle: metrics.metric(this, Number(msg.family), msg.labels ?? {}, msg.buckets ?? undefined),
          });
          return;
        case "value":
          answer({ value: metrics.value(Number(msg.metric)) });
          return;
        case "drop":
          for (const h of msg.handles ?? []) metrics.drop(this, h);
          return;
        default:
          metrics.update(Number(msg.metric), msg.action, Number(msg.value));
      }
    } catch (err) {
      if (msg.id !== undefined) answer({ error: wireError(err) });
      else this.#log(1, `cannot ${msg.action} a metric: ${(err as Error).message}`);
    }
  }

  /** Answers a model's call to manage the server's models (see ModelCall). */
  async #modelCall(msg: ModelCall, payload: Uint8Array): Promise<void> {
    const reply = (extra: Record<string, unknown>) =>
      this.#send({ op: "model_result", id: msg.id, ...extra });
    const models = this.#opts.server?.models;
    try {
      if (!models) throw unavailable(`Cannot manage models from ${this.#what}: no server to call`);
      const model = String(msg.model);
      if (msg.action === "ready") {
        await reply({ ready: models.ready(model, String(msg.version ?? "")) });
        return;
      }
      if (msg.action === "unload") {
        const unloading = models.unload(model, msg.unload_dependents === true);
        // A refusal (not explicit mode) is the caller's to see; the unload itself goes on after the answer.
        unloading.catch((err) => this.#log(1, `unloading '${model}' failed: ${(err as Error).message}`));
        await Promise.race([unloading, new Promise((done) => setTimeout(done, UNLOAD_ANSWER_MS))]);
        await reply({});
        return;
      }
      if (msg.action !== "load") throw invalidArg(`Cannot manage models: unknown action '${msg.action}'`);
      const files = new Map<string, Uint8Array>();
      let at = 0;
      for (const f of msg.files ?? []) {
        if (
          typeof f.name !== "string" || !Number.isInteger(f.nbytes) || f.nbytes < 0 ||
          at + f.nbytes > payload.byteLength
        ) {
          throw invalidArg(`Cannot load '${model}': the files sent do not match their sizes`);
        }
        files.set(f.name, payload.slice(at, at + f.nbytes));
        at += f.nbytes;
      }
      await models.load(
        model,
        typeof msg.config === "string" && msg.config !== "" ? msg.config : undefined,
        files,
      );
      await reply({});
    } catch (err) {
      await reply({ error: wireError(err) });
    }
  }

  /**
   * Runs one execute call with a list of requests (the model's `execute(requests)`); resolves with each
   * request's outputs or its own error.
   * @param requests the requests of the batch
   * @param timeoutMs the longest wait; 0 waits forever
   */
  async execute(
    requests: readonly BackendRequest[],
    timeoutMs: number,
  ): Promise<(Map<string, Tensor> | Error)[]> {
    if (this.dead) {
      throw internal(`Cannot run ${this.#what}: the Python stub ${this.exitReason ?? "was killed"}`);
    }
    const items = requests.map((r) => tensorBytes(r.inputs.values()));
    // One call at a time may use the shared file (the instance may send the next call before this one is
    // answered): it holds the file until its answer has been read. The others send everything inline.
    const shm = !this.#shmHeld;
    const inline = !shm || items.reduce((n, i) => n + inlineSize(i), 0) <= INLINE_MAX;
    if (shm) this.#shmHeld = true;
    const packed: Packed = { descs: [], parts: [], size: 0 };
    let end = 0;
    const wire: WireRequest[] = requests.map((r, i) => {
      let inputs: TensorDesc[];
      if (inline) inputs = packInline(items[i]!, packed);
      else {
        const written = writeTensors(this.#shm, end, r.inputs.values(), this.#shmSize);
        this.#shmSize = written.size;
        end = written.end;
        inputs = written.descs;
      }
      const p = r.parameters;
      const corr = p.sequence_id;
      // The server's own parameters stay out of the model's view (as Triton).
      const parameters = wireParameters(p, SERVER_PARAMETERS);
      return {
        id: r.id,
        correlation_id: typeof corr === "bigint" ? rawJSON(corr.toString()) : corr ?? 0,
        flags: (p.sequence_start === true ? 1 : 0) | (p.sequence_end === true ? 2 : 0),
        parameters,
        inputs,
        outputs: r.outputNames,
      };
    });
    // The id is the frame's 32-bit tag, 0 being the control call's.
    const id = this.#nextId;
    this.#nextId = id === 0xffffffff ? 1 : id + 1;
    requests.forEach((r, i) => {
      if (r.send) this.#senders.set(`${id}:${i}`, r.send);
    });
    let timer: ReturnType<typeof setTimeout> | undefined;
    let results: (Map<string, Tensor> | Error)[] | undefined;
    const answer = new Promise<StubMessage>((resolve, reject) => {
      this.#pending.set(id, {
        resolve: (msg, payload) => {
          // The payload is only valid now: the outputs are read before the promise settles.
          if (msg.op === "result") {
            try {
              results = this.#results(requests, id, msg, payload);
            } catch (err) {
              reject(err);
              return;
            }
          }
          resolve(msg);
        },
        reject,
      });
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          this.#failAll(`the Python stub did not answer within ${timeoutMs} ms and was killed`);
          this.kill();
        }, timeoutMs);
      }
    });
    requests.forEach((r, i) => r.signal && this.#watchCancel(r.signal, id, i));
    // No id in the header (it is the frame's tag): calls of the same form have the same header.
    const spin = this.#spinUs();
    const form: ExecuteForm = { spin, shm, shmSize: shm ? this.#shmSize : 0, end, requests: wire };
    this.#sendHead(this.#executeHead(form), packed, id).catch((e) => this.#pending.get(id)?.reject(e));
    // Written at once, the only call in flight: see #spinForAnswer.
    if (
      spin > 0 && this.#answerFd >= 0 && this.#pending.size === 1 && this.#outbox.length === 0 &&
      this.#writing === 0
    ) this.#spinForAnswer();
    let msg: StubMessage;
    try {
      msg = await answer;
    } catch (err) {
      requests.forEach((_, i) => this.#senders.delete(`${id}:${i}`));
      throw err;
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      if (shm) this.#shmHeld = false;
    }
    if (msg.op !== "result" || !results) {
      // The request failed as a whole: its senders take nothing more.
      requests.forEach((_, i) => this.#senders.delete(`${id}:${i}`));
      if (msg.op === "error") throw internal(`Cannot run ${this.#what}: ${msg.message}`);
      throw internal(`Cannot run ${this.#what}: unexpected stub answer '${msg.op}'`);
    }
    return results;
  }

  /**
   * The execute header of `form`, as the bytes a frame holds (padded, see #sendHead): a recent one's again when
   * `form` is of the same form, as calls of one client mostly are, else encoded and kept for the next calls.
   * Its JSON.stringify and encoding cost 6–8 µs of a lone call's time, which pays cold caches at every step;
   * comparing the form with a recent one costs a fraction of that. Several are kept (EXECUTE_HEADS): with calls
   * in flight together, the one holding the shared file and the others have two forms, which alternate.
   */
  #executeHead(form: ExecuteForm): Uint8Array {
    const heads = this.#executeHeads;
    for (let i = 0; i < heads.length; i++) {
      const known = heads[i]!;
      if (!sameForm(known.form, form)) continue;
      if (i > 0) {
        heads.splice(i, 1);
        heads.unshift(known);
      }
      return known.head;
    }
    const text = JSON.stringify({
      op: "execute",
      spin_us: form.spin,
      ...(form.shm ? { shm: true, shm_size: form.shmSize, out_offset: form.end } : {}),
      requests: form.requests,
    });
    const bytes = encoder.encode(text);
    const head = new Uint8Array(padded(bytes.byteLength)).fill(0x20);
    head.set(bytes);
    heads.unshift({ form: ownForm(form), head });
    if (heads.length > EXECUTE_HEADS) heads.pop();
    return head;
  }

  /** Each request's outputs (inline in the payload or in the shared file) or its own error. */
  #results(
    requests: readonly BackendRequest[],
    id: number,
    msg: Extract<StubMessage, { op: "result" }>,
    payload: Uint8Array,
  ): (Map<string, Tensor> | Error)[] {
    // One copy of the payload for all the responses' inline outputs.
    const own = payload.byteLength ? payload.slice() : payload;
    return requests.map((_, i) => {
      const response = msg.responses[i];
      if (!response) {
        this.#senders.delete(`${id}:${i}`);
        return internal(`Cannot run ${this.#what}: execute() returned no response for request ${i}`);
      }
      if (response.error) {
        this.#senders.delete(`${id}:${i}`);
        return errorOf(response.error);
      }
      if (response.rescheduled) {
        // Its responses so far went out; the next run of the request brings a sender of its own.
        this.#senders.delete(`${id}:${i}`);
        return new RescheduledRequest(this.#opts.config.name);
      }
      // An output that cannot be read fails its own request, not the others of the call.
      try {
        const out = new Map<string, Tensor>();
        for (const d of response.outputs ?? []) {
          out.set(d.name, readTensor(this.#shm, d, `output '${d.name}' of ${this.#what}`, own));
        }
        return response.parameters ? withParameters(out, response.parameters) : out;
      } catch (err) {
        this.#senders.delete(`${id}:${i}`);
        return err as Error;
      }
    });
  }

  /**
   * Tells the stub when a request's client goes away (`{op: "cancel", id, index}`), while the request still
   * runs: executing, or a decoupled request that has not sent its final flag. The model reads it through
   * `request.is_cancelled()`.
   */
  #watchCancel(signal: AbortSignal, id: number, index: number): void {
    const key = `${id}:${index}`;
    const cancel = () => {
      if (this.dead || (!this.#pending.has(id) && !this.#senders.has(key))) return;
      this.#send({ op: "cancel", id, index }).catch(() => {});
    };
    if (signal.aborted) cancel();
    else signal.addEventListener("abort", cancel, { once: true });
  }

  /** Asks the model to finalize, then stops the stub (killing it when it does not stop in time). */
  async finalize(): Promise<void> {
    // Decoupled requests still sending (an `async def execute` going on in the background, a model's own
    // thread) finish first, as requests in flight do: the model keeps its stub until their final responses,
    // for SENDERS_WAIT_MS at most (a model that never sends one would hold the unload, and its name, for good).
    const until = Date.now() + SENDERS_WAIT_MS;
    while (this.#senders.size > 0 && !this.exitReason && Date.now() < until) {
      await new Promise((r) => setTimeout(r, SENDERS_POLL_MS));
    }
    if (this.#senders.size > 0 && !this.exitReason) {
      this.#log(
        1,
        `${this.#senders.size} request(s) had no final response ${
          SENDERS_WAIT_MS / 1000
        } s into the unload: ` +
          "they are ended",
      );
    }
    if (!this.exitReason) {
      await settleWithin(this.#controlCall({ op: "finalize" }), FINALIZE_TIMEOUT_MS);
      await settleWithin(this.exited, FINALIZE_TIMEOUT_MS);
    }
    await this.kill();
  }

  /** Kills the process (if running) and frees the socket and shared file. */
  async kill(): Promise<void> {
    this.dead = true;
    if (this.#child && !this.exitReason) {
      try {
        this.#child.kill("SIGKILL");
      } catch {
        // Already gone.
      }
    }
    if (this.#child) await this.exited;
    this.#closeCommands();
    this.#listener?.close();
    this.#listener = undefined;
    try {
      this.#shm.close();
    } catch {
      // Closed before.
    }
    await Deno.remove(this.#shmPath).catch(() => {});
    await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
  }
}

/** One model instance: a stub process, started again when it dies. */
class PythonInstance implements BackendInstance {
  #opts: StubOptions;
  #timeoutMs: number;
  #stub: Stub | undefined;
  #starting: Promise<Stub> | undefined;
  #closed = false;

  /**
   * Eight batches at a time: the stub runs them one after another, and finds the next ones already in its
   * pipe when it finishes one, instead of waiting for the server's answer to go out and the next request to
   * come in. With several instances the scheduler gives a batch to the one holding the fewest. Four measured
   * better than two under load (add_sub at 8 connections: 15% less server CPU per request), while stubs spun
   * between calls. Since stubs sleep where requests arrive together (see spinAllowance), eight measured
   * better than four (bench/ab.ts, add_sub_py, one instance, 2 cores, 2026-11-27, 3-4 rounds each): HTTP JSON
   * at 4, 8 and 16 connections 1.04-1.07x, 1.14-1.19x and 1.26-1.30x the requests, HTTP binary at 8
   * 1.11-1.21x, gRPC (h2load) at 8 0.98-1.07x, each with 0.81-0.93x the CPU per request. Not with dynamic or
   * sequence batching (batches form while the instance is busy), nor with an execute timeout (it counts from
   * the moment a batch is sent).
   */
  readonly pipelineDepth: number;

  /**
   * Whether the server's thread can look at the running stub's socket for a lone call's answer instead of
   * sleeping until it comes (see Stub.#spinForAnswer): false while no stub runs and where FFI is not allowed.
   */
  get looksForAnswers(): boolean {
    return this.#stub?.looksForAnswers ?? false;
  }

  constructor(opts: StubOptions, stub: Stub, timeoutMs: number) {
    this.#opts = opts;
    this.#stub = stub;
    this.#timeoutMs = timeoutMs;
    const c = opts.config;
    this.pipelineDepth = !c.dynamic_batching && !c.sequence_batching && timeoutMs === 0 ? PIPELINE_DEPTH : 1;
  }

  #ready(): Promise<Stub> {
    if (this.#stub && !this.#stub.dead) return Promise.resolve(this.#stub);
    if (!this.#starting) {
      const old = this.#stub;
      this.#stub = undefined;
      this.#starting = (async () => {
        await old?.kill();
        const stub = await Stub.start(this.#opts);
        this.#stub = stub;
        return stub;
      })().finally(() => (this.#starting = undefined));
      this.#starting.catch(() => {});
    }
    return this.#starting;
  }

  async execute(inputs: Map<string, Tensor>, outputNames: readonly string[]): Promise<Map<string, Tensor>> {
    const [out] = await this.executeRequests([{ inputs, outputNames, id: "", parameters: {} }]);
    if (out instanceof Error) throw out;
    return out!;
  }

  async executeRequests(requests: readonly BackendRequest[]): Promise<(Map<string, Tensor> | Error)[]> {
    if (this.#closed) throw unavailable(`Cannot run '${this.#opts.config.name}': the instance is closed`);
    // A running stub gets the request in this same turn (no await before the write): answers that were
    // resolved just before are encoded after the stub already has its next request.
    const stub = this.#stub && !this.#stub.dead ? this.#stub : await this.#ready();
    // An output keeps the datatype the model gave it, also where the config says another, as Triton's Python
    // backend answers (Triton's own bls_decoupled example answers its INT32 output 'SUM' as INT64).
    try {
      return await stub.execute(requests, this.#timeoutMs);
    } finally {
      // A stub that died is replaced right away, so that the next request finds it ready.
      if (stub.dead && !this.#closed) this.#ready();
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    const stub = this.#stub ?? await this.#starting?.catch(() => undefined);
    await stub?.finalize();
  }
}

/** The Python backend; each registry binds its own (`bind`), so that BLS calls reach that registry. */
export class PythonBackend implements Backend {
  /** The backend name. */
  readonly name = "python";
  /** The model file. */
  readonly defaultModelFilename = "model.py";
  #server: ServerAccess | undefined;

  /**
   * Lets models call back into the server (`pb_utils.InferenceRequest.exec`, `exec(decoupled=True)`) and
   * sends their `pb_utils.Logger` lines to the server log.
   * @param server the server's models and log
   */
  bind(server: ServerAccess): void {
    this.#server = server;
  }

  /** Runs the model class's `auto_complete_config` in a short-lived stub. */
  async autoComplete(config: ModelConfig, ctx: InstanceContext): Promise<void> {
    try {
      await Deno.stat(ctx.modelPath);
    } catch {
      return; // Loading reports the missing file.
    }
    const python = pythonExecutable(config, ctx.backendConfig);
    // Named with the process id, as the stub folders: a later server removes what a crashed one left.
    const dir = await Deno.makeTempDir({ prefix: `dinfer-py-${Deno.pid}-ac-` });
    try {
      const inPath = join(dir, "in.json");
      const outPath = join(dir, "out.json");
      await Deno.writeTextFile(inPath, JSON.stringify(config));
      let out: Deno.CommandOutput;
      try {
        out = await new Deno.Command(python, {
          args: [STUB_PATH, "autocomplete", ctx.modelPath, inPath, outPath],
          cwd: ctx.versionDir,
          stdin: "null",
          stdout: "inherit",
          stderr: "piped",
          env: { PYTHONDONTWRITEBYTECODE: "1" },
          signal: ctx.signal,
        }).output();
      } catch (err) {
        if (ctx.signal?.aborted) throw ctx.signal.reason;
        throw unavailable(
          `Cannot load '${config.name}': cannot start Python '${python}': ${(err as Error).message}`,
        );
      }
      if (out.code !== 0) {
        const lines = new TextDecoder().decode(out.stderr).trim().split("\n");
        throw invalidArg(`Cannot load '${config.name}': auto_complete_config failed: ${lines.at(-1)}`);
      }
      const completed = JSON.parse(await Deno.readTextFile(outPath)) as Record<string, unknown>;
      Object.assign(config, completed);
    } finally {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }

  /** Starts a stub for the instance and runs the model's `initialize`. */
  async createInstance(config: ModelConfig, ctx: InstanceContext): Promise<BackendInstance> {
    for (const o of config.output) {
      if (!fromConfigType(o.data_type)) {
        throw invalidArg(`Cannot load '${config.name}': output '${o.name}' has no valid data_type`);
      }
    }
    const opts: StubOptions = {
      python: pythonExecutable(config, ctx.backendConfig),
      waitSpinUs: waitSpinUs(config, ctx.backendConfig),
      config,
      ctx,
      server: this.#server,
    };
    const timeoutMs = executeTimeoutMs(config, ctx.backendConfig);
    return new PythonInstance(opts, await Stub.start(opts), timeoutMs);
  }
}
