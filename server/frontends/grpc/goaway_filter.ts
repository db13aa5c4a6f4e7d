/**
 * A connection wrapper for the gRPC server that drops the HTTP/2 GOAWAY frames clients send.
 *
 * Deno 2.9's `node:http2` (nghttp2 under it) can abort the whole process while it handles a GOAWAY that a
 * client sends after a few hundred requests on one connection (`find_stream_on_goaway_func: Assertion
 * 'stream->closed_next == NULL'` or `free(): invalid pointer`; denoland/deno#36788). h2load and grpc-js
 * clients send one when they close. A client's GOAWAY only tells the server to open no more streams of its own
 * (server push), which a gRPC server never does, so dropping it changes nothing else; the TCP close that
 * follows ends the session as usual.
 *
 * The wrapper parses the client-to-server byte stream frame by frame without holding frames back: frame
 * headers (9 bytes) are read whole, payloads pass through as they arrive, and only GOAWAY frames (type 7) are
 * skipped. A connection that does not start with the HTTP/2 preface passes through untouched.
 * @module
 */

import { Buffer } from "node:buffer";
import type { Socket } from "node:net";
import { Duplex } from "node:stream";
import { setImmediate } from "node:timers";

/** The client connection preface of HTTP/2 (RFC 9113 §3.4). */
const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const FRAME_HEADER = 9;
const GOAWAY = 7;

/** A socket seen through the filter: what the HTTP/2 server reads has no GOAWAY frame of the client. */
export class GoawayFilter extends Duplex {
  readonly #socket: Socket;
  /** Preface bytes still to check; -1 once the connection passes through untouched. */
  #preface = PREFACE.length;
  /** A frame header being read. */
  #header = Buffer.alloc(FRAME_HEADER);
  #headerFill = 0;
  /** Payload bytes left of the current frame, and whether they are dropped. */
  #payloadLeft = 0;
  #dropping = false;
  #corked = false;

  /**
   * Wraps an accepted socket.
   * @param socket the client connection
   */
  constructor(socket: Socket) {
    super({ allowHalfOpen: false });
    this.#socket = socket;
    socket.on("data", (chunk: Buffer) => {
      const out = this.#filter(chunk);
      if (out.length > 0 && !this.push(out)) socket.pause();
    });
    socket.on("end", () => this.push(null));
    socket.on("close", () => this.destroy());
    socket.on("error", (err) => this.destroy(err));
  }

  /** The bytes of a chunk that the server should see: the chunk itself unless a GOAWAY or a split header is in it. */
  #filter(chunk: Buffer): Buffer {
    if (this.#preface === -1) return chunk;
    let at = 0;
    if (this.#preface > 0) {
      const n = Math.min(this.#preface, chunk.length);
      const from = PREFACE.length - this.#preface;
      if (!chunk.subarray(0, n).equals(PREFACE.subarray(from, from + n))) {
        this.#preface = -1; // not HTTP/2 with prior knowledge: leave it to the server to refuse
        return chunk;
      }
      this.#preface -= n;
      at = n;
    }
    /** The start of a frame header held back from an earlier chunk, to go out before this chunk's bytes. */
    let prefix: Buffer | undefined;
    /** Ranges of this chunk that are dropped (GOAWAY frames), in order. */
    const dropped: number[] = [];
    /** Bytes from here on are a frame header not yet complete: held back until its type is known. */
    let keepEnd = chunk.length;
    while (at < chunk.length) {
      if (this.#payloadLeft > 0) {
        const n = Math.min(this.#payloadLeft, chunk.length - at);
        if (this.#dropping) dropped.push(at, at + n);
        this.#payloadLeft -= n;
        at += n;
        continue;
      }
      const start = at;
      const held = this.#headerFill;
      const n = Math.min(FRAME_HEADER - held, chunk.length - at);
      chunk.copy(this.#header, held, at, at + n);
      this.#headerFill += n;
      at += n;
      if (this.#headerFill < FRAME_HEADER) {
        keepEnd = start;
        break;
      }
      this.#headerFill = 0;
      this.#payloadLeft = this.#header.readUIntBE(0, 3);
      this.#dropping = this.#header[3] === GOAWAY;
      if (this.#dropping) dropped.push(start, at);
      else if (held > 0) prefix = Buffer.from(this.#header.subarray(0, held));
    }
    if (prefix === undefined && dropped.length === 0 && keepEnd === chunk.length) return chunk;
    const parts: Buffer[] = prefix ? [prefix] : [];
    let from = 0;
    for (let i = 0; i < dropped.length; i += 2) {
      if (dropped[i]! > from) parts.push(chunk.subarray(from, dropped[i]!));
      from = dropped[i + 1]!;
    }
    if (keepEnd > from) parts.push(chunk.subarray(from, keepEnd));
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts);
  }

  override _read(): void {
    this.#socket.resume();
  }

  override _write(chunk: Buffer, encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.#cork();
    this.#socket.write(chunk, encoding, callback);
  }

  /**
   * Holds the socket's writes until the end of this event-loop turn: the frames of every response finished in
   * the turn (headers, data and trailers of many streams) leave in one write instead of one each.
   */
  #cork(): void {
    if (this.#corked) return;
    this.#corked = true;
    this.#socket.cork();
    setImmediate(() => {
      this.#corked = false;
      this.#socket.uncork();
    });
  }

  /** Chunks the HTTP/2 session queued while a write was in flight go out in one socket write. */
  override _writev(
    chunks: { chunk: Buffer; encoding: BufferEncoding }[],
    callback: (err?: Error | null) => void,
  ): void {
    this.#socket.write(
      chunks.length === 1 ? chunks[0]!.chunk : Buffer.concat(chunks.map((c) => c.chunk)),
      callback,
    );
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.#socket.end(callback);
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    this.#socket.destroy();
    callback(err);
  }

  /** The peer's address, as the HTTP/2 server and grpc-js read it from the socket. */
  get remoteAddress(): string | undefined {
    return this.#socket.remoteAddress;
  }

  /** The peer's port. */
  get remotePort(): number | undefined {
    return this.#socket.remotePort;
  }

  /** The local address. */
  get localAddress(): string | undefined {
    return this.#socket.localAddress;
  }

  /** The local port. */
  get localPort(): number | undefined {
    return this.#socket.localPort;
  }

  /** Sets the socket's TCP_NODELAY. */
  setNoDelay(noDelay?: boolean): this {
    this.#socket.setNoDelay(noDelay);
    return this;
  }

  /** Sets the socket's keepalive. */
  setKeepAlive(enable?: boolean, delay?: number): this {
    this.#socket.setKeepAlive(enable, delay);
    return this;
  }

  /** Sets the socket's idle timeout. */
  setTimeout(ms: number, callback?: () => void): this {
    this.#socket.setTimeout(ms, callback);
    return this;
  }
}
