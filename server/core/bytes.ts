/**
 * Byte buffers put together.
 * @module
 */

/**
 * Joins chunks into one buffer (the chunk itself when there is one).
 * @param chunks the chunks
 * @param total their length in bytes
 */
export function concatBytes(chunks: readonly Uint8Array[], total: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]!;
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  return out;
}
