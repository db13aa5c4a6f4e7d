/**
 * Habits of Python models written for Triton that dinfer must take as Triton 2.51 does: outputs whose numpy
 * datatype differs from the config's (numpy's defaults, int64 and float64) answer with the model's datatype, and
 * a BLS request takes its model's name as bytes (read from a BYTES input), as Triton's own bls example does. A
 * model may declare no inputs, and it sees the command line of Triton's embedded interpreter, `[""]` (Triton's
 * own test models run `unittest.main()` inside `execute`).
 * @module
 */

import assert from "node:assert/strict";
import { binaryOutputs, inferJson } from "./_http.ts";
import { servePythonModels } from "./_python.ts";

const DTYPES_CONFIG = `name: "dtypes_py"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "F" data_type: TYPE_FP32 dims: [ 2 ] }
]
`;

const DTYPES_MODEL = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            v = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0])
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([v * 2])),
                pb_utils.Tensor("F", np.array([1.5, v + 0.25])),
            ]))
        return out
`;

const CALLER_CONFIG = `name: "caller_py"
backend: "python"
max_batch_size: 0
input [ { name: "MODEL_NAME" data_type: TYPE_STRING dims: [ 1 ] }, { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT64 dims: [ 1 ] } ]
`;

const CALLER_MODEL = `import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            name = pb_utils.get_input_tensor_by_name(r, "MODEL_NAME").as_numpy()[0]
            call = pb_utils.InferenceRequest(
                model_name=name,
                requested_output_names=[b"OUT"],
                inputs=[pb_utils.get_input_tensor_by_name(r, "IN")],
            )
            answer = call.exec()
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
            out.append(pb_utils.InferenceResponse([pb_utils.get_output_tensor_by_name(answer, "OUT")]))
        return out
`;

Deno.test("Python models answer with their outputs' own datatypes and call BLS models named in bytes", async () => {
  await servePythonModels([["dtypes_py", DTYPES_CONFIG, DTYPES_MODEL], [
    "caller_py",
    CALLER_CONFIG,
    CALLER_MODEL,
  ]], async (s) => {
    const input = { name: "IN", datatype: "INT32", shape: [1], data: [3] };

    const json = await inferJson(s.url, "dtypes_py", { inputs: [input] });
    assert.equal(json.status, 200, JSON.stringify(json.json));
    assert.deepEqual((json.json as { outputs: unknown[] }).outputs, [
      { name: "OUT", datatype: "INT64", shape: [1], data: [6] },
      { name: "F", datatype: "FP64", shape: [2], data: [1.5, 3.25] },
    ]);
    const binary = await inferJson(s.url, "dtypes_py", {
      inputs: [input],
      outputs: [{ name: "OUT", parameters: { binary_data: true } }],
    });
    assert.equal(binary.status, 200);
    assert.deepEqual((binary.json as { outputs: unknown[] }).outputs, [
      { name: "OUT", datatype: "INT64", shape: [1], parameters: { binary_data_size: 8 } },
    ]);
    const raw = binaryOutputs(binary).get("OUT")!;
    assert.deepEqual([...new BigInt64Array(raw.slice().buffer)], [6n]);

    const called = await inferJson(s.url, "caller_py", {
      inputs: [{ name: "MODEL_NAME", datatype: "BYTES", shape: [1], data: ["dtypes_py"] }, input],
    });
    assert.equal(called.status, 200, JSON.stringify(called.json));
    assert.deepEqual((called.json as { outputs: unknown[] }).outputs, [
      { name: "OUT", datatype: "INT64", shape: [1], data: [6] },
    ]);
  });
});

const ARGV_CONFIG = `name: "argv_py"
backend: "python"
max_batch_size: 0
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
`;

const ARGV_MODEL = `import sys
import unittest

import numpy as np
import triton_python_backend_utils as pb_utils


class Case(unittest.TestCase):
    def test_nothing(self):
        pass


class TritonPythonModel:
    def execute(self, requests):
        # unittest.main reads sys.argv: with the stub's own arguments it would look for tests named by them.
        run = unittest.main("model", exit=False, argv=None).result
        text = f"{sys.argv!r} {run.testsRun} {run.wasSuccessful()}"
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([text], dtype=object))]) for _ in requests]
`;

Deno.test("a Python model may take no inputs, and sees the command line of Triton's stub", async () => {
  await servePythonModels([["argv_py", ARGV_CONFIG, ARGV_MODEL]], async (s) => {
    const a = await inferJson(s.url, "argv_py", { inputs: [] });
    assert.equal(a.status, 200, JSON.stringify(a.json));
    assert.deepEqual((a.json as { outputs: unknown[] }).outputs, [
      { name: "OUT", datatype: "BYTES", shape: [1], data: ["[''] 1 True"] },
    ]);
  });
});
