/**
 * The trace file's tensor text (Triton's JSON trace format: values joined by commas as C++ streams write
 * them) and the wall-clock conversion of trace timestamps for OpenTelemetry.
 * @module
 */

import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { assertEquals } from "../assert.ts";
import { bytesOf, fromJsonValues, utf8Encode } from "../../server/core/dtypes.ts";
import { traceDataText } from "../../server/trace/trace.ts";
import { toHrTime } from "../../server/trace/opentelemetry.ts";

Deno.test("integers are written in decimal, 64-bit ones exactly", () => {
  assertEquals(traceDataText("INT32", bytesOf(Int32Array.of(0, -1, 2147483647))), "0,-1,2147483647");
  assertEquals(traceDataText("UINT8", Uint8Array.of(0, 200, 255)), "0,200,255");
  assertEquals(traceDataText("INT8", bytesOf(Int8Array.of(-128, 5))), "-128,5");
  assertEquals(
    traceDataText("INT64", bytesOf(BigInt64Array.of(-9223372036854775808n, 9007199254740993n))),
    "-9223372036854775808,9007199254740993",
  );
  assertEquals(
    traceDataText("UINT64", bytesOf(BigUint64Array.of(18446744073709551615n))),
    "18446744073709551615",
  );
});

Deno.test("BOOL is written 1 and 0 and BYTES elements in double quotes", () => {
  assertEquals(traceDataText("BOOL", Uint8Array.of(1, 0, 1)), "1,0,1");
  assertEquals(
    traceDataText("BYTES", BytesTensor.of([utf8Encode("ab"), utf8Encode(""), utf8Encode("1,2")])),
    '"ab","","1,2"',
  );
});

Deno.test("floats have six significant digits as C++'s default %g: fixed or exponent, trailing zeros dropped", () => {
  const fp32 = (...v: number[]) => traceDataText("FP32", bytesOf(Float32Array.from(v)));
  assertEquals(fp32(0.1, 1.5, -2, 0), "0.1,1.5,-2,0");
  assertEquals(fp32(123456, 1234567, 0.0001, 0.00001), "123456,1.23457e+06,0.0001,1e-05");
  assertEquals(fp32(-0, NaN, Infinity, -Infinity), "-0,nan,inf,-inf");
  assertEquals(fp32(3.14159265), "3.14159");
  assertEquals(traceDataText("FP64", bytesOf(Float64Array.of(1e100, 2 / 3))), "1e+100,0.666667");
  assertEquals(
    traceDataText("FP16", fromJsonValues("FP16", [0.5, -1, 65504], "x") as Uint8Array),
    "0.5,-1,65504",
  );
  assertEquals(traceDataText("BF16", fromJsonValues("BF16", [1, 0.25], "x") as Uint8Array), "1,0.25");
});

Deno.test("a trace timestamp becomes wall-clock time from performance.timeOrigin, nanoseconds kept", () => {
  const [s0, n0] = toHrTime(0);
  const [s1, n1] = toHrTime(1_000_000_123);
  assertEquals((s1 - s0) * 1e9 + (n1 - n0), 1_000_000_123);
  assertEquals(n0 >= 0 && n0 < 1e9 && n1 >= 0 && n1 < 1e9, true);
  assertEquals(Math.abs(s0 * 1e3 + n0 / 1e6 - performance.timeOrigin) < 0.001, true);
});
