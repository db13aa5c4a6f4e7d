/**
 * The messages a gRPC stream (ModelStreamInfer) holds for a client that does not read them, bounded: a client
 * that keeps its stream open but stops reading would otherwise make the server hold everything its requests'
 * models answer (HTTP/2 flow control stops the bytes at the connection, and grpc-js queues the messages behind
 * them without limit).
 * @module
 */

import * as grpc from "@grpc/grpc-js";
import { STREAM_HELD_MAX } from "../frontend.ts";

/**
 * How long a cut stream keeps the responses it held while its client takes none of them: after it, they are
 * dropped (the stream is destroyed), so that a client that stays connected without reading holds no memory.
 */
export const CUT_GRACE_MS = 5000;

/** What the writer uses of a grpc-js server stream. */
export interface WritableCall {
  cancelled: boolean;
  writableEnded: boolean;
  writableFinished: boolean;
  destroyed: boolean;
  write(message: unknown, callback: () => void): unknown;
  emit(event: "error", status: grpc.StatusObject | { code: number; details: string }): unknown;
  destroy(): unknown;
}

/** Writes a stream's messages while the bytes its client has not taken stay within the bound. */
export class HeldWrites {
  #held = 0;
  #cut = false;
  /** After the cut: drops what is held once the client has taken none of it for the grace. */
  #grace: ReturnType<typeof setTimeout> | undefined;

  /**
   * @param call the stream
   * @param over called once when the bound is passed (before the stream ends): cancels the stream's requests
   * @param max the bound in bytes (default STREAM_HELD_MAX: past it the stream writes no more, its requests are
   *   cancelled and it ends RESOURCE_EXHAUSTED)
   * @param graceMs how long a cut stream keeps what it held (default CUT_GRACE_MS)
   */
  constructor(
    private readonly call: WritableCall,
    private readonly over: () => void,
    private readonly max = STREAM_HELD_MAX,
    private readonly graceMs = CUT_GRACE_MS,
  ) {}

  /** Whether the bound was passed: nothing more is written. */
  get cut(): boolean {
    return this.#cut;
  }

  /**
   * Writes a message unless the stream has ended or was cut.
   * @param message the message
   * @param bytes its size on the wire (an estimate is enough: what matters is the bound's order)
   */
  write(message: unknown, bytes: number): void {
    const call = this.call;
    if (this.#cut || call.cancelled || call.writableEnded) return;
    this.#held += bytes;
    call.write(message, () => {
      this.#held -= bytes;
      // A client that reads again is draining what was held: it gets the rest, then the status.
      if (this.#grace !== undefined) this.#armGrace();
    });
    if (this.#held <= this.max) return;
    this.#cut = true;
    this.over();
    // The status follows the messages held; a client that reads again soon sees them, then the status. One
    // that does not gets neither: the messages are dropped after the grace.
    call.emit("error", {
      code: grpc.status.RESOURCE_EXHAUSTED,
      details:
        `The client read none of the last ${this.max} bytes of this stream's responses: the stream was cut`,
    });
    this.#armGrace();
  }

  #armGrace(): void {
    clearTimeout(this.#grace);
    const call = this.call;
    if (call.writableFinished || call.destroyed) {
      this.#grace = undefined;
      return;
    }
    const timer = setTimeout(() => {
      if (!call.writableFinished && !call.destroyed) call.destroy();
    }, this.graceMs);
    Deno.unrefTimer(timer);
    this.#grace = timer;
  }
}
