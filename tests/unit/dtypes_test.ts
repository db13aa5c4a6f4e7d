import { Buffer } from "node:buffer";
import { assert, assertEquals, assertThrows } from "../assert.ts";
import {
  bf16ToNumber,
  bytesOf,
  dataByteSize,
  type Datatype,
  DATATYPES,
  elementCount,
  elementSize,
  fromConfigType,
  fromJsonValues,
  halfToNumber,
  isDatatype,
  numberToBf16,
  numberToHalf,
  type TensorData,
  toConfigType,
  toJsonText,
  toJsonValues,
  typedView,
  utf8Decode,
  utf8Encode,
} from "../../server/core/dtypes.ts";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { ServerError } from "../../server/core/errors.ts";

const WHAT = "input 'INPUT0'";

function bytes(...b: number[]): Uint8Array {
  return new Uint8Array(b);
}

/** The elements of a typed array as a plain array. */
function list(a: ArrayBufferView): unknown[] {
  return Array.from(a as unknown as ArrayLike<unknown>);
}

function roundTrip(dt: Datatype, values: unknown[], expected: TensorData): void {
  const data = fromJsonValues(dt, values, WHAT);
  assertEquals(data, expected, `${dt} bytes`);
  assertEquals(toJsonValues(dt, data), values, `${dt} values`);
}

function rejects(dt: Datatype, values: unknown[], message: string): void {
  assertThrows(() => fromJsonValues(dt, values, WHAT), ServerError, { code: "INVALID_ARG", message });
}

Deno.test("the protocol knows the fourteen KServe v2 datatypes and their element sizes", () => {
  assertEquals([...DATATYPES], [
    "BOOL",
    "UINT8",
    "UINT16",
    "UINT32",
    "UINT64",
    "INT8",
    "INT16",
    "INT32",
    "INT64",
    "FP16",
    "BF16",
    "FP32",
    "FP64",
    "BYTES",
  ]);
  assertEquals(DATATYPES.map(elementSize), [1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 2, 4, 8, 0]);
  assert(isDatatype("FP32"));
  assert(!isDatatype("fp32"));
  assert(!isDatatype("FLOAT"));
  assert(!isDatatype("STRING"));
  assert(!isDatatype(undefined));
  assert(!isDatatype(3));
});

Deno.test("BOOL round-trips as one byte per element, 1 for true", () => {
  roundTrip("BOOL", [true, false, true], bytes(1, 0, 1));
});

Deno.test("UINT8 round-trips its full range", () => {
  roundTrip("UINT8", [0, 255, 7], bytes(0, 255, 7));
});

Deno.test("UINT16 round-trips little-endian", () => {
  roundTrip("UINT16", [1, 65535, 258], bytes(1, 0, 255, 255, 2, 1));
});

Deno.test("UINT32 round-trips little-endian up to 2^32-1", () => {
  roundTrip("UINT32", [1, 4294967295, 16909060], bytes(1, 0, 0, 0, 255, 255, 255, 255, 4, 3, 2, 1));
});

Deno.test("UINT64 round-trips little-endian up to 2^53-1 as JSON numbers", () => {
  roundTrip(
    "UINT64",
    [1, 256, 2 ** 53 - 1],
    bytes(1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 0x1f, 0),
  );
});

Deno.test("INT8 round-trips two's complement", () => {
  roundTrip("INT8", [-128, 127, -1, 0], bytes(0x80, 0x7f, 0xff, 0));
});

Deno.test("INT16 round-trips little-endian two's complement", () => {
  roundTrip("INT16", [-2, 300, -32768, 32767], bytes(0xfe, 0xff, 0x2c, 0x01, 0x00, 0x80, 0xff, 0x7f));
});

Deno.test("INT32 round-trips little-endian two's complement", () => {
  roundTrip(
    "INT32",
    [-1, 16909060, -2147483648, 2147483647],
    bytes(0xff, 0xff, 0xff, 0xff, 4, 3, 2, 1, 0, 0, 0, 0x80, 0xff, 0xff, 0xff, 0x7f),
  );
});

Deno.test("INT64 round-trips little-endian two's complement", () => {
  roundTrip(
    "INT64",
    [-1, 2, -(2 ** 53 - 1)],
    bytes(
      ...[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
      ...[2, 0, 0, 0, 0, 0, 0, 0],
      ...[1, 0, 0, 0, 0, 0, 0xe0, 0xff],
    ),
  );
});

Deno.test("INT64 and UINT64 beyond 2^53 are written exactly in JSON", () => {
  const big = fromJsonValues("INT64", [2n ** 62n + 1n, -(2n ** 63n)], WHAT);
  assertEquals(
    big,
    bytes(1, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x80),
  );
  assertEquals(JSON.stringify(toJsonValues("INT64", big)), "[4611686018427387905,-9223372036854775808]");
  const ubig = fromJsonValues("UINT64", [2n ** 64n - 1n], WHAT);
  assertEquals(ubig, bytes(255, 255, 255, 255, 255, 255, 255, 255));
  assertEquals(JSON.stringify(toJsonValues("UINT64", ubig)), "[18446744073709551615]");
});

Deno.test("FP16 round-trips as IEEE half-precision bit patterns", () => {
  roundTrip("FP16", [1, -2, 0.5, 65504], bytes(0x00, 0x3c, 0x00, 0xc0, 0x00, 0x38, 0xff, 0x7b));
});

Deno.test("BF16 round-trips as the upper half of float32", () => {
  roundTrip("BF16", [1, -2, 1.5], bytes(0x80, 0x3f, 0x00, 0xc0, 0xc0, 0x3f));
});

Deno.test("FP32 round-trips little-endian IEEE single precision", () => {
  roundTrip("FP32", [1, -2.5, 0.25], bytes(0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0, 0, 0, 0x80, 0x3e));
});

Deno.test("FP32 keeps float32 precision: 0.1 comes back as the nearest float32", () => {
  const data = fromJsonValues("FP32", [0.1], WHAT);
  assertEquals(data, bytes(0xcd, 0xcc, 0xcc, 0x3d));
  assertEquals(toJsonValues("FP32", data), [0.10000000149011612]);
});

Deno.test("FP64 round-trips little-endian IEEE double precision", () => {
  roundTrip(
    "FP64",
    [1, -0.5, 0.1],
    bytes(
      ...[0, 0, 0, 0, 0, 0, 0xf0, 0x3f],
      ...[0, 0, 0, 0, 0, 0, 0xe0, 0xbf],
      ...[0x9a, 0x99, 0x99, 0x99, 0x99, 0x99, 0xb9, 0x3f],
    ),
  );
});

Deno.test("negative zero is written as -0.0 in JSON, as Triton does", () => {
  const data = fromJsonValues("FP32", [-0], WHAT);
  assertEquals(data, bytes(0, 0, 0, 0x80));
  assertEquals(JSON.stringify(toJsonValues("FP32", data)), "[-0.0]");
});

Deno.test("BYTES round-trips as one UTF-8 byte string per element", () => {
  roundTrip("BYTES", ["ab", "", "é"], BytesTensor.of([bytes(97, 98), bytes(), bytes(0xc3, 0xa9)]));
});

Deno.test("an empty tensor converts to no bytes and no values", () => {
  for (const dt of DATATYPES) {
    const data = fromJsonValues(dt, [], WHAT);
    assertEquals(dataByteSize(data), 0);
    assertEquals(toJsonValues(dt, data), []);
  }
});

Deno.test("integer values outside the datatype's range are refused with the range", () => {
  rejects(
    "INT8",
    [0, 128],
    "Cannot read input 'INPUT0': element 1 is 128, expected an integer in [-128, 127] for INT8",
  );
  rejects(
    "INT8",
    [-129],
    "Cannot read input 'INPUT0': element 0 is -129, expected an integer in [-128, 127] for INT8",
  );
  rejects(
    "UINT8",
    [-1],
    "Cannot read input 'INPUT0': element 0 is -1, expected an integer in [0, 255] for UINT8",
  );
  rejects(
    "UINT8",
    [256],
    "Cannot read input 'INPUT0': element 0 is 256, expected an integer in [0, 255] for UINT8",
  );
  rejects(
    "UINT16",
    [65536],
    "Cannot read input 'INPUT0': element 0 is 65536, expected an integer in [0, 65535] for UINT16",
  );
  rejects(
    "INT16",
    [-32769],
    "Cannot read input 'INPUT0': element 0 is -32769, expected an integer in [-32768, 32767] for INT16",
  );
  rejects(
    "UINT32",
    [4294967296],
    "Cannot read input 'INPUT0': element 0 is 4294967296, expected an integer in [0, 4294967295] for UINT32",
  );
  rejects(
    "INT32",
    [2147483648],
    "Cannot read input 'INPUT0': element 0 is 2147483648, expected an integer in [-2147483648, 2147483647] for INT32",
  );
  rejects(
    "UINT64",
    [-1],
    "Cannot read input 'INPUT0': element 0 is -1, expected an integer in range for UINT64",
  );
  rejects(
    "INT64",
    [2n ** 63n],
    "Cannot read input 'INPUT0': element 0 is 9223372036854775808, expected an integer in range for INT64",
  );
  rejects(
    "UINT64",
    [2n ** 64n],
    "Cannot read input 'INPUT0': element 0 is 18446744073709551616, expected an integer in range for UINT64",
  );
  rejects(
    "INT32",
    [2n ** 60n],
    "Cannot read input 'INPUT0': element 0 is 1152921504606846976, expected an integer in [-2147483648, 2147483647] for INT32",
  );
});

Deno.test("non-integers, strings and other JSON values are refused for integer datatypes", () => {
  rejects("INT32", [1, 1.5], "Cannot read input 'INPUT0': element 1 is 1.5, expected an integer for INT32");
  rejects("INT32", ["3"], `Cannot read input 'INPUT0': element 0 is "3", expected an integer for INT32`);
  rejects("UINT8", [true], "Cannot read input 'INPUT0': element 0 is true, expected an integer for UINT8");
  rejects("INT16", [null], "Cannot read input 'INPUT0': element 0 is null, expected an integer for INT16");
  rejects("INT64", [0.5], "Cannot read input 'INPUT0': element 0 is 0.5, expected an integer for INT64");
  rejects("UINT64", ["1"], `Cannot read input 'INPUT0': element 0 is "1", expected an integer for UINT64`);
  rejects("INT8", [{}], "Cannot read input 'INPUT0': element 0 is {}, expected an integer for INT8");
});

Deno.test("non-numbers are refused for floating-point datatypes", () => {
  rejects("FP32", ["1.0"], `Cannot read input 'INPUT0': element 0 is "1.0", expected a number for FP32`);
  rejects("FP64", [false], "Cannot read input 'INPUT0': element 0 is false, expected a number for FP64");
  rejects("FP16", [null], "Cannot read input 'INPUT0': element 0 is null, expected a number for FP16");
  rejects("BF16", [[1]], "Cannot read input 'INPUT0': element 0 is [1], expected a number for BF16");
});

Deno.test("numbers and strings are refused for BOOL, non-strings for BYTES", () => {
  rejects("BOOL", [true, 1], "Cannot read input 'INPUT0': element 1 is 1, expected true or false for BOOL");
  rejects(
    "BOOL",
    ["true"],
    `Cannot read input 'INPUT0': element 0 is "true", expected true or false for BOOL`,
  );
  rejects("BYTES", ["a", 1], "Cannot read input 'INPUT0': element 1 is 1, expected a string for BYTES");
  rejects("BYTES", [null], "Cannot read input 'INPUT0': element 0 is null, expected a string for BYTES");
});

Deno.test("numberToHalf gives the IEEE half-precision bits of exact values", () => {
  const cases: [number, number][] = [
    [1, 0x3c00],
    [-2, 0xc000],
    [0.5, 0x3800],
    [65504, 0x7bff],
    [0, 0x0000],
    [-0, 0x8000],
    [2 ** -14, 0x0400], // smallest normal
    [2 ** -24, 0x0001], // smallest subnormal
    [1023 * 2 ** -24, 0x03ff], // largest subnormal
    [Infinity, 0x7c00],
    [-Infinity, 0xfc00],
    [NaN, 0x7e00],
  ];
  for (const [v, bits] of cases) assertEquals(numberToHalf(v), bits, `numberToHalf(${v})`);
});

Deno.test("numberToHalf rounds to nearest, ties to even", () => {
  const cases: [number, number][] = [
    [1 + 2 ** -11, 0x3c00], // halfway between 0x3c00 and 0x3c01: to even
    [1 + 3 * 2 ** -11, 0x3c02], // halfway between 0x3c01 and 0x3c02: to even
    [1 + 2 ** -11 + 2 ** -20, 0x3c01], // above halfway
    [1 + 2 ** -11 + 2 ** -40, 0x3c01], // above halfway by less than float32 can hold
    [1 + 2 ** -11 - 2 ** -40, 0x3c00], // below halfway by less than float32 can hold
    [65519, 0x7bff], // below halfway to 65536
    [65520, 0x7c00], // halfway to 65536: to even, which is Infinity
    [1e6, 0x7c00], // overflow
    [-1e6, 0xfc00],
    [2 ** -25, 0x0000], // halfway between 0 and the smallest subnormal: to even
    [3 * 2 ** -26, 0x0001], // above halfway
    [2 ** -25 + 2 ** -60, 0x0001], // barely above halfway
    [2 ** -26, 0x0000], // underflow
    [-(2 ** -30), 0x8000], // underflow keeps the sign
    [3 * 2 ** -25, 0x0002], // subnormal tie (1.5 ulp): to even
    [2 ** -14 - 2 ** -26, 0x0400], // rounds up from the largest subnormal into the normals
  ];
  for (const [v, bits] of cases) assertEquals(numberToHalf(v), bits, `numberToHalf(${v})`);
});

Deno.test("halfToNumber decodes normals, subnormals, zeros, infinities and NaN", () => {
  const cases: [number, number][] = [
    [0x3c00, 1],
    [0xc000, -2],
    [0x7bff, 65504],
    [0x0400, 2 ** -14],
    [0x0001, 2 ** -24],
    [0x03ff, 1023 * 2 ** -24],
    [0x0000, 0],
    [0x8000, -0],
    [0x7c00, Infinity],
    [0xfc00, -Infinity],
    [0x3555, 0.333251953125],
  ];
  for (const [bits, v] of cases) assertEquals(halfToNumber(bits), v, `halfToNumber(${bits})`);
  assert(Number.isNaN(halfToNumber(0x7e00)));
  assert(Number.isNaN(halfToNumber(0xfc01)));
});

Deno.test("numberToBf16 gives bfloat16 bits, rounding to nearest even", () => {
  const cases: [number, number][] = [
    [1, 0x3f80],
    [-2, 0xc000],
    [1.5, 0x3fc0],
    [0, 0x0000],
    [-0, 0x8000],
    [Infinity, 0x7f80],
    [-Infinity, 0xff80],
    [NaN, 0x7fc0],
    [1 + 2 ** -8, 0x3f80], // halfway between 0x3f80 and 0x3f81: to even
    [1 + 3 * 2 ** -8, 0x3f82], // halfway between 0x3f81 and 0x3f82: to even
    [1 + 2 ** -8 + 2 ** -30, 0x3f81], // above halfway by less than float32 can hold
    [1 + 2 ** -8 + 2 ** -20, 0x3f81], // above halfway
    [3.4028234663852886e38, 0x7f80], // float32 max rounds up to Infinity
    [1e39, 0x7f80], // beyond float32
    [2 ** -133, 0x0001], // smallest bfloat16 subnormal
    [2 ** -134, 0x0000], // halfway to it: to even
  ];
  for (const [v, bits] of cases) assertEquals(numberToBf16(v), bits, `numberToBf16(${v})`);
});

Deno.test("bf16ToNumber decodes bfloat16 bits", () => {
  const cases: [number, number][] = [
    [0x3f80, 1],
    [0xc000, -2],
    [0x3fc0, 1.5],
    [0x7f7f, 3.3895313892515355e38],
    [0x0001, 2 ** -133],
    [0x8000, -0],
    [0x7f80, Infinity],
    [0xff80, -Infinity],
  ];
  for (const [bits, v] of cases) assertEquals(bf16ToNumber(bits), v, `bf16ToNumber(${bits})`);
  assert(Number.isNaN(bf16ToNumber(0x7fc0)));
});

Deno.test("dataByteSize counts raw bytes, and BYTES with their length prefixes", () => {
  assertEquals(dataByteSize(new Uint8Array(5)), 5);
  assertEquals(dataByteSize(BytesTensor.of([bytes(97), bytes(98, 99, 100)])), 12);
  assertEquals(dataByteSize(BytesTensor.of([])), 0);
});

Deno.test("elementCount multiplies the dims; a scalar shape has one element", () => {
  assertEquals(elementCount([]), 1);
  assertEquals(elementCount([2, 3]), 6);
  assertEquals(elementCount([4, 0, 5]), 0);
});

Deno.test("fromConfigType maps TYPE_* names to datatypes, TYPE_STRING to BYTES", () => {
  for (const dt of DATATYPES) {
    if (dt !== "BYTES") assertEquals(fromConfigType(`TYPE_${dt}`), dt);
  }
  assertEquals(fromConfigType("TYPE_STRING"), "BYTES");
  assertEquals(fromConfigType("TYPE_BYTES"), undefined);
  assertEquals(fromConfigType("TYPE_INVALID"), undefined);
  assertEquals(fromConfigType("FP32"), undefined);
  assertEquals(fromConfigType("TYPE_FLOAT"), undefined);
  assertEquals(fromConfigType(""), undefined);
});

Deno.test("toConfigType maps datatypes to TYPE_* names and back", () => {
  assertEquals(toConfigType("FP32"), "TYPE_FP32");
  assertEquals(toConfigType("BYTES"), "TYPE_STRING");
  assertEquals(toConfigType("BF16"), "TYPE_BF16");
  for (const dt of DATATYPES) assertEquals(fromConfigType(toConfigType(dt)), dt);
});

Deno.test("typedView is a view over aligned bytes, without copying", () => {
  const raw = bytesOf(new Float32Array([1, 2, 3]));
  const view = typedView("FP32", raw);
  assert(view instanceof Float32Array);
  assert(view.buffer === raw.buffer);
  assertEquals(list(view), [1, 2, 3]);
  const at4 = typedView("INT32", new Uint8Array(raw.buffer, 4, 8));
  assert(at4.buffer === raw.buffer);
  assertEquals(list(at4), [0x40000000, 0x40400000]);
});

Deno.test("typedView copies bytes that are not aligned for the type", () => {
  const backing = new Uint8Array(9);
  backing.set(bytes(0, 0, 0x80, 0x3f, 0, 0, 0x20, 0xc0), 1);
  const unaligned = backing.subarray(1);
  const view = typedView("FP32", unaligned);
  assert(view instanceof Float32Array);
  assert(view.buffer !== backing.buffer, "a copy");
  assertEquals(list(view), [1, -2.5]);
  const i64 = new Uint8Array(17);
  i64.set(bytes(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 0, 0, 0), 1);
  assertEquals(list(typedView("INT64", i64.subarray(1))), [-1n, 2n]);
  assertEquals(list(typedView("UINT16", i64.subarray(1, 5))), [65535, 65535]);
});

Deno.test("typedView copies an unaligned node Buffer rather than viewing it", () => {
  const backing = new ArrayBuffer(9);
  const buf = Buffer.from(backing, 1, 8);
  buf.set(bytes(1, 0, 0, 0, 2, 0, 0, 0));
  const view = typedView("UINT32", buf);
  assert(view.buffer !== backing);
  assertEquals(list(view), [1, 2]);
});

Deno.test("typedView gives FP16 and BF16 as their bit patterns, BOOL as bytes", () => {
  const fp16 = typedView("FP16", bytes(0x00, 0x3c, 0x00, 0xc0));
  assert(fp16 instanceof Uint16Array);
  assertEquals(list(fp16), [0x3c00, 0xc000]);
  assertEquals(list(typedView("BF16", bytes(0x80, 0x3f))), [0x3f80]);
  const bool = typedView("BOOL", bytes(1, 0));
  assert(bool instanceof Uint8Array);
  assertEquals(list(bool), [1, 0]);
  assert(typedView("INT8", bytes(0xff)) instanceof Int8Array);
  assert(typedView("UINT64", new Uint8Array(8)) instanceof BigUint64Array);
  assert(typedView("FP64", new Uint8Array(8)) instanceof Float64Array);
});

Deno.test("bytesOf views a typed array's bytes without copying", () => {
  const a = new Int16Array([1, -1, 3]);
  const b = bytesOf(a.subarray(1));
  assertEquals(b, bytes(0xff, 0xff, 3, 0));
  assert(b.buffer === a.buffer);
});

Deno.test("utf8Encode and utf8Decode convert strings, invalid bytes becoming U+FFFD", () => {
  assertEquals(utf8Encode("é€"), bytes(0xc3, 0xa9, 0xe2, 0x82, 0xac));
  assertEquals(utf8Decode(bytes(0xc3, 0xa9)), "é");
  assertEquals(utf8Decode(bytes(0x61, 0xff)), "a\ufffd");
});

Deno.test("toJsonText writes the same text as JSON.stringify of toJsonValues for every datatype", () => {
  const cases: [Datatype, unknown[]][] = [
    ["INT8", [-128, 0, 127]],
    ["UINT8", [0, 255]],
    ["INT16", [-32768, 5]],
    ["UINT16", [65535]],
    ["INT32", [-2147483648, 2147483647, 0]],
    ["UINT32", [4294967295, 1]],
    ["INT64", [-(2 ** 53) + 1, 7]],
    ["UINT64", [2 ** 53 - 1]],
    ["FP32", [0.1, -2.5, 1e-7, 3.4e38]],
    ["FP32", [0, -0, 1]],
    ["FP64", [0.1, Number.MAX_VALUE, -1e-300]],
    ["FP16", [1, -2, 65504]],
    ["BF16", [1, -2]],
    ["BOOL", [true, false]],
    ["BYTES", ["a", "", "grüße"]],
    ["INT32", []],
  ];
  for (const [dt, values] of cases) {
    const data = fromJsonValues(dt, values, "x");
    assertEquals(
      toJsonText(dt, data),
      JSON.stringify(toJsonValues(dt, data)),
      `${dt} ${JSON.stringify(values)}`,
    );
  }
  const fp32 = bytesOf(new Float32Array([0.1, -0, 2]));
  assertEquals(toJsonText("FP32", fp32), "[0.10000000149011612,-0.0,2]");
  assertEquals(toJsonText("FP64", bytesOf(new Float64Array([NaN, Infinity]))), "[null,null]");
  assertEquals(toJsonText("INT32", bytesOf(new Int32Array([1, -2, 3]))), "[1,-2,3]");
});
