import { assertEquals, assertThrows } from "../assert.ts";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { bytesOf, utf8Encode } from "../../server/core/dtypes.ts";
import { ServerError } from "../../server/core/errors.ts";
import { lookupType } from "../../server/core/protos.ts";
import type { InferResponse } from "../../server/core/types.ts";
import {
  decodeModelInferRequest,
  encodeModelInferResponse,
  fromInferParameters,
  longToNumber,
  type ModelInferRequestMessage,
  toInferParameters,
} from "../../server/frontends/grpc/infer_codec.ts";
import type { ShmLocation } from "../../server/shm/regions.ts";

const WHERE = "Cannot read the inference request for 'simple'";

const i32 = (...v: number[]) => bytesOf(new Int32Array(v));
const f32 = (...v: number[]) => bytesOf(new Float32Array(v));

/** A request message as protobufjs decodes it from the wire (Longs, oneof getters and all). */
function fromWire(fields: Record<string, unknown>): ModelInferRequestMessage {
  const type = lookupType("ModelInferRequest");
  const bytes = type.encode(type.fromObject({ model_name: "simple", ...fields })).finish();
  return type.decode(bytes) as unknown as ModelInferRequestMessage;
}

/** A request message as a plain object, for what the wire cannot carry or protobufjs would refuse. */
function plain(
  inputs: ModelInferRequestMessage["inputs"],
  raw: Uint8Array[] = [],
  outputs: ModelInferRequestMessage["outputs"] = [],
): ModelInferRequestMessage {
  return { model_name: "simple", model_version: "", id: "", inputs, outputs, raw_input_contents: raw };
}

function fails(msg: ModelInferRequestMessage, message: string): void {
  assertThrows(() => decodeModelInferRequest(msg), ServerError, { code: "INVALID_ARG", message });
}

Deno.test("longToNumber takes numbers, Longs and anything with a decimal toString", () => {
  assertEquals(longToNumber(-7), -7);
  assertEquals(longToNumber({ toNumber: () => 42, toString: () => "42" }), 42);
  assertEquals(longToNumber({ toString: () => "9007199254740991" }), 9007199254740991);
});

Deno.test("gRPC parameters decode by their oneof: int64 and uint64 as numbers when exact, else bigint", () => {
  const type = lookupType("ModelInferRequest");
  const msg = type.decode(
    type.encode(type.fromObject({
      parameters: {
        flag: { bool_param: true },
        tag: { string_param: "x" },
        ratio: { double_param: 0.25 },
        priority: { int64_param: 3 },
        negative: { int64_param: "-5" },
        big: { int64_param: "-9223372036854775808" },
        huge: { uint64_param: "18446744073709551615" },
        exact: { uint64_param: "9007199254740991" },
      },
    })).finish(),
  ) as unknown as ModelInferRequestMessage;
  assertEquals(fromInferParameters(msg.parameters), {
    flag: true,
    tag: "x",
    ratio: 0.25,
    priority: 3,
    negative: -5,
    big: -9223372036854775808n,
    huge: 18446744073709551615n,
    exact: 9007199254740991,
  });
  assertEquals(fromInferParameters(undefined), {});
  // A parameter with no value set (an empty InferParameter) is left out.
  assertEquals(fromInferParameters({ empty: {} }), {});
});

Deno.test("core parameters encode as bool, string, int64, double, and uint64 beyond int64's range", () => {
  assertEquals(
    toInferParameters({
      flag: false,
      tag: "",
      count: 5,
      negative: -1,
      ratio: 1.5,
      large: 2n ** 62n,
      beyond: 2n ** 63n,
      smallest: -(2n ** 63n),
    }),
    {
      flag: { bool_param: false },
      tag: { string_param: "" },
      count: { int64_param: 5 },
      negative: { int64_param: -1 },
      ratio: { double_param: 1.5 },
      large: { int64_param: "4611686018427387904" },
      beyond: { uint64_param: "9223372036854775808" },
      smallest: { int64_param: "-9223372036854775808" },
    },
  );
});

Deno.test("a request from the wire decodes raw contents, id, version, parameters and outputs", () => {
  const raw0 = i32(1, 2, 3, -4);
  const raw1 = BytesTensor.of([utf8Encode("ab"), utf8Encode("")]).data;
  const req = decodeModelInferRequest(fromWire({
    model_version: "2",
    id: "req-1",
    parameters: { priority: { int64_param: 2 }, sequence_start: { bool_param: true } },
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 4] },
      { name: "TEXT", datatype: "BYTES", shape: [2] },
    ],
    outputs: [
      { name: "OUTPUT0" },
      { name: "OUTPUT1", parameters: { classification: { int64_param: 2 } } },
    ],
    raw_input_contents: [raw0, raw1],
  }));
  assertEquals(req.model, "simple");
  assertEquals(req.version, "2");
  assertEquals(req.id, "req-1");
  assertEquals(req.parameters, { priority: 2, sequence_start: true });
  assertEquals(req.inputs.map((t) => [t.name, t.datatype, t.shape]), [
    ["INPUT0", "INT32", [1, 4]],
    ["TEXT", "BYTES", [2]],
  ]);
  assertEquals(Array.from(new Int32Array(new Uint8Array(req.inputs[0]!.data as Uint8Array).buffer)), [
    1,
    2,
    3,
    -4,
  ]);
  assertEquals((req.inputs[1]!.data as BytesTensor).strings(), ["ab", ""]);
  assertEquals(req.outputs, [
    { name: "OUTPUT0", classification: 0, parameters: {} },
    { name: "OUTPUT1", classification: 2, parameters: { classification: 2 } },
  ]);
});

Deno.test("a request from the wire decodes every typed contents field into the datatype's bytes", () => {
  const req = decodeModelInferRequest(fromWire({
    inputs: [
      { name: "B", datatype: "BOOL", shape: [3], contents: { bool_contents: [true, false, true] } },
      { name: "I8", datatype: "INT8", shape: [2], contents: { int_contents: [-128, 127] } },
      { name: "U16", datatype: "UINT16", shape: [2], contents: { uint_contents: [0, 65535] } },
      { name: "I32", datatype: "INT32", shape: [2], contents: { int_contents: [-2147483648, 7] } },
      {
        name: "I64",
        datatype: "INT64",
        shape: [2],
        contents: { int64_contents: ["-9223372036854775808", "9223372036854775807"] },
      },
      {
        name: "U64",
        datatype: "UINT64",
        shape: [1],
        contents: { uint64_contents: ["18446744073709551615"] },
      },
      { name: "F32", datatype: "FP32", shape: [2], contents: { fp32_contents: [0.5, -2] } },
      { name: "F64", datatype: "FP64", shape: [1], contents: { fp64_contents: [0.1] } },
      {
        name: "S",
        datatype: "BYTES",
        shape: [2],
        contents: { bytes_contents: [utf8Encode("hi"), new Uint8Array(0)] },
      },
    ],
  }));
  const data = Object.fromEntries(req.inputs.map((t) => [t.name, t.data]));
  assertEquals(data.B, new Uint8Array([1, 0, 1]));
  assertEquals(data.I8, bytesOf(new Int8Array([-128, 127])));
  assertEquals(data.U16, bytesOf(new Uint16Array([0, 65535])));
  assertEquals(data.I32, i32(-2147483648, 7));
  assertEquals(data.I64, bytesOf(new BigInt64Array([-(2n ** 63n), 2n ** 63n - 1n])));
  assertEquals(data.U64, bytesOf(new BigUint64Array([2n ** 64n - 1n])));
  assertEquals(data.F32, f32(0.5, -2));
  assertEquals(data.F64, bytesOf(new Float64Array([0.1])));
  assertEquals((data.S as BytesTensor).strings(), ["hi", ""]);
});

Deno.test("an input of zero elements needs no contents", () => {
  const req = decodeModelInferRequest(plain([
    { name: "EMPTY", datatype: "FP32", shape: [0, 4] },
    { name: "NONE", datatype: "BYTES", shape: [0] },
  ]));
  assertEquals(req.inputs.map((t) => t.data), [new Uint8Array(0), BytesTensor.of([])]);
});

Deno.test("a response encodes its outputs as raw_output_contents, BYTES serialized, and survives the wire", () => {
  const response: InferResponse = {
    model: "simple",
    version: "1",
    id: "r",
    outputs: [
      { name: "OUTPUT0", datatype: "INT32", shape: [1, 2], data: i32(5, -6) },
      { name: "TEXT", datatype: "BYTES", shape: [1], data: BytesTensor.of([utf8Encode("yes")]) },
    ],
    parameters: { sequence_end: true, count: 2 },
  };
  const encoded = encodeModelInferResponse(response);
  assertEquals(encoded, {
    model_name: "simple",
    model_version: "1",
    id: "r",
    parameters: { sequence_end: { bool_param: true }, count: { int64_param: 2 } },
    outputs: [
      { name: "OUTPUT0", datatype: "INT32", shape: [1, 2] },
      { name: "TEXT", datatype: "BYTES", shape: [1] },
    ],
    raw_output_contents: [i32(5, -6), new Uint8Array([3, 0, 0, 0, 121, 101, 115])],
  });
  const type = lookupType("ModelInferResponse");
  const back = type.toObject(type.decode(type.encode(type.fromObject(encoded)).finish()), {
    longs: Number,
    bytes: Array,
    oneofs: false,
  });
  assertEquals(back, {
    model_name: "simple",
    model_version: "1",
    id: "r",
    parameters: { sequence_end: { bool_param: true }, count: { int64_param: 2 } },
    outputs: [
      { name: "OUTPUT0", datatype: "INT32", shape: [1, 2] },
      { name: "TEXT", datatype: "BYTES", shape: [1] },
    ],
    raw_output_contents: [[5, 0, 0, 0, 250, 255, 255, 255], [3, 0, 0, 0, 121, 101, 115]],
  });
});

Deno.test("a response leaves the raw contents of outputs written to shared memory empty and names the region", () => {
  const encoded = encodeModelInferResponse(
    {
      model: "simple",
      version: "1",
      id: "",
      outputs: [
        { name: "OUTPUT0", datatype: "INT32", shape: [2], data: i32(1, 2) },
        { name: "OUTPUT1", datatype: "INT32", shape: [2], data: i32(3, 4) },
      ],
      parameters: {},
    },
    new Map([["OUTPUT1", { shared_memory_region: "out", shared_memory_byte_size: 8 }]]),
  );
  assertEquals(encoded.outputs, [
    { name: "OUTPUT0", datatype: "INT32", shape: [2] },
    {
      name: "OUTPUT1",
      datatype: "INT32",
      shape: [2],
      parameters: {
        shared_memory_region: { string_param: "out" },
        shared_memory_byte_size: { int64_param: 8 },
      },
    },
  ]);
  assertEquals(encoded.raw_output_contents, [i32(1, 2), new Uint8Array(0)]);
});

Deno.test("inputs in shared memory are read through the reader and take no raw_input_contents entry", () => {
  const reads: unknown[] = [];
  const reader = (loc: ShmLocation, datatype: string, shape: number[], what: string) => {
    reads.push({ loc, datatype, shape, what });
    return i32(9, 8);
  };
  const req = decodeModelInferRequest(
    fromWire({
      inputs: [
        {
          name: "INPUT0",
          datatype: "INT32",
          shape: [2],
          parameters: {
            shared_memory_region: { string_param: "in" },
            shared_memory_byte_size: { int64_param: 8 },
            shared_memory_offset: { int64_param: 16 },
          },
        },
        { name: "INPUT1", datatype: "INT32", shape: [2] },
      ],
      raw_input_contents: [i32(1, 2)],
    }),
    reader,
  );
  assertEquals(reads, [{
    loc: { region: "in", offset: 16, byteSize: 8 },
    datatype: "INT32",
    shape: [2],
    what: "the inference request for 'simple', input 'INPUT0'",
  }]);
  // protobufjs hands bytes fields over as Buffers: compared as plain bytes.
  assertEquals(req.inputs.map((t) => new Uint8Array(t.data as Uint8Array)), [i32(9, 8), i32(1, 2)]);
});

Deno.test("shared-memory inputs are refused without a reader, with typed contents, or with bad parameters", () => {
  const shmParams = {
    shared_memory_region: { string_param: "in", parameter_choice: "string_param" },
    shared_memory_byte_size: { int64_param: 8, parameter_choice: "int64_param" },
  };
  fails(
    plain([{ name: "INPUT0", datatype: "INT32", shape: [2], parameters: shmParams }]),
    `${WHERE}: input 'INPUT0' names shared memory, which this endpoint does not read`,
  );
  fails(
    plain([{
      name: "INPUT0",
      datatype: "INT32",
      shape: [2],
      parameters: shmParams,
      contents: { int_contents: [1, 2] },
    }]),
    `${WHERE}: input 'INPUT0' has both shared memory and typed contents`,
  );
  fails(
    plain([{
      name: "INPUT0",
      datatype: "INT32",
      shape: [2],
      parameters: { shared_memory_region: { string_param: "in", parameter_choice: "string_param" } },
    }]),
    "Cannot read the inference request for 'simple', input 'INPUT0': 'shared_memory_byte_size' is missing",
  );
});

Deno.test("malformed inputs are refused with the input and the reason", () => {
  fails(
    plain([{ name: "X", datatype: "INT3", shape: [1], contents: { int_contents: [1] } }]),
    `${WHERE}: input 'X' has unknown datatype 'INT3'`,
  );
  fails(
    plain([{ name: "X", datatype: "INT32", shape: [-1, 2], contents: { int_contents: [1, 2] } }]),
    `${WHERE}: input 'X' has shape [-1,2], dims must be non-negative`,
  );
  fails(
    plain([{ name: "X", datatype: "INT32", shape: [2] }]),
    `${WHERE}: input 'X' has no contents and there are no raw_input_contents`,
  );
});

Deno.test("raw contents must come one per input, and not beside typed contents", () => {
  fails(
    plain(
      [{ name: "A", datatype: "INT32", shape: [1] }, { name: "B", datatype: "INT32", shape: [1] }],
      [i32(1)],
    ),
    `${WHERE}: raw_input_contents has 1 entries for 2 inputs; when raw contents are used every input must have one`,
  );
  // A size that does not fit the shape is validation's to refuse: the codec hands the bytes on.
  assertEquals(
    decodeModelInferRequest(plain([{ name: "A", datatype: "FP32", shape: [2, 2] }], [f32(1, 2, 3)]))
      .inputs[0]!
      .data,
    f32(1, 2, 3),
  );
  fails(
    plain([{ name: "A", datatype: "INT32", shape: [1], contents: { int_contents: [1] } }], [i32(1)]),
    `${WHERE}: input 'A' has both typed contents and raw_input_contents`,
  );
  fails(
    plain([{ name: "S", datatype: "BYTES", shape: [2] }], [BytesTensor.of([utf8Encode("a")]).data]),
    "Cannot read the inference request for 'simple', input 'S': expected 2 string elements for inference input 'S' for model 'simple', got 1",
  );
});

Deno.test("typed contents must use the datatype's field, with one value per element, in range", () => {
  fails(
    plain([{ name: "H", datatype: "FP16", shape: [1], contents: { fp32_contents: [1] } }]),
    "Cannot read the inference request for 'simple', input 'H': datatype FP16 has no typed contents field, send it in raw_input_contents",
  );
  fails(
    plain([{ name: "X", datatype: "INT32", shape: [1], contents: { fp32_contents: [1] } }]),
    "Cannot read the inference request for 'simple', input 'X': datatype INT32 takes 'int_contents', but 'fp32_contents' is set",
  );
  fails(
    plain([{ name: "X", datatype: "INT32", shape: [2, 2], contents: { int_contents: [1, 2, 3] } }]),
    "Cannot read the inference request for 'simple', input 'X': 'int_contents' has 3 elements, expected 4",
  );
  fails(
    plain([{ name: "X", datatype: "INT8", shape: [1], contents: { int_contents: [300] } }]),
    "Cannot read the inference request for 'simple', input 'X': element 0 is 300, expected an integer in [-128, 127] for INT8",
  );
});

Deno.test("an output's classification is handed on as a number, NaN when it is none", () => {
  const asked = [
    { int64_param: -1, parameter_choice: "int64_param" },
    { string_param: "2", parameter_choice: "string_param" },
    { int64_param: 3, parameter_choice: "int64_param" },
  ].map((classification) =>
    decodeModelInferRequest(plain([], [], [{ name: "OUT", parameters: { classification } }])).outputs[0]!
      .classification
  );
  assertEquals(asked, [-1, NaN, 3]);
});
