/**
 * The transport floor for gRPC against HTTP: the least a server on dinfer's stack can do to answer the
 * benchmark's `simple` request over each protocol, with no decoding and no model — a fixed ModelInferResponse
 * over gRPC (@grpc/grpc-js on Deno's node:http2, connections accepted and handed to grpc-js as dinfer does) and a
 * fixed binary-extension answer over HTTP (`Deno.serve`). What it reaches over gRPC relative to HTTP bounds what
 * any server on this stack can reach, dinfer included.
 *
 * With `--python=<interpreter>` every request first waits for one round trip of a 512-byte frame through a
 * minimal Python echo process (`bench/python_echo.ts`, one process, frames answered in order): the floor of a
 * server on this stack that hands each request to a Python process, as the Python backend does. `--model=<name>`
 * names the model in the answers and in the routes (default `simple`; the Python benchmark's `add_sub_py` has
 * the same signature). A request without `Inference-Header-Content-Length` gets the answer in JSON. The model's
 * ready and statistics routes answer as dinfer's do (successes counted), for the benchmarks' checks.
 *
 * Usage: `deno run -A bench/transport_floor_server.ts --http-port=N --grpc-port=M [--model=NAME]
 * [--python=PATH]` (other flags are ignored).
 * @module
 */

import { Buffer } from "node:buffer";
import net from "node:net";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../server/core/protos.ts";
import { GoawayFilter } from "../server/frontends/grpc/goaway_filter.ts";
import { OUTPUT0, OUTPUT1 } from "./simple_requests.ts";
import { startPythonEcho } from "./python_echo.ts";

function text(name: string): string | undefined {
  return Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
}

function flag(name: string): number {
  const v = Number(text(name));
  if (!Number.isInteger(v) || v <= 0) {
    console.error(`Cannot start the transport floor server: --${name}=N is required`);
    Deno.exit(2);
  }
  return v;
}

const httpPort = flag("http-port");
const grpcPort = flag("grpc-port");
const model = text("model") ?? "simple";
const python = text("python");
const echo = python ? await startPythonEcho(python) : undefined;
let successes = 0;

// The answer to the benchmarks' request (bench/simple_requests.ts), precomputed.
const sum = new Uint8Array(OUTPUT0.buffer);
const diff = new Uint8Array(OUTPUT1.buffer);

const ResponseType = lookupType(".inference.ModelInferResponse");
const grpcAnswer = Buffer.from(
  ResponseType.encode(ResponseType.fromObject({
    model_name: model,
    model_version: "1",
    outputs: [
      { name: "OUTPUT0", datatype: "INT32", shape: [1, 16] },
      { name: "OUTPUT1", datatype: "INT32", shape: [1, 16] },
    ],
    raw_output_contents: [sum, diff],
  })).finish(),
);

const header = new TextEncoder().encode(JSON.stringify({
  model_name: model,
  model_version: "1",
  outputs: [
    { name: "OUTPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
    { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
  ],
}));
const httpAnswer = new Uint8Array(header.byteLength + 128);
httpAnswer.set(header, 0);
httpAnswer.set(sum, header.byteLength);
httpAnswer.set(diff, header.byteLength + 64);
const httpHeaders = {
  "content-type": "application/octet-stream",
  "inference-header-content-length": String(header.byteLength),
};
const jsonAnswer = new TextEncoder().encode(JSON.stringify({
  model_name: model,
  model_version: "1",
  outputs: [
    { name: "OUTPUT0", datatype: "INT32", shape: [1, 16], data: [...OUTPUT0] },
    { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: [...OUTPUT1] },
  ],
}));
const jsonHeaders = { "content-type": "application/json" };
const statsPath = `/v2/models/${model}/stats`;

const raw = (b: Buffer) => b;
const server = new grpc.Server({ "grpc.enable_channelz": 0 });
server.addService({
  ModelInfer: {
    path: "/inference.GRPCInferenceService/ModelInfer",
    requestStream: false,
    responseStream: false,
    requestSerialize: raw,
    requestDeserialize: raw,
    responseSerialize: raw,
    responseDeserialize: raw,
  },
}, {
  ModelInfer: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
    if (!echo) {
      successes++;
      callback(null, grpcAnswer);
      return;
    }
    echo.roundTrip().then(() => {
      successes++;
      callback(null, grpcAnswer);
    });
  },
});
const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
net.createServer((socket) => {
  socket.setNoDelay(true);
  injector.injectConnection(new GoawayFilter(socket));
}).listen(grpcPort, "127.0.0.1");

Deno.serve({ port: httpPort, hostname: "127.0.0.1", onListen: () => {} }, async (request) => {
  if (request.method === "POST") {
    const binary = request.headers.has("inference-header-content-length");
    await request.arrayBuffer();
    if (echo) await echo.roundTrip();
    successes++;
    return binary
      ? new Response(httpAnswer, { headers: httpHeaders })
      : new Response(jsonAnswer, { headers: jsonHeaders });
  }
  if (new URL(request.url).pathname === statsPath) {
    return Response.json({
      model_stats: [{ inference_stats: { success: { count: successes }, fail: { count: 0 } } }],
    });
  }
  // Health and readiness.
  return new Response(null);
});
