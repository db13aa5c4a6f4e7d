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
  copyInto(out, chunks);
  return out;
}

/**
 * Writes chunks one after another into `out`, which has room for them.
 * @param out the target
 * @param chunks the chunks
 * @param at where the first goes
 */
export function copyInto(out: Uint8Array, chunks: readonly Uint8Array[], at = 0): void {
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
}
