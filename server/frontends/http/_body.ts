/**
 * Request bodies read within a size limit, shared by the HTTP handler, the generate extension and the listener
 * threads.
 * @module
 */

/**
 * Joins chunks into one buffer (the chunk itself when there is one).
 * @param chunks the chunks
 * @param total their length in bytes
 */
export function concat(chunks: readonly Uint8Array[], total: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  return out;
}

/**
 * Reads a body stream whole unless it is longer than `limit` bytes.
 * @param body the stream (null for no body)
 * @param limit the most bytes to accept
 * @returns the bytes, or null when the body is longer than the limit (the stream is cancelled)
 */
export async function readUpTo(
  body: ReadableStream<Uint8Array> | null,
  limit: number,
): Promise<Uint8Array | null> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  const reader = body?.getReader();
  if (reader) {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      total += value.byteLength;
      if (total > limit) {
        await reader.cancel();
        return null;
      }
      chunks.push(value);
    }
  }
  return concat(chunks, total);
}
