/**
 * A small reader of ONNX model files (protobuf, without a schema): enough to list a model's initializers,
 * which ONNX Runtime's metadata does not show.
 * @module
 */

import { utf8Decode } from "../core/dtypes.ts";

/**
 * Reads the protobuf varint at `pos`.
 * @param buf the message
 * @param pos where the varint starts
 * @returns its value and the position after it
 * @throws Error when the message ends inside it
 */
export function readVarint(buf: Uint8Array, pos: number): [number, number] {
  let value = 0;
  let scale = 1;
  for (;;) {
    const b = buf[pos++];
    if (b === undefined) throw new Error("truncated varint");
    value += (b & 0x7f) * scale;
    if (b < 0x80) return [value, pos];
    scale *= 128;
  }
}

/**
 * The fields of a protobuf message, in order: the field number, and the value of a varint field or the length
 * and bytes of a length-delimited one (64- and 32-bit fields are skipped).
 * @param buf the message
 * @throws Error on a truncated message or a wire type other than varint, 64-bit, length-delimited, 32-bit
 */
export function* protoFields(
  buf: Uint8Array,
): Generator<{ field: number; value: number; bytes?: Uint8Array }> {
  let pos = 0;
  while (pos < buf.length) {
    let key: number;
    [key, pos] = readVarint(buf, pos);
    const field = Math.floor(key / 8);
    const wire = key % 8;
    if (wire === 0) {
      let value: number;
      [value, pos] = readVarint(buf, pos);
      yield { field, value };
    } else if (wire === 2) {
      let length: number;
      [length, pos] = readVarint(buf, pos);
      if (pos + length > buf.length) throw new Error("truncated field");
      yield { field, value: length, bytes: buf.subarray(pos, pos + length) };
      pos += length;
    } else if (wire === 1) {
      pos += 8;
    } else if (wire === 5) {
      pos += 4;
    } else {
      throw new Error(`unexpected wire type ${wire}`);
    }
  }
}

/**
 * The initializers of an ONNX model's main graph by name, with their element type number: ModelProto.graph (7),
 * GraphProto.initializer (5) and sparse_initializer (15, its values 1), TensorProto.name (8) and data_type (2).
 * Empty when the file cannot be read or parsed (ONNX Runtime has already opened it by then).
 * @param path the model file
 */
export async function initializerTypes(path: string): Promise<Map<string, number>> {
  const found = new Map<string, number>();
  const addTensor = (tensor: Uint8Array) => {
    let name = "";
    let type = 0;
    for (const f of protoFields(tensor)) {
      if (f.field === 8 && f.bytes) name = utf8Decode(f.bytes);
      else if (f.field === 2 && !f.bytes) type = f.value;
    }
    if (name) found.set(name, type);
  };
  try {
    const model = await Deno.readFile(path);
    for (const m of protoFields(model)) {
      if (m.field !== 7 || !m.bytes) continue;
      for (const g of protoFields(m.bytes)) {
        if (g.field === 5 && g.bytes) addTensor(g.bytes);
        if (g.field === 15 && g.bytes) {
          for (const s of protoFields(g.bytes)) if (s.field === 1 && s.bytes) addTensor(s.bytes);
        }
      }
    }
  } catch {
    return new Map();
  }
  return found;
}
