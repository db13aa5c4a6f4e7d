/**
 * The generate extension's pure parts: shaping a JSON value for an input, reading a request body into an
 * inference request, and writing a response.
 * @module
 */

import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import assert from "node:assert/strict";
import {
  decodeGenerateRequest,
  encodeGenerateResponse,
  generateShape,
} from "../../server/frontends/http/generate.ts";
import { bytesOf } from "../../server/core/dtypes.ts";

Deno.test("generateShape fills the innermost variable dim and sets the others to 1, as Triton does", () => {
  assert.deepEqual(generateShape([1], 1), [1]);
  assert.deepEqual(generateShape([-1], 3), [3]);
  assert.deepEqual(generateShape([-1, 4], 8), [2, 4]);
  assert.deepEqual(generateShape([-1, 2, -1], 6), [1, 2, 3]);
  assert.deepEqual(generateShape([-1], 0), [0]);
  assert.equal(generateShape([4], 3), undefined);
  assert.equal(generateShape([2, -1], 3), undefined);
  assert.equal(generateShape([1], 2), undefined);
});

Deno.test("decodeGenerateRequest turns input names into tensors and the rest into parameters", () => {
  const inputs = new Map([
    ["text_input", { datatype: "BYTES" as const, shape: [1] }],
    ["max_tokens", { datatype: "INT32" as const, shape: [-1, 1] }],
  ]);
  const r = decodeGenerateRequest(
    {
      text_input: "hi",
      id: "7",
      temperature: 0.5,
      parameters: { max_tokens: 3, stream: true, big: 2n ** 60n },
    },
    inputs,
    { model: "m", version: "2" },
  );
  assert.deepEqual([r.model, r.version, r.id, r.outputs], ["m", "2", "7", []]);
  assert.deepEqual(r.inputs, [
    {
      name: "text_input",
      datatype: "BYTES",
      shape: [1],
      data: BytesTensor.of([new TextEncoder().encode("hi")]),
    },
    { name: "max_tokens", datatype: "INT32", shape: [1, 1], data: bytesOf(new Int32Array([3])) },
  ]);
  assert.deepEqual(r.parameters, { id: "7", temperature: 0.5, stream: true, big: 2n ** 60n });
  assert.throws(
    () => decodeGenerateRequest({ x: null }, inputs, { model: "m", version: "" }),
    { message: "parameter 'x' has invalid type. It should be either 'int', 'bool', or 'string'." },
  );
});

Deno.test("decodeGenerateRequest reads a value nested 200,000 deep without overflowing the stack", () => {
  const inputs = new Map([["text_input", { datatype: "BYTES" as const, shape: [-1] }]]);
  let deep: unknown = "a";
  for (let i = 0; i < 200_000; i++) deep = [deep];
  const r = decodeGenerateRequest({ text_input: deep }, inputs, { model: "m", version: "" });
  assert.deepEqual(r.inputs[0]!.shape, [1]);
  assert.deepEqual(r.inputs[0]!.data, BytesTensor.of([new TextEncoder().encode("a")]));
});

Deno.test("encodeGenerateResponse writes sorted keys, one-element outputs as plain values", () => {
  const out = encodeGenerateResponse({
    model: "m",
    version: "1",
    id: "",
    parameters: { triton_final_response: true, seq: 3 },
    outputs: [
      {
        name: "text_output",
        datatype: "BYTES",
        shape: [1],
        data: BytesTensor.of([new TextEncoder().encode("x")]),
      },
      { name: "A", datatype: "FP32", shape: [2], data: bytesOf(new Float32Array([1.5, 2])) },
    ],
  });
  assert.equal(
    JSON.stringify(out),
    '{"A":[1.5,2],"model_name":"m","model_version":"1","seq":3,"text_output":"x"}',
  );
});
