/**
 * The bare exchange of the MLP benchmark: `Deno.serve` reading the same single-sample binary request as the
 * server gets and answering it with fixed bytes (the logits ONNX Runtime gives for the benchmark's input,
 * computed once at start), with no decoding, batching or model run. Its throughput is the HTTP side's limit on
 * this machine; with ONNX Runtime's in-process throughput it gives the stack's combined limit
 * 1 / (1/raw + 1/bare) that the benchmark reads dinfer against.
 *
 * Usage: `deno run -A bench/mlp_bare_server.ts --http-port=N --model-repository=<bench/models>`. It answers
 * `POST /v2/models/{m}/infer`, health, and statistics with zero counts (so the load generator reads it as it
 * reads the server).
 * @module
 */

import * as ort from "onnxruntime-node";
import { mlpInput } from "./mlp_load.ts";

function flag(name: string): string {
  const v = Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  if (!v) {
    console.error(`Cannot start the bare MLP server: --${name}= is required`);
    Deno.exit(2);
  }
  return v;
}

const port = Number(flag("http-port"));
const models = flag("model-repository");
const session = await ort.InferenceSession.create(`${models}/mlp/1/model.onnx`);
const logits = (await session.run({ input: new ort.Tensor("float32", mlpInput(), [1, 784]) })).logits!;
await session.release();

const header = new TextEncoder().encode(JSON.stringify({
  model_name: "mlp",
  model_version: "1",
  outputs: [{ name: "logits", datatype: "FP32", shape: [1, 10], parameters: { binary_data_size: 40 } }],
}));
const answer = new Uint8Array(header.byteLength + 40);
answer.set(header, 0);
answer.set(new Uint8Array((logits.data as Float32Array).buffer), header.byteLength);
const headers = {
  "content-type": "application/octet-stream",
  "inference-header-content-length": String(header.byteLength),
};
const stats = JSON.stringify({ model_stats: [{ inference_count: 0, execution_count: 0, batch_stats: [] }] });

Deno.serve({ port, hostname: "127.0.0.1", onListen: () => {} }, async (request) => {
  if (request.method === "POST") {
    await request.arrayBuffer();
    return new Response(answer, { headers });
  }
  if (request.url.endsWith("/stats")) {
    return new Response(stats, { headers: { "content-type": "application/json" } });
  }
  return new Response(null);
});
