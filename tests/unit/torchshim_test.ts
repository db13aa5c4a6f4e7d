/**
 * libtorchshim through its bindings (ffi/torchshim.ts): signatures, forward on each argument kind, and the
 * errors that cross the C ABI. Needs the library `./dinfer` builds against .venv-torch (build/torchshim).
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { TorchShim, torchShimPath } from "../../ffi/torchshim.ts";
import type { Tensor } from "../../server/core/types.ts";

const MODELS = fileURLToPath(new URL("../fixtures/pytorch_models", import.meta.url));

function fp32(name: string, shape: number[], values: number[]): Tensor {
  return { name, datatype: "FP32", shape, data: new Uint8Array(Float32Array.from(values).buffer) };
}

function floats(data: Uint8Array): number[] {
  return Array.from(new Float32Array(data.slice().buffer));
}

Deno.test("libtorchshim describes forward's arguments", () => {
  const shim = TorchShim.open(torchShimPath({}));
  const addSub = shim.load(`${MODELS}/add_sub_pt/1/model.pt`, "cpu");
  const dict = shim.load(`${MODELS}/dict_pt/1/model.pt`, "cpu");
  try {
    assert.deepEqual(addSub.signature(), [
      { name: "a", kind: "tensor", type: "Tensor" },
      { name: "b", kind: "tensor", type: "Tensor" },
    ]);
    assert.deepEqual(dict.signature(), [{ name: "inputs", kind: "dict", type: "Dict(str, Tensor)" }]);
  } finally {
    addSub.close();
    dict.close();
  }
});

Deno.test("libtorchshim runs forward on positional and dictionary inputs and returns each tuple element", async () => {
  const shim = TorchShim.open(torchShimPath({}));
  const addSub = shim.load(`${MODELS}/add_sub_pt/1/model.pt`, "cpu", { optimized: true, intraThreads: 1 });
  const dict = shim.load(`${MODELS}/dict_pt/1/model.pt`, "cpu");
  try {
    const out = await addSub.forward(
      [fp32("a", [1, 2], [1, 2]), fp32("b", [1, 2], [10, 20])],
      undefined,
      true,
    );
    assert.deepEqual(out.map((o) => ({ ...o, data: floats(o.data) })), [
      { datatype: "FP32", shape: [1, 2], data: [11, 22] },
      { datatype: "FP32", shape: [1, 2], data: [-9, -18] },
    ]);
    const d = await dict.forward(
      [fp32("value", [1, 3], [1, 2, 3]), fp32("scale", [1, 3], [3, 3, 3])],
      ["value", "scale"],
      false,
    );
    assert.deepEqual(d.map((o) => ({ ...o, data: floats(o.data) })), [
      { datatype: "FP32", shape: [1, 3], data: [3, 6, 9] },
    ]);
  } finally {
    addSub.close();
    dict.close();
  }
});

Deno.test("libtorchshim reports load and forward failures with torch's reason", async () => {
  const shim = TorchShim.open(torchShimPath({}));
  assert.throws(
    () => shim.load(`${MODELS}/bad_model_pt/1/model.pt`, "cpu"),
    { message: "PytorchStreamReader failed reading zip archive: failed finding central directory" },
  );
  const checked = shim.load(`${MODELS}/checked_pt/1/model.pt`, "cpu");
  try {
    await assert.rejects(
      checked.forward([fp32("INPUT__0", [1, 1], [-1])], undefined, true),
      { message: "builtins.ValueError: negative input" },
    );
    const ok = await checked.forward([fp32("INPUT__0", [1, 2], [9, 16])], undefined, true);
    assert.deepEqual(floats(ok[0]!.data), [3, 4]);
  } finally {
    checked.close();
  }
  await assert.rejects(checked.forward([fp32("INPUT__0", [1], [1])], undefined, true), {
    message: "Cannot use a TorchScript module: it is closed",
  });
});
