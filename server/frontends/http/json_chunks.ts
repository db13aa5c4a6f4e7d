/**
 * JSON answers with large outputs, written in chunks as the body is sent: the `data` text of an output of
 * `JSON_STREAM_BYTES` or more is made a few thousand elements at a time and encoded straight into the body's
 * chunks, so that the answer never exists whole, as one string or as one buffer (either costs more memory than
 * the output itself: a float of 4 bytes is 3 to 15 characters of text).
 * @module
 */

import type { BytesTensor } from "../../core/bytes_tensor.ts";
import { elementSize, toJsonText, utf8Decode, utf8Encode } from "../../core/dtypes.ts";
import type { Tensor } from "../../core/types.ts";

/** From this many bytes of contents on, an output's JSON data is written in chunks as the answer is sent. */
export const JSON_STREAM_BYTES: number = 1 << 20;

/** Elements made into text at once. */
const CHUNK_ELEMENTS = 1 << 14;

/** Text gathered before it is encoded into one chunk of the body. */
const CHUNK_CHARS = 1 << 19;

/**
 * Stands in the answer's text for the data array of an output written in chunks: a NUL character, which no JSON
 * text that `JSON.stringify` writes holds unescaped.
 */
export const DEFERRED_DATA = "\u0000";

/**
 * The text of an output's contents as a JSON array, in pieces whose concatenation is what `toJsonText` gives.
 * @param t the output
 */
export function* jsonDataPieces(t: Tensor): Generator<string> {
  yield "[";
  let first = true;
  const inner = (text: string) => {
    const items = text.slice(1, -1);
    if (items.length === 0) return "";
    const piece = first ? items : `,${items}`;
    first = false;
    return piece;
  };
  if (t.datatype === "BYTES") {
    // As toJsonText: the elements decoded as UTF-8, written by JSON.stringify.
    let batch: string[] = [];
    for (const element of t.data as BytesTensor) {
      batch.push(utf8Decode(element));
      if (batch.length === CHUNK_ELEMENTS) {
        yield inner(JSON.stringify(batch));
        batch = [];
      }
    }
    if (batch.length > 0) yield inner(JSON.stringify(batch));
  } else {
    const bytes = t.data as Uint8Array;
    const step = CHUNK_ELEMENTS * elementSize(t.datatype);
    for (let at = 0; at < bytes.byteLength; at += step) {
      yield inner(toJsonText(t.datatype, bytes.subarray(at, at + step)));
    }
  }
  yield "]";
}

/**
 * The body of a JSON answer whose text holds `DEFERRED_DATA` in place of the data of `deferred` (in order), the
 * data written in chunks as the body is read.
 * @param text the answer's text with the stand-ins
 * @param deferred the outputs whose data is written in chunks
 */
export function jsonChunks(text: string, deferred: readonly Tensor[]): ReadableStream<Uint8Array> {
  const between = text.split(DEFERRED_DATA);
  const pieces = (function* () {
    for (let i = 0; i < deferred.length; i++) {
      yield between[i]!;
      yield* jsonDataPieces(deferred[i]!);
    }
    yield between[deferred.length]!;
  })();
  return new ReadableStream<Uint8Array>({
    type: "bytes",
    pull(controller) {
      let gathered = "";
      while (gathered.length < CHUNK_CHARS) {
        const next = pieces.next();
        if (next.done) break;
        gathered += next.value;
      }
      if (gathered.length > 0) controller.enqueue(utf8Encode(gathered));
      else controller.close();
    },
  });
}

/**
 * The answer's text with the data of `deferred` written in place of their stand-ins.
 * @param text the answer's text with the stand-ins
 * @param deferred the outputs whose data the stand-ins hold the place of
 */
export function jsonWhole(text: string, deferred: readonly Tensor[]): string {
  let i = 0;
  return text.replaceAll(DEFERRED_DATA, () => toJsonText(deferred[i]!.datatype, deferred[i++]!.data));
}
