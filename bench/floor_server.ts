/**
 * The stack's floor for the HTTP benchmark: the least a server on dinfer's stack can do to answer a JSON
 * inference of `simple` — `Deno.serve`, `JSON.parse`, one synchronous ONNX Runtime run through
 * onnxruntime-node's native binding (as dinfer's backend runs it, with the same session options) and the
 * answer as JSON — with no validation, no scheduling, no statistics and no other endpoint. No server built
 * on this stack answers faster on the same machine, so the benchmark reports dinfer's latency beside it.
 *
 * Usage: `deno run -A bench/floor_server.ts --http-port=N` (other `--flags` are ignored, so that the
 * benchmark starts it like the server). Serves `POST /v2/models/simple/infer` (JSON, INT32 [1,16] inputs
 * INPUT0 and INPUT1) and `GET /v2/health/{live,ready}`.
 * @module
 */

import * as ort from "onnxruntime-node";
import { fileURLToPath } from "node:url";
import { sessionOptions } from "../server/backends/onnxruntime.ts";
import { readConfigFile, toModelConfig } from "../server/repository/config.ts";

interface NativeSession {
  loadModel(path: string, options: ort.InferenceSession.SessionOptions): void;
  run(
    feeds: Record<string, ort.Tensor>,
    fetches: Record<string, null>,
    options: Record<string, never>,
  ): Record<string, { data: Int32Array }>;
}

const MODEL_DIR = fileURLToPath(new URL("../examples/models/simple", import.meta.url));

const portArg = Deno.args.find((a) => a.startsWith("--http-port="));
const port = Number(portArg?.slice("--http-port=".length));
if (!Number.isInteger(port) || port <= 0) {
  console.error("Cannot start the floor server: --http-port=N is required");
  Deno.exit(2);
}

const binding = await import("onnxruntime-node/dist/binding.js") as {
  binding: { InferenceSession: new () => NativeSession };
  initOrt: () => void;
};
binding.initOrt();
const session = new binding.binding.InferenceSession();
session.loadModel(
  `${MODEL_DIR}/1/model.onnx`,
  sessionOptions(toModelConfig(await readConfigFile(MODEL_DIR, "simple"), "simple")),
);

const JSON_HEADERS = { "content-type": "application/json" };
const FETCHES = { OUTPUT0: null, OUTPUT1: null };

function output(name: string, data: Int32Array): string {
  return `{"name":"${name}","datatype":"INT32","shape":[1,16],"data":[${data.join(",")}]}`;
}

async function infer(request: Request): Promise<Response> {
  const body = JSON.parse(await request.text()) as { inputs: { name: string; data: number[] }[] };
  const feeds: Record<string, ort.Tensor> = {};
  for (const input of body.inputs) {
    feeds[input.name] = new ort.Tensor("int32", Int32Array.from(input.data), [1, 16]);
  }
  const out = session.run(feeds, FETCHES, {});
  return new Response(
    `{"model_name":"simple","model_version":"1","outputs":[${output("OUTPUT0", out.OUTPUT0!.data)},${
      output("OUTPUT1", out.OUTPUT1!.data)
    }]}`,
    { headers: JSON_HEADERS },
  );
}

Deno.serve({ port, hostname: "127.0.0.1", onListen: () => {} }, (request) => {
  if (request.method === "POST" && request.url.endsWith("/v2/models/simple/infer")) return infer(request);
  if (request.url.includes("/v2/health/")) return new Response(null);
  return new Response(null, { status: 404 });
});
