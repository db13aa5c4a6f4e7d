/**
 * The body of a server-sent events answer (`generate_stream`, the OpenAI routes' `stream: true`), whose events
 * wait for a client that does not read them only up to a bound: a client that keeps its connection open but
 * stops reading would otherwise make the server hold everything its model sends.
 * @module
 */

import { STREAM_HELD_MAX } from "../frontend.ts";

/** A streamed answer's body and the events pushed to it. */
export class EventBody {
  /** The body, for the Response (or the listener thread's forwarded answer). */
  readonly body: ReadableStream<Uint8Array>;
  #controller!: ReadableStreamDefaultController<Uint8Array>;
  #open = true;
  readonly #gone: (why: "left" | "not reading") => void;
  readonly #max: number;

  /**
   * @param gone called once when the client will take no more events: it went away (`left`), or it let more
   *   than `max` bytes of them wait (`not reading`; the body is then failed, which ends the connection)
   * @param max the most bytes of events held for the client (default STREAM_HELD_MAX)
   */
  constructor(gone: (why: "left" | "not reading") => void, max = STREAM_HELD_MAX) {
    this.#gone = gone;
    this.#max = max;
    // Measured in bytes, nothing wanted ahead: desiredSize is minus the bytes waiting for the client.
    this.body = new ReadableStream<Uint8Array>({
      start: (c) => {
        this.#controller = c;
      },
      cancel: () => this.#end("left"),
    }, new ByteLengthQueuingStrategy({ highWaterMark: 0 }));
  }

  /** Whether the body still takes events. */
  get open(): boolean {
    return this.#open;
  }

  /**
   * Adds an event's bytes; nothing once the body has ended.
   * @param bytes the encoded event
   */
  push(bytes: Uint8Array): void {
    if (!this.#open) return;
    const c = this.#controller;
    c.enqueue(bytes);
    if ((c.desiredSize ?? 0) >= -this.#max) return;
    c.error(
      new Error(`the client read none of the last ${this.#max} bytes of events: the answer was cut`),
    );
    this.#end("not reading");
  }

  /** Ends the body after the events pushed so far. */
  close(): void {
    if (!this.#open) return;
    this.#open = false;
    this.#controller.close();
  }

  /**
   * Ends the body with an error: the connection is cut (events not yet sent are dropped).
   * @param err why
   */
  fail(err: Error): void {
    if (!this.#open) return;
    this.#open = false;
    this.#controller.error(err);
  }

  #end(why: "left" | "not reading"): void {
    if (!this.#open) return;
    this.#open = false;
    this.#gone(why);
  }
}
