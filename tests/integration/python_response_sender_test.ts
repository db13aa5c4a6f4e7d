/**
 * The response sender of a Python model that is not decoupled: the request's one response goes through
 * `request.get_response_sender()` instead of execute's list (execute returns None, or None in the request's
 * place), with the final flag alongside or after it, also from a thread after execute returned (the answer waits
 * for it); a second response, a final flag before the response and a request left with no sender are errors.
 * @module
 */

import assert from "node:assert/strict";
import { type Answer, get, inferJson } from "./_http.ts";
import { servePythonModels } from "./_python.ts";

const MODEL = `import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def later(sender, response):
    time.sleep(0.05)
    sender.send(response, FINAL)


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            v = int(pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().reshape(-1)[0])
            shape = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy().shape
            resp = pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.full(shape, v * 10, np.int32))])
            s = r.get_response_sender
            mode = v % 10
            if v >= 1000:
                # Sent from a thread of the model's after execute returns: the answer waits for it.
                threading.Thread(target=later, args=(s(), resp)).start()
                out.append(None)
            elif mode == 0:
                s().send(resp, FINAL)
                out.append(None)
            elif mode == 1:
                s().send(resp)
                s().send(flags=FINAL)
                out.append(None)
            elif mode == 2:
                s().send(resp)
                out.append(None)
            elif mode == 3:
                # No sender taken: nothing can answer the request.
                out.append(None)
            elif mode == 5:
                s().send(flags=FINAL)
            elif mode == 6:
                s().send(resp)
                s().send(resp, FINAL)
            elif mode == 8:
                s().send(resp, FINAL)
                s().send(resp)
            elif mode == 4:
                # Kept open past this call, answered through the list.
                self.kept = s()
                out.append(resp)
            elif mode == 9:
                try:
                    self.kept.send(resp, FINAL)
                    out.append(resp)
                except pb_utils.TritonModelException as e:
                    out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(e.message())))
            else:
                out.append(resp)
        # A call whose requests all went through their senders may return None instead of a list.
        return None if 100 <= v < 1000 else out
`;

const SINGLE = `name: "sender_py"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
`;

const BATCHED = `name: "sender_batch_py"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds: 2000000 }
`;

function request(v: number, batched = false) {
  return { inputs: [{ name: "INPUT0", datatype: "INT32", shape: batched ? [1, 1] : [1], data: [v] }] };
}

function value(a: Answer): unknown {
  assert.equal(a.status, 200, JSON.stringify(a.json));
  const [out] = (a.json as { outputs: { name: string; data: unknown[] }[] }).outputs;
  assert.equal(out!.name, "OUTPUT0");
  return out!.data[0];
}

function error(a: Answer): unknown {
  assert.equal(a.status, 500, JSON.stringify(a.json));
  return (a.json as { error: string }).error;
}

Deno.test("a model that is not decoupled answers through its requests' response senders", async () => {
  await servePythonModels([["sender_py", SINGLE, MODEL], ["sender_batch_py", BATCHED, MODEL]], async (s) => {
    const infer = (v: number) => inferJson(s.url, "sender_py", request(v));
    const fails = (what: string) =>
      `Cannot run 'sender_py' instance 'sender_py_0': TritonModelException: ${what}`;
    // The response with the final flag, then None in the list, or execute returning None.
    assert.equal(value(await infer(10)), 100);
    assert.equal(value(await infer(100)), 1000);
    // The final flag alone after the response.
    assert.equal(value(await infer(11)), 110);
    assert.equal(value(await infer(101)), 1010);
    // The response without the final flag: a model that is not decoupled has no more to send.
    assert.equal(value(await infer(12)), 120);
    // A response in execute's list.
    assert.equal(value(await infer(17)), 170);
    // Errors of the model's: the stub keeps serving after each.
    assert.equal(error(await infer(13)), fails("execute returned NoneType, not an InferenceResponse"));
    assert.equal(error(await infer(103)), fails("execute returned None responses for 1 requests"));
    // Triton's words.
    const unable = "Unable to send response. ";
    assert.equal(
      error(await infer(15)),
      fails(`${unable}Non-decoupled model cannot send complete final before sending a response.`),
    );
    assert.equal(
      error(await infer(16)),
      fails(`${unable}Non-decoupled model cannot send more than one response.`),
    );
    assert.equal(
      error(await infer(18)),
      fails(`${unable}Response sender has been closed.`),
    );
    // A second response through the sender of a request answered in execute's list, in a later call.
    assert.equal(value(await infer(14)), 140);
    assert.equal(error(await infer(19)), `${unable}Non-decoupled model cannot send more than one response.`);
    assert.equal(value(await infer(20)), 200);
    // Sent from a thread after execute returned: the answer waits for it.
    assert.equal(value(await infer(1000)), 10000);

    // One execute call of eight requests, some answered through their senders and the others in the list.
    const values = [30, 31, 32, 37, 1040, 47, 41, 57];
    const answers = await Promise.all(
      values.map((v) => inferJson(s.url, "sender_batch_py", request(v, true))),
    );
    assert.deepEqual(answers.map(value), values.map((v) => v * 10));
    const stats = (await get(s.url, "/v2/models/sender_batch_py/stats")).json as {
      model_stats: { inference_count: number; execution_count: number }[];
    };
    assert.deepEqual(
      [stats.model_stats[0]!.inference_count, stats.model_stats[0]!.execution_count],
      [8, 1],
    );

    // A call where one request went through its sender and the other got neither a sender nor a response: the
    // call fails, both requests with it (their order in the call is their arrival's).
    const failed = await Promise.all(
      [50, 53].map((v) => inferJson(s.url, "sender_batch_py", request(v, true))),
    );
    for (const a of failed) {
      assert.match(
        String(error(a)),
        /^Cannot run 'sender_batch_py' instance 'sender_batch_py_0': TritonModelException: request [01] has no response: execute returned None for it and took no response sender$/,
      );
    }
  });
});
