import { assert, assertEquals, assertThrows } from "../assert.ts";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { bytesOf, utf8Decode, utf8Encode } from "../../server/core/dtypes.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { InferResponse, RequestedOutput, Tensor } from "../../server/core/types.ts";
import {
  decodeInferRequest,
  encodeInferResponse,
  HEADER_LENGTH,
  inferResponse,
} from "../../server/frontends/http/infer_codec.ts";

const TARGET = { model: "simple", version: "1" };
const WHERE = "Cannot read the inference request for 'simple'";

function json(obj: unknown): Uint8Array {
  return utf8Encode(typeof obj === "string" ? obj : JSON.stringify(obj));
}

/** A binary-extension body: the JSON header, then the chunks; with the header's length. */
function binaryBody(head: unknown, ...chunks: Uint8Array[]): { body: Uint8Array; headerLength: number } {
  const h = json(head);
  const total = h.byteLength + chunks.reduce((n, c) => n + c.byteLength, 0);
  const body = new Uint8Array(total);
  body.set(h);
  let off = h.byteLength;
  for (const c of chunks) {
    body.set(c, off);
    off += c.byteLength;
  }
  return { body, headerLength: h.byteLength };
}

function fails(body: Uint8Array, headerLength: number | undefined, message: string): void {
  assertThrows(() => decodeInferRequest(body, headerLength, TARGET), ServerError, {
    code: "INVALID_ARG",
    message,
  });
}

function failsJson(obj: unknown, message: string): void {
  fails(json(obj), undefined, message);
}

const i32 = (...v: number[]) => bytesOf(new Int32Array(v));
const f32 = (...v: number[]) => bytesOf(new Float32Array(v));

Deno.test("the header-length header is named in lower case", () => {
  assertEquals(HEADER_LENGTH, "inference-header-content-length");
});

Deno.test("a JSON request decodes flat data, id, parameters and outputs", () => {
  const decoded = decodeInferRequest(
    json({
      id: "req-1",
      parameters: { priority: 2, timeout: 1000, flag: true, tag: "x" },
      inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 4], data: [1, 2, 3, -4] }],
      outputs: [
        { name: "OUTPUT0", parameters: { binary_data: true } },
        { name: "OUTPUT1", parameters: { classification: 3 } },
        { name: "OUTPUT2" },
      ],
    }),
    undefined,
    TARGET,
  );
  assertEquals(decoded, {
    request: {
      model: "simple",
      version: "1",
      id: "req-1",
      inputs: [{ name: "INPUT0", datatype: "INT32", shape: [1, 4], data: i32(1, 2, 3, -4) }],
      outputs: [
        { name: "OUTPUT0", classification: 0, parameters: { binary_data: true } },
        { name: "OUTPUT1", classification: 3, parameters: { classification: 3 } },
        { name: "OUTPUT2", classification: 0, parameters: {} },
      ],
      parameters: { priority: 2, timeout: 1000, flag: true, tag: "x" },
    },
    binaryOutput: false,
  });
});

Deno.test("a JSON request flattens nested data row-major", () => {
  const { request } = decodeInferRequest(
    json({ inputs: [{ name: "X", datatype: "FP32", shape: [2, 2], data: [[1, 2], [3, 4.5]] }] }),
    undefined,
    TARGET,
  );
  assertEquals(request.inputs, [{ name: "X", datatype: "FP32", shape: [2, 2], data: f32(1, 2, 3, 4.5) }]);
  assertEquals(request.id, "");
  assertEquals(request.outputs, []);
  assertEquals(request.parameters, {});
});

Deno.test("a JSON request decodes BOOL and BYTES data", () => {
  const { request } = decodeInferRequest(
    json({
      inputs: [
        { name: "B", datatype: "BOOL", shape: [3], data: [true, false, true] },
        { name: "S", datatype: "BYTES", shape: [2], data: ["hi", "é"] },
      ],
    }),
    undefined,
    TARGET,
  );
  assertEquals(request.inputs, [
    { name: "B", datatype: "BOOL", shape: [3], data: new Uint8Array([1, 0, 1]) },
    { name: "S", datatype: "BYTES", shape: [2], data: BytesTensor.of([utf8Encode("hi"), utf8Encode("é")]) },
  ]);
});

Deno.test("binary_data_output in the request parameters asks for binary outputs", () => {
  const { binaryOutput, request } = decodeInferRequest(
    json({
      parameters: { binary_data_output: true },
      inputs: [{ name: "X", datatype: "INT32", shape: [1], data: [1] }],
    }),
    undefined,
    TARGET,
  );
  assertEquals(binaryOutput, true);
  // As Triton: the flag is the frontend's; the request's parameters (the model's view) leave it out.
  assertEquals(request.parameters, {});
  const other = decodeInferRequest(
    json({
      parameters: { binary_data_output: false },
      inputs: [{ name: "X", datatype: "INT32", shape: [1], data: [1] }],
    }),
    undefined,
    TARGET,
  );
  assertEquals(other.binaryOutput, false);
});

Deno.test("INT64 values beyond 2^53 in JSON keep every digit", () => {
  const { request } = decodeInferRequest(
    json(
      '{"inputs":[{"name":"X","datatype":"INT64","shape":[2],"data":[9223372036854775807,-9007199254740993]}]}',
    ),
    undefined,
    TARGET,
  );
  assertEquals(request.inputs[0]!.data, bytesOf(new BigInt64Array([2n ** 63n - 1n, -(2n ** 53n) - 1n])));
});

Deno.test("binary inputs are read in order from after the JSON header, as views", () => {
  const a = i32(1, 2, 3, 4);
  const b = f32(0.5, -1);
  const { body, headerLength } = binaryBody(
    {
      inputs: [
        { name: "A", datatype: "INT32", shape: [1, 4], parameters: { binary_data_size: 16 } },
        { name: "J", datatype: "INT32", shape: [1], data: [7] },
        { name: "B", datatype: "FP32", shape: [2], parameters: { binary_data_size: 8 } },
      ],
    },
    a,
    b,
  );
  const { request } = decodeInferRequest(body, headerLength, TARGET);
  assertEquals(request.inputs, [
    { name: "A", datatype: "INT32", shape: [1, 4], data: a },
    { name: "J", datatype: "INT32", shape: [1], data: i32(7) },
    { name: "B", datatype: "FP32", shape: [2], data: b },
  ]);
  const first = request.inputs[0]!.data as Uint8Array;
  assertEquals(first.buffer === body.buffer, true);
  assertEquals(first.byteOffset, headerLength);
  assertEquals((request.inputs[2]!.data as Uint8Array).byteOffset, headerLength + 16);
});

Deno.test("binary BYTES inputs are checked by their length prefixes and kept as they are in the body", () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: "S", datatype: "BYTES", shape: [1, 2], parameters: { binary_data_size: 11 } }] },
    BytesTensor.of([utf8Encode("abc"), new Uint8Array(0)]).data,
  );
  const { request } = decodeInferRequest(body, headerLength, TARGET);
  assertEquals(request.inputs, [
    {
      name: "S",
      datatype: "BYTES",
      shape: [1, 2],
      data: BytesTensor.of([utf8Encode("abc"), new Uint8Array(0)]),
    },
  ]);
  const data = (request.inputs[0]!.data as BytesTensor).data;
  assert(data.buffer === body.buffer && data.byteOffset === headerLength, "a view of the body, not a copy");
});

Deno.test("a header length equal to the body length means a JSON body with no binary part", () => {
  const body = json({ inputs: [{ name: "X", datatype: "INT8", shape: [2], data: [1, -1] }] });
  const { request } = decodeInferRequest(body, body.byteLength, TARGET);
  assertEquals(request.inputs[0]!.data, new Uint8Array([1, 255]));
});

Deno.test("the raw form (header length 0) makes the whole body the model's only input", () => {
  const body = f32(1, 2, 3, 4);
  let asked = -1;
  const decoded = decodeInferRequest(body, 0, TARGET, (n) => {
    asked = n;
    return { name: "INPUT0", datatype: "FP32", shape: [1, 4] };
  });
  assertEquals(asked, 16);
  assertEquals(decoded, {
    request: {
      model: "simple",
      version: "1",
      id: "",
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 4], data: body }],
      outputs: [],
      parameters: {},
    },
    binaryOutput: true,
  });
});

Deno.test("the raw form of a BYTES input is checked by its length prefixes and kept whole", () => {
  const body = BytesTensor.of([utf8Encode("a"), utf8Encode("bc")]).data;
  const { request } = decodeInferRequest(
    body,
    0,
    TARGET,
    () => ({ name: "S", datatype: "BYTES", shape: [2] }),
  );
  assertEquals((request.inputs[0]!.data as BytesTensor).elements(), [utf8Encode("a"), utf8Encode("bc")]);
  assert((request.inputs[0]!.data as BytesTensor).data === body, "the body itself, not a copy");
  assertThrows(
    () => decodeInferRequest(body, 0, TARGET, () => ({ name: "S", datatype: "BYTES", shape: [3] })),
    ServerError,
    {
      code: "INVALID_ARG",
      message:
        "Cannot read input 'S': BYTES data holds 2 elements, expected 3 (length prefix of element 2 is missing)",
    },
  );
});

Deno.test("the raw form is refused for models without exactly one input", () => {
  fails(
    f32(1),
    0,
    `${WHERE}: the raw binary form needs a model with exactly one input`,
  );
});

Deno.test("malformed JSON is refused with the parser's reason", () => {
  fails(
    json("{x"),
    undefined,
    `${WHERE}: malformed JSON: Expected property name or '}' in JSON at position 1 (line 1 column 2)`,
  );
  fails(new Uint8Array(0), undefined, `${WHERE}: malformed JSON: Unexpected end of JSON input`);
  const { body, headerLength } = binaryBody({ inputs: [] }, f32(1));
  fails(
    body,
    headerLength - 1,
    `${WHERE}: malformed JSON: Expected ',' or '}' after property value in JSON at position 12 (line 1 column 13)`,
  );
});

Deno.test("a JSON body that is not an object is refused", () => {
  failsJson([1], `${WHERE}: the JSON body must be an object`);
  failsJson("null", `${WHERE}: the JSON body must be an object`);
  failsJson("3", `${WHERE}: the JSON body must be an object`);
});

Deno.test("bad top-level fields are refused", () => {
  failsJson({ id: 3, inputs: [] }, `${WHERE}: 'id' must be a string`);
  failsJson({ parameters: [1], inputs: [] }, `${WHERE}: 'parameters' must be an object`);
  failsJson(
    { parameters: { p: [1] }, inputs: [] },
    `${WHERE}: parameter 'p' must be a boolean, number or string`,
  );
  failsJson({}, `${WHERE}: 'inputs' must be an array`);
  failsJson({ inputs: {} }, `${WHERE}: 'inputs' must be an array`);
  failsJson({ inputs: [], outputs: {} }, `${WHERE}: 'outputs' must be an array`);
});

Deno.test("bad input entries are refused", () => {
  failsJson({ inputs: [1] }, `${WHERE}: input 0 must be an object`);
  failsJson({ inputs: [{ datatype: "FP32", shape: [1], data: [1] }] }, `${WHERE}: input 0 has no 'name'`);
  failsJson(
    { inputs: [{ name: "X", datatype: "FLOAT32", shape: [1], data: [1] }] },
    `${WHERE}: input 'X' has unknown datatype "FLOAT32"`,
  );
  failsJson(
    { inputs: [{ name: "X", shape: [1], data: [1] }] },
    `${WHERE}: input 'X' has unknown datatype undefined`,
  );
  failsJson(
    { inputs: [{ name: "X", datatype: "fp32", shape: [1], data: [1] }] },
    `${WHERE}: input 'X' has unknown datatype "fp32"`,
  );
  failsJson(
    { inputs: [{ name: "X", datatype: "FP32", parameters: "p", shape: [1], data: [1] }] },
    `${WHERE}, input 'X': 'parameters' must be an object`,
  );
});

Deno.test("a shape that is not a list of non-negative integers is refused", () => {
  const msg = `${WHERE}: input 'X' 'shape' must be an array of non-negative integers`;
  for (const shape of [undefined, 4, "4", [-1], [1.5], ["2"], [null], [2, -3], [1e300, 0], [2 ** 53, 0]]) {
    failsJson({ inputs: [{ name: "X", datatype: "FP32", shape, data: [1] }] }, msg);
  }
});

Deno.test("data whose element count does not match the shape is refused", () => {
  failsJson(
    { inputs: [{ name: "X", datatype: "FP32", shape: [2, 2], data: [1, 2, 3] }] },
    `${WHERE}: input 'X' has 3 data elements, expected 4 for shape [2,2]`,
  );
  failsJson(
    { inputs: [{ name: "X", datatype: "FP32", shape: [1], data: [[1], [2]] }] },
    `${WHERE}: input 'X' has 2 data elements, expected 1 for shape [1]`,
  );
  failsJson(
    { inputs: [{ name: "X", datatype: "FP32", shape: [0], data: [1] }] },
    `${WHERE}: input 'X' has 1 data elements, expected 0 for shape [0]`,
  );
});

Deno.test("an input without data or binary_data_size is refused", () => {
  failsJson({ inputs: [{ name: "X", datatype: "FP32", shape: [1] }] }, `${WHERE}: input 'X' has no 'data'`);
  failsJson(
    { inputs: [{ name: "X", datatype: "FP32", shape: [1], data: 1 }] },
    `${WHERE}: input 'X' has no 'data'`,
  );
});

Deno.test("element values are checked against the datatype", () => {
  failsJson(
    { inputs: [{ name: "X", datatype: "UINT8", shape: [2], data: [1, 300] }] },
    "Cannot read input 'X': element 1 is 300, expected an integer in [0, 255] for UINT8",
  );
});

Deno.test("an input with both data and binary_data_size is refused", () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: "X", datatype: "FP32", shape: [1], data: [1], parameters: { binary_data_size: 4 } }] },
    f32(1),
  );
  fails(body, headerLength, `${WHERE}: input 'X' has both 'data' and binary data`);
});

Deno.test("a binary_data_size that is not a non-negative integer is refused", () => {
  for (const size of [-1, 1.5, "4", true]) {
    const { body, headerLength } = binaryBody(
      { inputs: [{ name: "X", datatype: "FP32", shape: [1], parameters: { binary_data_size: size } }] },
      f32(1),
    );
    fails(body, headerLength, `${WHERE}: input 'X' 'binary_data_size' must be a non-negative integer`);
  }
});

Deno.test("a later input claiming more than what the earlier ones left is refused", () => {
  const { body, headerLength } = binaryBody(
    {
      inputs: [
        { name: "A", datatype: "FP32", shape: [1], parameters: { binary_data_size: 4 } },
        { name: "B", datatype: "FP32", shape: [3], parameters: { binary_data_size: 12 } },
      ],
    },
    f32(1, 2, 3),
  );
  fails(body, headerLength, `${WHERE}: input 'B' claims 12 bytes of binary data but only 8 remain`);
});

Deno.test("binary data sizes that claim more than the body holds are refused", () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: "X", datatype: "FP32", shape: [4], parameters: { binary_data_size: 16 } }] },
    f32(1, 2),
  );
  fails(body, headerLength, `${WHERE}: input 'X' claims 16 bytes of binary data but only 8 remain`);
});

Deno.test("binary data sizes that claim less than the body holds are refused", () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: "X", datatype: "FP32", shape: [1], parameters: { binary_data_size: 4 } }] },
    f32(1, 2),
  );
  fails(body, headerLength, `${WHERE}: the body has 8 bytes of binary data but the inputs claim 4`);
  const extra = binaryBody({ inputs: [{ name: "X", datatype: "FP32", shape: [1], data: [1] }] }, f32(1));
  fails(
    extra.body,
    extra.headerLength,
    `${WHERE}: the body has 4 bytes of binary data but the inputs claim 0`,
  );
});

Deno.test("a binary_data_size that does not fit the shape is handed on as sent (validation refuses it)", () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: "X", datatype: "FP32", shape: [2, 2], parameters: { binary_data_size: 12 } }] },
    f32(1, 2, 3),
  );
  const { request } = decodeInferRequest(body, headerLength, TARGET);
  assertEquals([request.inputs[0]!.shape, request.inputs[0]!.data], [[2, 2], f32(1, 2, 3)]);
});

Deno.test("binary BYTES whose elements do not fit the declared size are refused", () => {
  const { body, headerLength } = binaryBody(
    { inputs: [{ name: "S", datatype: "BYTES", shape: [1], parameters: { binary_data_size: 6 } }] },
    new Uint8Array([5, 0, 0, 0, 97, 98]),
  );
  fails(body, headerLength, "Cannot read input 'S': BYTES element 0 claims 5 bytes but only 2 remain");
});

Deno.test("binary BYTES with fewer or more elements than the shape are refused in Triton's words", () => {
  const strings = (...v: string[]) => BytesTensor.of(v.map(utf8Encode)).data;
  const request = (chunk: Uint8Array) =>
    binaryBody({
      inputs: [{
        name: "S",
        datatype: "BYTES",
        shape: [3],
        parameters: { binary_data_size: chunk.byteLength },
      }],
    }, chunk);
  const fewer = request(strings("a", "b"));
  fails(
    fewer.body,
    fewer.headerLength,
    "Cannot read input 'S': expected 3 string elements for inference input 'S' for model 'simple', got 2",
  );
  const more = request(strings("a", "b", "c", "d", "e"));
  fails(
    more.body,
    more.headerLength,
    "Cannot read input 'S': unexpected number of string elements 4 for inference input 'S' for model 'simple', expecting 3",
  );
});

Deno.test("a header length beyond the body, negative or not an integer is refused", () => {
  const body = json({ inputs: [] });
  const n = body.byteLength;
  fails(body, n + 1, `${WHERE}: Inference-Header-Content-Length is ${n + 1} but the body has ${n} bytes`);
  fails(body, -1, `${WHERE}: Inference-Header-Content-Length is -1 but the body has ${n} bytes`);
  fails(body, NaN, `${WHERE}: Inference-Header-Content-Length is NaN but the body has ${n} bytes`);
  fails(body, 2.5, `${WHERE}: Inference-Header-Content-Length is 2.5 but the body has ${n} bytes`);
});

Deno.test("bad requested outputs are refused", () => {
  const inputs = [{ name: "X", datatype: "FP32", shape: [1], data: [1] }];
  failsJson({ inputs, outputs: [1] }, `${WHERE}: output 0 must be an object with a 'name'`);
  failsJson({ inputs, outputs: [{ name: 3 }] }, `${WHERE}: output 0 must be an object with a 'name'`);
  failsJson(
    { inputs, outputs: [{ name: "Y", parameters: 1 }] },
    `${WHERE}, output 'Y': 'parameters' must be an object`,
  );
});

Deno.test("an output's classification is handed on as a number, NaN when it is none (validation refuses both)", () => {
  const inputs = [{ name: "X", datatype: "FP32", shape: [1], data: [1] }];
  const asked = [-1, 1.5, "3", true, undefined].map((classification) =>
    decodeInferRequest(
      json({
        inputs,
        outputs: [{ name: "Y", parameters: classification === undefined ? {} : { classification } }],
      }),
      undefined,
      TARGET,
    ).request.outputs[0]!.classification
  );
  assertEquals(asked, [-1, 1.5, NaN, NaN, 0]);
});

function response(outputs: Tensor[], id = "", parameters: InferResponse["parameters"] = {}): InferResponse {
  return { model: "simple", version: "1", id, outputs, parameters };
}

function out(name: string, binary?: boolean): RequestedOutput {
  return { name, classification: 0, parameters: binary === undefined ? {} : { binary_data: binary } };
}

const OUT0: Tensor = { name: "OUTPUT0", datatype: "FP32", shape: [1, 2], data: f32(1.5, -2) };
const OUT1: Tensor = { name: "OUTPUT1", datatype: "INT32", shape: [2], data: i32(7, -8) };

Deno.test("a response encodes as JSON when no output asks for binary", () => {
  const enc = encodeInferResponse(response([OUT0, OUT1]), [], false);
  assertEquals(enc.headerLength, undefined);
  assertEquals(
    utf8Decode(enc.body),
    '{"model_name":"simple","model_version":"1","outputs":[' +
      '{"name":"OUTPUT0","datatype":"FP32","shape":[1,2],"data":[1.5,-2]},' +
      '{"name":"OUTPUT1","datatype":"INT32","shape":[2],"data":[7,-8]}]}',
  );
});

Deno.test("responses of another version, and outputs of the same name with another datatype, name their own", () => {
  const text = (version: string, t: Tensor) =>
    utf8Decode(encodeInferResponse({ ...response([t]), version }, [], false).body);
  const int = { ...OUT1, name: 'O"x' };
  const float: Tensor = { ...OUT0, name: 'O"x' };
  for (let round = 0; round < 2; round++) {
    assertEquals(
      text("1", int),
      '{"model_name":"simple","model_version":"1","outputs":[' +
        '{"name":"O\\"x","datatype":"INT32","shape":[2],"data":[7,-8]}]}',
    );
    assertEquals(
      text("2", float),
      '{"model_name":"simple","model_version":"2","outputs":[' +
        '{"name":"O\\"x","datatype":"FP32","shape":[1,2],"data":[1.5,-2]}]}',
    );
  }
});

Deno.test("a response's parameters keep a uint64 beyond 2^53 exact (an ensemble echoes the sequence_id)", () => {
  const enc = encodeInferResponse(
    response([OUT1], "", { sequence_id: 9007199254740993n, sequence_start: true }),
    [],
    false,
  );
  assertEquals(
    utf8Decode(enc.body),
    '{"model_name":"simple","model_version":"1","parameters":{"sequence_id":9007199254740993,"sequence_start":true},' +
      '"outputs":[{"name":"OUTPUT1","datatype":"INT32","shape":[2],"data":[7,-8]}]}',
  );
});

Deno.test("a response echoes the request id and carries its parameters", () => {
  const enc = encodeInferResponse(response([OUT1], "req-7", { sequence_end: true }), [], false);
  assertEquals(
    utf8Decode(enc.body),
    '{"model_name":"simple","model_version":"1","id":"req-7","parameters":{"sequence_end":true},' +
      '"outputs":[{"name":"OUTPUT1","datatype":"INT32","shape":[2],"data":[7,-8]}]}',
  );
});

Deno.test("BOOL and BYTES outputs encode as JSON booleans and strings", () => {
  const enc = encodeInferResponse(
    response([
      { name: "B", datatype: "BOOL", shape: [2], data: new Uint8Array([1, 0]) },
      { name: "S", datatype: "BYTES", shape: [2], data: BytesTensor.of([utf8Encode("a"), utf8Encode("é")]) },
    ]),
    [],
    false,
  );
  assertEquals(
    utf8Decode(enc.body),
    '{"model_name":"simple","model_version":"1","outputs":[' +
      '{"name":"B","datatype":"BOOL","shape":[2],"data":[true,false]},' +
      '{"name":"S","datatype":"BYTES","shape":[2],"data":["a","é"]}]}',
  );
});

Deno.test("an output with binary_data true is sent after the JSON header", () => {
  const enc = encodeInferResponse(response([OUT0, OUT1]), [out("OUTPUT0", true), out("OUTPUT1")], false);
  const head = '{"model_name":"simple","model_version":"1","outputs":[' +
    '{"name":"OUTPUT0","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}},' +
    '{"name":"OUTPUT1","datatype":"INT32","shape":[2],"data":[7,-8]}]}';
  assertEquals(enc.headerLength, head.length);
  assertEquals(utf8Decode(enc.body.subarray(0, enc.headerLength)), head);
  assertEquals(enc.body.subarray(enc.headerLength), new Uint8Array([0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0]));
});

Deno.test("small binary answers made one after the other keep their own bytes; a large one has a buffer of its own", () => {
  // Small joined answers are cut from a shared slab: enough of them to fill several slabs, each checked after all
  // were made.
  const made: { value: number; body: Uint8Array; headerLength: number }[] = [];
  for (let value = 0; value < 200; value++) {
    const t: Tensor = {
      name: "OUTPUT1",
      datatype: "INT32",
      shape: [64],
      data: i32(...new Array(64).fill(value)),
    };
    const enc = encodeInferResponse(response([t]), [], true);
    made.push({ value, body: enc.body, headerLength: enc.headerLength! });
  }
  for (const { value, body, headerLength } of made) {
    assertEquals(body.byteLength, headerLength + 256);
    assertEquals(body.subarray(headerLength), i32(...new Array(64).fill(value)));
  }
  const buffers = new Set(made.map((m) => m.body.buffer));
  assert(
    buffers.size > 1 && buffers.size < made.length,
    `${buffers.size} buffers for ${made.length} answers`,
  );
  const large: Tensor = {
    name: "OUTPUT1",
    datatype: "INT32",
    shape: [1024],
    data: i32(...new Array(1024).fill(3)),
  };
  const enc = encodeInferResponse(response([large]), [], true);
  assertEquals([enc.body.byteOffset, enc.body.byteLength === enc.body.buffer.byteLength], [0, true]);
});

Deno.test("binary_data_output sends every output in binary, in output order, unless one says false", () => {
  const all = encodeInferResponse(response([OUT0, OUT1]), [], true);
  const head = '{"model_name":"simple","model_version":"1","outputs":[' +
    '{"name":"OUTPUT0","datatype":"FP32","shape":[1,2],"parameters":{"binary_data_size":8}},' +
    '{"name":"OUTPUT1","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}}]}';
  assertEquals(all.headerLength, head.length);
  assertEquals(utf8Decode(all.body.subarray(0, all.headerLength)), head);
  assertEquals(
    all.body.subarray(head.length),
    new Uint8Array([0, 0, 0xc0, 0x3f, 0, 0, 0, 0xc0, 7, 0, 0, 0, 0xf8, 0xff, 0xff, 0xff]),
  );

  const mixed = encodeInferResponse(response([OUT0, OUT1]), [out("OUTPUT0", false)], true);
  const mixedHead = '{"model_name":"simple","model_version":"1","outputs":[' +
    '{"name":"OUTPUT0","datatype":"FP32","shape":[1,2],"data":[1.5,-2]},' +
    '{"name":"OUTPUT1","datatype":"INT32","shape":[2],"parameters":{"binary_data_size":8}}]}';
  assertEquals(mixed.headerLength, mixedHead.length);
  assertEquals(utf8Decode(mixed.body.subarray(0, mixed.headerLength)), mixedHead);
  assertEquals(mixed.body.subarray(mixedHead.length), new Uint8Array([7, 0, 0, 0, 0xf8, 0xff, 0xff, 0xff]));
});

Deno.test("binary BYTES outputs are sent with their length prefixes", () => {
  const s: Tensor = {
    name: "S",
    datatype: "BYTES",
    shape: [2],
    data: BytesTensor.of([utf8Encode("ab"), utf8Encode("")]),
  };
  const enc = encodeInferResponse(response([s], "x"), [out("S", true)], false);
  const head = '{"model_name":"simple","model_version":"1","id":"x","outputs":[' +
    '{"name":"S","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":10}}]}';
  assertEquals(enc.headerLength, head.length);
  assertEquals(utf8Decode(enc.body.subarray(0, head.length)), head);
  assertEquals(enc.body.subarray(head.length), new Uint8Array([2, 0, 0, 0, 97, 98, 0, 0, 0, 0]));
});

Deno.test("the header length counts UTF-8 bytes, not characters", () => {
  const t: Tensor = { name: "é", datatype: "UINT8", shape: [1], data: new Uint8Array([9]) };
  const enc = encodeInferResponse(response([t]), [], true);
  const head = '{"model_name":"simple","model_version":"1","outputs":[' +
    '{"name":"é","datatype":"UINT8","shape":[1],"parameters":{"binary_data_size":1}}]}';
  assertEquals(enc.headerLength, utf8Encode(head).byteLength);
  assertEquals(enc.headerLength, head.length + 1);
  assertEquals(enc.body.subarray(enc.headerLength), new Uint8Array([9]));
});

Deno.test("an encoded binary response decodes back as a request would", () => {
  const enc = encodeInferResponse(response([OUT0]), [], true);
  const head = JSON.parse(utf8Decode(enc.body.subarray(0, enc.headerLength)));
  assertEquals(head.outputs[0].parameters.binary_data_size, 8);
  assertEquals(new Float32Array(enc.body.slice(enc.headerLength!).buffer), new Float32Array([1.5, -2]));
});

Deno.test("a small binary response is one buffer whose parts are its JSON part and its outputs", () => {
  const t: Tensor = { name: "é", datatype: "UINT8", shape: [2], data: new Uint8Array([9, 8]) };
  const enc = encodeInferResponse(response([t, OUT1]), [], true);
  assertEquals(enc.text, undefined);
  assertEquals(enc.byteLength, enc.body.byteLength);
  assertEquals(enc.byteLength, enc.headerLength! + 2 + 8);
  assertEquals(enc.parts.length, 3);
  assertEquals(enc.parts[0], enc.body.subarray(0, enc.headerLength));
  assertEquals(enc.parts[1], new Uint8Array([9, 8]));
  assertEquals(enc.parts[2], new Uint8Array([7, 0, 0, 0, 0xf8, 0xff, 0xff, 0xff]));
});

Deno.test("binary responses with the same JSON part each get a body and headers of their own", async () => {
  const bodies = [[1, 2], [3, 4], [5]].map((v) =>
    encodeInferResponse(
      response([{ name: "X", datatype: "UINT8", shape: [v.length], data: new Uint8Array(v) }]),
      [],
      true,
    )
  );
  const other = encodeInferResponse(response([OUT1], "id-1"), [], true);
  const again = encodeInferResponse(
    response([{ name: "X", datatype: "UINT8", shape: [2], data: new Uint8Array([6, 7]) }]),
    [],
    true,
  );
  const head =
    '{"model_name":"simple","model_version":"1","outputs":[{"name":"X","datatype":"UINT8","shape":[2],' +
    '"parameters":{"binary_data_size":2}}]}';
  const want = (tail: number[]) => new Uint8Array([...utf8Encode(head), ...tail]);
  assertEquals(bodies[0]!.body, want([1, 2]));
  assertEquals(bodies[1]!.body, want([3, 4]));
  assertEquals(again.body, want([6, 7]));
  // Bodies of their own, whether or not they lie in one slab: writing one leaves the others as they were.
  const first = bodies[0]!.body.slice();
  bodies[0]!.body.fill(0);
  assertEquals([bodies[1]!.body, again.body], [want([3, 4]), want([6, 7])]);
  bodies[0]!.body.set(first);
  assertEquals(bodies[2]!.headerLength, head.length);
  assertEquals(
    utf8Decode(bodies[2]!.body.subarray(0, bodies[2]!.headerLength)),
    head.replace("[2]", "[1]").replace(":2}", ":1}"),
  );
  assertEquals(utf8Decode(other.body.subarray(0, other.headerLength)).includes('"id":"id-1"'), true);
  for (const enc of [bodies[0]!, bodies[2]!, other, bodies[1]!]) {
    const answer = inferResponse(enc);
    assertEquals(answer.headers.get(HEADER_LENGTH), String(enc.headerLength));
    assertEquals(answer.headers.get("content-type"), "application/octet-stream");
    assertEquals(new Uint8Array(await answer.arrayBuffer()), enc.body);
  }
});

Deno.test("a binary request whose JSON part came before decodes to fresh objects over its own bytes", () => {
  const head = {
    id: "again",
    parameters: { binary_data_output: true, priority: 1 },
    inputs: [
      { name: "A", datatype: "INT32", shape: [1, 2], parameters: { binary_data_size: 8 } },
      { name: "B", datatype: "FP32", shape: [1, 1], parameters: { binary_data_size: 4 } },
    ],
    outputs: [{ name: "OUT", parameters: { classification: 2 } }],
  };
  const want = (a: number, b: number, model: string) => ({
    request: {
      model,
      version: "1",
      id: "again",
      inputs: [
        { name: "A", datatype: "INT32", shape: [1, 2], data: i32(a, a + 1) },
        { name: "B", datatype: "FP32", shape: [1, 1], data: f32(b) },
      ],
      outputs: [{ name: "OUT", classification: 2, parameters: { classification: 2 } }],
      parameters: { priority: 1 },
    },
    binaryOutput: true,
  });
  const first = binaryBody(head, i32(1, 2), f32(0.5));
  const one = decodeInferRequest(first.body, first.headerLength, TARGET);
  assertEquals(one, want(1, 0.5, "simple"));
  // What a later stage does to one request is not seen by the next with the same JSON part.
  one.request.inputs[0]!.shape[0] = 9;
  one.request.parameters.priority = 7;
  one.request.outputs[0]!.parameters.classification = 5;
  const second = binaryBody(head, i32(3, 4), f32(-2));
  const two = decodeInferRequest(second.body, second.headerLength, { model: "other", version: "1" });
  assertEquals(two, want(3, -2, "other"));
  assertEquals((two.request.inputs[1]!.data as Uint8Array).buffer, second.body.buffer);
  // A binary part of another length than the JSON part claims is still refused in so many words.
  const short = binaryBody(head, i32(3, 4));
  fails(
    short.body,
    short.headerLength,
    `${WHERE}: input 'B' claims 4 bytes of binary data but only 0 remain`,
  );
  const long = binaryBody(head, i32(3, 4), f32(1), f32(2));
  fails(
    long.body,
    long.headerLength,
    `${WHERE}: the body has 16 bytes of binary data but the inputs claim 12`,
  );
});

Deno.test("a binary request with BYTES inputs is decoded in full each time", () => {
  const head = {
    inputs: [
      { name: "A", datatype: "INT32", shape: [1], parameters: { binary_data_size: 4 } },
      { name: "S", datatype: "BYTES", shape: [1], parameters: { binary_data_size: 6 } },
    ],
  };
  const bytes = (s: string) => {
    const b = new Uint8Array(4 + s.length);
    new DataView(b.buffer).setUint32(0, s.length, true);
    b.set(utf8Encode(s), 4);
    return b;
  };
  const ok = binaryBody(head, i32(1), bytes("hi"));
  decodeInferRequest(ok.body, ok.headerLength, TARGET);
  // The same JSON part with BYTES elements of other lengths: the elements are checked again.
  const bad = binaryBody(head, i32(1), bytes("h"), new Uint8Array(1));
  fails(
    bad.body,
    bad.headerLength,
    "Cannot read input 'S': unexpected number of string elements 2 for inference input 'S' for model 'simple', expecting 1",
  );
});
