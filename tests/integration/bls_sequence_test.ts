/**
 * A Python model's BLS calls to a sequence model carry their correlation id and start and end flags, as Triton's
 * python backend passes them: simple_sequence (an accumulator) sums within the sequence the calls name.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { EXAMPLES, pythonPath, startTestServer } from "../helpers.ts";
import { copyDir, inferJson, outputsOf } from "./_http.ts";
import { writePythonModel } from "./_python.ts";

const MODEL = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Adds VALUE to sequence SEQ of simple_sequence through BLS; FLAGS are the request flags (1 start, 2 end)."""

    def execute(self, requests):
        out = []
        for r in requests:
            seq = int(pb_utils.get_input_tensor_by_name(r, "SEQ").as_numpy()[0])
            flags = int(pb_utils.get_input_tensor_by_name(r, "FLAGS").as_numpy()[0])
            value = pb_utils.get_input_tensor_by_name(r, "VALUE").as_numpy().reshape(1, 1)
            answer = pb_utils.InferenceRequest(
                model_name="simple_sequence",
                inputs=[pb_utils.Tensor("INPUT", value.astype(np.int32))],
                requested_output_names=["OUTPUT"],
                correlation_id=seq,
                flags=flags,
            ).exec()
            if answer.has_error():
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT").as_numpy().reshape(1)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total.astype(np.int32))]))
        return out
`;

/** Passes its own request's correlation id and flags on to simple_sequence, and answers the sum and the id's type. */
const PASS_MODEL = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            value = pb_utils.get_input_tensor_by_name(r, "VALUE").as_numpy().reshape(1, 1)
            answer = pb_utils.InferenceRequest(
                model_name="simple_sequence",
                inputs=[pb_utils.Tensor("INPUT", value.astype(np.int32))],
                requested_output_names=["OUTPUT"],
                correlation_id=r.correlation_id(),
                flags=r.flags(),
            ).exec()
            if answer.has_error():
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT").as_numpy().reshape(1)
            kind = np.array([type(r.correlation_id()).__name__.encode()], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUM", total.astype(np.int32)), pb_utils.Tensor("KIND", kind)]))
        return out
`;

const PASS_CONFIG = `name: "bls_pass_py"
backend: "python"
max_batch_size: 0
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "KIND" data_type: TYPE_STRING dims: [ 1 ] } ]
`;

/** Calls echo_py through BLS with its own request's parameters, and answers echo_py's view of them. */
const PARAMS_MODEL = `import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            answer = pb_utils.InferenceRequest(
                model_name="echo_py",
                inputs=[pb_utils.Tensor("text_input", np.array([b"x"], dtype=np.object_))],
                requested_output_names=["params"],
                parameters=json.loads(r.parameters()),
            ).exec()
            if answer.has_error():
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.error().message())))
                continue
            out.append(pb_utils.InferenceResponse([pb_utils.get_output_tensor_by_name(answer, "params")]))
        return out
`;

const PARAMS_CONFIG = `name: "bls_params_py"
backend: "python"
max_batch_size: 0
input [ { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "params" data_type: TYPE_STRING dims: [ 1 ] } ]
`;

const CONFIG = `name: "bls_seq_py"
backend: "python"
max_batch_size: 0
input [
  { name: "SEQ" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "VALUE" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] } ]
`;

/** POSTs a JSON body (as text: its integers exact) to a model; the data of each output. */
async function call2(url: string, body: string, model: string): Promise<unknown[]> {
  const r = await fetch(`${url}/v2/models/${model}/infer`, { method: "POST", body });
  const json = await r.json();
  assert.equal(r.status, 200, JSON.stringify(json));
  return (json.outputs as { data: unknown[] }[]).map((o) => o.data[0]);
}

Deno.test("BLS calls to a sequence model carry their correlation id and flags", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-bls-seq-" });
  try {
    await copyDir(`${EXAMPLES}/simple_sequence`, `${repo}/simple_sequence`);
    await writePythonModel(repo, "bls_seq_py", CONFIG, MODEL);
    await writePythonModel(repo, "bls_params_py", PARAMS_CONFIG, PARAMS_MODEL);
    await copyDir(
      fileURLToPath(new URL("../fixtures/generate_models/echo_py", import.meta.url)),
      `${repo}/echo_py`,
    );
    await writePythonModel(repo, "bls_pass_py", PASS_CONFIG, PASS_MODEL);
    await using s = await startTestServer([
      `--model-repository=${repo}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
    ]);
    const call = async (seq: number, flags: number, value: number) => {
      const a = await inferJson(s.url, "bls_seq_py", {
        inputs: [
          { name: "SEQ", datatype: "INT32", shape: [1], data: [seq] },
          { name: "FLAGS", datatype: "INT32", shape: [1], data: [flags] },
          { name: "VALUE", datatype: "INT32", shape: [1], data: [value] },
        ],
      });
      assert.equal(a.status, 200, JSON.stringify(a.json));
      return outputsOf(a)[0]!.data![0];
    };
    // Two sequences side by side: each sums its own values.
    assert.equal(await call(41, 1, 5), 5);
    assert.equal(await call(42, 1, 100), 100);
    assert.equal(await call(41, 0, 2), 7);
    assert.equal(await call(42, 2, 1), 101);
    assert.equal(await call(41, 2, 3), 10);
    // Ended: a call without START is refused by the sequence batcher, and its message comes back through BLS.
    const after = await inferJson(s.url, "bls_seq_py", {
      inputs: [
        { name: "SEQ", datatype: "INT32", shape: [1], data: [41] },
        { name: "FLAGS", datatype: "INT32", shape: [1], data: [0] },
        { name: "VALUE", datatype: "INT32", shape: [1], data: [1] },
      ],
    });
    assert.match(
      JSON.stringify(after.json),
      /sequence 41 is not active; its first request must set sequence_start/,
    );

    // A negative id is no uint64: the BLS call is refused in the model.
    const negative = await inferJson(s.url, "bls_seq_py", {
      inputs: [
        { name: "SEQ", datatype: "INT32", shape: [1], data: [-5] },
        { name: "FLAGS", datatype: "INT32", shape: [1], data: [1] },
        { name: "VALUE", datatype: "INT32", shape: [1], data: [1] },
      ],
    });
    assert.match(JSON.stringify(negative.json), /Cannot exec: correlation_id -5 is not a uint64/);

    // A uint64 id beyond 2^53 reaches the model as an int, and its BLS call names the same sequence as a client
    // that sends that id.
    const big = "1152921504606846981"; // 2^60 + 5
    const viaBls = await call2(
      s.url,
      `{"parameters":{"sequence_id":${big},"sequence_start":true},` +
        `"inputs":[{"name":"VALUE","datatype":"INT32","shape":[1],"data":[5]}]}`,
      "bls_pass_py",
    );
    assert.deepEqual(viaBls, [5, "int"]);
    const direct = await call2(
      s.url,
      `{"parameters":{"sequence_id":${big}},` +
        `"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[2]}]}`,
      "simple_sequence",
    );
    assert.deepEqual(direct, [7]);

    // Parameters beyond 2^53 keep their digits through the model and its BLS call.
    const params = await call2(
      s.url,
      `{"parameters":{"big":${big},"small":-3},` +
        `"inputs":[{"name":"VALUE","datatype":"INT32","shape":[1],"data":[1]}]}`,
      "bls_params_py",
    );
    assert.deepEqual(params, [`{"big": ${big}, "small": -3}`]);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
