/**
 * The gRPC server of a listener thread: it accepts connections on the server's gRPC port beside the main thread
 * (`reusePort`), and runs node:http2 and grpc-js for them here. ModelInfer requests are decoded and their answers
 * encoded here, the model running on the main thread (or on this thread's copy of it); every other call, and any
 * ModelInfer this thread cannot read on its own (shared memory, a restricted group without its key, a malformed
 * message), goes to the main thread whole, serialized, and its answer comes back serialized (see `remote.ts`).
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { HeldWrites } from "./held_writes.ts";
import { type ErrorCode, grpcStatus } from "../../core/errors.ts";
import { nowNs } from "../../core/clock.ts";
import { lookupType } from "../../core/protos.ts";
import type { InferRequest, InferResponse } from "../../core/types.ts";
import type { Restriction } from "../restricted.ts";
import { CallCounter, codec, type MessageCodec, method, restriction } from "./_calls.ts";
import { FRAME_PREFIX, FramedMessage, installGrpcJsPatches } from "./framing.ts";
import {
  decodeModelInferRequest,
  encodeModelInferResponseParts,
  type ModelInferRequestMessage,
} from "./infer_codec.ts";
import {
  closeGracefully,
  type GrpcListener,
  type GrpcListenOptions,
  grpcServerOptions,
  listenGrpc,
} from "./listen.ts";
import { type GrpcFromThread, type GrpcToThread, metadataEntries, own } from "./remote.ts";

/** A method as the listener threads learn it: its name, its path, whether it streams both ways. */
export interface ThreadMethod {
  name: string;
  path: string;
  streaming: boolean;
}

/** What a listener thread's gRPC server is started with. */
export interface GrpcThreadOptions {
  /** Address, port (the main thread's), limits, TLS. */
  listen: GrpcListenOptions;
  /** The methods the main thread serves. */
  methods: ThreadMethod[];
  /** The restriction of the inference group (`--grpc-restricted-protocol`), if any. */
  inference: Restriction | undefined;
  /** The open gRPC connections of all threads. */
  open: Int32Array;
}

/** The answer to a request run for this thread: the response, or the error it failed with. */
export type InferAnswer = { response: InferResponse } | { error: { code: ErrorCode; message: string } };

/** What the thread's gRPC server asks of the thread around it. */
export interface GrpcThreadLink {
  /** Runs a decoded ModelInfer request (on this thread's copy of the model or on the main thread). */
  infer(request: InferRequest, recvStart: number, recvEnd: number): Promise<InferAnswer>;
  /** Posts a message about a forwarded call to the main thread. */
  post(msg: GrpcFromThread, transfer: ArrayBuffer[]): void;
  /** A new message id, unique among the thread's messages to the main thread. */
  nextId(): number;
  /** Reports a failed accept. */
  error(message: string): void;
}

/** Passes messages through as their bytes (the main thread's handlers (de)serialize them). */
const identity: MessageCodec = {
  serialize: (value: Buffer) => value,
  deserialize: (buf: Buffer) => buf,
};

/** A ModelInfer request as this thread reads it: the bytes, and the message when they decode. */
interface InferCallRequest {
  bytes: Buffer;
  message: ModelInferRequestMessage | undefined;
}

const inferRequestCodec = codec(lookupType("ModelInferRequest"), false);

/** ModelInfer's requests: the bytes kept beside the message, to forward whole when the thread cannot run them. */
const inferRequest: MessageCodec = {
  serialize: (value: Buffer) => value,
  deserialize: (bytes: Buffer): InferCallRequest => {
    const decoded = inferRequestCodec.deserialize(bytes);
    // A message that does not decode carries the error under a symbol: the main thread words it.
    const ok = Object.getOwnPropertySymbols(decoded).length === 0;
    return { bytes, message: ok ? decoded as unknown as ModelInferRequestMessage : undefined };
  },
};

/** ModelInfer's responses: framed here, or the main thread's serialized answer to a forwarded call. */
const inferResponse: MessageCodec = {
  serialize: (value: FramedMessage | Buffer) => value instanceof FramedMessage ? value.message() : value,
  deserialize: (buf: Buffer) => buf,
};

/** Whether a ModelInfer request names shared memory for an input or an output. */
function usesSharedMemory(msg: ModelInferRequestMessage): boolean {
  const named = (p: Record<string, unknown> | undefined) => p !== undefined && "shared_memory_region" in p;
  return msg.inputs.some((t) => named(t.parameters as Record<string, unknown> | undefined)) ||
    (msg.outputs ?? []).some((t) => named((t as { parameters?: Record<string, unknown> }).parameters));
}

/** The gRPC server of one listener thread. */
export class GrpcThreadServer {
  readonly #calls = new CallCounter();
  /** Unary calls forwarded, by message id. */
  readonly #replies = new Map<number, (reply: Extract<GrpcToThread, { op: "grpc-reply" }>) => void>();
  /** Streams forwarded, by message id, with their writes (bounded for a client that stops reading). */
  readonly #streams = new Map<number, { call: grpc.ServerDuplexStream<Buffer, Buffer>; held: HeldWrites }>();
  #server: grpc.Server | undefined;
  #listener: GrpcListener | undefined;
  /** The inference group's restriction check: such a call without its key goes to the main thread, which refuses it. */
  readonly #denied: ReturnType<typeof restriction>;

  private constructor(options: GrpcThreadOptions, private readonly link: GrpcThreadLink) {
    this.#denied = restriction(options.inference);
  }

  /** Starts listening. */
  static async start(options: GrpcThreadOptions, link: GrpcThreadLink): Promise<GrpcThreadServer> {
    installGrpcJsPatches();
    const s = new GrpcThreadServer(options, link);
    const server = new grpc.Server(grpcServerOptions(options.listen));
    for (const m of options.methods) {
      const definition = m.name === "ModelInfer"
        ? method(m.path, inferRequest, inferResponse)
        : method(m.path, identity, identity, m.streaming);
      const handler = m.name === "ModelInfer"
        ? s.#infer
        : m.streaming
        ? (call: grpc.ServerDuplexStream<Buffer, Buffer>) => s.#stream(m.name, call)
        : (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) =>
          s.#unary(m.name, call.request, call.metadata, callback);
      server.addService({ [m.name]: definition }, { [m.name]: handler } as grpc.UntypedServiceImplementation);
    }
    s.#server = server;
    s.#listener = await listenGrpc(server, options.listen, options.open, true, link.error);
    return s;
  }

  /** Takes a message of the main thread about a forwarded call. */
  handle(msg: GrpcToThread): void {
    if (msg.op === "grpc-reply") {
      const resolve = this.#replies.get(msg.id);
      this.#replies.delete(msg.id);
      resolve?.(msg);
      return;
    }
    const stream = this.#streams.get(msg.id);
    if (!stream) return;
    if (msg.op === "grpc-write") {
      const m = msg.message;
      stream.held.write(Buffer.from(m.buffer, m.byteOffset, m.byteLength), m.byteLength);
      return;
    }
    const call = stream.call;
    this.#streams.delete(msg.id);
    if (msg.status) call.emit("error", msg.status);
    else if (!call.writableEnded) call.end();
  }

  #infer = (
    call: grpc.ServerUnaryCall<InferCallRequest, FramedMessage | Buffer>,
    callback: grpc.sendUnaryData<FramedMessage | Buffer>,
  ) => {
    const recvEnd = nowNs();
    const { bytes, message } = call.request;
    const allowed = this.#denied?.(call.metadata) === undefined;
    let request: InferRequest | undefined;
    if (message && allowed && !usesSharedMemory(message)) {
      try {
        request = decodeModelInferRequest(message);
      } catch {
        // The main thread words the error, knowing the model (NOT_FOUND comes first).
      }
    }
    if (!request) {
      this.#unary("ModelInfer", bytes, call.metadata, callback);
      return;
    }
    this.#calls.begin();
    this.link.infer(request, recvEnd, recvEnd).then((answer) => {
      if ("error" in answer) {
        callback({ code: grpcStatus(answer.error.code), details: answer.error.message });
        return;
      }
      let framed: FramedMessage;
      try {
        framed = new FramedMessage(
          encodeModelInferResponseParts(answer.response, undefined, { reserve: FRAME_PREFIX }),
        );
      } catch (err) {
        // An answer that does not encode ends its call INTERNAL, not the thread (an unhandled rejection).
        callback({ code: grpc.status.INTERNAL, details: (err as Error).message });
        return;
      }
      callback(null, framed);
    }, (err) => callback({ code: grpc.status.INTERNAL, details: (err as Error).message }))
      .finally(() => this.#calls.end());
  };

  /** Forwards a unary call to the main thread and answers with what it returns. */
  #unary(
    method: string,
    request: Buffer,
    metadata: grpc.Metadata,
    callback: grpc.sendUnaryData<Buffer>,
  ): void {
    const id = this.link.nextId();
    const message = own(request);
    this.#calls.begin();
    new Promise<Extract<GrpcToThread, { op: "grpc-reply" }>>((resolve) => {
      this.#replies.set(id, resolve);
      this.link.post(
        { op: "grpc-call", id, method, metadata: metadataEntries(metadata), message },
        [message.buffer as ArrayBuffer],
      );
    }).then((reply) => {
      if (reply.status) callback(reply.status as Partial<grpc.StatusObject>);
      else {
        const m = reply.message!;
        callback(null, Buffer.from(m.buffer, m.byteOffset, m.byteLength));
      }
    }).finally(() => this.#calls.end());
  }

  #stream(method: string, call: grpc.ServerDuplexStream<Buffer, Buffer>): void {
    const id = this.link.nextId();
    this.#calls.begin();
    let open = true;
    const finish = () => {
      if (!open) return;
      open = false;
      this.#streams.delete(id);
      this.#calls.end();
    };
    // A client that stops reading is cancelled on the main thread as one that went away (then the call ends).
    const held = new HeldWrites(call, () => {
      if (this.#streams.has(id)) this.link.post({ op: "grpc-cancel", id }, []);
    });
    this.#streams.set(id, { call, held });
    this.link.post({ op: "grpc-open", id, method, metadata: metadataEntries(call.metadata) }, []);
    call.on("data", (bytes: Buffer) => {
      if (!this.#streams.has(id)) return; // the main thread has ended the call
      const message = own(bytes);
      this.link.post({ op: "grpc-data", id, message }, [message.buffer as ArrayBuffer]);
    });
    call.on("end", () => {
      if (this.#streams.has(id)) this.link.post({ op: "grpc-end", id }, []);
    });
    call.on("cancelled", () => {
      if (this.#streams.has(id)) this.link.post({ op: "grpc-cancel", id }, []);
      finish();
    });
    call.on("finish", finish);
    call.on("close", finish);
    call.on("error", finish);
  }

  /** Stops accepting, waits for the calls in progress, then closes the connections once their answers have left. */
  async shutdown(): Promise<void> {
    this.#listener?.close();
    await this.#calls.idle();
    if (this.#server && this.#listener) await closeGracefully(this.#server, this.#listener);
  }

  /** Ends every call at once. */
  forceShutdown(): void {
    this.#listener?.close();
    this.#listener?.destroy();
    this.#server?.forceShutdown();
  }
}
