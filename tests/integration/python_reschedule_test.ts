/**
 * Request rescheduling (`request.set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`): a model with
 * `sequence_batching { iterative_sequence: true }` gives a request back and it runs again, a request without a
 * correlation id being a sequence of its own (START on its first run only); each run counts in the statistics.
 * Elsewhere the request fails in Triton's words, as does a rescheduled request whose place in execute's list is
 * not None.
 * @module
 */

import assert from "node:assert/strict";
import { type Answer, get, inferJson } from "./_http.ts";
import { servePythonModels } from "./_python.ts";

/** Counts down from IN, one response per run: the request is rescheduled until it reaches 0. */
const COUNTDOWN = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            start = pb_utils.get_input_tensor_by_name(r, "START")
            first = 1 if start is None else int(start.as_numpy().reshape(-1)[0])
            if first:
                self.left = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0])
            self.left -= 1
            response = pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([self.left], np.int32)),
                pb_utils.Tensor("FIRST", np.array([first], np.int32)),
            ])
            sender = r.get_response_sender()
            if self.left > 0:
                r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(response)
            else:
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
`;

/** Answers each request on its second run (IN doubled), after giving it back on its first. */
const TWICE = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            v = int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0])
            start = pb_utils.get_input_tensor_by_name(r, "START")
            first = 1 if start is None else int(start.as_numpy().reshape(-1)[0])
            if v == 7:
                r.set_release_flags(3)
            if first and v != 9:
                r.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                # v == 8: a response where None belongs.
                out.append(None if v != 8 else pb_utils.InferenceResponse([]))
                continue
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([v * 2], np.int32))]))
        return out
`;

/** Calls twice_py and countdown_py through BLS with its input's value: the sum of what they answer. */
const CALLER = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            v = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            inputs = [pb_utils.Tensor("IN", v)]
            twice = pb_utils.InferenceRequest(model_name="twice_py", inputs=inputs, requested_output_names=["OUT"]).exec()
            if twice.has_error():
                raise pb_utils.TritonModelException(twice.error().message())
            total = int(pb_utils.get_output_tensor_by_name(twice, "OUT").as_numpy()[0])
            streamed = pb_utils.InferenceRequest(
                model_name="countdown_py", inputs=inputs, requested_output_names=["OUT"]
            ).exec(decoupled=True)
            for response in streamed:
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                left = pb_utils.get_output_tensor_by_name(response, "OUT")
                if left is not None:
                    total = total * 10 + int(left.as_numpy()[0])
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([total], np.int32))]))
        return out
`;

const IO = `input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]`;

const START =
  `control_input [ { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]`;

const config = (name: string, extra: string) =>
  `name: "${name}"
backend: "python"
max_batch_size: 0
${IO}
${extra}
`;

const COUNTDOWN_CONFIG = (name: string, sequence: boolean) =>
  config(
    name,
    `output [ { name: "FIRST" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
${sequence ? `sequence_batching { iterative_sequence: true ${START} }` : ""}`,
  );

/** The JSON objects of an SSE body's `data:` events, in order. */
function events(text: string): unknown[] {
  return text.split("\n\n").filter((e) => e !== "").map((e) => JSON.parse(e.slice("data: ".length)));
}

async function generateStream(url: string, model: string, value: number): Promise<unknown[]> {
  const r = await fetch(`${url}/v2/models/${model}/generate_stream`, {
    method: "POST",
    body: JSON.stringify({ IN: value }),
  });
  assert.equal(r.status, 200);
  return events(await r.text());
}

function value(a: Answer): unknown {
  assert.equal(a.status, 200, JSON.stringify(a.json));
  return (a.json as { outputs: { data: unknown[] }[] }).outputs[0]!.data[0];
}

function error(a: Answer, status = 500): unknown {
  assert.equal(a.status, status, JSON.stringify(a.json));
  return (a.json as { error: string }).error;
}

async function counts(url: string, model: string): Promise<number[]> {
  const stats = (await get(url, `/v2/models/${model}/stats`)).json as {
    model_stats: {
      inference_count: number;
      execution_count: number;
      inference_stats: { success: { count: number } };
    }[];
  };
  const s = stats.model_stats[0]!;
  return [s.inference_count, s.execution_count, s.inference_stats.success.count];
}

const request = (v: number, parameters?: Record<string, unknown>) => ({
  ...(parameters ? { parameters } : {}),
  inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [v] }],
});

const refused = (model: string) =>
  `Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag: '${model}' runs a request again only with sequence_batching { iterative_sequence: true }`;

Deno.test("a rescheduled request runs again on a model with iterative sequences, and fails elsewhere", async () => {
  await servePythonModels([
    ["countdown_py", COUNTDOWN_CONFIG("countdown_py", true), COUNTDOWN],
    ["countdown_plain_py", COUNTDOWN_CONFIG("countdown_plain_py", false), COUNTDOWN],
    ["twice_py", config("twice_py", `sequence_batching { iterative_sequence: true ${START} }`), TWICE],
    ["twice_dynamic_py", config("twice_dynamic_py", "dynamic_batching { }"), TWICE],
    ["twice_direct_py", config("twice_direct_py", `sequence_batching { direct { } ${START} }`), TWICE],
    ["caller_py", config("caller_py", ""), CALLER],
  ], async (s) => {
    // A decoupled model: one response per run, START on the first run only; the last one final.
    const out = (left: number, first: number) => ({
      FIRST: first,
      OUT: left,
      model_name: "countdown_py",
      model_version: "1",
    });
    assert.deepEqual(await generateStream(s.url, "countdown_py", 3), [out(2, 1), out(1, 0), out(0, 0)]);
    assert.deepEqual(await generateStream(s.url, "countdown_py", 1), [out(0, 1)]);
    assert.deepEqual(await counts(s.url, "countdown_py"), [4, 4, 4]);

    // Not decoupled: None in the rescheduled request's place; the second run answers.
    assert.equal(value(await inferJson(s.url, "twice_py", request(21))), 42);
    // Requests without a correlation id are sequences of their own: concurrent ones queue for the one slot.
    const together = await Promise.all([1, 2, 3, 4].map((v) => inferJson(s.url, "twice_py", request(v))));
    assert.deepEqual(together.map(value), [2, 4, 6, 8]);
    // A request of an explicit sequence runs again within it.
    const seq = { sequence_id: 5, sequence_start: true, sequence_end: true };
    assert.equal(value(await inferJson(s.url, "twice_py", request(10, seq))), 20);
    // A request answered on its first run is not run again.
    assert.equal(value(await inferJson(s.url, "twice_py", request(9))), 18);
    assert.deepEqual(await counts(s.url, "twice_py"), [13, 13, 13]);
    // Triton's words for a rescheduled request whose place in the list is not None (the call fails).
    assert.equal(
      error(await inferJson(s.url, "twice_py", request(8))),
      "Cannot run 'twice_py' instance 'twice_py_0': TritonModelException: Expected a None object in the execute function return list for reschduled request, found type '<class 'triton_python_backend_utils.InferenceResponse'>'.",
    );
    assert.equal(
      error(await inferJson(s.url, "twice_py", request(7))),
      "Cannot run 'twice_py' instance 'twice_py_0': TritonModelException: Cannot set release flags 3: expected TRITONSERVER_REQUEST_RELEASE_ALL or TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    );
    assert.equal(value(await inferJson(s.url, "twice_py", request(6))), 12);

    // Through BLS (as Triton's QA model bls_request_rescheduling calls them): 3 doubled, then 2, 1 and 0.
    assert.equal(value(await inferJson(s.url, "caller_py", request(3))), 6210);

    // Models without iterative sequences: the request fails (Triton 2.51 leaves it unanswered).
    assert.equal(error(await inferJson(s.url, "twice_dynamic_py", request(1))), refused("twice_dynamic_py"));
    assert.equal(
      error(await inferJson(s.url, "twice_direct_py", request(1, { sequence_id: 3, sequence_start: true }))),
      refused("twice_direct_py"),
    );
    assert.equal(value(await inferJson(s.url, "twice_dynamic_py", request(9))), 18);
    // A decoupled one: the response sent before the request was given back, then the failure.
    assert.deepEqual(await generateStream(s.url, "countdown_plain_py", 2), [
      { FIRST: 1, OUT: 1, model_name: "countdown_plain_py", model_version: "1" },
      { error: refused("countdown_plain_py") },
    ]);
  });
});
