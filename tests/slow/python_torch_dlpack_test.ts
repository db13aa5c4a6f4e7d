/**
 * A Python model that computes with torch, as Triton's examples do: inputs to torch through DLPack, outputs back
 * with `pb_utils.Tensor.from_dlpack(name, to_dlpack(t))`, BF16 tensors too (numpy has no bfloat16), run in the
 * torch interpreter (`DINFER_TORCH_PYTHON`).
 * @module
 */

import assert from "node:assert/strict";
import { torchPythonPath } from "../helpers.ts";
import { binaryOutputs, inferBinary, inferJson } from "../integration/_http.ts";
import { servePythonModels } from "../integration/_python.ts";

const CONFIG = (python: string) =>
  `name: "torch_dlpack_py"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
parameters: { key: "python_executable" value: { string_value: ${JSON.stringify(python)} } }
`;

const MODEL = `import numpy as np
import torch
from torch.utils.dlpack import from_dlpack, to_dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            tensor = pb_utils.get_input_tensor_by_name(r, "INPUT0")
            x = from_dlpack(tensor.to_dlpack())
            # The tensor itself is a DLPack object too.
            same = torch.from_dlpack(tensor)
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor.from_dlpack("OUTPUT0", to_dlpack(torch.relu(x) * 2)),
                pb_utils.Tensor.from_dlpack("OUTPUT1", same + 1),
            ]))
        return out
`;

const BF16_CONFIG = (python: string) =>
  `name: "torch_bf16_py"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_BF16 dims: [ 2 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_BF16 dims: [ 2 ] } ]
parameters: { key: "python_executable" value: { string_value: ${JSON.stringify(python)} } }
`;

const BF16_MODEL = `import torch
from torch.utils.dlpack import from_dlpack, to_dlpack
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            tensor = pb_utils.get_input_tensor_by_name(r, "INPUT0")
            x = from_dlpack(tensor.to_dlpack())
            assert x.dtype == torch.bfloat16, x.dtype
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor.from_dlpack("OUTPUT0", to_dlpack(x * 3))]))
        return out
`;

Deno.test("a Python model computes with torch through DLPack, both ways", async () => {
  await servePythonModels([["torch_dlpack_py", CONFIG(torchPythonPath()), MODEL]], async (s) => {
    const a = await inferJson(s.url, "torch_dlpack_py", {
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [4], data: [-1, 2, -3, 4.5] }],
    });
    assert.equal(a.status, 200, JSON.stringify(a.json));
    assert.deepEqual((a.json as { outputs: unknown[] }).outputs, [
      { name: "OUTPUT0", datatype: "FP32", shape: [4], data: [0, 4, 0, 9] },
      { name: "OUTPUT1", datatype: "FP32", shape: [4], data: [0, 3, -2, 5.5] },
    ]);
  });
});

Deno.test("a Python model takes and answers BF16 tensors through DLPack and torch", async () => {
  await servePythonModels([["torch_bf16_py", BF16_CONFIG(torchPythonPath()), BF16_MODEL]], async (s) => {
    // bfloat16 1.0 and 2.0, little-endian.
    const a = await inferBinary(s.url, "torch_bf16_py", {
      inputs: [{ name: "INPUT0", datatype: "BF16", shape: [2], parameters: { binary_data_size: 4 } }],
      outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
    }, [Uint8Array.of(0x80, 0x3f, 0x00, 0x40)]);
    assert.equal(a.status, 200, JSON.stringify(a.json));
    // 3.0 and 6.0 in bfloat16.
    assert.deepEqual([...binaryOutputs(a).get("OUTPUT0")!], [0x40, 0x40, 0xc0, 0x40]);
  });
});
