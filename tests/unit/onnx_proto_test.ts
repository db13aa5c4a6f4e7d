import { assertEquals, assertThrows } from "../assert.ts";
import { initializerTypes, protoFields, readVarint } from "../../server/backends/onnx_proto.ts";

/** A protobuf varint. */
function varint(n: number): number[] {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n % 128) | 0x80);
    n = Math.floor(n / 128);
  }
  out.push(n);
  return out;
}

/** A length-delimited field. */
function bytesField(field: number, bytes: number[]): number[] {
  return [...varint(field * 8 + 2), ...varint(bytes.length), ...bytes];
}

/** A varint field. */
function varintField(field: number, value: number): number[] {
  return [...varint(field * 8), ...varint(value)];
}

const text = (s: string) => [...new TextEncoder().encode(s)];

/** A TensorProto with a name (8) and a data_type (2). */
const tensor = (name: string, type: number) => [...varintField(2, type), ...bytesField(8, text(name))];

Deno.test("readVarint reads one- and multi-byte varints and returns the position after them", () => {
  assertEquals(readVarint(new Uint8Array([0x01]), 0), [1, 1]);
  assertEquals(readVarint(new Uint8Array([0x00, 0xac, 0x02, 0x07]), 1), [300, 3]);
  // 2^53 - 1: beyond 32 bits, still exact.
  assertEquals(readVarint(new Uint8Array(varint(2 ** 53 - 1)), 0), [2 ** 53 - 1, 8]);
  assertThrows(() => readVarint(new Uint8Array([0x80, 0x80]), 0), Error, { message: "truncated varint" });
});

Deno.test("protoFields yields varint and length-delimited fields in order and skips fixed-size ones", () => {
  const message = new Uint8Array([
    ...varintField(1, 150),
    ...bytesField(2, text("hi")),
    ...varint(3 * 8 + 1), // fixed64
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    8,
    ...varint(4 * 8 + 5), // fixed32
    1,
    2,
    3,
    4,
    ...varintField(5, 0),
  ]);
  assertEquals([...protoFields(message)], [
    { field: 1, value: 150 },
    { field: 2, value: 2, bytes: new Uint8Array(text("hi")) },
    { field: 5, value: 0 },
  ]);
});

Deno.test("protoFields refuses a truncated field and the group wire types", () => {
  assertThrows(() => [...protoFields(new Uint8Array([...varint(2 * 8 + 2), 5, 1, 2]))], Error, {
    message: "truncated field",
  });
  assertThrows(() => [...protoFields(new Uint8Array([...varint(1 * 8 + 3)]))], Error, {
    message: "unexpected wire type 3",
  });
});

Deno.test("initializerTypes lists the main graph's dense and sparse initializers with their element types", async () => {
  const graph = [
    ...bytesField(1, tensor("not an initializer", 1)), // GraphProto.node: other fields are ignored
    ...bytesField(5, tensor("W", 1)), // FLOAT
    ...bytesField(5, tensor("B", 7)), // INT64
    ...bytesField(15, [...bytesField(1, tensor("S", 10))]), // SparseTensorProto.values: FLOAT16
  ];
  const model = new Uint8Array([...varintField(1, 8), ...bytesField(7, graph)]); // ir_version, graph
  const dir = await Deno.makeTempDir({ prefix: "dinfer_onnx_proto_" });
  try {
    await Deno.writeFile(`${dir}/model.onnx`, model);
    assertEquals(await initializerTypes(`${dir}/model.onnx`), new Map([["W", 1], ["B", 7], ["S", 10]]));
    // Unreadable or unparsable files give no initializers.
    assertEquals(await initializerTypes(`${dir}/missing.onnx`), new Map());
    await Deno.writeFile(`${dir}/bad.onnx`, new Uint8Array([...varint(7 * 8 + 2), 100, 1]));
    assertEquals(await initializerTypes(`${dir}/bad.onnx`), new Map());
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
