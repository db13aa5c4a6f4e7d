/**
 * The gRPC load generator of `./dinfer bench`, run as its own process: closed-loop ModelInfer calls on
 * `simple` with raw contents over one @grpc/grpc-js channel, N calls in flight, latencies per call; the first
 * answer and every 1000th are checked. Prints one JSON line per point. One channel serves every point.
 *
 * `deno run -A bench/grpc_load.ts <host:port> <in-flight,in-flight,...> <duration s> <warm-up s> [model]`
 * (the model defaults to `simple`; any model with INT32 [1,16] INPUT0/INPUT1 and their sum and difference as
 * OUTPUT0/OUTPUT1 serves)
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../server/core/protos.ts";
import { INPUT0, INPUT1, OUTPUT0, OUTPUT1 } from "./simple_requests.ts";

const [target = "127.0.0.1:8001", inflightArg = "1", durationArg = "5", warmupArg = "1", model = "simple"] =
  Deno.args;
const points = inflightArg.split(",").map(Number);
const durationMs = Number(durationArg) * 1000;
const warmupMs = Number(warmupArg) * 1000;

const reqType = lookupType("ModelInferRequest");
const resType = lookupType("ModelInferResponse");
const bytes = (v: Int32Array) => new Uint8Array(v.buffer.slice(0));
const request = Buffer.from(
  reqType.encode(reqType.fromObject({
    model_name: model,
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16] },
    ],
    outputs: [{ name: "OUTPUT0" }, { name: "OUTPUT1" }],
    raw_input_contents: [bytes(INPUT0), bytes(INPUT1)],
  })).finish(),
);

const client = new grpc.Client(target, grpc.credentials.createInsecure(), {
  "grpc.max_receive_message_length": -1,
});
const path = "/inference.GRPCInferenceService/ModelInfer";

function call(): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    client.makeUnaryRequest(
      path,
      (x: Buffer) => x,
      (x: Buffer) => x,
      request,
      (err: grpc.ServiceError | null, res?: Buffer) => (err ? reject(err) : resolve(res!)),
    );
  });
}

function check(res: Buffer): string | undefined {
  const m = resType.decode(res) as unknown as { raw_output_contents: Uint8Array[] };
  const [o0, o1] = m.raw_output_contents.map((u) =>
    new Int32Array(Uint8Array.prototype.slice.call(u).buffer)
  );
  for (let i = 0; i < 16; i++) {
    if (o0?.[i] !== OUTPUT0[i] || o1?.[i] !== OUTPUT1[i]) return `wrong output at ${i}`;
  }
  return undefined;
}

async function measure(inflight: number): Promise<Record<string, unknown>> {
  const start = performance.now();
  const from = start + warmupMs;
  const to = from + durationMs;
  const latencies: number[] = [];
  let count = 0, errors = 0, completed = 0, checked = 0, mismatches = 0;
  let firstError: string | undefined;
  async function loop(): Promise<void> {
    while (performance.now() < to) {
      const t0 = performance.now();
      try {
        const res = await call();
        const t1 = performance.now();
        if (completed++ % 1000 === 0) {
          checked++;
          const why = check(res);
          if (why) {
            mismatches++;
            firstError ??= why;
          }
        }
        if (t0 >= from && t1 <= to) {
          count++;
          latencies.push((t1 - t0) * 1000);
        }
      } catch (err) {
        errors++;
        firstError ??= (err as Error).message;
      }
    }
  }
  await Promise.all(Array.from({ length: inflight }, loop));
  latencies.sort((x, y) => x - y);
  const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
  return {
    connections: inflight,
    count,
    seconds: durationMs / 1000,
    rate: count / (durationMs / 1000),
    p50Us: q(0.5),
    p90Us: q(0.9),
    p99Us: q(0.99),
    meanUs: latencies.reduce((s, x) => s + x, 0) / Math.max(1, latencies.length),
    errors,
    checked,
    mismatches,
    ...(firstError ? { firstError } : {}),
  };
}

for (const inflight of points) console.log(JSON.stringify(await measure(inflight)));
client.close();
