/**
 * Listener threads (`--http-thread-count`, `--grpc-thread-count`): Web Workers that accept connections on the
 * HTTP and gRPC ports beside the main thread's own listeners (`reusePort`), read and decode requests and encode
 * answers, while the main thread keeps the models, the schedulers and every piece of state. This file is the
 * main thread's side: it starts the threads, runs what they hand over, and stops them. `http_worker.ts` is the
 * threads' side (its gRPC server in `../grpc/thread.ts`).
 * @module
 */

import { reviveBytes } from "../../core/bytes_tensor.ts";
import { type ErrorCode, toServerError } from "../../core/errors.ts";
import type { InferRequest, InferResponse } from "../../core/types.ts";
import type { HttpFrontend } from "./handler.ts";
import type { Restriction } from "../restricted.ts";
import type { ConnectionLimits } from "./listener.ts";
import type { ListenerReplicas, ReplicaMessage } from "./replicas.ts";
import type { GrpcListenOptions } from "../grpc/listen.ts";
import { type GrpcFromThread, type GrpcToThread, RemoteCalls, type RemoteMethod } from "../grpc/remote.ts";
import type { GrpcThreadOptions, ThreadMethod } from "../grpc/thread.ts";
import { settleWithin } from "../../core/clock.ts";
import {
  type Answer,
  ANSWERS,
  Channel,
  type ChannelMemory,
  decodeRequest,
  encodeAnswer,
  REQUEST,
  RESPONSE,
  SLOTS,
  TAKEN,
} from "./_channel.ts";

/**
 * The longest wait for the listener threads to answer a reclaim: a thread busy with a copy's batch answers after
 * it; one that does not answer by then leaves the reclaimer reading the RSS without it.
 */
const RECLAIM_WAIT_MS = 2000;

/** Messages from the main thread to a listener thread. */
export type ToWorker =
  | {
    op: "start";
    id: -1;
    channel: ChannelMemory;
    /** What the thread serves over HTTP; nothing when it serves only gRPC. */
    http: HttpThreadOptions | undefined;
    /** What the thread serves over gRPC; nothing when it serves only HTTP. */
    grpc: GrpcThreadOptions | undefined;
  }
  | { op: "stop"; id: -1 }
  /** Collect the thread's garbage and give free memory back (the main thread's MemoryReclaimer, idle). */
  | { op: "reclaim"; id: -1 }
  | { op: "inferred"; id: number; response: InferResponse }
  | { op: "error"; id: number; code: ErrorCode; message: string }
  | {
    op: "http";
    id: number;
    status: number;
    headers: [string, string][];
    body: Uint8Array | null;
    /** The body follows in `http-chunk` messages, ended by `http-end` (server-sent events). */
    stream?: boolean;
  }
  /** A piece of a streamed answer's body. */
  | { op: "http-chunk"; id: number; chunk: Uint8Array }
  /** The end of a streamed answer's body; `error` when it ended early. */
  | { op: "http-end"; id: number; error?: string }
  | ReplicaMessage
  | GrpcToThread;

/** What a listener thread serves over HTTP. */
export interface HttpThreadOptions {
  /** The address the main thread listens on. */
  hostname: string;
  /** The port the main thread listens on (the threads join it). */
  port: number;
  /** `--http-max-input-size`. */
  maxInputSize: number;
  /** The restriction of the inference API (`--http-restricted-api`), if any. */
  inference: Restriction | undefined;
  /** The connection limits and timeouts (the open-connection count shared with the main thread). */
  limits: ConnectionLimits;
}

/** Messages from a listener thread to the main thread. */
export type FromWorker =
  | { op: "listening"; id: -1 }
  | { op: "stopped"; id: -1 }
  /** The thread has done what a `reclaim` message asked. */
  | { op: "reclaimed"; id: -1 }
  | { op: "log"; id: -1; level: "info" | "error"; message: string }
  /** The thread has closed its copy of a model version (see replicas.ts). */
  | { op: "replica-closed"; id: -1; replica: number }
  | {
    op: "infer";
    id: number;
    request: InferRequest;
    recvStart: number;
    recvEnd: number;
    /** The request came over gRPC (ModelInfer) rather than HTTP. */
    grpc?: boolean;
  }
  | {
    op: "http";
    id: number;
    method: string;
    url: string;
    headers: [string, string][];
    body: Uint8Array | null;
    /** The body was larger than --http-max-input-size and was not read. */
    tooLarge: boolean;
  }
  /** The client of a forwarded request went away: its handler's signal aborts, and a streamed answer stops. */
  | { op: "http-cancel"; id: number }
  | GrpcFromThread;

/** Runs a request a listener thread decoded. */
export type InferDecoded = (
  request: InferRequest,
  recvStart: number,
  recvEnd: number,
) => Promise<InferResponse>;

/** What the listener threads serve. */
export interface ListenerThreadsOptions {
  /** HTTP, when the threads serve it: what each thread listens with, and the main thread's frontend. */
  http?: HttpThreadOptions & {
    /** How many of the threads serve HTTP (the first ones). */
    threads: number;
    /** The main thread's HTTP frontend, which answers what the threads hand over. */
    frontend: HttpFrontend;
  };
  /** gRPC, when the threads serve it. */
  grpc?: {
    /** How many of the threads serve gRPC (the first ones). */
    threads: number;
    /** The methods of the main thread's gRPC server, which answer the calls the threads forward. */
    methods: ReadonlyMap<string, RemoteMethod>;
    /** Where and how the threads listen (the main thread's bound port), and the shared connection count. */
    listen: GrpcListenOptions;
    /** The open gRPC connections of all threads. */
    open: Int32Array;
    /** The restriction of the inference group (`--grpc-restricted-protocol`), if any. */
    inference?: Restriction;
    /** Runs a ModelInfer request a thread decoded. */
    infer: InferDecoded;
  };
  /** Reports a thread that failed after it started, and a thread's failed accepts. */
  onError?: (message: string) => void;
  /** Reports what a thread logs at level info (listening again after a failure). */
  onInfo?: (message: string) => void;
}

/** The methods as the threads learn them. */
function threadMethods(methods: ReadonlyMap<string, RemoteMethod>): ThreadMethod[] {
  return [...methods].map(([name, m]) => ({
    name,
    path: m.definition.path,
    streaming: m.definition.requestStream,
  }));
}

/** The buffers of a response's outputs, moved to the listener thread rather than copied. */
function outputBuffers(response: InferResponse): ArrayBuffer[] {
  const seen = new Set<ArrayBuffer>();
  for (const t of response.outputs) {
    const p = t.data instanceof Uint8Array ? t.data : t.data.data;
    // Only buffers a tensor owns alone: a view into a shared buffer (a batch's output) is copied.
    if (p.buffer instanceof ArrayBuffer && p.byteOffset === 0 && p.byteLength === p.buffer.byteLength) {
      seen.add(p.buffer);
    }
  }
  return [...seen];
}

/** What runs a request a thread decoded: the gRPC frontend's or the HTTP frontend's entry. */
function inferOf(options: ListenerThreadsOptions, grpc: boolean | undefined): InferDecoded {
  const run = grpc ? options.grpc?.infer : options.http?.frontend.inferDecoded;
  if (!run) throw new Error(`This server does not serve ${grpc ? "gRPC" : "HTTP"} on listener threads`);
  return run;
}

/** A body of `size` zero bytes, made as it is read (for a request whose real body was too large to read). */
function zeros(size: number): ReadableStream<Uint8Array> {
  const chunk = new Uint8Array(Math.min(size, 65536));
  let left = size;
  return new ReadableStream({
    pull(controller) {
      if (left <= 0) return controller.close();
      const n = Math.min(left, chunk.byteLength);
      controller.enqueue(n === chunk.byteLength ? chunk : chunk.subarray(0, n));
      left -= n;
    },
  });
}

/** A request the main thread answers for a listener thread, built from what the thread read. */
function rebuildRequest(
  msg: Extract<FromWorker, { op: "http" }>,
  maxInputSize: number,
  signal: AbortSignal,
): Request {
  const headers = new Headers(msg.headers);
  if (msg.tooLarge) {
    // The thread stopped reading at the limit: the handler refuses the request by its declared length, or by
    // the size of a body that stands in for it, as it refuses one it reads itself.
    const declared = headers.get("content-length");
    return new Request(msg.url, {
      method: msg.method,
      headers,
      body: declared === null ? zeros(maxInputSize + 1) : null,
      signal,
    });
  }
  const hasBody = msg.method !== "GET" && msg.method !== "HEAD";
  return new Request(msg.url, {
    method: msg.method,
    headers,
    body: hasBody ? (msg.body ?? new Uint8Array(0)) as BodyInit : null,
    signal,
  });
}

/** Whether an answer's body is a stream of events that must reach the client as it is made. */
function streamed(response: Response): boolean {
  return response.body !== null && /^text\/event-stream/i.test(response.headers.get("content-type") ?? "");
}

/** The running listener threads. */
export class ListenerThreads {
  #workers: Worker[] = [];
  /** The threads that failed after their start (ended, and left out of what follows). */
  #failed = new Set<number>();
  /** Per thread, what a shutdown waits for: its "stopped", or its failure. */
  #stopping = new Map<number, () => void>();
  #channels: Channel[] = [];
  /** The gRPC calls each thread that serves gRPC forwards. */
  #remotes: RemoteCalls[] = [];
  #stopped = false;
  #replicas: ListenerReplicas | undefined;
  /** The forwarded HTTP requests in progress, by thread and id: what ends them when their client goes. */
  #forwarded = new Map<string, AbortController>();
  /** Per thread, the reclaims asked of it that it has not answered yet (it answers in order). */
  #reclaims: (() => void)[][] = [];

  private constructor() {}

  /**
   * Starts `count` listener threads on the main thread's HTTP and gRPC addresses and ports.
   * @param count how many
   * @param options what they serve, where they listen and their limits
   * @returns the threads, once all listen
   */
  static async start(count: number, options: ListenerThreadsOptions): Promise<ListenerThreads> {
    const pool = new ListenerThreads();
    const started: Promise<void>[] = [];
    const { http, grpc } = options;
    const methods = grpc ? threadMethods(grpc.methods) : [];
    // What each HTTP thread listens with: the options less what stays on the main thread.
    const httpThread: HttpThreadOptions | undefined = http &&
      {
        hostname: http.hostname,
        port: http.port,
        maxInputSize: http.maxInputSize,
        inference: http.inference,
        limits: http.limits,
      };
    for (let i = 0; i < count; i++) {
      const worker = new Worker(new URL("./http_worker.ts", import.meta.url).href, {
        type: "module",
        name: `listener-${i + 1}`,
      });
      pool.#workers.push(worker);
      const reclaims: (() => void)[] = [];
      pool.#reclaims.push(reclaims);
      const memory = Channel.allocate();
      const channel = new Channel(memory);
      pool.#channels.push(channel);
      const remote = grpc && i < grpc.threads
        ? new RemoteCalls(grpc.methods, (reply, transfer) => worker.postMessage(reply, transfer))
        : undefined;
      if (remote) pool.#remotes.push(remote);
      started.push(
        new Promise((resolve, reject) => {
          let listening = false;
          worker.onerror = (e) => {
            e.preventDefault();
            // After the start, a thread that fails is reported and left out; the other threads keep serving.
            if (listening) {
              options.onError?.(`Listener thread ${i + 1} failed: ${e.message}`);
              // Ended, so that a shutdown does not wait for a thread that will never say it stopped.
              pool.#failed.add(i);
              worker.terminate();
              pool.#stopping.get(i)?.();
              // Its forwarded requests end too: a stream's model stops.
              for (const [key, aborts] of pool.#forwarded) if (key.startsWith(`${i}:`)) aborts.abort();
              remote?.cancelAll();
              pool.#replicas?.failed(i);
              for (const done of reclaims.splice(0)) done();
            } else reject(new Error(e.message));
          };
          worker.onmessage = (e: MessageEvent<FromWorker>) => {
            const msg = e.data;
            if (msg.op === "listening") {
              listening = true;
              void pool.#poll(channel, worker, options);
              resolve();
            } else if (msg.op === "log") {
              if (msg.level === "error") options.onError?.(msg.message);
              else options.onInfo?.(msg.message);
            } else if (msg.op === "replica-closed") pool.#replicas?.closed(i, msg.replica);
            else if (msg.op === "reclaimed") reclaims.shift()?.();
            else if (msg.op === "http-cancel") pool.#forwarded.get(`${i}:${msg.id}`)?.abort();
            else if (msg.op.startsWith("grpc-")) remote?.handle(msg as GrpcFromThread);
            else void pool.#serve(worker, msg, options, i);
          };
        }),
      );
      worker.postMessage(
        {
          op: "start",
          id: -1,
          channel: memory,
          http: http && i < http.threads ? httpThread : undefined,
          grpc: remote && grpc
            ? { listen: grpc.listen, methods, inference: grpc.inference, open: grpc.open }
            : undefined,
        } satisfies ToWorker,
      );
    }
    try {
      await Promise.all(started);
    } catch (err) {
      for (const w of pool.#workers) w.terminate();
      throw err;
    }
    return pool;
  }

  /** How many listener threads. */
  get count(): number {
    return this.#workers.length;
  }

  /**
   * Posts a message of the replica protocol to one listener thread.
   * @param thread the thread's index
   * @param msg the message
   */
  post(thread: number, msg: ReplicaMessage): void {
    if (!this.#failed.has(thread)) this.#workers[thread]?.postMessage(msg satisfies ToWorker);
  }

  /**
   * Asks every thread to collect its garbage and give free memory back (it does so on its own thread).
   * @param waitMs how long to wait for the threads at most
   * @returns when every thread has done so, or failed or stopped, or `waitMs` have passed
   */
  reclaim(waitMs = RECLAIM_WAIT_MS): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    const done = this.#workers.map((w, i) =>
      new Promise<void>((resolve) => {
        if (this.#failed.has(i)) return resolve();
        this.#reclaims[i]!.push(resolve);
        w.postMessage({ op: "reclaim", id: -1 } satisfies ToWorker);
      })
    );
    return settleWithin(Promise.all(done), waitMs, { unref: true });
  }

  /**
   * Lets the threads run copies of small models (see replicas.ts); the replicas hear the threads' answers.
   * @param replicas the main thread's side of the copies
   */
  attach(replicas: ListenerReplicas): void {
    this.#replicas = replicas;
  }

  /** Takes the requests a listener thread writes into its channel, as long as the pool runs. */
  async #poll(channel: Channel, worker: Worker, options: ListenerThreadsOptions): Promise<void> {
    let seen = 0;
    while (!this.#stopped) {
      const bell = Atomics.load(channel.control, 0);
      if (bell === seen) {
        const w = Atomics.waitAsync(channel.control, 0, bell);
        if (w.async) await w.value;
        continue;
      }
      seen = bell;
      for (let slot = 0; slot < SLOTS; slot++) {
        const i = channel.stateIndex(slot);
        // A load first: a compare-exchange is a locked write to the line even where it fails, and most slots
        // are not waiting.
        if (
          Atomics.load(channel.control, i) === REQUEST &&
          Atomics.compareExchange(channel.control, i, REQUEST, TAKEN) === REQUEST
        ) {
          void this.#runSlot(channel, worker, slot, options);
        }
      }
    }
  }

  async #runSlot(
    channel: Channel,
    worker: Worker,
    slot: number,
    options: ListenerThreadsOptions,
  ): Promise<void> {
    let answer: Answer;
    try {
      const { header, bytes } = channel.read(slot);
      const f = decodeRequest(header, bytes);
      answer = { response: await inferOf(options, f.grpc)(f.request, f.recvStart, f.recvEnd) };
    } catch (err) {
      const e = toServerError(err);
      answer = { error: { code: e.code, message: e.message } };
    }
    const id = -2 - slot;
    try {
      const frame = encodeAnswer(answer);
      if (!frame || !channel.write(slot, frame)) {
        // Too large for the slot: the answer goes by postMessage, the slot says so.
        const reply: ToWorker = "error" in answer
          ? { op: "error", id, code: answer.error.code, message: answer.error.message }
          : { op: "inferred", id, response: answer.response };
        worker.postMessage(reply, "response" in answer ? outputBuffers(answer.response) : []);
        channel.write(slot, { header: '{"pm":true}', bodies: [] });
      }
    } catch (err) {
      // An answer that cannot be sent either way still frees the slot and ends the thread's request.
      const message = `Cannot hand the answer to the listener thread: ${(err as Error).message}`;
      worker.postMessage({ op: "error", id, code: "INTERNAL", message } satisfies ToWorker);
      channel.write(slot, { header: '{"pm":true}', bodies: [] });
    }
    Atomics.store(channel.control, channel.stateIndex(slot), RESPONSE);
    Atomics.add(channel.control, ANSWERS, 1);
    Atomics.notify(channel.control, ANSWERS);
  }

  async #serve(worker: Worker, msg: FromWorker, options: ListenerThreadsOptions, thread: number) {
    if (msg.op === "infer") {
      let reply: ToWorker;
      let transfer: ArrayBuffer[] = [];
      try {
        reviveBytes(msg.request.inputs);
        const response = await inferOf(options, msg.grpc)(msg.request, msg.recvStart, msg.recvEnd);
        reply = { op: "inferred", id: msg.id, response };
        transfer = outputBuffers(response);
      } catch (err) {
        const e = toServerError(err);
        reply = { op: "error", id: msg.id, code: e.code, message: e.message };
      }
      worker.postMessage(reply, transfer);
    } else if (msg.op === "http") {
      const key = `${thread}:${msg.id}`;
      const aborts = new AbortController();
      this.#forwarded.set(key, aborts);
      try {
        let response: Response;
        let body: Uint8Array | null;
        try {
          if (!options.http) throw new Error("This thread does not serve HTTP");
          response = await options.http.frontend.handle(
            rebuildRequest(msg, options.http.maxInputSize, aborts.signal),
          );
          if (streamed(response)) {
            await this.#stream(worker, msg.id, response, aborts.signal);
            return;
          }
          body = response.body ? new Uint8Array(await response.arrayBuffer()) : null;
        } catch (err) {
          const e = toServerError(err);
          response = new Response(null, { status: 500, headers: { "content-type": "application/json" } });
          body = new TextEncoder().encode(JSON.stringify({ error: e.message }));
        }
        worker.postMessage(
          {
            op: "http",
            id: msg.id,
            status: response.status,
            headers: [...response.headers],
            body,
          } satisfies ToWorker,
          body ? [body.buffer as ArrayBuffer] : [],
        );
      } finally {
        this.#forwarded.delete(key);
      }
    }
  }

  /**
   * Sends a streamed answer (server-sent events) to the thread piece by piece as the handler makes it, so that its
   * client sees each event at once; when the client goes (`signal`), the handler's stream is cancelled, which
   * stops its model.
   */
  async #stream(worker: Worker, id: number, response: Response, signal: AbortSignal): Promise<void> {
    worker.postMessage(
      {
        op: "http",
        id,
        status: response.status,
        headers: [...response.headers],
        body: null,
        stream: true,
      } satisfies ToWorker,
    );
    const reader = response.body!.getReader();
    const cancel = () => void reader.cancel().catch(() => {});
    signal.addEventListener("abort", cancel, { once: true });
    let error: string | undefined;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const chunk = new Uint8Array(value);
        worker.postMessage({ op: "http-chunk", id, chunk } satisfies ToWorker, [chunk.buffer]);
      }
    } catch (err) {
      error = (err as Error).message;
    } finally {
      signal.removeEventListener("abort", cancel);
    }
    worker.postMessage({ op: "http-end", id, ...(error === undefined ? {} : { error }) } satisfies ToWorker);
  }

  /** Ends the polling of every channel (each poll loop wakes once more and sees the flag). */
  #stopPolling(): void {
    this.#stopped = true;
    for (const c of this.#channels) {
      Atomics.add(c.control, 0, 1);
      Atomics.notify(c.control, 0);
    }
  }

  /**
   * Stops accepting connections and finishes the requests the threads are answering.
   * @returns when every thread has stopped
   */
  async shutdown(): Promise<void> {
    await Promise.all(this.#workers.map((worker, i) =>
      new Promise<void>((resolve) => {
        if (this.#failed.has(i)) return resolve();
        this.#stopping.set(i, resolve);
        const previous = worker.onmessage;
        worker.onmessage = (e: MessageEvent<FromWorker>) => {
          if (e.data.op === "stopped") {
            worker.terminate();
            resolve();
          } else previous?.call(worker, e);
        };
        worker.postMessage({ op: "stop", id: -1 } satisfies ToWorker);
      })
    ));
    this.#replicas?.stop();
    this.#stopPolling();
    for (const r of this.#remotes) r.cancelAll();
    this.#workers = [];
    this.#endReclaims();
  }

  /** Answers every reclaim still waiting for a thread that has stopped. */
  #endReclaims(): void {
    for (const waiting of this.#reclaims) for (const done of waiting.splice(0)) done();
  }

  /** Ends the threads at once (requests they are answering are dropped). */
  terminate(): void {
    this.#replicas?.stop();
    this.#stopPolling();
    for (const w of this.#workers) w.terminate();
    for (const r of this.#remotes) r.cancelAll();
    this.#workers = [];
    this.#endReclaims();
  }
}
