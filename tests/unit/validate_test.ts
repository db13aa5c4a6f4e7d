import { assertEquals, assertThrows } from "../assert.ts";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { bytesOf, type Datatype, type TensorData, utf8Encode } from "../../server/core/dtypes.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { InferRequest, RequestedOutput, Tensor, TensorSpec } from "../../server/core/types.ts";
import { type ModelSignature, shapeText, validateRequest } from "../../server/core/validate.ts";

function spec(name: string, datatype: Datatype, dims: number[], optional = false): TensorSpec {
  return { name, datatype, dims, modelDims: dims, optional, labels: undefined };
}

/** A batching model like Triton's `simple`: two INT32 [16] inputs, two outputs, max_batch_size 8. */
const SIMPLE: ModelSignature = {
  name: "simple",
  maxBatchSize: 8,
  inputs: [spec("INPUT0", "INT32", [16]), spec("INPUT1", "INT32", [16])],
  outputs: [spec("OUTPUT0", "INT32", [16]), spec("OUTPUT1", "INT32", [16])],
};

/** A model without batching, with a variable dim. */
const NOBATCH: ModelSignature = {
  name: "nobatch",
  maxBatchSize: 0,
  inputs: [spec("X", "FP32", [2, -1])],
  outputs: [spec("Y", "FP32", [2, -1])],
};

const STRINGS: ModelSignature = {
  name: "strings",
  maxBatchSize: 4,
  inputs: [spec("S", "BYTES", [2])],
  outputs: [spec("T", "BYTES", [2])],
};

const OPTIONAL: ModelSignature = {
  name: "optional",
  maxBatchSize: 8,
  inputs: [spec("x", "FP32", [4]), spec("bias", "FP32", [4], true)],
  outputs: [spec("y", "FP32", [4])],
};

const ALL_OPTIONAL: ModelSignature = {
  name: "all_optional",
  maxBatchSize: 0,
  inputs: [spec("a", "FP32", [1], true)],
  outputs: [spec("b", "FP32", [1])],
};

function tensor(name: string, datatype: Datatype, shape: number[], data?: TensorData): Tensor {
  const count = shape.reduce((a, b) => a * b, 1);
  const size = datatype === "BYTES" ? 0 : datatype === "FP64" || datatype.endsWith("64") ? 8 : 4;
  return {
    name,
    datatype,
    shape,
    data: data ??
      (datatype === "BYTES"
        ? BytesTensor.of(Array.from({ length: count }, () => utf8Encode("x")))
        : new Uint8Array(count * size)),
  };
}

function request(inputs: Tensor[], outputs: RequestedOutput[] = []): InferRequest {
  return { model: "m", version: "", id: "", inputs, outputs, parameters: {} };
}

function out(name: string, classification = 0): RequestedOutput {
  return { name, classification, parameters: {} };
}

function fails(req: InferRequest, sig: ModelSignature, message: string): void {
  assertThrows(() => validateRequest(req, sig), ServerError, { code: "INVALID_ARG", message });
}

const in0 = (shape = [1, 16]) => tensor("INPUT0", "INT32", shape);
const in1 = (shape = [1, 16]) => tensor("INPUT1", "INT32", shape);

Deno.test("shapeText writes dims in brackets without spaces", () => {
  assertEquals(shapeText([1, 16]), "[1,16]");
  assertEquals(shapeText([-1, 16]), "[-1,16]");
  assertEquals(shapeText([]), "[]");
});

Deno.test("a valid batched request passes with its batch size and every output", () => {
  const req = request([in0([3, 16]), in1([3, 16])]);
  const v = validateRequest(req, SIMPLE);
  assertEquals(v.request, req);
  assertEquals(v.batchSize, 3);
  assertEquals([...v.inputs.keys()], ["INPUT0", "INPUT1"]);
  assertEquals(v.inputs.get("INPUT1"), req.inputs[1]);
  assertEquals(v.outputs, [out("OUTPUT0"), out("OUTPUT1")]);
});

Deno.test("requested outputs are kept as asked, in the request's order", () => {
  const outputs = [
    { name: "OUTPUT1", classification: 2, parameters: { binary_data: true } },
    out("OUTPUT0"),
  ];
  const v = validateRequest(request([in0(), in1()], outputs), SIMPLE);
  assertEquals(v.outputs, outputs);
});

Deno.test("inputs may come in any order", () => {
  const v = validateRequest(request([in1(), in0()]), SIMPLE);
  assertEquals(v.batchSize, 1);
});

Deno.test("an unknown input is refused, naming the model's inputs", () => {
  fails(
    request([in0(), in1(), tensor("INPUT2", "INT32", [1, 16])]),
    SIMPLE,
    "Cannot infer 'simple': unexpected inference input 'INPUT2' for model 'simple', the model's inputs are 'INPUT0', 'INPUT1'",
  );
});

Deno.test("a missing input is refused", () => {
  fails(
    request([in0()]),
    SIMPLE,
    "Cannot infer 'simple': expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], " +
      "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
  );
});

Deno.test("an input given twice is refused", () => {
  fails(
    request([in0(), in0(), in1()]),
    SIMPLE,
    "Cannot infer 'simple': input 'INPUT0' is given more than once",
  );
});

Deno.test("a request without inputs is refused unless every input is optional", () => {
  fails(
    request([]),
    SIMPLE,
    "Cannot infer 'simple': expected 2 inputs but got 0 inputs for model 'simple'. Got input(s) [], " +
      "but missing required input(s) ['INPUT0','INPUT1']. Please provide all required input(s).",
  );
  const none = validateRequest(request([]), ALL_OPTIONAL);
  assertEquals([none.batchSize, none.inputs.size], [1, 0]);
});

Deno.test("a datatype other than the config's is refused", () => {
  fails(
    request([tensor("INPUT0", "FP32", [1, 16]), in1()]),
    SIMPLE,
    "Cannot infer 'simple': inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
  );
});

Deno.test("a shape that does not match the dims is refused, with the batch dim shown as -1", () => {
  fails(
    request([in0([1, 15]), in1()]),
    SIMPLE,
    "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]",
  );
  fails(
    request([in0([16]), in1()]),
    SIMPLE,
    "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [16]",
  );
  fails(
    request([in0([1, 1, 16]), in1()]),
    SIMPLE,
    "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,1,16]",
  );
  fails(
    request([tensor("INPUT0", "INT32", [-1, 16], new Uint8Array(64)), in1()]),
    SIMPLE,
    "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [-1,16]",
  );
});

Deno.test("a batch of zero is refused", () => {
  fails(
    request([in0([0, 16]), in1([0, 16])]),
    SIMPLE,
    "Cannot infer 'simple': input 'INPUT0' has batch size 0, expected at least 1",
  );
});

Deno.test("a batch above max_batch_size is refused", () => {
  validateRequest(request([in0([8, 16]), in1([8, 16])]), SIMPLE);
  fails(
    request([in0([9, 16]), in1([9, 16])]),
    SIMPLE,
    "Cannot infer 'simple': inference request batch-size must be <= 8 for 'simple', input 'INPUT0' has 9",
  );
});

Deno.test("inputs with different batch sizes are refused", () => {
  fails(
    request([in0([1, 16]), in1([2, 16])]),
    SIMPLE,
    "Cannot infer 'simple': input 'INPUT1' batch size does not match other inputs for 'simple' (2, the others 1)",
  );
});

Deno.test("contents whose byte size does not match the shape are refused in Triton's words", () => {
  fails(
    request([tensor("INPUT0", "INT32", [1, 16], new Uint8Array(60)), in1()]),
    SIMPLE,
    "Cannot infer 'simple': input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
  );
  fails(
    request([tensor("INPUT0", "INT32", [2, 16], new Uint8Array(64)), in1([2, 16])]),
    SIMPLE,
    "Cannot infer 'simple': input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 128, got 64",
  );
});

Deno.test("fixed-size inputs given an element list are refused", () => {
  fails(
    request([tensor("INPUT0", "INT32", [1, 16], BytesTensor.of([new Uint8Array(64)])), in1()]),
    SIMPLE,
    "Cannot infer 'simple': input 'INPUT0' has no byte contents",
  );
});

Deno.test("BYTES inputs need one element per shape entry", () => {
  const v = validateRequest(request([tensor("S", "BYTES", [2, 2])]), STRINGS);
  assertEquals(v.batchSize, 2);
  fails(
    request([tensor("S", "BYTES", [1, 2], BytesTensor.of([utf8Encode("a")]))]),
    STRINGS,
    "Cannot infer 'strings': input 'S' has 1 elements, expected 2 for shape [1,2]",
  );
  fails(
    request([tensor("S", "BYTES", [1, 2], new Uint8Array(8))]),
    STRINGS,
    "Cannot infer 'strings': input 'S' of type BYTES has no element list",
  );
});

Deno.test("an unknown output is refused, naming the model's outputs", () => {
  fails(
    request([in0(), in1()], [out("OUTPUT0"), out("OUTPUT9")]),
    SIMPLE,
    "Cannot infer 'simple': unexpected inference output 'OUTPUT9' for model 'simple', the model's outputs are 'OUTPUT0', 'OUTPUT1'",
  );
});

Deno.test("an output requested twice is refused", () => {
  fails(
    request([in0(), in1()], [out("OUTPUT1"), out("OUTPUT1")]),
    SIMPLE,
    "Cannot infer 'simple': output 'OUTPUT1' is requested more than once",
  );
});

Deno.test("a negative or fractional classification count is refused", () => {
  fails(
    request([in0(), in1()], [out("OUTPUT0", -1)]),
    SIMPLE,
    "Cannot infer 'simple': output 'OUTPUT0' asks for classification -1, expected a non-negative integer",
  );
  fails(
    request([in0(), in1()], [out("OUTPUT0", 1.5)]),
    SIMPLE,
    "Cannot infer 'simple': output 'OUTPUT0' asks for classification 1.5, expected a non-negative integer",
  );
});

Deno.test("classification of a BYTES or BOOL output is refused with the request, not in its batch", () => {
  const s = tensor("S", "BYTES", [1, 2]);
  fails(
    request([s], [out("T", 1)]),
    STRINGS,
    "Cannot infer 'strings': cannot classify output 'T': datatype BYTES is not numeric",
  );
  const flags: ModelSignature = {
    name: "flags",
    maxBatchSize: 4,
    inputs: [spec("x", "FP32", [2])],
    outputs: [spec("b", "BOOL", [2]), spec("y", "FP32", [2])],
  };
  const x = tensor("x", "FP32", [1, 2]);
  fails(
    request([x], [out("b", 2)]),
    flags,
    "Cannot infer 'flags': cannot classify output 'b': datatype BOOL is not numeric",
  );
  // A numeric output beside it may be classified, and the BOOL one asked for plainly.
  assertEquals(validateRequest(request([x], [out("b"), out("y", 1)]), flags).outputs.length, 2);
});

Deno.test("an optional input may be left out, or given", () => {
  const x = tensor("x", "FP32", [2, 4]);
  const without = validateRequest(request([x]), OPTIONAL);
  assertEquals(without.batchSize, 2);
  assertEquals([...without.inputs.keys()], ["x"]);
  const withBias = validateRequest(request([x, tensor("bias", "FP32", [2, 4])]), OPTIONAL);
  assertEquals([...withBias.inputs.keys()], ["x", "bias"]);
  fails(
    request([tensor("bias", "FP32", [1, 4])]),
    OPTIONAL,
    "Cannot infer 'optional': expected number of inputs between 1 and 2 but got 1 inputs for model 'optional'. " +
      "Got input(s) ['bias'], but missing required input(s) ['x']. Please provide all required input(s).",
  );
});

Deno.test("a model without batching takes the dims as the full shape, batch size 1", () => {
  const x = tensor("X", "FP32", [2, 5], bytesOf(new Float32Array(10)));
  const v = validateRequest(request([x]), NOBATCH);
  assertEquals(v.batchSize, 1);
  assertEquals(v.outputs, [out("Y")]);
  fails(
    request([tensor("X", "FP32", [1, 2, 5])]),
    NOBATCH,
    "Cannot infer 'nobatch': unexpected shape for input 'X' for model 'nobatch'. Expected [2,-1], got [1,2,5]",
  );
  fails(
    request([tensor("X", "FP32", [3, 5])]),
    NOBATCH,
    "Cannot infer 'nobatch': unexpected shape for input 'X' for model 'nobatch'. Expected [2,-1], got [3,5]",
  );
});

Deno.test("a model without batching accepts an empty variable dim", () => {
  const v = validateRequest(request([tensor("X", "FP32", [2, 0], new Uint8Array(0))]), NOBATCH);
  assertEquals(v.batchSize, 1);
});

Deno.test("FP64 and INT64 sizes count eight bytes per element", () => {
  const sig: ModelSignature = {
    name: "wide",
    maxBatchSize: 0,
    inputs: [spec("D", "FP64", [2]), spec("L", "INT64", [1])],
    outputs: [spec("O", "FP64", [2])],
  };
  validateRequest(request([tensor("D", "FP64", [2]), tensor("L", "INT64", [1])]), sig);
  fails(
    request([tensor("D", "FP64", [2], new Uint8Array(8)), tensor("L", "INT64", [1])]),
    sig,
    "Cannot infer 'wide': input byte size mismatch for input 'D' for model 'wide'. Expected 16, got 8",
  );
});
