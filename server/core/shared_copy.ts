/**
 * Copying bytes into shared memory (the arenas of an ONNX Runtime worker instance) at full speed. V8 copies into
 * or out of a SharedArrayBuffer word by word only where source and target have the same alignment to 8 bytes;
 * otherwise byte by byte, five times slower or worse (the binary part of an HTTP request starts wherever its JSON
 * part ends). Such a copy goes through a plain buffer laid out at the target's alignment: two fast copies.
 * @module
 */

/** Below this many bytes a copy goes straight (the detour costs more than it saves). */
const STAGE_MIN_BYTES = 256;

/** The largest staging buffer kept between copies; larger copies stage through one of their own. */
const STAGE_KEEP_BYTES = 1 << 20;

let stage = new ArrayBuffer(0);

/** A plain buffer of at least `byteLength` bytes (the kept one, grown, while small enough). */
function stageOf(byteLength: number): ArrayBuffer {
  if (stage.byteLength >= byteLength) return stage;
  if (byteLength > STAGE_KEEP_BYTES) return new ArrayBuffer(byteLength);
  stage = new ArrayBuffer(Math.min(STAGE_KEEP_BYTES, Math.max(byteLength, stage.byteLength * 2)));
  return stage;
}

/**
 * `out.set(src, offset)`, fast also where `out` lies in shared memory at another alignment than `src`.
 * @param out the target
 * @param src the bytes to copy
 * @param offset where in `out` they go
 */
export function setBytes(out: Uint8Array, src: Uint8Array, offset = 0): void {
  const at = out.byteOffset + offset;
  if (
    src.byteLength < STAGE_MIN_BYTES || ((at - src.byteOffset) & 7) === 0 ||
    !(out.buffer instanceof SharedArrayBuffer || src.buffer instanceof SharedArrayBuffer)
  ) {
    out.set(src, offset);
    return;
  }
  const shift = (src.buffer instanceof SharedArrayBuffer ? src.byteOffset : at) & 7;
  const staged = new Uint8Array(stageOf(shift + src.byteLength), shift, src.byteLength);
  staged.set(src);
  out.set(staged, offset);
}
