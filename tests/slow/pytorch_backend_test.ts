/**
 * The PyTorch backend against a real server, in both runtimes (native: libtorch in the server through
 * libtorchshim; stub: Python stubs running torch): TorchScript fixtures (tests/fixtures/pytorch_models, made by
 * examples/generate_torch_models.py) with each naming convention, datatypes, batching, errors at run time and
 * at load, parameters, and the digits_torch example. The torch interpreter is `DINFER_TORCH_PYTHON` (the
 * launcher's .venv-torch).
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { join } from "node:path";
import { ROOT, startTestServer, type TestServer, torchPythonPath } from "../helpers.ts";
import { type Answer, call, get, inferJson, outputsOf } from "../integration/_http.ts";

const TORCH_MODELS = fileURLToPath(new URL("../fixtures/pytorch_models", import.meta.url));
const TORCH_EXAMPLES = join(ROOT, "examples", "pytorch_models");

/** The two runtimes: libtorch in the server through libtorchshim, and Python stubs running torch. */
const RUNTIMES = ["native", "stub"] as const;
type Runtime = typeof RUNTIMES[number];

function startTorchServer(runtime: Runtime, flags: string[] = []): Promise<TestServer> {
  return startTestServer([
    `--model-repository=${TORCH_MODELS}`,
    `--model-repository=${TORCH_EXAMPLES}`,
    `--backend-config=pytorch,python-executable=${torchPythonPath()}`,
    `--backend-config=pytorch,runtime=${runtime}`,
    "--strict-readiness=false",
    ...flags,
  ]);
}

/** How a load failure of the model's first instance reads in each runtime. */
/**
 * A load failure's message. The stub runtime names the instance: `<model>_0` in the default instance group,
 * `<model>_0_0` in the first group a config declares (the group is named `<model>_0`, as in Triton).
 */
function loadFailure(runtime: Runtime, model: string, reason: string, instance = `${model}_0`): string {
  return runtime === "native"
    ? `Cannot load '${model}': ${reason}`
    : `Cannot load '${model}' instance '${instance}': initialize failed: TorchScriptError: ${reason}`;
}

function fp32(name: string, shape: number[], data: number[]) {
  return { name, datatype: "FP32", shape, data };
}

function post(base: string, path: string, body: unknown): Promise<Answer> {
  return call(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
}

/** The repository index row of a model. */
async function row(base: string, name: string): Promise<Record<string, string>> {
  const r = await post(base, "/v2/repository/index", {});
  const rows = r.json as unknown as Record<string, string>[];
  return rows.find((x) => x.name === name)!;
}

for (const runtime of RUNTIMES) {
  Deno.test(`pytorch backend (${runtime}) serves TorchScript models as Triton does`, async (t) => {
    await using s = await startTorchServer(runtime);

    await t.step("metadata names the pytorch_libtorch platform and the config's tensors", async () => {
      const r = await get(s.url, "/v2/models/add_sub_pt");
      assert.equal(r.status, 200);
      assert.deepEqual(r.json, {
        name: "add_sub_pt",
        versions: ["1"],
        platform: "pytorch_libtorch",
        inputs: [
          { name: "b", datatype: "FP32", shape: [-1, 4] },
          { name: "a", datatype: "FP32", shape: [-1, 4] },
        ],
        outputs: [
          { name: "OUTPUT__1", datatype: "FP32", shape: [-1, 4] },
          { name: "OUTPUT__0", datatype: "FP32", shape: [-1, 4] },
        ],
      });
    });

    await t.step(
      "inputs named after forward's arguments and OUTPUT__<index> outputs map by name",
      async () => {
        const r = await inferJson(s.url, "add_sub_pt", {
          inputs: [
            fp32("a", [2, 4], [1, 2, 3, 4, 5, 6, 7, 8]),
            fp32("b", [2, 4], [10, 20, 30, 40, 1, 1, 1, 1]),
          ],
          outputs: [{ name: "OUTPUT__0" }, { name: "OUTPUT__1" }],
        });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.deepEqual(outputsOf(r), [
          fp32("OUTPUT__0", [2, 4], [11, 22, 33, 44, 6, 7, 8, 9]),
          fp32("OUTPUT__1", [2, 4], [-9, -18, -27, -36, 4, 5, 6, 7]),
        ]);
      },
    );

    await t.step("INPUT__<index> inputs reach forward by index, whatever the config order", async () => {
      const r = await inferJson(s.url, "sub_index_pt", {
        inputs: [fp32("INPUT__0", [1, 3], [5, 6, 7]), fp32("INPUT__1", [1, 3], [1, 2, 3])],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(outputsOf(r), [fp32("OUTPUT__0", [1, 3], [4, 4, 4])]);
    });

    await t.step("a Dict[str, Tensor] forward gets the inputs keyed by config name", async () => {
      const r = await inferJson(s.url, "dict_pt", {
        inputs: [fp32("value", [1, 3], [1, 2, 3]), fp32("scale", [1, 3], [2, 3, 4])],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(outputsOf(r), [fp32("OUTPUT__0", [1, 3], [2, 6, 12])]);
    });

    await t.step("names without a convention follow config order; 4 requests run as one batch", async () => {
      const answers = await Promise.all([1, 2, 3, 4].map((i) =>
        inferJson(s.url, "ordered_pt", {
          inputs: [fp32("first", [1, 2], [i, -i]), fp32("second", [1, 2], [10 * i, 1])],
        })
      ));
      answers.forEach((r, k) => {
        const i = k + 1;
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.deepEqual(outputsOf(r), [
          fp32("doubled", [1, 2], [2 * i, -2 * i]),
          fp32("tripled", [1, 2], [30 * i, 3]),
        ]);
      });
      const st = await get(s.url, "/v2/models/ordered_pt/stats");
      const m = (st.json!.model_stats as Record<string, unknown>[])[0]!;
      assert.equal(m.inference_count, 4);
      assert.equal(m.execution_count, 1);
    });

    await t.step("each tensor datatype round-trips through torch", async () => {
      const inputs = [
        { name: "INPUT__0", datatype: "FP32", shape: [1, 3], data: [1.5, -2.25, 3] },
        { name: "INPUT__1", datatype: "FP16", shape: [1, 3], data: [0.5, -1, 2048] },
        { name: "INPUT__2", datatype: "INT64", shape: [1, 3], data: [-5, 0, 123456789] },
        { name: "INPUT__3", datatype: "INT8", shape: [1, 3], data: [-128, 0, 127] },
        { name: "INPUT__4", datatype: "UINT8", shape: [1, 3], data: [0, 128, 255] },
        { name: "INPUT__5", datatype: "BOOL", shape: [1, 3], data: [true, false, true] },
      ];
      const r = await inferJson(s.url, "identity_types_pt", { inputs });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(outputsOf(r), inputs.map((x) => ({ ...x, name: x.name.replace("INPUT", "OUTPUT") })));
    });

    await t.step(
      "a model without batching takes unbatched shapes and refuses a batch dimension",
      async () => {
        const r = await inferJson(s.url, "add_nobatch_pt", {
          inputs: [fp32("INPUT__0", [4], [1, 2, 3, 4]), fp32("INPUT__1", [4], [1, 1, 1, 1])],
        });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.deepEqual(outputsOf(r), [fp32("OUTPUT__0", [4], [2, 3, 4, 5])]);
        const bad = await inferJson(s.url, "add_nobatch_pt", {
          inputs: [fp32("INPUT__0", [1, 4], [1, 2, 3, 4]), fp32("INPUT__1", [1, 4], [1, 1, 1, 1])],
        });
        assert.equal(bad.status, 400);
      },
    );

    await t.step("an exception in forward answers 500 with the reason; the model keeps serving", async () => {
      const r = await inferJson(s.url, "checked_pt", { inputs: [fp32("INPUT__0", [1, 2], [4, -1])] });
      assert.equal(r.status, 500);
      assert.deepEqual(r.json, {
        error: "Cannot run 'checked_pt': PyTorch execute failure: builtins.ValueError: negative input",
      });
      const ok = await inferJson(s.url, "checked_pt", { inputs: [fp32("INPUT__0", [1, 2], [4, 9])] });
      assert.equal(ok.status, 200, JSON.stringify(ok.json));
      assert.deepEqual(outputsOf(ok), [fp32("OUTPUT__0", [1, 2], [2, 3])]);
    });

    await t.step("the sequence batcher's START control reaches forward by argument name", async () => {
      const sums: unknown[] = [];
      for (
        const [v, start, end] of [[5, true, false], [3, false, false], [2, false, true], [
          7,
          true,
          true,
        ]] as const
      ) {
        const r = await inferJson(s.url, "sequence_pt", {
          parameters: { sequence_id: 42, sequence_start: start, sequence_end: end },
          inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [v] }],
        });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        sums.push(outputsOf(r)[0]!.data?.[0]);
      }
      assert.deepEqual(sums, [5, 8, 10, 7]);
    });

    await t.step("BYTES tensors are refused at load with the reason", async () => {
      assert.deepEqual(await row(s.url, "bytes_pt"), {
        name: "bytes_pt",
        version: "1",
        state: "UNAVAILABLE",
        reason:
          "Cannot load 'bytes_pt': input 'INPUT__0' has data_type TYPE_STRING: the PyTorch backend serves tensors only, not BYTES",
      });
    });

    await t.step("a config whose inputs do not match forward is refused at load", async () => {
      assert.deepEqual(await row(s.url, "wrong_count_pt"), {
        name: "wrong_count_pt",
        version: "1",
        state: "UNAVAILABLE",
        reason: loadFailure(runtime, "wrong_count_pt", "the config names 1 input(s), forward takes 2 (a, b)"),
      });
    });

    await t.step("a model.pt that is not TorchScript is refused at load", async () => {
      const path = join(TORCH_MODELS, "bad_model_pt", "1", "model.pt");
      assert.deepEqual(await row(s.url, "bad_model_pt"), {
        name: "bad_model_pt",
        version: "1",
        state: "UNAVAILABLE",
        reason: loadFailure(
          runtime,
          "bad_model_pt",
          `'${path}' is not a TorchScript model: PytorchStreamReader failed reading zip archive: failed finding central directory`,
        ),
      });
    });

    await t.step("digits_torch classifies the held-out samples", async () => {
      const samples = JSON.parse(
        await Deno.readTextFile(join(ROOT, "examples", "models", "digits", "samples.json")),
      ) as { inputs: number[][]; labels: number[] };
      const r = await inferJson(s.url, "digits_torch", {
        inputs: [fp32("INPUT__0", [samples.inputs.length, 64], samples.inputs.flat())],
        outputs: [{ name: "OUTPUT__0", parameters: { classification: 1 } }],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"];
      const got = (outputsOf(r)[0]!.data as string[]).map((c) => c.split(":").slice(1).join(":"));
      assert.deepEqual(got, samples.labels.map((l) => `${l}:${names[l]}`));
    });
  });

  Deno.test(`pytorch backend (${runtime}) applies its config parameters and refuses bad ones`, async (t) => {
    await using s = await startTorchServer(runtime, ["--model-control-mode=explicit"]);
    const config = (parameters: Record<string, string>) =>
      JSON.stringify({
        name: "add_nobatch_pt",
        platform: "pytorch_libtorch",
        max_batch_size: 0,
        input: [
          { name: "INPUT__0", data_type: "TYPE_FP32", dims: [4] },
          { name: "INPUT__1", data_type: "TYPE_FP32", dims: [4] },
        ],
        output: [{ name: "OUTPUT__0", data_type: "TYPE_FP32", dims: [4] }],
        parameters: Object.fromEntries(Object.entries(parameters).map(([k, v]) => [k, { string_value: v }])),
      });
    const load = (parameters: Record<string, string>) =>
      post(s.url, "/v2/repository/models/add_nobatch_pt/load", {
        parameters: { config: config(parameters) },
      });

    await t.step(
      "thread counts, inference mode off and unoptimized execution still compute the same",
      async () => {
        const r = await load({
          INTRA_OP_THREAD_COUNT: "1",
          INTER_OP_THREAD_COUNT: "1",
          INFERENCE_MODE: "false",
          DISABLE_OPTIMIZED_EXECUTION: "true",
          ENABLE_JIT_PROFILING: "false",
          ENABLE_TENSOR_FUSER: "false",
        });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        const out = await inferJson(s.url, "add_nobatch_pt", {
          inputs: [fp32("INPUT__0", [4], [1, 2, 3, 4]), fp32("INPUT__1", [4], [0.5, 0.5, 0.5, 0.5])],
        });
        assert.equal(out.status, 200, JSON.stringify(out.json));
        assert.deepEqual(outputsOf(out), [fp32("OUTPUT__0", [4], [1.5, 2.5, 3.5, 4.5])]);
      },
    );

    await t.step("a thread count that is not a positive integer fails the load with the reason", async () => {
      const r = await load({ INTRA_OP_THREAD_COUNT: "zero" });
      assert.equal(r.status, 400);
      assert.deepEqual(r.json, {
        error:
          "Cannot load 'add_nobatch_pt': failed to load 'add_nobatch_pt', the previous versions keep serving: " +
          loadFailure(
            runtime,
            "add_nobatch_pt",
            "parameter 'INTRA_OP_THREAD_COUNT' is 'zero', expected a positive integer",
          ),
      });
    });

    await t.step("a KIND_GPU instance on a torch without CUDA fails the load with the reason", async () => {
      const withGpu = JSON.parse(config({})) as Record<string, unknown>;
      withGpu.instance_group = [{ kind: "KIND_GPU", count: 1, gpus: [0] }];
      const r = await post(s.url, "/v2/repository/models/add_nobatch_pt/load", {
        parameters: { config: JSON.stringify(withGpu) },
      });
      assert.equal(r.status, 400);
      assert.deepEqual(r.json, {
        error:
          "Cannot load 'add_nobatch_pt': failed to load 'add_nobatch_pt', the previous versions keep serving: " +
          (runtime === "native"
            ? "Cannot load 'add_nobatch_pt': KIND_GPU instances run in the stub runtime (--backend-config=pytorch,runtime=stub) with a CUDA build of torch"
            : loadFailure(
              runtime,
              "add_nobatch_pt",
              "KIND_GPU needs a CUDA build of torch and a GPU; this torch sees none",
              "add_nobatch_pt_0_0",
            )),
      });
    });
  });
}
