/**
 * gRPC calls that a listener thread accepted and the main thread answers: every method but the ModelInfer
 * requests a thread decodes itself (see `thread.ts`). The thread hands over the serialized messages and the call's
 * metadata; here they meet the same handlers the main thread's own connections use, through stand-ins for
 * grpc-js's call objects, and the answers go back serialized.
 * @module
 */

import { Buffer } from "node:buffer";
import { Duplex } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import { grpcError } from "./_calls.ts";

/** Metadata as it crosses threads: each key with its values (Uint8Array for `-bin` keys). */
export type MetadataEntries = [string, (string | Uint8Array)[]][];

/** A status a call ends with. */
export interface CallStatus {
  code: number;
  details: string;
}

/** Messages from a listener thread about the calls it forwards. */
export type GrpcFromThread =
  /** A unary call: its method, metadata and request message. */
  | { op: "grpc-call"; id: number; method: string; metadata: MetadataEntries; message: Uint8Array }
  /** A stream opens. */
  | { op: "grpc-open"; id: number; method: string; metadata: MetadataEntries }
  /** A stream's request message. */
  | { op: "grpc-data"; id: number; message: Uint8Array }
  /** The client has sent all of a stream's requests. */
  | { op: "grpc-end"; id: number }
  /** The client cancelled a stream (or its connection closed). */
  | { op: "grpc-cancel"; id: number };

/** Messages to a listener thread about the calls it forwarded. */
export type GrpcToThread =
  /** A unary call's answer: the response message, or the status it failed with. */
  | { op: "grpc-reply"; id: number; message?: Uint8Array; status?: CallStatus }
  /** A stream's response message. */
  | { op: "grpc-write"; id: number; message: Uint8Array }
  /** A stream ends: OK without a status. */
  | { op: "grpc-close"; id: number; status?: CallStatus };

/** A method the main thread serves: its definition (for the (de)serializers) and its handler. */
export interface RemoteMethod {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: grpc.UntypedHandleCall;
}

/** The metadata of a call, to send to another thread. */
export function metadataEntries(metadata: grpc.Metadata): MetadataEntries {
  const out: MetadataEntries = [];
  for (const key of Object.keys(metadata.getMap())) {
    out.push([key, metadata.get(key).map((v) => typeof v === "string" ? v : new Uint8Array(v))]);
  }
  return out;
}

/** Metadata rebuilt from what another thread sent. */
export function metadataOf(entries: MetadataEntries): grpc.Metadata {
  const metadata = new grpc.Metadata();
  for (const [key, values] of entries) {
    for (const v of values) metadata.add(key, typeof v === "string" ? v : Buffer.from(v));
  }
  return metadata;
}

/**
 * A copy of a message's bytes in a buffer of its own, which moves to the other thread rather than being copied
 * again (the buffers of Node's Buffers cannot move).
 */
export function own(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(bytes.byteLength);
  out.set(bytes);
  return out;
}

/** The buffer to transfer with a message. */
function transferOf(message: Uint8Array | undefined): ArrayBuffer[] {
  return message ? [message.buffer as ArrayBuffer] : [];
}

/** The status an error a handler ends a call with stands for (a grpc-js status object, or anything thrown). */
function statusOf(err: unknown): CallStatus {
  const e = err as Partial<grpc.StatusObject> | null;
  if (e && typeof e === "object" && typeof e.code === "number") {
    return { code: e.code, details: String(e.details ?? (e as { message?: string }).message ?? "") };
  }
  const s = grpcError(err);
  return { code: s.code ?? grpc.status.INTERNAL, details: s.details ?? "" };
}

/** The stand-in for grpc-js's server stream of a forwarded ModelStreamInfer-like call. */
class RemoteStream extends Duplex {
  cancelled = false;
  #closed = false;

  constructor(
    readonly metadata: grpc.Metadata,
    readonly method: RemoteMethod,
    private readonly send: (reply: GrpcToThread, transfer: ArrayBuffer[]) => void,
    private readonly id: number,
  ) {
    super({ objectMode: true });
    // A handler ends a call with a status by emitting it as an error, as with grpc-js.
    this.on("error", (err) => this.close(statusOf(err)));
  }

  override _read(): void {}

  override _write(chunk: unknown, _encoding: string, callback: (error?: Error | null) => void): void {
    if (!this.#closed) {
      let message: Uint8Array;
      try {
        message = own(this.method.definition.responseSerialize(chunk) as Uint8Array);
      } catch (err) {
        this.close(statusOf(err));
        callback();
        return;
      }
      this.send({ op: "grpc-write", id: this.id, message }, transferOf(message));
    }
    callback();
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.close();
    callback();
  }

  /** Ends the call on the thread (OK without a status), then lets go of the stream: nothing more comes for it. */
  close(status?: CallStatus): void {
    if (this.#closed) return;
    this.#closed = true;
    this.send(status ? { op: "grpc-close", id: this.id, status } : { op: "grpc-close", id: this.id }, []);
    queueMicrotask(() => this.destroy());
  }

  getPeer(): string {
    return "";
  }
}

/**
 * The main thread's side of the calls one listener thread forwards.
 */
export class RemoteCalls {
  readonly #streams = new Map<number, RemoteStream>();

  /**
   * @param methods the methods served, by name (`ModelInfer`, `ServerLive`, `Check`, ...)
   * @param send posts a message to the thread, with the buffers to transfer
   */
  constructor(
    private readonly methods: ReadonlyMap<string, RemoteMethod>,
    private readonly send: (reply: GrpcToThread, transfer: ArrayBuffer[]) => void,
  ) {}

  /** Takes one message from the thread. */
  handle(msg: GrpcFromThread): void {
    switch (msg.op) {
      case "grpc-call":
        return this.#unary(msg);
      case "grpc-open":
        return this.#open(msg);
      case "grpc-data": {
        const s = this.#streams.get(msg.id);
        if (!s) return;
        let message: unknown;
        try {
          message = s.method.definition.requestDeserialize(Buffer.from(msg.message));
        } catch (err) {
          // A message that does not decode ends its stream (its requests running are cancelled, as when the
          // client cancels), not the main thread's message handler.
          this.#streams.delete(msg.id);
          s.cancelled = true;
          s.emit("cancelled");
          s.close(statusOf(err));
          return;
        }
        s.push(message);
        return;
      }
      case "grpc-end":
        this.#streams.get(msg.id)?.push(null);
        return;
      case "grpc-cancel": {
        const s = this.#streams.get(msg.id);
        if (!s) return;
        this.#streams.delete(msg.id);
        s.cancelled = true;
        s.emit("cancelled");
        s.destroy();
        return;
      }
    }
  }

  /** How many forwarded streams are open. */
  get openStreams(): number {
    return this.#streams.size;
  }

  /** Cancels every stream in progress (the thread is gone). */
  cancelAll(): void {
    for (const id of [...this.#streams.keys()]) this.handle({ op: "grpc-cancel", id });
  }

  #unary(msg: Extract<GrpcFromThread, { op: "grpc-call" }>): void {
    const m = this.methods.get(msg.method);
    if (!m || m.definition.requestStream || m.definition.responseStream) {
      this.send({
        op: "grpc-reply",
        id: msg.id,
        status: { code: grpc.status.UNIMPLEMENTED, details: `Method '${msg.method}' is not a unary method` },
      }, []);
      return;
    }
    let answered = false;
    const reply = (err: unknown, value?: unknown) => {
      if (answered) return;
      answered = true;
      if (err) {
        this.send({ op: "grpc-reply", id: msg.id, status: statusOf(err) }, []);
        return;
      }
      let message: Uint8Array;
      try {
        message = own(m.definition.responseSerialize(value) as Uint8Array);
      } catch (e) {
        this.send({ op: "grpc-reply", id: msg.id, status: statusOf(e) }, []);
        return;
      }
      this.send({ op: "grpc-reply", id: msg.id, message }, transferOf(message));
    };
    try {
      const call = {
        request: m.definition.requestDeserialize(Buffer.from(msg.message)),
        metadata: metadataOf(msg.metadata),
        cancelled: false,
        getPeer: () => "",
        on: () => call,
        once: () => call,
        sendMetadata: () => {},
      };
      (m.handler as grpc.handleUnaryCall<unknown, unknown>)(
        call as unknown as grpc.ServerUnaryCall<unknown, unknown>,
        (err, value) => reply(err, value),
      );
    } catch (err) {
      reply(err ?? new Error("handler failed"));
    }
  }

  #open(msg: Extract<GrpcFromThread, { op: "grpc-open" }>): void {
    const m = this.methods.get(msg.method);
    if (!m || !m.definition.requestStream || !m.definition.responseStream) {
      this.send({
        op: "grpc-close",
        id: msg.id,
        status: {
          code: grpc.status.UNIMPLEMENTED,
          details: `Method '${msg.method}' is not a streaming method`,
        },
      }, []);
      return;
    }
    let stream: RemoteStream;
    try {
      stream = new RemoteStream(metadataOf(msg.metadata), m, this.send, msg.id);
    } catch (err) {
      this.send({ op: "grpc-close", id: msg.id, status: statusOf(err) }, []);
      return;
    }
    this.#streams.set(msg.id, stream);
    stream.on("close", () => this.#streams.delete(msg.id));
    try {
      (m.handler as grpc.handleBidiStreamingCall<unknown, unknown>)(
        stream as unknown as grpc.ServerDuplexStream<unknown, unknown>,
      );
    } catch (err) {
      // A handler that throws ends its stream with the error, not the main thread's message handler.
      this.#streams.delete(msg.id);
      stream.close(statusOf(err));
    }
  }
}
