/**
 * ModelInfer requests on the `simple` model for the benchmark's h2load gRPC points: the encoded
 * ModelInferRequest with raw contents, its gRPC frame (what h2load sends as the body) and one real call
 * through @grpc/grpc-js whose answer is decoded, so that the bytes h2load sends are known to be answered
 * correctly (h2load does not read the gRPC status in the trailers).
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../server/core/protos.ts";

/** One output of a decoded ModelInferResponse. */
export interface GrpcOutput {
  /** The output's name. */
  name: string;
  /** Its datatype. */
  datatype: string;
  /** Its shape. */
  shape: number[];
  /** Its raw contents (little-endian). */
  contents: Uint8Array;
}

/**
 * Encodes a ModelInferRequest for `simple`: INPUT0 and INPUT1 as INT32 [1,16] in `raw_input_contents`.
 * @param input0 INPUT0's 16 values
 * @param input1 INPUT1's 16 values
 * @param model the model to name (default `simple`; any with the same inputs serves)
 * @returns the protobuf bytes
 */
export function simpleInferRequest(input0: Int32Array, input1: Int32Array, model = "simple"): Uint8Array {
  const type = lookupType("ModelInferRequest");
  const bytes = (v: Int32Array) => new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
  return type.encode(type.fromObject({
    model_name: model,
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16] },
    ],
    raw_input_contents: [bytes(input0), bytes(input1)],
  })).finish();
}

/**
 * Frames a message as gRPC sends it on HTTP/2: a 0 byte (not compressed), the length as 4 bytes big-endian,
 * then the message.
 * @param message the encoded message
 * @returns the framed bytes
 */
export function grpcFrame(message: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + message.byteLength);
  new DataView(out.buffer).setUint32(1, message.byteLength);
  out.set(message, 5);
  return out;
}

/**
 * Makes one ModelInfer call with an encoded request over a fresh @grpc/grpc-js channel, closed afterwards.
 * @param target host:port of the gRPC endpoint
 * @param request the encoded ModelInferRequest
 * @returns the response's outputs with their raw contents
 */
export async function grpcInferOnce(target: string, request: Uint8Array): Promise<GrpcOutput[]> {
  const client = new grpc.Client(target, grpc.credentials.createInsecure());
  try {
    const response = await new Promise<Buffer>((resolve, reject) => {
      client.makeUnaryRequest(
        "/inference.GRPCInferenceService/ModelInfer",
        (x: Buffer) => x,
        (x: Buffer) => x,
        Buffer.from(request),
        { deadline: Date.now() + 10_000 },
        (err: grpc.ServiceError | null, res?: Buffer) => (err ? reject(err) : resolve(res!)),
      );
    });
    const type = lookupType("ModelInferResponse");
    const m = type.toObject(type.decode(response), { longs: Number }) as {
      outputs?: { name: string; datatype: string; shape?: number[] }[];
      raw_output_contents?: Uint8Array[];
    };
    return (m.outputs ?? []).map((o, i) => ({
      name: o.name,
      datatype: o.datatype,
      shape: o.shape ?? [],
      contents: m.raw_output_contents?.[i] ?? new Uint8Array(0),
    }));
  } finally {
    client.close();
  }
}
