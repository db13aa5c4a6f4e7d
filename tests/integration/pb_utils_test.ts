/**
 * Helpers of triton_python_backend_utils that model code calls directly, run in the Python of the compatibility
 * venv: BYTES tensors serialized and read back, TRITONSERVER_DataType numbers, the Logger's level names, and
 * Triton's names of enums and types (MetricKind, MemoryType, InferenceTrace, InferenceResponseSender,
 * ResponseIterator), and tensors through DLPack.
 * @module
 */

import assert from "node:assert/strict";
import { ROOT } from "../helpers.ts";
import { pythonJson } from "./_python.ts";

Deno.test("pb_utils: serialize_byte_tensor and deserialize_bytes_tensor, the datatype numbers, Logger levels", async () => {
  const got = await pythonJson(
    `
import json, sys
import numpy as np
sys.path.insert(0, "${ROOT}server/backends/python")
import triton_python_backend_utils as pb_utils
def err(f):
    try:
        f()
        return "no error"
    except pb_utils.TritonModelException as e:
        return str(e)
t = np.array([[b"ab", "c"], [b"", "\\u00e9"]], dtype=np.object_)
s = pb_utils.serialize_byte_tensor(t)
back = pb_utils.deserialize_bytes_tensor(s)
raw = pb_utils.deserialize_bytes_tensor(np.frombuffer(s.item(), dtype=np.uint8))
try:
    pb_utils.deserialize_bytes_tensor(b"\\x05\\x00\\x00\\x00ab")
    cut = "no error"
except pb_utils.TritonModelException as e:
    cut = e.message()
print(json.dumps({
    "serialized": list(s.item()), "shape": list(s.shape), "dtype": str(s.dtype),
    "back": [x.decode() for x in back], "raw": [x.decode() for x in raw], "cut": cut,
    "empty": list(pb_utils.serialize_byte_tensor(np.array([], dtype=np.object_)).shape),
    "types": [np.dtype(pb_utils.triton_to_numpy_type(c)).name for c in (1, 8, 11, 13)],
    "named": np.dtype(pb_utils.triton_to_numpy_type("TYPE_FP16")).name,
    "codes": [pb_utils.numpy_to_triton_type(t) for t in (np.bool_, np.uint16, np.int32, np.float16, np.float32, np.float64, np.object_, np.bytes_, np.complex64)],
    "consts": [pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, pb_utils.TRITONSERVER_MEMORY_GPU, pb_utils.TRITONSERVER_MEMORY_CPU],
    "s2n": {k: np.dtype(v).name for k, v in pb_utils.TRITON_STRING_TO_NUMPY.items()},
    "memory": vars(pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0)),
    "flags": (lambda r: (r.set_flags(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START), r.flags(), r.trace().get_context())[1:])(pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])),
    "levels": [pb_utils.Logger.INFO, pb_utils.Logger.WARNING, pb_utils.Logger.ERROR, pb_utils.Logger.VERBOSE],
    "kinds": [pb_utils.MetricKind.COUNTER, pb_utils.MetricKind.GAUGE, pb_utils.MetricKind.HISTOGRAM],
    "memoryTypes": [pb_utils.MemoryType.TRITONSERVER_MEMORY_GPU, pb_utils.MemoryType.TRITONSERVER_MEMORY_CPU],
    "traceType": type(pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[]).trace()) is pb_utils.InferenceTrace,
    "senderTypes": [issubclass(t, pb_utils.InferenceResponseSender) for t in (pb_utils.ResponseSender, pb_utils.OneResponseSender)],
    "iterator": pb_utils.ResponseIterator.__name__,
    "fromCapsule": (lambda t: [t.as_numpy().tolist(), t.triton_dtype()])(pb_utils.Tensor.from_dlpack("x", np.arange(3, dtype=np.int32).__dlpack__())),
    "fromObject": pb_utils.Tensor.from_dlpack("x", np.arange(2, dtype=np.int64)).as_numpy().tolist(),
    "protocol": np.from_dlpack(pb_utils.Tensor("y", np.arange(2, dtype=np.float32))).tolist(),
    "bf16": (lambda t: [err(t.as_numpy), (lambda u: [u.triton_dtype(), type(u).__name__, u._array.tolist()])(pb_utils.Tensor.from_dlpack("u", t.to_dlpack()))])(pb_utils.Tensor._of("b", np.array([0x3f80, 0x4000], dtype=np.uint16), "BF16")),
    "dlpackErrors": [
        err(lambda: pb_utils.Tensor.from_dlpack("t", np.arange(6, dtype=np.int32).reshape(2, 3).T.__dlpack__())),
        err(lambda: pb_utils.Tensor("s", np.array(["a"], dtype=np.object_)).to_dlpack()),
    ],
}))
`,
  );
  assert.deepEqual(got, {
    serialized: [2, 0, 0, 0, 97, 98, 1, 0, 0, 0, 99, 0, 0, 0, 0, 2, 0, 0, 0, 0xc3, 0xa9],
    shape: [],
    dtype: "object",
    back: ["ab", "c", "", "é"],
    raw: ["ab", "c", "", "é"],
    cut: "cannot deserialize bytes tensor: an element runs past the end",
    empty: [0],
    types: ["bool", "int32", "float32", "object"],
    named: "float16",
    // TRITONSERVER_DataType numbers, as Triton's numpy_to_triton_type; none for a dtype Triton has no type for.
    codes: [1, 3, 8, 10, 11, 12, 13, 13, null],
    // Triton's values.
    consts: [2, 0, 1],
    s2n: {
      TYPE_BOOL: "bool",
      TYPE_UINT8: "uint8",
      TYPE_UINT16: "uint16",
      TYPE_UINT32: "uint32",
      TYPE_UINT64: "uint64",
      TYPE_INT8: "int8",
      TYPE_INT16: "int16",
      TYPE_INT32: "int32",
      TYPE_INT64: "int64",
      TYPE_FP16: "float16",
      TYPE_FP32: "float32",
      TYPE_FP64: "float64",
      TYPE_STRING: "object",
    },
    memory: { preferred_memory_type: 1, preferred_device_id: 0 },
    flags: [1, null],
    levels: [0, 1, 2, 3],
    kinds: [0, 1, 2],
    memoryTypes: [0, 1],
    traceType: true,
    senderTypes: [true, true],
    iterator: "_ResponseIterator",
    // Tensor.from_dlpack takes a capsule (what torch.utils.dlpack.to_dlpack returns) or a protocol object, and a
    // Tensor is a protocol object itself (torch.from_dlpack(tensor)).
    fromCapsule: [[0, 1, 2], "INT32"],
    fromObject: [0, 1],
    protocol: [0, 1],
    // BF16 (no numpy type): refused by as_numpy in Triton's words, carried through DLPack as bfloat16 (1.0, 2.0).
    bf16: [
      "Tensor dtype is BF16 and cannot be converted to numpy. Use to_dlpack() and from_dlpack() instead.",
      ["BF16", "_BF16Tensor", [0x3f80, 0x4000]],
    ],
    // Triton's words for what DLPack cannot carry.
    dlpackErrors: [
      "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order are supported.",
      "DLPack does not have support for string tensors.",
    ],
  });
});
