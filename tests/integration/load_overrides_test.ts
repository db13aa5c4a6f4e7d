/**
 * What a load request may not choose: a config override that names a program or an environment is refused
 * (HTTP 400, gRPC INVALID_ARGUMENT), and no configured file name leads out of its model or version folder.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../../server/core/protos.ts";
import { checkFileNames, toModelConfig } from "../../server/repository/config.ts";
import { FIXTURES, startTestServer } from "../helpers.ts";
import { call } from "./_http.ts";

const b64 = (text: string) => Buffer.from(text).toString("base64");

function load(base: string, name: string, parameters: Record<string, string>) {
  return call(`${base}/v2/repository/models/${name}/load`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ parameters }),
  });
}

const MODEL_PY = `
import triton_python_backend_utils as pb_utils
class TritonPythonModel:
    def execute(self, requests):
        return []
`;

function pythonConfig(name: string, parameters: Record<string, unknown>): string {
  return JSON.stringify({
    name,
    backend: "python",
    parameters,
    input: [{ name: "IN", data_type: "TYPE_FP32", dims: [1] }],
    output: [{ name: "OUT", data_type: "TYPE_FP32", dims: [1] }],
  });
}

function onnxConfig(name: string, extra: Record<string, unknown>): string {
  return JSON.stringify({
    name,
    platform: "onnxruntime_onnx",
    max_batch_size: 8,
    input: [{ name: "INPUT0", data_type: "TYPE_FP32", dims: [-1] }],
    output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [-1] }],
    ...extra,
  });
}

Deno.test("a load request's config override may not name the program or environment the server runs", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-override-" });
  try {
    await using s = await startTestServer([
      `--model-repository=${FIXTURES}`,
      "--model-control-mode=explicit",
      "--allow-grpc=true",
    ]);
    const marker = `${dir}/ran`;
    const runner = `${dir}/runner.sh`;
    await Deno.writeTextFile(runner, `#!/bin/sh\ntouch ${marker}\n`);
    await Deno.chmod(runner, 0o755);
    for (
      const [key, value] of [
        ["python_executable", runner],
        ["EXECUTION_ENV_PATH", dir],
        ["execution_env_path", dir],
        ["session.optimized_model_external_initializers_file_name", `${dir}/out.bin`],
      ] as const
    ) {
      const r = await load(s.url, "py_upload", {
        config: pythonConfig("py_upload", { [key]: { string_value: value } }),
        "file:1/model.py": b64(MODEL_PY),
      });
      assert.equal(r.status, 400, key);
      assert.deepEqual(r.json, {
        error:
          `Cannot load 'py_upload': failed to load 'py_upload': parameter '${key}' of the 'config' override names a program or an environment; it may be set only in the model repository or on the command line`,
      });
    }

    // gRPC RepositoryModelLoad: INVALID_ARGUMENT with the same message.
    const client = new grpc.Client(`127.0.0.1:${s.server.grpcPort}`, grpc.credentials.createInsecure());
    try {
      const req = lookupType("RepositoryModelLoadRequest");
      const status = await new Promise<{ code: number; details: string }>((resolve) => {
        client.makeUnaryRequest(
          "/inference.GRPCInferenceService/RepositoryModelLoad",
          (v: Record<string, unknown>) => Buffer.from(req.encode(req.fromObject(v)).finish()),
          (b: Buffer) => b,
          {
            model_name: "py_upload",
            parameters: {
              config: {
                string_param: pythonConfig("py_upload", { python_executable: { string_value: runner } }),
              },
              "file:1/model.py": { bytes_param: Buffer.from(MODEL_PY) },
            },
          },
          (err) => resolve({ code: err?.code ?? 0, details: err?.details ?? "" }),
        );
      });
      assert.deepEqual(status, {
        code: grpc.status.INVALID_ARGUMENT,
        details:
          "Cannot load 'py_upload': failed to load 'py_upload': parameter 'python_executable' of the 'config' override names a program or an environment; it may be set only in the model repository or on the command line",
      });
    } finally {
      client.close();
    }
    await assert.rejects(Deno.stat(marker), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("configured file names stay in their folder; outside paths get one answer, present or not", async () => {
  await using s = await startTestServer([`--model-repository=${FIXTURES}`, "--model-control-mode=explicit"]);
  const cases: [Record<string, unknown>, string][] = [
    [
      { default_model_filename: "../../identity_fp32/1/model.onnx" },
      "default_model_filename '../../identity_fp32/1/model.onnx' is not a file name inside the version folder",
    ],
    [
      { default_model_filename: "../../identity_fp32/1/missing.onnx" },
      "default_model_filename '../../identity_fp32/1/missing.onnx' is not a file name inside the version folder",
    ],
    [
      { default_model_filename: `${FIXTURES}/identity_fp32/1/model.onnx` },
      `default_model_filename '${FIXTURES}/identity_fp32/1/model.onnx' is not a file name inside the version folder`,
    ],
    [
      { cc_model_filenames: { "8.6": "../../identity_fp32/1/model.onnx" } },
      "cc_model_filenames['8.6'] '../../identity_fp32/1/model.onnx' is not a file name inside the version folder",
    ],
  ];
  for (const [extra, reason] of cases) {
    const r = await load(s.url, "identity_fp16", { config: onnxConfig("identity_fp16", extra) });
    assert.equal(r.status, 400, JSON.stringify(extra));
    assert.deepEqual(r.json, {
      error:
        `Cannot load 'identity_fp16': failed to load 'identity_fp16': Cannot load 'identity_fp16': ${reason}`,
    });
  }
  for (const file of ["../identity_fp32/config.pbtxt", "../../../../../../etc/passwd", "/etc/passwd"]) {
    const r = await load(s.url, "identity_fp16", {
      config: onnxConfig("identity_fp16", {
        output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [-1], label_filename: file }],
      }),
    });
    assert.equal(r.status, 400, file);
    assert.deepEqual(r.json, {
      error:
        `Cannot load 'identity_fp16': failed to load 'identity_fp16': Cannot load 'identity_fp16': output 'OUTPUT0' label_filename '${file}' is not a file name inside the model folder`,
    });
  }
  // A warmup sample's file and a sequence state's initial file stay in the warmup and initial_state folders.
  for (const file of ["../../identity_fp32/config.pbtxt", "../../../../../../etc/passwd", "/etc/passwd"]) {
    const warm = await load(s.url, "identity_fp16", {
      config: onnxConfig("identity_fp16", {
        model_warmup: [{
          name: "w",
          batch_size: 1,
          inputs: { INPUT0: { data_type: "TYPE_FP16", dims: [4], input_data_file: file } },
        }],
      }),
    });
    assert.equal(warm.status, 400, file);
    assert.deepEqual(warm.json, {
      error:
        `Cannot load 'identity_fp16': failed to load 'identity_fp16': Cannot load 'identity_fp16': model_warmup 'w' input 'INPUT0' input_data_file '${file}' is not a file name inside the warmup folder`,
    });
    const state = await load(s.url, "identity_fp16", {
      config: onnxConfig("identity_fp16", {
        sequence_batching: {
          state: [{
            input_name: "S_IN",
            output_name: "S_OUT",
            data_type: "TYPE_FP16",
            dims: [4],
            initial_state: [{ name: "init", data_type: "TYPE_FP16", dims: [4], data_file: file }],
          }],
        },
      }),
    });
    assert.equal(state.status, 400, file);
    assert.deepEqual(state.json, {
      error:
        `Cannot load 'identity_fp16': failed to load 'identity_fp16': Cannot load 'identity_fp16': state 'S_IN' initial_state data_file '${file}' is not a file name inside the initial_state folder`,
    });
  }
  // A name that stays inside after resolving loads as before.
  const ok = await load(s.url, "identity_fp32", {
    config: onnxConfig("identity_fp32", { default_model_filename: "./model.onnx" }),
  });
  assert.equal(ok.status, 200, JSON.stringify(ok.json));
});

Deno.test("a config cannot make the server allocate without bound: priority levels, BYTES warmup samples and states", async () => {
  await using s = await startTestServer([`--model-repository=${FIXTURES}`, "--model-control-mode=explicit"]);
  const prefix = "Cannot load 'identity_fp32': failed to load 'identity_fp32': ";
  const cases: [Record<string, unknown>, string][] = [
    [
      { dynamic_batching: { priority_levels: 100_000_000, default_priority_level: 1 } },
      "Cannot load 'identity_fp32': dynamic_batching priority_levels 100000000 is more than the 10000 dinfer supports",
    ],
    [
      {
        model_warmup: [{
          name: "w",
          batch_size: 1,
          inputs: { INPUT0: { data_type: "TYPE_STRING", dims: [200_000_000], zero_data: true } },
        }],
      },
      "Cannot warm up 'identity_fp32' with sample 'w': input 'INPUT0' has 200000000 elements, more than the 4194304 of a BYTES tensor the server makes",
    ],
    [
      {
        sequence_batching: {
          state: [{
            input_name: "S_IN",
            output_name: "S_OUT",
            data_type: "TYPE_STRING",
            dims: [200_000_000],
            initial_state: [{ name: "init", data_type: "TYPE_STRING", dims: [200_000_000], zero_data: true }],
          }],
        },
      },
      "Cannot load 'identity_fp32': sequence_batching state 'S_IN' has 200000000 elements, more than the 4194304 of a BYTES tensor the server makes",
    ],
  ];
  for (const [extra, reason] of cases) {
    const r = await load(s.url, "identity_fp32", { config: onnxConfig("identity_fp32", extra) });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.equal((r.json as { error: string }).error, `${prefix}${reason}`);
  }
  // Counts a load request may not ask for (each instance can be a process, a warm-up holds the load).
  const counts: [Record<string, unknown>, string][] = [
    [
      { instance_group: [{ count: 40, kind: "KIND_CPU" }, { count: 40, kind: "KIND_CPU" }] },
      "the 'config' override asks for 80 instances, more than the 64 a load request may; a larger count may be set in the model repository",
    ],
    [
      {
        model_warmup: [{
          name: "w",
          batch_size: 1,
          count: 2_000_000_000,
          inputs: { INPUT0: { data_type: "TYPE_FP32", dims: [1], zero_data: true } },
        }],
      },
      "the 'config' override asks for 2000000000 runs of a warmup sample, more than the 1000 a load request may",
    ],
  ];
  for (const [extra, reason] of counts) {
    const r = await load(s.url, "identity_fp32", { config: onnxConfig("identity_fp32", extra) });
    assert.equal(r.status, 400, JSON.stringify(r.json));
    assert.match((r.json as { error: string }).error, new RegExp(`: ${reason.replace(/[()'.]/g, ".")}$`));
  }
});

Deno.test("checkFileNames refuses NUL, '.', absolute and escaping names and accepts names inside", () => {
  const base = { name: "m", input: [], output: [{ name: "O", data_type: "TYPE_FP32", dims: [1] }] };
  const check = (extra: Record<string, unknown>) => () =>
    checkFileNames(toModelConfig({ ...base, ...extra }, "m"), "m");
  for (const bad of [".", "./", "..", "a/../..", "/x", "a\0b"]) {
    assert.throws(check({ default_model_filename: bad }), {
      message:
        `Cannot load 'm': default_model_filename '${bad}' is not a file name inside the version folder`,
    });
  }
  for (const good of ["model.onnx", "a/b/model.plan", "a/../model.onnx", "model.savedmodel/"]) {
    check({ default_model_filename: good })();
  }
});
