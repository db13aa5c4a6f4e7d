import { assert, assertEquals, assertThrows } from "../assert.ts";
import { BytesTensor, reviveBytes } from "../../server/core/bytes_tensor.ts";
import { utf8Encode } from "../../server/core/dtypes.ts";
import { ServerError } from "../../server/core/errors.ts";

const WHAT = "input 'INPUT0'";

function bytes(...b: number[]): Uint8Array {
  return new Uint8Array(b);
}

Deno.test("BytesTensor.of writes each element as a 4-byte little-endian length and its bytes", () => {
  assertEquals(BytesTensor.of([]).data, bytes());
  assertEquals(BytesTensor.of([]).count, 0);
  const two = BytesTensor.of([bytes(97), bytes(98, 99, 100)]);
  assertEquals(two.data, bytes(1, 0, 0, 0, 97, 3, 0, 0, 0, 98, 99, 100));
  assertEquals(two.count, 2);
  assertEquals(two.byteLength, 12);
  assertEquals(BytesTensor.of([bytes()]).data, bytes(0, 0, 0, 0));
  const out = BytesTensor.of([new Uint8Array(300).fill(7)]).data;
  assertEquals(out.subarray(0, 4), bytes(0x2c, 0x01, 0, 0));
  assertEquals(out.byteLength, 304);
});

Deno.test("BytesTensor.fromWire keeps the buffer it checked, and its elements are views of it", () => {
  const buf = bytes(1, 0, 0, 0, 97, 0, 0, 0, 0, 3, 0, 0, 0, 98, 99, 100);
  const t = BytesTensor.fromWire(buf, 3, WHAT);
  assert(t.data === buf, "the buffer is kept, not copied");
  assertEquals(t.count, 3);
  const elements = t.elements();
  assertEquals(elements, [bytes(97), bytes(), bytes(98, 99, 100)]);
  assert(elements.every((e) => e.buffer === buf.buffer), "elements are views, not copies");
  assertEquals([...t], elements);
  assertEquals([t.at(2), t.at(0), t.at(1)], [bytes(98, 99, 100), bytes(97), bytes()]);
  assertEquals(BytesTensor.fromWire(bytes(), 0, WHAT).elements(), []);
  assertEquals(BytesTensor.fromWire(BytesTensor.of([utf8Encode("héllo")]).data, 1, WHAT).strings(), [
    "héllo",
  ]);
});

Deno.test("BytesTensor.fromWire reads a buffer that starts at an offset", () => {
  const backing = bytes(9, 9, 9, 2, 0, 0, 0, 120, 121);
  assertEquals(BytesTensor.fromWire(backing.subarray(3), 1, WHAT).elements(), [bytes(120, 121)]);
});

Deno.test("BytesTensor.fromWire refuses a missing or truncated length prefix", () => {
  assertThrows(() => BytesTensor.fromWire(bytes(1, 0, 0, 0, 97, 2, 0), 2, WHAT), ServerError, {
    code: "INVALID_ARG",
    message:
      "Cannot read input 'INPUT0': BYTES data holds 1 elements, expected 2 (length prefix of element 1 is missing)",
  });
  assertThrows(() => BytesTensor.fromWire(bytes(), 1, WHAT), ServerError, {
    code: "INVALID_ARG",
    message:
      "Cannot read input 'INPUT0': BYTES data holds 0 elements, expected 1 (length prefix of element 0 is missing)",
  });
});

Deno.test("BytesTensor.fromWire refuses an element that runs past the end", () => {
  assertThrows(() => BytesTensor.fromWire(bytes(5, 0, 0, 0, 97), 1, WHAT), ServerError, {
    code: "INVALID_ARG",
    message: "Cannot read input 'INPUT0': BYTES element 0 claims 5 bytes but only 1 remain",
  });
  assertThrows(() => BytesTensor.fromWire(bytes(0, 0, 0, 0, 255, 255, 255, 255), 2, WHAT), ServerError, {
    code: "INVALID_ARG",
    message: "Cannot read input 'INPUT0': BYTES element 1 claims 4294967295 bytes but only 0 remain",
  });
});

Deno.test("BytesTensor.fromWire refuses bytes after the expected elements", () => {
  assertThrows(() => BytesTensor.fromWire(bytes(1, 0, 0, 0, 97, 0), 1, WHAT), ServerError, {
    code: "INVALID_ARG",
    message: "Cannot read input 'INPUT0': BYTES data has 1 bytes after the 1 expected elements",
  });
  assertThrows(() => BytesTensor.fromWire(bytes(0, 0, 0, 0), 0, WHAT), ServerError, {
    code: "INVALID_ARG",
    message: "Cannot read input 'INPUT0': BYTES data has 4 bytes after the 0 expected elements",
  });
});

Deno.test("BytesTensor.fromWire words a wrong count of an inference input as clients expect", () => {
  const names = { input: "IN", model: "m" };
  assertThrows(() => BytesTensor.fromWire(bytes(1, 0, 0, 0, 97), 2, WHAT, names), ServerError, {
    code: "INVALID_ARG",
    message:
      "Cannot read input 'INPUT0': expected 2 string elements for inference input 'IN' for model 'm', got 1",
  });
  assertThrows(() => BytesTensor.fromWire(bytes(1, 0, 0, 0, 97, 0, 0, 0, 0), 1, WHAT, names), ServerError, {
    code: "INVALID_ARG",
    message:
      "Cannot read input 'INPUT0': unexpected number of string elements 2 for inference input 'IN' for model 'm', expecting 1",
  });
});

Deno.test("BytesTensor.fromStrings encodes UTF-8 length-prefixed into one buffer, multi-byte text included", () => {
  const strings = ["ab", "", "é€😀", "x".repeat(40), "ü", "€".repeat(20)];
  const t = BytesTensor.fromStrings(strings);
  assertEquals(t.count, 6);
  assertEquals(t.strings(), strings);
  assertEquals(t.elements().map((v) => v.byteLength), [2, 0, 9, 40, 2, 60]);
  assertEquals(t.byteLength, 6 * 4 + 2 + 9 + 40 + 2 + 60);
  assertEquals(t.data, BytesTensor.of(strings.map(utf8Encode)).data);
  assertEquals(BytesTensor.fromStrings([]).data, bytes());
  assertThrows(() => BytesTensor.fromStrings(["a", 1], "input 'X'"), ServerError, {
    code: "INVALID_ARG",
    message: "Cannot read input 'X': element 1 is 1, expected a string for BYTES",
  });
});

Deno.test("BytesTensor.concat joins elements in order; slice shares the buffer", () => {
  const a = BytesTensor.fromStrings(["a", "bc"]);
  const b = BytesTensor.fromStrings(["", "def"]);
  const joined = BytesTensor.concat([a, b]);
  assertEquals(joined.count, 4);
  assertEquals(joined.strings(), ["a", "bc", "", "def"]);
  const middle = joined.slice(1, 3);
  assertEquals(middle.strings(), ["bc", ""]);
  assert(middle.data.buffer === joined.data.buffer, "a slice is a view");
  assertEquals(joined.slice(4, 4).count, 0);
  assertEquals(joined.slice(0, 4).data, joined.data);
  assertThrows(
    () => joined.slice(3, 5),
    RangeError,
    { message: "Cannot slice BYTES elements 3 to 5: the tensor has 4 elements" },
  );
  assertThrows(() => joined.at(4), RangeError, {
    message: "Cannot read BYTES element 4: the tensor has 4 elements",
  });
});

Deno.test("BytesTensor.copy owns its buffer", () => {
  const t = BytesTensor.fromStrings(["xy"]);
  const c = t.copy();
  t.data[4] = 0x41;
  assertEquals(c.strings(), ["xy"]);
  assertEquals(t.strings(), ["Ay"]);
});

Deno.test("reviveBytes gives BYTES contents their class back after structured cloning", () => {
  const tensors = structuredClone([
    { name: "S", datatype: "BYTES", shape: [2], data: BytesTensor.fromStrings(["a", "b"]) },
    { name: "F", datatype: "UINT8", shape: [1], data: bytes(5) },
  ]) as { name: string; datatype: string; shape: number[]; data: unknown }[];
  assert(!(tensors[0]!.data instanceof BytesTensor), "cloning drops the class");
  reviveBytes(tensors);
  assert(tensors[0]!.data instanceof BytesTensor);
  assertEquals((tensors[0]!.data as BytesTensor).strings(), ["a", "b"]);
  assertEquals(tensors[1]!.data, bytes(5));
});
