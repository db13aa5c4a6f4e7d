/**
 * An HTTP listener thread (a Web Worker): it accepts connections on the server's HTTP port beside the main
 * thread (`reusePort`, so the kernel spreads connections over the listeners), reads requests and answers
 * them. Inference requests are decoded and their answers encoded here, so the main thread, which holds the
 * models, only validates, schedules and runs them; every other request (and any inference request this thread
 * cannot decode on its own: compressed bodies, the raw binary form, shared memory, malformed input) is handed
 * to the main thread's handler whole. See `workers.ts` for the main thread's side. The same thread may serve
 * gRPC on the server's gRPC port too (`../grpc/thread.ts`), its decoded ModelInfer requests taking the same way
 * to the models as HTTP's.
 * @module
 */

/// <reference lib="deno.worker" />

import { reviveBytes } from "../../core/bytes_tensor.ts";
import type { InferRequest, Tensor } from "../../core/types.ts";
import type { GrpcThreadServer } from "../grpc/thread.ts";
import { httpStatus } from "../../core/errors.ts";
import { nowNs } from "../../core/clock.ts";
import { utf8Decode } from "../../core/dtypes.ts";
import type { ShmLocation } from "../../shm/system_shm.ts";
import {
  type DecodedRequest,
  decodeInferRequest,
  encodeInferResponse,
  HEADER_LENGTH,
  inferResponse,
} from "./infer_codec.ts";
import { INFER_PATH, pathOf } from "./_paths.ts";
import { readDeclaredBody, readUpTo } from "./_body.ts";
import { handlerFailed, receiveBody, type ResilientServer, serveResilient } from "./listener.ts";
import type { FromWorker, ToWorker } from "./workers.ts";
import { matchesRestriction, type Restriction } from "../restricted.ts";
import { ReplicaRunner } from "./_replica_runner.ts";
import { EventBody } from "./event_body.ts";
import { reclaimMemory } from "../../core/memory.ts";
import {
  type Answer,
  ANSWERS,
  Channel,
  decodeAnswer,
  encodeRequest,
  FREE,
  REQUEST,
  RESPONSE,
  SLOTS,
} from "./_channel.ts";

let nextId = 0;
/** The main thread's replies awaited by message id (requests sent by postMessage). */
const pending = new Map<number, (reply: ToWorker) => void>();
/** The streamed answers of forwarded requests (see forward), by id. */
const streams = new Map<number, EventBody>();
/**
 * The replies awaited by channel slot (an answer too large for its slot), by slot: an array, as every request
 * through the channel registers one, and a Map that fills and empties with every request allocates a new
 * table each time, tables that outlived the young generation's collections.
 */
const slotWaiters: (((reply: ToWorker) => void) | undefined)[] = [];
let server: ResilientServer | undefined;
let grpcServer: GrpcThreadServer | undefined;
let maxInputSize = 0;
/** The inference API's restriction: a request without the header goes to the main thread, which refuses it. */
let inference: Restriction | undefined;
let channel: Channel | undefined;
const freeSlots: number[] = [];
/** This thread's copies of small models (see replicas.ts). */
const replicas = new ReplicaRunner((message) =>
  self.postMessage({ op: "log", id: -1, level: "error", message } satisfies FromWorker)
);

/** The slot of an answer too large for its slot, which comes by postMessage with id `-2 - slot` (workers.ts). */
function slotOf(id: number): number {
  return -2 - id;
}

/** What wakes each slot whose answer is awaited (by slot), and how many are awaited. */
const answerWaiters: ((() => void) | undefined)[] = [];
let awaited = 0;
let watching = false;

/**
 * Wakes the requests whose answers came, as long as some are awaited: scans the awaited slots, then waits on
 * the answers' doorbell. One waiter for the channel: the main thread's `Atomics.notify` after an answer that
 * comes while the thread is awake finds no waiter, and a wake-up finds every answer given meanwhile (an MLP
 * batch's, 64 of them), where a waiter per slot took a wake-up, a task on this thread's event loop, per answer.
 * The doorbell is read before the scan, so an answer given after the scan changes it and the wait returns at
 * once.
 */
async function watchAnswers(ch: Channel): Promise<void> {
  watching = true;
  try {
    while (awaited > 0) {
      const bell = Atomics.load(ch.control, ANSWERS);
      for (let slot = 0; slot < SLOTS; slot++) {
        const wake = answerWaiters[slot];
        if (!wake || Atomics.load(ch.control, ch.stateIndex(slot)) !== RESPONSE) continue;
        answerWaiters[slot] = undefined;
        awaited--;
        wake();
      }
      if (awaited === 0) break;
      const w = Atomics.waitAsync(ch.control, ANSWERS, bell);
      if (w.async) await w.value;
    }
  } finally {
    watching = false;
  }
}

/**
 * Waits for a slot's answer through the event loop, also when the request is the only one in flight. Blocking
 * the thread with `Atomics.wait` until the answer comes would save the event loop's wake-up, but the thread
 * reads none of its other connections meanwhile. Measured on 2 cores (2026-11-28, at most 2 ms of blocking for
 * a request alone in flight): nothing gained at one connection (add_sub_py, the MLP); over a listener thread's
 * connections add_sub_py at 8 connections answered 3,600-4,200 requests/s with it against 10,500-12,500
 * without it (the main thread's CPU per request 77-88 µs against 26-31), and the MLP's batches split (64
 * connections, two threads: mean batches of 10-15 against 18, p99 17-45 ms against 9-12).
 */
function waitForAnswer(ch: Channel, slot: number): Promise<void> | undefined {
  if (Atomics.load(ch.control, ch.stateIndex(slot)) === RESPONSE) return undefined;
  return new Promise((resolve) => {
    answerWaiters[slot] = resolve;
    awaited++;
    if (!watching) void watchAnswers(ch);
  });
}

/** Runs a decoded request on the main thread through the shared-memory channel; undefined if it cannot. */
async function viaChannel(frame: Parameters<typeof encodeRequest>[0]): Promise<Answer | undefined> {
  const ch = channel;
  if (!ch) return undefined;
  const encoded = encodeRequest(frame);
  if (!encoded) return undefined;
  const slot = freeSlots.pop();
  if (slot === undefined) return undefined;
  if (!ch.write(slot, encoded)) {
    freeSlots.push(slot);
    return undefined;
  }
  // An answer too large for the slot comes by postMessage under the slot's key.
  const large = new Promise<ToWorker>((resolve) => (slotWaiters[slot] = resolve));
  Atomics.store(ch.control, ch.stateIndex(slot), REQUEST);
  Atomics.add(ch.control, 0, 1);
  Atomics.notify(ch.control, 0);
  const answered = waitForAnswer(ch, slot);
  if (answered) await answered;
  let answer: Answer;
  try {
    const { header, bytes } = ch.read(slot);
    if ((header as { pm?: boolean }).pm) {
      const reply = await large;
      answer = reply.op === "inferred"
        ? { response: reply.response }
        : reply.op === "error"
        ? { error: { code: reply.code, message: reply.message } }
        : { error: { code: "INTERNAL", message: `Unexpected reply '${reply.op}'` } };
    } else {
      slotWaiters[slot] = undefined;
      answer = decodeAnswer(header, bytes);
    }
  } catch (err) {
    // An answer that does not decode fails its request alone: the slot goes back to the free ones.
    slotWaiters[slot] = undefined;
    answer = { error: { code: "INTERNAL", message: `Cannot read the answer: ${(err as Error).message}` } };
  } finally {
    Atomics.store(ch.control, ch.stateIndex(slot), FREE);
    freeSlots.push(slot);
  }
  return answer;
}

const JSON_HEADERS = { "content-type": "application/json" };

/** Thrown by the shared-memory reader: such a request is answered by the main thread. */
const NEEDS_MAIN = new Error("needs the main thread");

function ask(message: FromWorker, transfer: Transferable[] = []): Promise<ToWorker> {
  return new Promise((resolve) => {
    pending.set(message.id, resolve);
    self.postMessage(message, transfer);
  });
}

/** The body, at most `limit` bytes (null when it is larger). */
async function readCapped(request: Request, limit: number): Promise<Uint8Array | null> {
  const declared = request.headers.get("content-length");
  if (declared !== null) {
    // request.body is not looked at first: that makes the body a stream, read in JavaScript chunk by chunk
    // where request.bytes() alone takes it whole.
    const size = Number(declared);
    if (size > limit) return null;
    if (size === 0) return new Uint8Array(0);
    const alignAt = Number(request.headers.get("inference-header-content-length") ?? 0);
    return await receiveBody(request, readDeclaredBody(request, size, alignAt));
  }
  if (!request.body) return new Uint8Array(0);
  return await receiveBody(request, readUpTo(request.body, limit));
}

/**
 * Hands a request to the main thread's handler and answers with what it returns.
 * @param body the body read, or null when there is none (GET, HEAD) or it was over the limit (`tooLarge`)
 */
async function forward(request: Request, body: Uint8Array | null, tooLarge = false): Promise<Response> {
  const id = nextId++;
  const headers = [...request.headers];
  const bytes = body && body.byteLength > 0 ? body : null;
  const transfer = bytes && bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
    ? [bytes.buffer as ArrayBuffer]
    : [];
  // A client that goes away ends the request on the main thread too (its handler's signal; a stream's model).
  let answered = false;
  const cancel = () => {
    if (!answered || streams.has(id)) self.postMessage({ op: "http-cancel", id } satisfies FromWorker);
  };
  request.signal.addEventListener("abort", cancel, { once: true });
  const reply = await ask(
    {
      op: "http",
      id,
      method: request.method,
      url: request.url,
      headers,
      body: bytes,
      tooLarge,
    },
    transfer,
  );
  answered = true;
  if (reply.op !== "http") throw new Error(`unexpected reply '${reply.op}'`);
  if (!reply.stream) {
    request.signal.removeEventListener("abort", cancel);
    return new Response(reply.body as BodyInit | null, { status: reply.status, headers: reply.headers });
  }
  // Server-sent events: each piece goes to the client as the main thread sends it.
  // A client that leaves or stops reading ends the request on the main thread.
  const events = new EventBody(() => {
    if (streams.delete(id)) self.postMessage({ op: "http-cancel", id } satisfies FromWorker);
    request.signal.removeEventListener("abort", cancel);
  });
  streams.set(id, events);
  return new Response(events.body, { status: reply.status, headers: reply.headers });
}

/** A piece or the end of a streamed answer (see forward). */
function streamPiece(msg: Extract<ToWorker, { op: "http-chunk" | "http-end" }>): void {
  const events = streams.get(msg.id);
  if (!events) return;
  if (msg.op === "http-chunk") {
    events.push(msg.chunk);
    return;
  }
  streams.delete(msg.id);
  if (msg.error === undefined) events.close();
  else events.fail(new Error(msg.error));
}

/** Decodes an inference request here, or returns undefined when the main thread must read it. */
function decodeHere(
  request: Request,
  body: Uint8Array,
  model: string,
  version: string,
): { decoded: DecodedRequest; headerLength: number | undefined } | undefined {
  const encoding = request.headers.get("content-encoding");
  if (encoding && encoding.trim().toLowerCase() !== "identity") return undefined;
  const accept = request.headers.get("accept-encoding");
  if (accept && /gzip|deflate/i.test(accept)) return undefined;
  const hl = request.headers.get(HEADER_LENGTH);
  let headerLength: number | undefined;
  if (hl !== null) {
    if (!/^\s*[0-9]+\s*$/.test(hl)) return undefined;
    headerLength = Number(hl);
    if (headerLength === 0) return undefined; // the raw binary form needs the model's config
  }
  let decoded: DecodedRequest;
  try {
    decoded = decodeInferRequest(
      headerLength === undefined ? utf8Decode(body) : body,
      headerLength,
      { model, version },
      undefined,
      (_loc: ShmLocation) => {
        throw NEEDS_MAIN;
      },
    );
  } catch {
    return undefined; // errors are worded by the main thread, which knows the model (NOT_FOUND comes first)
  }
  if (decoded.request.outputs.some((o) => o.parameters.shared_memory_region !== undefined)) return undefined;
  return { decoded, headerLength };
}

/** The buffers of a request's tensors, to transfer rather than copy. */
function buffersOf(tensors: readonly Tensor[]): ArrayBuffer[] {
  const seen = new Set<ArrayBuffer>();
  for (const t of tensors) {
    // A binary body moves whole: its tensors are views of it, and nothing else uses it afterwards.
    const b = (t.data instanceof Uint8Array ? t.data : t.data.data).buffer;
    if (b instanceof ArrayBuffer && b.byteLength > 0) seen.add(b);
  }
  return [...seen];
}

/**
 * Runs a decoded request: on this thread's copy of the model, or on the main thread through the channel, or
 * by postMessage when the channel cannot carry it.
 * @param grpc whether it came over gRPC (ModelInfer) rather than HTTP
 */
async function runDecoded(
  request: InferRequest,
  recvStart: number,
  recvEnd: number,
  grpc: boolean,
): Promise<Answer> {
  const local = replicas.infer(request);
  const answer = local ? await local : await viaChannel({ request, recvStart, recvEnd, grpc });
  if (answer) return answer;
  const id = nextId++;
  const reply = await ask({ op: "infer", id, request, recvStart, recvEnd, grpc }, buffersOf(request.inputs));
  if (reply.op === "error") return { error: { code: reply.code, message: reply.message } };
  if (reply.op === "inferred") return { response: reply.response };
  throw new Error(`unexpected reply '${reply.op}'`);
}

async function infer(request: Request, model: string, version: string): Promise<Response> {
  const recvStart = nowNs();
  const body = await readCapped(request, maxInputSize);
  if (body === null) return forward(request, null, true);
  const recvEnd = nowNs();
  const here = decodeHere(request, body, model, version);
  if (!here) return forward(request, body);
  const { decoded } = here;
  const outputs = decoded.request.outputs;
  const answer = await runDecoded(decoded.request, recvStart, recvEnd, false);
  if ("error" in answer) {
    return new Response(JSON.stringify({ error: answer.error.message }), {
      status: httpStatus(answer.error.code),
      headers: JSON_HEADERS,
    });
  }
  return inferResponse(encodeInferResponse(answer.response, outputs, decoded.binaryOutput));
}

function handle(request: Request): Promise<Response> {
  if (request.method === "POST") {
    const m = INFER_PATH.exec(pathOf(request.url));
    if (m && (!inference || matchesRestriction(request.headers.get(inference.key), inference.value))) {
      return infer(request, m[1]!, m[2] ?? "");
    }
  }
  if (request.method === "GET" || request.method === "HEAD") return forward(request, null);
  return readCapped(request, maxInputSize).then((body) => forward(request, body, body === null));
}

/** Starts what the thread serves. */
async function start(msg: Extract<ToWorker, { op: "start" }>): Promise<void> {
  const log = (level: "info" | "error") => (message: string) =>
    self.postMessage({ op: "log", id: -1, level, message } satisfies FromWorker);
  const http = msg.http;
  if (http) {
    maxInputSize = http.maxInputSize;
    inference = http.inference;
    server = serveResilient({
      hostname: http.hostname,
      port: http.port,
      reusePort: true,
      name: `HTTPService (${self.name})`,
      logger: { info: log("info"), error: log("error") },
      limits: http.limits,
      onError: handlerFailed,
    }, handle);
  }
  if (msg.grpc) {
    // Loaded only by threads that serve gRPC: grpc-js and the protobuf types cost a thread memory.
    const { GrpcThreadServer } = await import("../grpc/thread.ts");
    grpcServer = await GrpcThreadServer.start(msg.grpc, {
      infer: (request, recvStart, recvEnd) => runDecoded(request, recvStart, recvEnd, true),
      post: (m, transfer) => self.postMessage(m satisfies FromWorker, transfer),
      nextId: () => nextId++,
      error: log("error"),
    });
  }
}

self.onmessage = (e: MessageEvent<ToWorker>) => {
  const msg = e.data;
  switch (msg.op) {
    case "start":
      channel = new Channel(msg.channel);
      for (let slot = SLOTS - 1; slot >= 0; slot--) freeSlots.push(slot);
      void start(msg).then(
        () => self.postMessage({ op: "listening", id: -1 } satisfies FromWorker),
        (err) => {
          // A thread that cannot listen fails its start: the main thread reports it and stops the server's start.
          setTimeout(() => {
            throw err;
          });
        },
      );
      return;
    case "reclaim":
      reclaimMemory();
      self.postMessage({ op: "reclaimed", id: -1 } satisfies FromWorker);
      return;
    case "stop":
      // "stopped" goes whatever a step of the stop does: the main thread waits for it.
      void Promise.allSettled([server?.shutdown(), grpcServer?.shutdown()]).then(() => replicas.closeAll())
        .catch(() => {}).then(
          () => self.postMessage({ op: "stopped", id: -1 } satisfies FromWorker),
        );
      return;
    case "grpc-reply":
    case "grpc-write":
    case "grpc-close":
      grpcServer?.handle(msg);
      return;
    case "http-chunk":
    case "http-end":
      streamPiece(msg);
      return;
    case "routes":
    case "replica-served":
    case "replica-open":
    case "replica-close":
      replicas.handle(
        msg,
        (replica) => self.postMessage({ op: "replica-closed", id: -1, replica } satisfies FromWorker),
      );
      return;
    default: {
      if (msg.op === "inferred") reviveBytes(msg.response.outputs);
      let resolve: ((reply: ToWorker) => void) | undefined;
      if (msg.id <= -2) {
        const slot = slotOf(msg.id);
        resolve = slotWaiters[slot];
        slotWaiters[slot] = undefined;
      } else {
        resolve = pending.get(msg.id);
        pending.delete(msg.id);
      }
      resolve?.(msg);
    }
  }
};
