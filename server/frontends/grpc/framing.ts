/**
 * Messages that leave the gRPC frontend already framed, and narrow changes to `@grpc/grpc-js` 1.14's server call
 * that keep a large message from being copied, and a call's objects from being held, more than needed.
 *
 * grpc-js frames every response it sends (a 5-byte prefix: compressed flag, big-endian length) by copying the
 * serialized message whole into a new buffer (`BaseServerInterceptingCall.serializeMessage`), then writes it to
 * the HTTP/2 stream in one write, which Deno's `node:http2` takes whole at once (a copy) and hands on to the
 * connection as fast as it can, whatever the connection has not sent yet. Its `StreamDecoder` keeps the received
 * chunks of the last message in `readPartialMessage` after joining them, until the next message begins (for a
 * unary call: until the call is collected). For a 50 MB tensor each of these is a copy of the response or the
 * request more than needed at the peak. grpc-js has no hook for any of them, so `installGrpcJsPatches` changes
 * four methods on their prototypes, once, when the installed grpc-js is of the versions they were written
 * against and has the members they use:
 *
 * - `serializeMessage(value)`: a `FramedMessage` is its frame in one buffer (its one part as it is, several
 *   parts joined); any other value takes grpc-js's own path. Without the change, the response serializer of
 *   `framedCodec` hands grpc-js the message without its prefix and grpc-js frames it as usual.
 * - `sendMessage(value, callback)`: a `FramedMessage` over `WRITE_PIECE` bytes is written from its parts (a large
 *   output's own bytes, not a copy) in pieces of at most that size, each after the previous one's write
 *   completed and, while the connection holds more than `BACKLOG_BYTES` not yet sent, after it drained; with
 *   grpc-js's own checks and outcomes (a cancelled call sends nothing, a message over the send limit ends the
 *   call RESOURCE_EXHAUSTED, a failed write ends it INTERNAL, the callback runs once the message is written).
 *   Any other value takes grpc-js's own path.
 * - `StreamDecoder.write(data)`: after grpc-js's own write, when no message is being read, the chunks of the
 *   message just joined are let go (`readPartialMessage`, which the next message resets anyway).
 * - `start(listener)`, which runs once for every call: when the call's HTTP/2 stream has closed (after grpc-js's
 *   own listeners of its `close`), the stream lets go of its listeners, keeping one that ignores a late `error`
 *   as grpc-js's did, and the stream's native handle lets go of the stream. Deno's `node:http2` wraps each
 *   stream's native handle in a JavaScript object that the young generation's collections never free (only a
 *   full collection does), and the handle points back at its stream (`owner`), so every closed stream outlived
 *   them (a bare `node:http2` server had 1.6 KB per stream promoted to the old generation), and through
 *   grpc-js's listeners (closures over the call) it held everything its call made: the request, the decoded
 *   message, the response. On 2 cores, `simple`'s ModelInfer at 16 streams had 9.2 KB per call promoted,
 *   scavenges taking 10% of the main thread; with the listeners let go, 2.8 KB (the stream's own objects) and
 *   3.8%; with the handle's links cut as well, 0.2-0.4 KB (the handles) and 1.3-1.6% in about one fresh server
 *   of three to four, the others as before (the higher level when the machine ran slow; see `bench/RESULTS.md`).
 * @module
 */

import { Buffer } from "node:buffer";
import { status } from "@grpc/grpc-js";
import { BaseServerInterceptingCall } from "@grpc/grpc-js/build/src/server-interceptors.js";
import { StreamDecoder } from "@grpc/grpc-js/build/src/stream-decoder.js";
import grpcJsPackage from "@grpc/grpc-js/package.json" with { type: "json" };
import type * as protobuf from "protobufjs";
import { type Codec, codec } from "./_calls.ts";

/** The length of gRPC's message prefix: the compressed flag and the big-endian length. */
export const FRAME_PREFIX = 5;

/** The size of the pieces a large framed message is written in, and the size from which it is. */
export const WRITE_PIECE = 1 << 20;

/** The bytes a connection may hold not yet sent before the next piece of a large message waits for it. */
export const BACKLOG_BYTES = 4 * WRITE_PIECE;

/** The grpc-js versions whose internals the changes were checked against (major.minor). */
const PATCHED_VERSIONS = ["1.14"];

/** A response message serialized and framed by the frontend, in parts: the prefix and the protobuf bytes. */
export class FramedMessage {
  /** The parts, whose concatenation is the frame. */
  readonly parts: readonly Uint8Array[];
  /** The frame's length. */
  readonly byteLength: number;

  /**
   * Frames a message whose bytes are the concatenation of `parts` after `FRAME_PREFIX` bytes left free at the
   * start of the first part (which the prefix is written into).
   * @param parts the free prefix, then the serialized message
   */
  constructor(parts: Uint8Array[]) {
    const length = parts.reduce((n, p) => n + p.byteLength, 0);
    const first = parts[0]!;
    const view = new DataView(first.buffer, first.byteOffset, FRAME_PREFIX);
    view.setUint8(0, 0);
    view.setUint32(1, length - FRAME_PREFIX);
    this.parts = parts;
    this.byteLength = length;
  }

  /** The frame in one buffer: the one part as it is, or the parts joined. */
  frame(): Buffer {
    if (this.parts.length === 1) {
      const p = this.parts[0]!;
      return Buffer.from(p.buffer, p.byteOffset, p.byteLength);
    }
    return Buffer.concat(this.parts, this.byteLength);
  }

  /** The serialized message, without the prefix, in one buffer. */
  message(): Buffer {
    return this.frame().subarray(FRAME_PREFIX);
  }
}

/**
 * The (de)serializers of a response type whose messages may come already framed (`FramedMessage`), plain
 * messages being encoded as they are.
 * @param type the protobuf type
 */
export function framedCodec(type: protobuf.Type): Codec {
  const plain = codec(type, true);
  return {
    serialize: (value) => value instanceof FramedMessage ? value.message() : plain.serialize(value),
    deserialize: plain.deserialize,
  };
}

/** What the piece writer reads of the connection under an HTTP/2 stream. */
interface Connection {
  writableLength: number;
  destroyed: boolean;
  once(event: "drain" | "close", listener: () => void): unknown;
  off(event: "drain" | "close", listener: () => void): unknown;
}

/** The members of grpc-js's server call that the changes use, as they are in the versions they were written for. */
interface ServerCall {
  serializeMessage(value: unknown): Buffer;
  sendMessage(value: unknown, callback: () => void): void;
  checkCancelled(): boolean;
  maybeSendMetadata(): void;
  sendStatus(status: { code: number; details: string; metadata: null }): void;
  maxSendMessageSize: number;
  stream: {
    write(chunk: Uint8Array, callback: (error?: Error | null) => void): boolean;
    session?: { socket?: Partial<Connection> };
  };
  callEventTracker?: { addMessageSent(): void };
  start(listener: unknown): void;
}

/** What the release of a closed stream uses of it. */
interface ClosingStream {
  once(event: "close", listener: () => void): unknown;
  on(event: "error", listener: () => void): unknown;
  removeAllListeners(): unknown;
}

/** The members of grpc-js's stream decoder that the change uses. */
interface Decoder {
  write(data: Buffer): Buffer[];
  readState: number;
  readPartialMessage: Buffer[];
}

/** grpc-js's `ReadState.NO_DATA`: between messages. */
const NO_DATA = 0;

/** The connection of a call's stream when it reports its unsent bytes, else undefined. */
function connectionOf(call: ServerCall): Connection | undefined {
  const socket = call.stream.session?.socket;
  return typeof socket?.writableLength === "number" && typeof socket.once === "function" &&
      typeof socket.off === "function"
    ? socket as Connection
    : undefined;
}

/** Calls `then` once the connection drained or closed. */
function whenDrained(connection: Connection, then: () => void): void {
  const done = () => {
    connection.off("drain", done);
    connection.off("close", done);
    then();
  };
  connection.once("drain", done);
  connection.once("close", done);
}

/**
 * Sends a framed message over `WRITE_PIECE` bytes as grpc-js's `sendMessage` sends one, in pieces.
 * @param call the server call
 * @param message the framed message
 * @param callback runs once the whole message is written
 */
function sendInPieces(call: ServerCall, message: FramedMessage, callback: () => void): void {
  if (call.checkCancelled()) return;
  if (call.maxSendMessageSize !== -1 && message.byteLength - FRAME_PREFIX > call.maxSendMessageSize) {
    call.sendStatus({
      code: status.RESOURCE_EXHAUSTED,
      details: `Sent message larger than max (${message.byteLength} vs. ${call.maxSendMessageSize})`,
      metadata: null,
    });
    return;
  }
  call.maybeSendMetadata();
  const connection = connectionOf(call);
  const parts = message.parts;
  let part = 0;
  let at = 0;
  const next = (error?: Error | null) => {
    if (error) {
      call.sendStatus({ code: status.INTERNAL, details: "Internal server error", metadata: null });
      return;
    }
    while (part < parts.length && at >= parts[part]!.byteLength) {
      part++;
      at = 0;
    }
    if (part === parts.length) {
      call.callEventTracker?.addMessageSent();
      callback();
      return;
    }
    if (connection && !connection.destroyed && connection.writableLength > BACKLOG_BYTES) {
      whenDrained(connection, () => next());
      return;
    }
    const piece = parts[part]!.subarray(at, at + WRITE_PIECE);
    at += piece.byteLength;
    call.stream.write(piece, next);
  };
  next();
}

/** A late `error` of a closed stream, which nothing can answer any more. */
function ignore(): void {}

/**
 * Lets a closed stream's listeners go (see the module comment): the emitter's table of listeners is replaced by
 * an empty one, which is what `removeAllListeners()` does when nothing listens for `removeListener`. Here the
 * stream does (`node:http2` counts some listeners for its session), so `removeAllListeners()` would emit it for
 * every listener, and `Readable`'s own version queues a tick as well: measured against it with `bench/ab.ts`,
 * 0.94x (simple, 16 streams) and 0.92x (Python, 8) the CPU per call. A stream without that table takes
 * `removeAllListeners()`.
 */
function releaseListeners(stream: ClosingStream): void {
  const s = stream as unknown as { _events?: unknown; _eventsCount?: unknown };
  if (typeof s._events === "object" && typeof s._eventsCount === "number") {
    s._events = Object.create(null);
    s._eventsCount = 0;
  } else stream.removeAllListeners();
  stream.on("error", ignore);
}

/** The symbol under which Deno's `node:http2` streams keep their native handle, once a stream showed it. */
let handleKey: symbol | undefined;

/**
 * The native handle of an HTTP/2 stream (in Deno's `node:http2`, an own property keyed by a symbol described as
 * `kHandle`, present while the stream is open), or undefined where the stream has none.
 */
export function streamHandle(stream: object): Record<PropertyKey, unknown> | undefined {
  if (handleKey === undefined || !Object.hasOwn(stream, handleKey)) {
    const key = Object.getOwnPropertySymbols(stream).find((k) => k.description === "kHandle");
    if (key === undefined) return undefined;
    handleKey = key;
  }
  const handle = (stream as Record<symbol, unknown>)[handleKey];
  return typeof handle === "object" && handle !== null ? handle as Record<PropertyKey, unknown> : undefined;
}

/**
 * Lets a closed stream's native handle go of the stream: its own properties that point back at the stream
 * (`owner` and the symbol-keyed owner) become undefined, which is how the handle's callbacks in `node:http2` find a
 * stream that is gone (they return at once). Deno wraps the handle in a JavaScript object that the young
 * generation's collections never free, so through those two properties every closed stream, and all it still
 * referred to, outlived them until the next full collection (see the module comment).
 */
export function releaseHandle(handle: Record<PropertyKey, unknown>, stream: object): void {
  if (handle.owner === stream) handle.owner = undefined;
  for (const key of Object.getOwnPropertySymbols(handle)) {
    if (handle[key] === stream) handle[key] = undefined;
  }
}

let installed = false;

/**
 * Whether a grpc-js version is one the changes were written for, the installed grpc-js having the members they
 * use.
 * @param version a grpc-js version
 */
export function grpcJsPatchable(version: string): boolean {
  if (!PATCHED_VERSIONS.includes(version.split(".").slice(0, 2).join("."))) return false;
  const call = BaseServerInterceptingCall.prototype as unknown as Partial<ServerCall>;
  const methods = [
    call.serializeMessage,
    call.sendMessage,
    call.checkCancelled,
    call.maybeSendMetadata,
    call.sendStatus,
    call.start,
  ];
  if (!methods.every((m) => typeof m === "function")) return false;
  const probe = new StreamDecoder(-1) as unknown as Partial<Decoder>;
  return typeof probe.write === "function" && probe.readState === NO_DATA &&
    Array.isArray(probe.readPartialMessage);
}

/**
 * Installs the changes to grpc-js (see the module comment), once per process.
 * @returns whether they are installed; false when the installed grpc-js is not a version or shape they were
 *   written for, which then runs unchanged
 */
export function installGrpcJsPatches(): boolean {
  if (installed) return true;
  if (!grpcJsPatchable(grpcJsPackage.version)) return false;
  const call = BaseServerInterceptingCall.prototype as unknown as ServerCall;
  const { serializeMessage, sendMessage, start } = call;
  call.serializeMessage = function (this: ServerCall, value) {
    return value instanceof FramedMessage ? value.frame() : serializeMessage.call(this, value);
  };
  call.sendMessage = function (this: ServerCall, value, callback) {
    if (value instanceof FramedMessage && value.byteLength > WRITE_PIECE) sendInPieces(this, value, callback);
    else sendMessage.call(this, value, callback);
  };
  call.start = function (this: ServerCall, listener) {
    const stream = this.stream as unknown as Partial<ClosingStream>;
    if (typeof stream.once === "function" && typeof stream.removeAllListeners === "function") {
      // Taken now: the stream drops its own reference to the handle when it is destroyed, before `close`.
      const handle = streamHandle(stream);
      stream.once("close", () => {
        releaseListeners(stream as ClosingStream);
        if (handle) releaseHandle(handle, stream);
      });
    }
    start.call(this, listener);
  };
  const decoder = StreamDecoder.prototype as unknown as Decoder;
  const write = decoder.write;
  decoder.write = function (this: Decoder, data) {
    const messages = write.call(this, data);
    if (messages.length > 0 && this.readState === NO_DATA) this.readPartialMessage = [];
    return messages;
  };
  installed = true;
  return true;
}
