/**
 * Ensembles against a real server over the fixtures (tests/fixtures/ensembles): exact outputs of `ens_add_sub`
 * over HTTP (JSON and binary) and gRPC (tritonclient.grpc), output subsets, the broken ensembles' reasons,
 * the composing model's statistics, and errors raised inside a step.
 * @module
 */

import assert from "node:assert/strict";
import { FIXTURES, pythonPath, ROOT, startTestServer, type TestServer } from "../helpers.ts";
import { binaryOutputs, bytesOf, call, get, inferBinary, inferJson, outputsOf } from "./_http.ts";

const ENSEMBLES = `${ROOT}tests/fixtures/ensembles`;

const IN0 = [1, 2.5, -3, 4];
const IN1 = [0.5, -1, 10, 0.25];
/** ens_add_sub: OUT_A = 2 * IN0, OUT_B = 2 * IN1, SUM = IN0 + IN1 (all exact in FP32). */
const EXPECTED = {
  OUT_A: IN0.map((v) => 2 * v),
  OUT_B: IN1.map((v) => 2 * v),
  SUM: IN0.map((v, i) => v + IN1[i]!),
};

function jsonInputs(in0: number[] = IN0, in1: number[] = IN1) {
  return [
    { name: "IN0", datatype: "FP32", shape: [in0.length], data: in0 },
    { name: "IN1", datatype: "FP32", shape: [in1.length], data: in1 },
  ];
}

/** `ens_add_sub` with dims [-1]: the ensemble accepts any length, its step model only 4. */
const LOOSE_CONFIG = (await Deno.readTextFile(`${ENSEMBLES}/ens_add_sub/config.pbtxt`))
  .replace('name: "ens_add_sub"', 'name: "ens_loose"')
  .replaceAll("dims: [ 4 ]", "dims: [ -1 ]");

async function withServer(fn: (s: TestServer) => Promise<void>): Promise<void> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_ensembles_" });
  try {
    await Deno.mkdir(`${repo}/ens_loose/1`, { recursive: true });
    await Deno.writeTextFile(`${repo}/ens_loose/config.pbtxt`, LOOSE_CONFIG);
    // Declared decoupled: refused at load (a stream's client would wait for responses that never come).
    await Deno.mkdir(`${repo}/ens_decoupled/1`, { recursive: true });
    await Deno.writeTextFile(
      `${repo}/ens_decoupled/config.pbtxt`,
      `${
        LOOSE_CONFIG.replace('name: "ens_loose"', 'name: "ens_decoupled"')
      }\nmodel_transaction_policy { decoupled: true }\n`,
    );
    await using s = await startTestServer([
      `--model-repository=${FIXTURES}`,
      `--model-repository=${ENSEMBLES}`,
      `--model-repository=${repo}`,
      // The fixtures hold broken models on purpose.
      "--strict-readiness=false",
      "--allow-grpc=true",
    ]);
    await fn(s);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
}

/** The counts of a model's statistics. */
async function counts(s: TestServer, model: string) {
  const a = await get(s.url, `/v2/models/${model}/stats`);
  assert.equal(a.status, 200);
  const m = (a.json!.model_stats as Record<string, unknown>[])[0]!;
  const is = m.inference_stats as Record<string, { count: number }>;
  return {
    inference: m.inference_count as number,
    execution: m.execution_count as number,
    success: is.success!.count,
    fail: is.fail!.count,
  };
}

/** Runs Python without blocking the event loop the server answers on. */
async function python(code: string, args: string[]): Promise<{ code: number; out: string; err: string }> {
  const out = await new Deno.Command(pythonPath(), {
    args: ["-c", code, ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { PYTHONDONTWRITEBYTECODE: "1" },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, out: dec.decode(out.stdout), err: dec.decode(out.stderr) };
}

const GRPC_CLIENT = `
import json, sys
import numpy as np
import tritonclient.grpc as g
from tritonclient.utils import InferenceServerException

c = g.InferenceServerClient(sys.argv[1])
def inputs(in0):
    a = g.InferInput("IN0", [len(in0)], "FP32"); a.set_data_from_numpy(np.array(in0, dtype=np.float32))
    b = g.InferInput("IN1", [4], "FP32"); b.set_data_from_numpy(np.array(${
  JSON.stringify(IN1)
}, dtype=np.float32))
    return [a, b]
res = {}
r = c.infer("ens_add_sub", inputs(${JSON.stringify(IN0)}))
res["all"] = {o.name: r.as_numpy(o.name).tolist() for o in r.get_response().outputs}
r = c.infer("ens_add_sub", inputs(${JSON.stringify(IN0)}), outputs=[g.InferRequestedOutput("SUM")])
res["subset"] = {o.name: r.as_numpy(o.name).tolist() for o in r.get_response().outputs}
for model, in0 in [("ens_cycle", ${JSON.stringify(IN0)}), ("ens_add_sub", [1, 2, 3])]:
    try:
        c.infer(model, inputs(in0))
        res[model] = "no error"
    except InferenceServerException as e:
        res[model] = [e.status(), e.message()]
print(json.dumps(res))
`;

Deno.test("ensembles: outputs, broken graphs, composing statistics and step errors", async (t) => {
  await withServer(async (s) => {
    await t.step("ens_add_sub gives exact outputs over HTTP JSON", async () => {
      const a = await inferJson(s.url, "ens_add_sub", { id: "e1", inputs: jsonInputs() });
      assert.equal(a.status, 200, JSON.stringify(a.json));
      assert.deepEqual([a.json!.model_name, a.json!.model_version, a.json!.id], ["ens_add_sub", "1", "e1"]);
      assert.deepEqual(outputsOf(a), [
        { name: "OUT_A", datatype: "FP32", shape: [4], data: EXPECTED.OUT_A },
        { name: "OUT_B", datatype: "FP32", shape: [4], data: EXPECTED.OUT_B },
        { name: "SUM", datatype: "FP32", shape: [4], data: EXPECTED.SUM },
      ]);
    });

    await t.step("ens_add_sub gives exact outputs over HTTP binary", async () => {
      const a = await inferBinary(s.url, "ens_add_sub", {
        inputs: [
          { name: "IN0", datatype: "FP32", shape: [4], parameters: { binary_data_size: 16 } },
          { name: "IN1", datatype: "FP32", shape: [4], parameters: { binary_data_size: 16 } },
        ],
        outputs: ["SUM", "OUT_A", "OUT_B"].map((name) => ({ name, parameters: { binary_data: true } })),
      }, [bytesOf(new Float32Array(IN0)), bytesOf(new Float32Array(IN1))]);
      assert.equal(a.status, 200);
      assert.deepEqual(outputsOf(a).map((o) => [o.name, o.datatype, o.shape]), [
        ["SUM", "FP32", [4]],
        ["OUT_A", "FP32", [4]],
        ["OUT_B", "FP32", [4]],
      ]);
      const bin = binaryOutputs(a);
      const f32 = (name: string) => [...new Float32Array(bin.get(name)!.slice().buffer)];
      assert.deepEqual([f32("SUM"), f32("OUT_A"), f32("OUT_B")], [
        EXPECTED.SUM,
        EXPECTED.OUT_A,
        EXPECTED.OUT_B,
      ]);
    });

    await t.step("a requested subset of outputs returns only those", async () => {
      const a = await inferJson(s.url, "ens_add_sub", { inputs: jsonInputs(), outputs: [{ name: "OUT_B" }] });
      assert.equal(a.status, 200);
      assert.deepEqual(outputsOf(a), [{ name: "OUT_B", datatype: "FP32", shape: [4], data: EXPECTED.OUT_B }]);
    });

    await t.step("ens_add_sub over gRPC (tritonclient.grpc)", async () => {
      const port = s.server.grpcPort;
      assert.ok(port, "the gRPC service did not start");
      const r = await python(GRPC_CLIENT, [`127.0.0.1:${port}`]);
      assert.equal(r.code, 0, r.err);
      assert.deepEqual(JSON.parse(r.out), {
        all: EXPECTED,
        subset: { SUM: EXPECTED.SUM },
        ens_cycle: [
          "StatusCode.NOT_FOUND",
          "Request for unknown model: 'ens_cycle' has no available versions: Cannot load ensemble 'ens_cycle': " +
          "the steps form a cycle (step 0 -> step 1 -> step 0)",
        ],
        ens_add_sub: [
          "StatusCode.INVALID_ARGUMENT",
          "Cannot infer 'ens_add_sub': unexpected shape for input 'IN0' for model 'ens_add_sub'. Expected [4], got [3]",
        ],
      });
    });

    const REASONS: Record<string, string> = {
      ens_decoupled:
        "Cannot load ensemble 'ens_decoupled': a decoupled ensemble (model_transaction_policy { decoupled: true }) is not supported",
      ens_cycle: "Cannot load ensemble 'ens_cycle': the steps form a cycle (step 0 -> step 1 -> step 0)",
      ens_type_mismatch:
        "Cannot load ensemble 'ens_type_mismatch': tensor 'IN0' has datatype INT32 but step 0 input 'INPUT0' takes FP32",
      ens_unknown_model:
        "Cannot load ensemble 'ens_unknown_model': step 0 uses model 'no_such_model', which is not loaded",
    };

    await t.step("broken ensembles are UNAVAILABLE with their reasons in the repository index", async () => {
      const a = await call(`${s.url}/v2/repository/index`, { method: "POST", body: "{}" });
      assert.equal(a.status, 200);
      const rows = (a.json as unknown as { name: string }[]).filter((r) => r.name.startsWith("ens_"));
      assert.deepEqual(rows, [
        { name: "ens_add_sub", version: "1", state: "READY", reason: "" },
        { name: "ens_cycle", version: "1", state: "UNAVAILABLE", reason: REASONS.ens_cycle },
        { name: "ens_decoupled", version: "1", state: "UNAVAILABLE", reason: REASONS.ens_decoupled },
        { name: "ens_loose", version: "1", state: "READY", reason: "" },
        { name: "ens_type_mismatch", version: "1", state: "UNAVAILABLE", reason: REASONS.ens_type_mismatch },
        { name: "ens_unknown_model", version: "1", state: "UNAVAILABLE", reason: REASONS.ens_unknown_model },
      ]);
    });

    await t.step("inference on a broken ensemble is 404 'has no available versions'", async () => {
      for (const [name, reason] of Object.entries(REASONS)) {
        const a = await inferJson(s.url, name, {
          inputs: [{ name: "IN0", datatype: "FP32", shape: [4], data: IN0 }],
        });
        assert.equal(a.status, 404);
        assert.deepEqual(a.json, {
          error: `Request for unknown model: '${name}' has no available versions: ${reason}`,
        });
      }
    });

    await t.step("each ensemble request runs the composing model twice", async () => {
      const stepBefore = await counts(s, "add_sub_fp32_nobatch");
      const ensBefore = await counts(s, "ens_add_sub");
      const answers = await Promise.all(
        [0, 1, 2].map((k) => inferJson(s.url, "ens_add_sub", { inputs: jsonInputs(IN0.map((v) => v + k)) })),
      );
      assert.deepEqual(
        answers.map((a) => outputsOf(a).find((o) => o.name === "OUT_A")!.data),
        [0, 1, 2].map((k) => IN0.map((v) => 2 * (v + k))),
      );
      const stepAfter = await counts(s, "add_sub_fp32_nobatch");
      const ensAfter = await counts(s, "ens_add_sub");
      assert.deepEqual(
        {
          inference: stepAfter.inference - stepBefore.inference,
          execution: stepAfter.execution - stepBefore.execution,
          success: stepAfter.success - stepBefore.success,
          fail: stepAfter.fail - stepBefore.fail,
        },
        { inference: 6, execution: 6, success: 6, fail: 0 },
      );
      assert.deepEqual(
        {
          inference: ensAfter.inference - ensBefore.inference,
          execution: ensAfter.execution - ensBefore.execution,
          success: ensAfter.success - ensBefore.success,
          fail: ensAfter.fail - ensBefore.fail,
        },
        { inference: 3, execution: 3, success: 3, fail: 0 },
      );
    });

    await t.step("a shape error inside a step is a 400 and the server keeps serving", async () => {
      // The ensemble's own validation refuses a wrong shape before any step.
      const own = await inferJson(s.url, "ens_add_sub", { inputs: jsonInputs([1, 2, 3], [1, 2, 3]) });
      assert.equal(own.status, 400);
      assert.deepEqual(own.json, {
        error:
          "Cannot infer 'ens_add_sub': unexpected shape for input 'IN0' for model 'ens_add_sub'. Expected [4], got [3]",
      });
      // ens_loose takes any length; its first step refuses 3 elements.
      const stepBefore = await counts(s, "add_sub_fp32_nobatch");
      const bad = await inferJson(s.url, "ens_loose", { inputs: jsonInputs([1, 2, 3], [1, 2, 3]) });
      assert.equal(bad.status, 400);
      assert.deepEqual(bad.json, {
        error:
          "Cannot infer 'add_sub_fp32_nobatch': unexpected shape for input 'INPUT0' for model 'add_sub_fp32_nobatch'. Expected [4], got [3]",
      });
      const stepAfter = await counts(s, "add_sub_fp32_nobatch");
      // As Triton: the step refused the request at validation, so its statistics do not count it.
      assert.deepEqual([stepAfter.execution - stepBefore.execution, stepAfter.fail - stepBefore.fail], [
        0,
        0,
      ]);
      assert.deepEqual(await counts(s, "ens_loose"), { inference: 0, execution: 0, success: 0, fail: 1 });
      const good = await inferJson(s.url, "ens_loose", { inputs: jsonInputs() });
      assert.equal(good.status, 200);
      assert.deepEqual(outputsOf(good).map((o) => [o.name, o.shape, o.data]), [
        ["OUT_A", [4], EXPECTED.OUT_A],
        ["OUT_B", [4], EXPECTED.OUT_B],
        ["SUM", [4], EXPECTED.SUM],
      ]);
      assert.deepEqual(await counts(s, "ens_loose"), { inference: 1, execution: 1, success: 1, fail: 1 });
    });
  });
});
