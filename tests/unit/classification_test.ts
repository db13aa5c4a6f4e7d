import { assertEquals, assertThrows } from "../assert.ts";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { classify } from "../../server/core/classification.ts";
import { bytesOf, type Datatype, numberToBf16, numberToHalf } from "../../server/core/dtypes.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { Tensor } from "../../server/core/types.ts";

function tensor(datatype: Datatype, shape: number[], data: ArrayBufferView): Tensor {
  return { name: "OUT", datatype, shape, data: bytesOf(data) };
}

/** The classes as strings, with the result's name, datatype and shape. */
function classes(t: Tensor): { name: string; datatype: Datatype; shape: number[]; classes: string[] } {
  return {
    name: t.name,
    datatype: t.datatype,
    shape: t.shape,
    classes: (t.data as BytesTensor).strings(),
  };
}

const LABELS = ["cat", "dog", "bird"];

Deno.test("classify reports the top N as value:index:label, highest first", () => {
  const t = tensor("FP32", [3], new Float32Array([0.1, 0.7, 0.2]));
  assertEquals(classes(classify(t, 2, false, LABELS)), {
    name: "OUT",
    datatype: "BYTES",
    shape: [2],
    classes: ["0.700000:1:dog", "0.200000:2:bird"],
  });
});

Deno.test("classify without labels reports value:index", () => {
  const t = tensor("FP32", [3], new Float32Array([0.1, 0.7, 0.2]));
  assertEquals(classes(classify(t, 3, false, undefined)).classes, ["0.700000:1", "0.200000:2", "0.100000:0"]);
});

Deno.test("classify leaves out the label of a class beyond the labels file", () => {
  const t = tensor("FP32", [4], new Float32Array([0, 0, 0, 1]));
  assertEquals(classes(classify(t, 2, false, LABELS)).classes, ["1.000000:3", "0.000000:0:cat"]);
});

Deno.test("classify caps N at the number of classes", () => {
  const t = tensor("FP32", [3], new Float32Array([3, 1, 2]));
  const r = classes(classify(t, 10, false, LABELS));
  assertEquals(r.shape, [3]);
  assertEquals(r.classes, ["3.000000:0:cat", "2.000000:2:bird", "1.000000:1:dog"]);
});

Deno.test("classify ranks each batch item on its own, shape [batch, N]", () => {
  const t = tensor("FP32", [2, 3], new Float32Array([1, 3, 2, 6, 5, 4]));
  assertEquals(classes(classify(t, 2, true, LABELS)), {
    name: "OUT",
    datatype: "BYTES",
    shape: [2, 2],
    classes: ["3.000000:1:dog", "2.000000:2:bird", "6.000000:0:cat", "5.000000:1:dog"],
  });
});

Deno.test("classify of a batch of one keeps the batch dim", () => {
  const t = tensor("FP32", [1, 3], new Float32Array([1, 3, 2]));
  const r = classes(classify(t, 1, true, undefined));
  assertEquals(r.shape, [1, 1]);
  assertEquals(r.classes, ["3.000000:1"]);
});

Deno.test("classify without batching treats every element as a class", () => {
  const t = tensor("FP32", [2, 2], new Float32Array([1, 4, 3, 2]));
  const r = classes(classify(t, 2, false, undefined));
  assertEquals(r.shape, [2]);
  assertEquals(r.classes, ["4.000000:1", "3.000000:2"]);
});

Deno.test("classify breaks ties by the lower index first", () => {
  const t = tensor("FP32", [5], new Float32Array([5, 1, 5, 0, 5]));
  assertEquals(classes(classify(t, 4, false, undefined)).classes, [
    "5.000000:0",
    "5.000000:2",
    "5.000000:4",
    "1.000000:1",
  ]);
});

Deno.test("classify writes integer outputs without decimals", () => {
  const i32 = tensor("INT32", [3], new Int32Array([3, -1, 7]));
  assertEquals(classes(classify(i32, 2, false, undefined)).classes, ["7:2", "3:0"]);
  const u8 = tensor("UINT8", [3], new Uint8Array([200, 10, 255]));
  assertEquals(classes(classify(u8, 3, false, LABELS)).classes, ["255:2:bird", "200:0:cat", "10:1:dog"]);
  const i64 = tensor("INT64", [1, 3], new BigInt64Array([10n, -20n, 2n ** 60n]));
  assertEquals(classes(classify(i64, 2, true, undefined)).classes, ["1152921504606846976:2", "10:0"]);
  const u64 = tensor("UINT64", [2], new BigUint64Array([1n, 2n ** 64n - 1n]));
  assertEquals(classes(classify(u64, 1, false, undefined)).classes, ["18446744073709551615:1"]);
});

Deno.test("classify decodes FP16 and BF16 values before ranking", () => {
  const fp16 = tensor("FP16", [3], new Uint16Array([0.5, 1.5, -1].map(numberToHalf)));
  assertEquals(classes(classify(fp16, 2, false, LABELS)).classes, ["1.500000:1:dog", "0.500000:0:cat"]);
  const bf16 = tensor("BF16", [3], new Uint16Array([-3, 2, 0.25].map(numberToBf16)));
  assertEquals(classes(classify(bf16, 3, false, undefined)).classes, [
    "2.000000:1",
    "0.250000:2",
    "-3.000000:0",
  ]);
});

Deno.test("classify of FP64 prints six decimals", () => {
  const t = tensor("FP64", [2], new Float64Array([0.1234567, 2.5]));
  assertEquals(classes(classify(t, 2, false, undefined)).classes, ["2.500000:1", "0.123457:0"]);
});

Deno.test("classify reads unaligned output bytes", () => {
  const backing = new Uint8Array(13);
  backing.set(bytesOf(new Float32Array([1, 3, 2])), 1);
  const t: Tensor = { name: "OUT", datatype: "FP32", shape: [3], data: backing.subarray(1) };
  assertEquals(classes(classify(t, 1, false, undefined)).classes, ["3.000000:1"]);
});

Deno.test("classify of an empty batch gives an empty result", () => {
  const t = tensor("FP32", [0, 3], new Float32Array(0));
  const r = classes(classify(t, 2, true, undefined));
  assertEquals(r.shape, [0, 0]);
  assertEquals(r.classes, []);
});

Deno.test("classify refuses BYTES and BOOL outputs", () => {
  assertThrows(
    () =>
      classify(
        { name: "S", datatype: "BYTES", shape: [1], data: BytesTensor.of([new Uint8Array(1)]) },
        1,
        false,
        undefined,
      ),
    ServerError,
    { code: "INVALID_ARG", message: "Cannot classify output 'S': datatype BYTES is not numeric" },
  );
  assertThrows(
    () =>
      classify(
        { name: "B", datatype: "BOOL", shape: [2], data: new Uint8Array([1, 0]) },
        1,
        false,
        undefined,
      ),
    ServerError,
    { code: "INVALID_ARG", message: "Cannot classify output 'B': datatype BOOL is not numeric" },
  );
});
