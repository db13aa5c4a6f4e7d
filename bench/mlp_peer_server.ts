/**
 * The hand-written peer for the MLP benchmark: the least a user would write to batch this one model on the same
 * stack, with none of a server's generality. `Deno.serve` reads each single-sample binary request (the JSON
 * header is parsed, the 784 floats taken from behind it), queues it, and while ONNX Runtime is busy the queue
 * grows; when a run ends, everything queued (up to 64 samples) becomes the next batch, copied into one
 * Float32Array and run with onnxruntime-node's public `await session.run()`. That call is synchronous under its
 * promise (a `setImmediate`), so requests are read between runs, and ONNX Runtime's intra-op pool threads (one
 * per core by default) are what use the other cores. Each request is answered with its 10 logits as binary
 * tensor data. No validation beyond the sizes, no statistics, no other model.
 *
 * Usage: `deno run -A bench/mlp_peer_server.ts --http-port=N --model-repository=<bench/models>
 * [--intra-op-threads=K]` (other `--flags` are ignored; `--intra-op-threads` defaults to ONNX Runtime's own
 * choice). It answers `POST /v2/models/{m}/infer`, health, and statistics with its own inference and
 * execution counts (so the load generator reads it as it reads the server).
 * @module
 */

import * as ort from "onnxruntime-node";
import { badRequest, MAX_BATCH, MLP_IN as IN, mlpAnswer, mlpServerArgs } from "./mlp_serving.ts";

const { port, models, flag } = mlpServerArgs("MLP peer server");
const intraOp = flag("intra-op-threads");
const session = await ort.InferenceSession.create(
  `${models}/mlp/1/model.onnx`,
  intraOp === undefined ? {} : { intraOpNumThreads: Number(intraOp) },
);

interface Queued {
  sample: Uint8Array;
  resolve: (r: Response) => void;
}
let queue: Queued[] = [];
let running = false;
let inferences = 0;
let executions = 0;

async function drain(): Promise<void> {
  running = true;
  while (queue.length > 0) {
    const batch = queue.length <= MAX_BATCH ? queue : queue.slice(0, MAX_BATCH);
    queue = queue.length <= MAX_BATCH ? [] : queue.slice(MAX_BATCH);
    const input = new Float32Array(batch.length * IN);
    const bytes = new Uint8Array(input.buffer);
    batch.forEach((q, i) => bytes.set(q.sample, i * IN * 4));
    try {
      const out = await session.run({ input: new ort.Tensor("float32", input, [batch.length, IN]) });
      const logits = new Uint8Array((out.logits!.data as Float32Array).buffer);
      executions++;
      inferences += batch.length;
      batch.forEach((q, i) => q.resolve(mlpAnswer(logits, i)));
    } catch (err) {
      for (const q of batch) q.resolve(new Response(String(err), { status: 500 }));
    }
  }
  running = false;
}

Deno.serve({ port, hostname: "127.0.0.1", onListen: () => {} }, async (request) => {
  if (request.method === "POST") {
    const body = new Uint8Array(await request.arrayBuffer());
    const hl = Number(request.headers.get("inference-header-content-length"));
    if (!Number.isInteger(hl) || hl < 0 || hl > body.byteLength) return badRequest("bad header length");
    const json = JSON.parse(new TextDecoder().decode(body.subarray(0, hl))) as {
      inputs?: { shape?: number[] }[];
    };
    if (json.inputs?.[0]?.shape?.[0] !== 1 || body.byteLength - hl !== IN * 4) {
      return badRequest("expected [1, 784]");
    }
    return await new Promise<Response>((resolve) => {
      queue.push({ sample: body.subarray(hl), resolve });
      if (!running) drain();
    });
  }
  if (request.url.endsWith("/stats")) {
    return Response.json({
      model_stats: [{ inference_count: inferences, execution_count: executions, batch_stats: [] }],
    });
  }
  return new Response(null);
});
