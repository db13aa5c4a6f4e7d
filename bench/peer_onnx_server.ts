/**
 * The hand-written peer for the ONNX path: what a user would write instead of running an inference server —
 * `Deno.serve`, `JSON.parse`, onnxruntime-node's public `await session.run()` (default session options) and
 * `Response.json`. It serves `POST /v2/models/simple/infer` with JSON tensors (every input named in the
 * request, every output in the answer) and `GET /v2/health/{live,ready}`.
 *
 * Usage: `deno run -A bench/peer_onnx_server.ts --http-port=N [--reuse-port] [--intra-op-threads=K]` (other
 * `--flags` are ignored). `--reuse-port` lets several such processes share the port (SO_REUSEPORT: the kernel
 * spreads connections over them), as a user would run one per core; each then prints `listening` once it
 * listens. `--intra-op-threads` sets ONNX Runtime's intra-op thread count (default: its own, one per core).
 * @module
 */

import * as ort from "onnxruntime-node";
import { fileURLToPath } from "node:url";

const MODEL = fileURLToPath(new URL("../examples/models/simple/1/model.onnx", import.meta.url));
const port = Number(Deno.args.find((a) => a.startsWith("--http-port="))?.slice("--http-port=".length));
if (!Number.isInteger(port) || port <= 0) {
  console.error("Cannot start the peer server: --http-port=N is required");
  Deno.exit(2);
}

const reusePort = Deno.args.includes("--reuse-port");
const intraOp = Deno.args.find((a) => a.startsWith("--intra-op-threads="))?.slice(
  "--intra-op-threads=".length,
);
const session = await ort.InferenceSession.create(
  MODEL,
  intraOp === undefined ? {} : { intraOpNumThreads: Number(intraOp) },
);

interface JsonInput {
  name: string;
  shape: number[];
  data: number[];
}

async function infer(request: Request): Promise<Response> {
  const body = JSON.parse(await request.text()) as { inputs: JsonInput[] };
  const feeds: Record<string, ort.Tensor> = {};
  for (const i of body.inputs) feeds[i.name] = new ort.Tensor("int32", Int32Array.from(i.data), i.shape);
  const results = await session.run(feeds);
  const outputs = Object.entries(results).map(([name, t]) => ({
    name,
    datatype: "INT32",
    shape: t.dims,
    data: Array.from(t.data as Int32Array),
  }));
  return Response.json({ model_name: "simple", model_version: "1", outputs });
}

const onListen = () => reusePort && console.log("listening");
Deno.serve({ port, hostname: "127.0.0.1", reusePort, onListen }, (request) => {
  if (request.method === "POST" && request.url.endsWith("/v2/models/simple/infer")) return infer(request);
  if (request.url.includes("/v2/health/")) return new Response(null);
  return new Response(null, { status: 404 });
});
