/**
 * A unary gRPC call (ModelInfer) that the client cancels is cancelled for a Python model too, as in Triton: the
 * model reads it through `request.is_cancelled()` while it runs (Triton's QA model `execute_cancel` polls it).
 * @module
 */

import assert from "node:assert/strict";
import { startTestServer } from "../helpers.ts";
import { pythonJson, writePythonModel } from "./_python.ts";

const CONFIG = `name: "wait_py"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
`;

/** IN 1 waits (up to 10 s) for its request to be cancelled; IN 0 answers what the last wait saw. */
const MODEL = `import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.seen = "nothing yet"

    def execute(self, requests):
        out = []
        for r in requests:
            if int(pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()[0]) == 1:
                until = time.monotonic() + 10
                while not r.is_cancelled() and time.monotonic() < until:
                    time.sleep(0.02)
                self.seen = "cancelled" if r.is_cancelled() else "not cancelled"
                out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(self.seen)))
            else:
                text = np.array([self.seen.encode()], dtype=object)
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", text)]))
        return out
`;

const CLIENT = `
import json, os, time, numpy as np, tritonclient.grpc as g
c = g.InferenceServerClient(os.environ["URL"])
def request(v):
    t = g.InferInput("IN", [1], "INT32"); t.set_data_from_numpy(np.array([v], dtype=np.int32))
    return [t]
got = {}
future = c.async_infer("wait_py", request(1), lambda result, error: got.update(error=error.status()))
time.sleep(0.5)
future.cancel()
time.sleep(0.5)
# The next call runs once the cancelled one has seen its cancellation.
seen = c.infer("wait_py", request(0)).as_numpy("OUT")[0].decode()
print(json.dumps([got.get("error"), seen]))
`;

Deno.test("a cancelled unary gRPC call is cancelled for the Python model running it", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-grpc-cancel-" });
  try {
    await writePythonModel(repo, "wait_py", CONFIG, MODEL);
    await using s = await startTestServer([`--model-repository=${repo}`, "--allow-grpc=true"]);
    const got = await pythonJson(CLIENT, { URL: `127.0.0.1:${s.server.grpcPort}` });
    assert.deepEqual(got, ["StatusCode.CANCELLED", "cancelled"]);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
