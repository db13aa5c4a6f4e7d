/**
 * A server that shuts down while gRPC calls run answers every call it accepted before it closes the connections:
 * grpc-js writes a call's status after its message, and the connection wrapper holds writes for a few event-loop
 * turns, so connections closed as soon as the last call ended cut its answer off. The model sleeps in each
 * execute, so that the calls are still running when the shutdown begins.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../../server/core/protos.ts";
import { pythonPath, startTestServer } from "../helpers.ts";
import { writePythonModel } from "./_python.ts";

const CALLS = 6;

async function slowRepository(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-grpc-shutdown-" });
  await writePythonModel(
    dir,
    "slow_py",
    `name: "slow_py"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`,
    `import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.1)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy().copy())]) for r in requests]
`,
  );
  return dir;
}

/** One ModelInfer call on a connection of its own: the answer's OUT, or the status code. */
function call(port: number, value: number): Promise<{ out?: number; code?: number; details?: string }> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), {
    "grpc.use_local_subchannel_pool": 1,
  });
  const req = lookupType("ModelInferRequest"), res = lookupType("ModelInferResponse");
  const message = {
    model_name: "slow_py",
    inputs: [{ name: "IN", datatype: "INT32", shape: [1] }],
    raw_input_contents: [new Uint8Array(Int32Array.of(value).buffer)],
  };
  return new Promise<{ out?: number; code?: number; details?: string }>((resolve) => {
    client.makeUnaryRequest(
      "/inference.GRPCInferenceService/ModelInfer",
      (m: Record<string, unknown>) => Buffer.from(req.encode(req.fromObject(m)).finish()),
      (b: Buffer) => b,
      message,
      (err, value) => {
        if (err) return resolve({ code: err.code, details: err.details });
        const decoded = res.toObject(res.decode(value!), { bytes: Array }) as {
          raw_output_contents: number[][];
        };
        resolve({ out: new Int32Array(Uint8Array.from(decoded.raw_output_contents[0]!).buffer)[0]! });
      },
    );
  }).finally(() => client.close());
}

for (const threads of [1, 2]) {
  Deno.test(`a server shutting down answers the gRPC calls it accepted (${threads} gRPC thread(s))`, async () => {
    const repo = await slowRepository();
    try {
      const s = await startTestServer([
        `--model-repository=${repo}`,
        `--backend-config=python,python-executable=${pythonPath()}`,
        "--allow-grpc=true",
        `--grpc-thread-count=${threads}`,
      ]);
      const port = s.server.grpcPort!;
      const values = Array.from({ length: CALLS }, (_, i) => 100 + i);
      const answers = values.map((v) => call(port, v));
      // Once the first call is answered, every call has long been accepted (connections on this host take
      // milliseconds) and the rest still wait for the one instance, which runs them one at a time (0.1 s each).
      const successes = async () =>
        ((await (await fetch(`${s.url}/v2/models/slow_py/stats`)).json()) as {
          model_stats: { inference_stats: { success: { count: number } } }[];
        }).model_stats[0]!.inference_stats.success.count;
      while ((await successes()) === 0) await new Promise((r) => setTimeout(r, 10));
      assert.ok((await successes()) < CALLS, "the calls were still running when the shutdown began");
      await s.close();
      assert.deepEqual(await Promise.all(answers), values.map((out) => ({ out })));
    } finally {
      await Deno.remove(repo, { recursive: true });
    }
  });
}
