/**
 * Malformed requests that once reached a 500 are client errors: 400 / INVALID_ARGUMENT naming the problem, and
 * the server keeps serving.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../../server/core/protos.ts";
import { EXAMPLES, FIXTURES, startTestServer } from "../helpers.ts";
import { call } from "./_http.ts";

function post(base: string, path: string, body: string | Uint8Array, headers: Record<string, string> = {}) {
  return call(base + path, { method: "POST", body: body as BodyInit, headers });
}

const DEEP = "[".repeat(10_000) + "1" + "]".repeat(10_000);

Deno.test("HTTP: deep nesting, impossible BYTES shapes, NUL in file names and out-of-range floats are 400", async () => {
  await using s = await startTestServer([
    `--model-repository=${EXAMPLES}`,
    `--model-repository=${FIXTURES}`,
    "--model-control-mode=explicit",
    "--load-model=simple",
    "--load-model=identity_string",
    "--load-model=identity_fp32",
    "--load-model=identity_fp64",
    "--load-model=identity_fp16",
  ]);
  const expect400 = async (r: Promise<{ status: number; json: unknown }>, error: string) => {
    const a = await r;
    assert.equal(a.status, 400, JSON.stringify(a.json));
    assert.deepEqual(a.json, { error });
  };

  // Data nested 10,000 deep is flattened, then found to be the wrong size.
  await expect400(
    post(
      s.url,
      "/v2/models/simple/infer",
      `{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":${DEEP}},` +
        `{"name":"INPUT1","datatype":"INT32","shape":[1,16],"data":[1]}]}`,
    ),
    "Cannot read the inference request for 'simple': input 'INPUT0' has 1 data elements, expected 16 for shape [1,16]",
  );
  await expect400(
    post(s.url, "/v2/trace/setting", `{"trace_level":${DEEP}}`),
    "Cannot update the trace settings: 'trace_level' values must be strings",
  );

  // A datatype that is a number beyond 2^53 (read as a bigint).
  await expect400(
    post(
      s.url,
      "/v2/models/identity_fp32/infer",
      `{"inputs":[{"name":"INPUT0","datatype":18446744073709551615,"shape":[1,3],"data":[1,2,3]}]}`,
    ),
    "Cannot read the inference request for 'identity_fp32': input 'INPUT0' has unknown datatype 18446744073709551615",
  );

  // A BYTES shape of a trillion elements with a 4-byte body.
  const header = JSON.stringify({
    inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1, 1e12], parameters: { binary_data_size: 4 } }],
  });
  await expect400(
    post(
      s.url,
      "/v2/models/identity_string/infer",
      new Uint8Array([...new TextEncoder().encode(header), 0, 0, 0, 0]),
      {
        "inference-header-content-length": String(header.length),
      },
    ),
    "Cannot read input 'INPUT0': expected 1000000000000 string elements for inference input 'INPUT0' for model 'identity_string', got 1",
  );

  // A file name with NUL: refused before anything is written, without naming a server path.
  await expect400(
    post(
      s.url,
      "/v2/repository/models/up/load",
      JSON.stringify({
        parameters: {
          config: JSON.stringify({ name: "up", platform: "onnxruntime_onnx" }),
          "file:1/mo\u0000del.onnx": "AAAA",
        },
      }),
    ),
    `Cannot load 'up': failed to load 'up': file path "1/mo\\u0000del.onnx" must not contain control characters`,
  );

  // Floats beyond their type's range.
  for (
    const [model, dt, literal, error] of [
      ["identity_fp32", "FP32", "1e400", "element 0 is out of the range of FP32"],
      ["identity_fp32", "FP32", "3.5e38", "element 0 is out of the range of FP32 (3.5e+38)"],
      ["identity_fp32", "FP32", "-1e39", "element 0 is out of the range of FP32 (-1e+39)"],
      ["identity_fp64", "FP64", "-1e400", "element 0 is out of the range of FP64"],
      ["identity_fp16", "FP16", "65520", "element 0 is out of the range of FP16 (65520)"],
    ] as const
  ) {
    await expect400(
      post(
        s.url,
        `/v2/models/${model}/infer`,
        `{"inputs":[{"name":"INPUT0","datatype":"${dt}","shape":[1,2],"data":[${literal},1]}]}`,
      ),
      `Cannot read input 'INPUT0': ${error}`,
    );
  }
  // The largest finite values still pass.
  const max = await post(
    s.url,
    "/v2/models/identity_fp32/infer",
    `{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,2],"data":[3.4028234663852886e38,-3.4028234663852886e38]}]}`,
  );
  assert.equal(max.status, 200, JSON.stringify(max.json));
  const half = await post(
    s.url,
    "/v2/models/identity_fp16/infer",
    `{"inputs":[{"name":"INPUT0","datatype":"FP16","shape":[1,1],"data":[65504]}]}`,
  );
  assert.equal(half.status, 200, JSON.stringify(half.json));
});

Deno.test("gRPC: a BYTES shape larger than its raw contents is INVALID_ARGUMENT", async () => {
  await using s = await startTestServer([
    `--model-repository=${FIXTURES}`,
    "--model-control-mode=explicit",
    "--load-model=identity_string",
    "--allow-grpc=true",
  ]);
  const client = new grpc.Client(`127.0.0.1:${s.server.grpcPort}`, grpc.credentials.createInsecure());
  try {
    const req = lookupType("ModelInferRequest");
    const err = await new Promise<grpc.ServiceError | null>((resolve) => {
      client.makeUnaryRequest(
        "/inference.GRPCInferenceService/ModelInfer",
        (v: Record<string, unknown>) => Buffer.from(req.encode(req.fromObject(v)).finish()),
        (b: Buffer) => b,
        {
          model_name: "identity_string",
          inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [1, 1e12] }],
          raw_input_contents: [Buffer.from([0, 0, 0, 0])],
        },
        (e) => resolve(e),
      );
    });
    assert.equal(err?.code, grpc.status.INVALID_ARGUMENT);
    assert.equal(
      err?.details,
      "Cannot read the inference request for 'identity_string', input 'INPUT0': expected 1000000000000 string elements for inference input 'INPUT0' for model 'identity_string', got 1",
    );
  } finally {
    client.close();
  }
});
