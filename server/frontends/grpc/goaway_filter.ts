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
 *
 * The other way, the wrapper holds what the HTTP/2 session writes for a few event-loop turns (FLUSH_TURNS) and
 * writes it to the socket at once: a gRPC answer (headers, data, trailers) leaves in one write, and the answers
 * of many calls finished together in one.
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

/**
 * The event-loop turns a held write waits, past the one it was written in, for the rest of its answer: Deno
 * 2.9.6's `node:http2` sends a response's headers and data in one turn, and its trailers (which carry a gRPC
 * call's status) two turns later (ending the stream, then sending the trailers, each wait for a
 * `setImmediate`). Corked for the turn alone, a gRPC answer still took three socket writes; held this long, one.
 * `bench/ab.ts --baseline` on 2 cores, h2load, 3 rounds of 4 pairs (2026-11-27), against the corked writes:
 * `simple` at 1 stream 1.14x the calls per second at 0.84x the server's CPU per call, at 16 streams 1.00x at
 * 0.97x; the Python backend's `add_sub_py` at 1 stream 1.18x at 0.87x, at 8 streams 1.14x at 0.86x.
 */
const FLUSH_TURNS = 2;
/** How long a socket whose session closed cleanly may take to send its last bytes and close. */
const END_GRACE_MS = 1000;
/** Held bytes that go out at once, without waiting for the turns to pass. */
const FLUSH_BYTES = 64 * 1024;

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
  /** Chunks the HTTP/2 session wrote, held for one socket write (see #hold), and their size. */
  #out: Buffer[] = [];
  #outBytes = 0;
  /** Whether a flush is scheduled, and the event-loop turns it has waited so far. */
  #flushing = false;
  #turns = 0;

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

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (err?: Error | null) => void): void {
    this.#hold(chunk);
    this.#done(callback);
  }

  override _writev(
    chunks: { chunk: Buffer; encoding: BufferEncoding }[],
    callback: (err?: Error | null) => void,
  ): void {
    for (const c of chunks) this.#hold(c.chunk);
    this.#done(callback);
  }

  override _final(callback: (err?: Error | null) => void): void {
    this.#flushNow();
    this.#socket.end(callback);
  }

  /**
   * Holds a chunk the HTTP/2 session wrote until its answer is complete (see FLUSH_TURNS), or until
   * FLUSH_BYTES are held: every frame of the answers finished meanwhile leaves in one socket write.
   */
  #hold(chunk: Buffer): void {
    this.#out.push(chunk);
    this.#outBytes += chunk.length;
    if (this.#outBytes >= FLUSH_BYTES) {
      this.#flushNow();
    } else if (!this.#flushing) {
      this.#flushing = true;
      this.#turns = 0;
      setImmediate(this.#flush);
    }
  }

  /** Tells the session its chunk is taken; while the socket's own buffer is full, once it has drained. */
  #done(callback: (err?: Error | null) => void): void {
    if (this.#socket.writableNeedDrain) this.#socket.once("drain", () => callback());
    else callback();
  }

  readonly #flush = (): void => {
    if (this.#turns < FLUSH_TURNS && !this.#socket.destroyed) {
      this.#turns++;
      setImmediate(this.#flush);
      return;
    }
    this.#flushing = false;
    this.#flushNow();
  };

  /** Writes what is held, in one socket write. */
  #flushNow(): void {
    if (this.#out.length === 0) return;
    const out = this.#out, bytes = this.#outBytes;
    this.#out = [];
    this.#outBytes = 0;
    if (this.#socket.destroyed) return;
    this.#socket.write(out.length === 1 ? out[0]! : Buffer.concat(out, bytes));
  }

  override _destroy(err: Error | null, callback: (err?: Error | null) => void): void {
    // What the session wrote last (the last answers' trailers, a GOAWAY as it closes) leaves before the socket
    // closes: a clean close ends the socket after those bytes, and destroys it once closed or after END_GRACE_MS
    // (a socket destroyed at once dropped the bytes still being written: the answers of the calls that ended
    // last before a shutdown); a failed one is cut at once.
    this.#flushNow();
    const socket = this.#socket;
    if (err || socket.destroyed) socket.destroy();
    else {
      const timer = setTimeout(() => socket.destroy(), END_GRACE_MS);
      Deno.unrefTimer(timer);
      socket.once("close", () => clearTimeout(timer));
      socket.end();
    }
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
