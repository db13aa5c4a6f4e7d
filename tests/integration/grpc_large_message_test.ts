/**
 * Large gRPC answers, which the frontend frames itself and writes in pieces from the output's own bytes: ModelInfer
 * and ModelStreamInfer return every value of a tensor of several pieces exactly, and a stream's answers keep their
 * order and final flag.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../../server/core/protos.ts";
import { WRITE_PIECE } from "../../server/frontends/grpc/framing.ts";
import { FIXTURES, startTestServer } from "../helpers.ts";

/** 3.5 pieces of FP32 elements. */
const COUNT = (7 * WRITE_PIECE) / 8;

function values(seed: number): Float32Array {
  const v = new Float32Array(COUNT);
  for (let i = 0; i < COUNT; i++) v[i] = (i % 9973) + seed;
  return v;
}

function request(seed: number, id: string): Record<string, unknown> {
  return {
    model_name: "identity_fp32",
    id,
    inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, COUNT] }],
    raw_input_contents: [new Uint8Array(values(seed).buffer)],
  };
}

const REQUEST = lookupType("ModelInferRequest");
const serialize = (v: Record<string, unknown>) => Buffer.from(REQUEST.encode(REQUEST.fromObject(v)).finish());

interface Answer {
  id: string;
  outputs: { name: string; datatype: string; shape: number[] }[];
  parameters?: Record<string, { bool_param?: boolean }>;
  raw_output_contents: Uint8Array[];
}

function checkAnswer(answer: Answer, seed: number, id: string): void {
  assert.equal(answer.id, id);
  assert.deepEqual(answer.outputs, [{ name: "OUTPUT0", datatype: "FP32", shape: [1, COUNT] }]);
  const raw = answer.raw_output_contents[0]!;
  assert.equal(raw.byteLength, COUNT * 4);
  const out = new Float32Array(Uint8Array.from(raw).buffer);
  assert.deepEqual(out, values(seed));
}

Deno.test("gRPC: large answers of ModelInfer and ModelStreamInfer carry every value, in order", async () => {
  await using s = await startTestServer([
    `--model-repository=${FIXTURES}`,
    "--model-control-mode=explicit",
    "--load-model=identity_fp32",
    "--allow-grpc=true",
  ]);
  const client = new grpc.Client(`127.0.0.1:${s.server.grpcPort}`, grpc.credentials.createInsecure(), {
    "grpc.max_receive_message_length": -1,
  });
  try {
    const responseType = lookupType("ModelInferResponse");
    const unary = await new Promise<Answer>((resolve, reject) => {
      client.makeUnaryRequest(
        "/inference.GRPCInferenceService/ModelInfer",
        serialize,
        (b: Buffer) => responseType.toObject(responseType.decode(b), { longs: Number }) as Answer,
        request(1, "one"),
        (err, r) => (err ? reject(err) : resolve(r!)),
      );
    });
    checkAnswer(unary, 1, "one");

    const streamType = lookupType("ModelStreamInferResponse");
    const call = client.makeBidiStreamRequest(
      "/inference.GRPCInferenceService/ModelStreamInfer",
      serialize,
      (b: Buffer) => streamType.toObject(streamType.decode(b), { longs: Number }),
    );
    const answers: { error_message?: string; infer_response: Answer }[] = [];
    const ended = new Promise<void>((resolve, reject) => {
      call.on("data", (m) => answers.push(m));
      call.on("error", reject);
      call.on("end", resolve);
    });
    call.write(request(2, "two"));
    call.write(request(3, "three"));
    call.end();
    await ended;
    assert.equal(answers.length, 2);
    for (const [n, [seed, id]] of [[2, "two"], [3, "three"]].entries()) {
      const a = answers[n]!;
      assert.equal(a.error_message ?? "", "");
      assert.deepEqual(a.infer_response.parameters, { triton_final_response: { bool_param: true } });
      checkAnswer(a.infer_response, seed as number, id as string);
    }
  } finally {
    client.close();
  }
});
