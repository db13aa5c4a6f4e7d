/**
 * The Python backend against a real server: Triton-style model.py files (tests/fixtures/python_models) run
 * unchanged; BLS into Python and ONNX models, auto_complete_config, error responses, a stub that crashes or
 * hangs, finalize on unload and a large tensor through shared memory.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { EXAMPLES, fileLogger, pythonPath, ROOT, startTestServer, type TestServer } from "../helpers.ts";
import type { Logger } from "../../server/logging.ts";
import {
  binaryOutputs,
  bytesOf,
  copyDir,
  deserializeStrings,
  get,
  inferBinary,
  inferJson,
  outputsOf,
  serializeStrings,
} from "../integration/_http.ts";

const PYTHON_MODELS = fileURLToPath(new URL("../fixtures/python_models", import.meta.url));

function startPythonServer(repositories: string[], flags: string[] = [], log?: Logger): Promise<TestServer> {
  return startTestServer([
    ...repositories.map((r) => `--model-repository=${r}`),
    `--backend-config=python,python-executable=${pythonPath()}`,
    "--strict-readiness=false",
    ...flags,
  ], log);
}

function fp32(name: string, shape: number[], data: number[]) {
  return { name, datatype: "FP32", shape, data };
}

function int32(name: string, shape: number[], data: number[]) {
  return { name, datatype: "INT32", shape, data };
}

Deno.test("python backend runs Triton-style model.py files", async (t) => {
  await using s = await startPythonServer([PYTHON_MODELS, EXAMPLES]);

  await t.step("add_sub_py adds and subtracts FP32 vectors", async () => {
    const r = await inferJson(s.url, "add_sub_py", {
      inputs: [
        fp32("INPUT0", [2, 4], [1, 2, 3, 4, 5, 6, 7, 8]),
        fp32("INPUT1", [2, 4], [1, 1, 1, 1, 2, 2, 2, 2]),
      ],
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(outputsOf(r), [
      fp32("OUTPUT0", [2, 4], [2, 3, 4, 5, 7, 8, 9, 10]),
      fp32("OUTPUT1", [2, 4], [0, 1, 2, 3, 3, 4, 5, 6]),
    ]);
  });

  await t.step("concurrent requests each get their own answer", async () => {
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) =>
      inferJson(s.url, "add_sub_py", {
        inputs: [fp32("INPUT0", [1, 4], [i, i, i, i]), fp32("INPUT1", [1, 4], [1, 2, 3, 4])],
        outputs: [{ name: "OUTPUT1" }],
      })));
    answers.forEach((r, i) => {
      assert.equal(r.status, 200);
      assert.deepEqual(outputsOf(r), [fp32("OUTPUT1", [1, 4], [i - 1, i - 2, i - 3, i - 4])]);
    });
  });

  await t.step("a dynamic batch reaches execute() as separate requests, each with its own id", async () => {
    const answers = await Promise.all(
      ["a", "b", "c"].map((id, i) =>
        inferJson(s.url, "batch_info_py", { id, inputs: [fp32("INPUT0", [1, 1], [i + 1])] })
      ),
    );
    answers.forEach((r, i) => {
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.equal(r.json?.id, ["a", "b", "c"][i]);
      assert.deepEqual(outputsOf(r), [
        int32("COUNT", [1, 1], [3]),
        { name: "REQUEST_ID", datatype: "BYTES", shape: [1, 1], data: [["a", "b", "c"][i]] },
        fp32("OUTPUT0", [1, 1], [2 * (i + 1)]),
      ]);
    });
  });

  await t.step(
    "identity_bytes_py returns BYTES elements unchanged, empty and non-ASCII ones too",
    async () => {
      const strings = ["hello", "", "grüße", "a\u0000b"];
      const r = await inferBinary(s.url, "identity_bytes_py", {
        inputs: [{
          name: "INPUT0",
          datatype: "BYTES",
          shape: [4],
          parameters: { binary_data_size: serializeStrings(strings).byteLength },
        }],
        outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
      }, [serializeStrings(strings)]);
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(deserializeStrings(binaryOutputs(r).get("OUTPUT0")!), strings);
    },
  );

  await t.step("bls_py calls add_sub_py and the ONNX model 'simple' through exec()", async () => {
    for (const model of ["add_sub_py", "simple"]) {
      const r = await inferJson(s.url, "bls_py", {
        inputs: [
          { name: "MODEL_NAME", datatype: "BYTES", shape: [1], data: [model] },
          fp32("INPUT0", [4], [10, 20, 30, 40]),
          fp32("INPUT1", [4], [1, 2, 3, 4]),
        ],
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(outputsOf(r), [
        fp32("OUTPUT0", [4], [11, 22, 33, 44]),
        fp32("OUTPUT1", [4], [9, 18, 27, 36]),
      ]);
    }
  });

  await t.step("a BLS call to a missing model comes back as an error response", async () => {
    const r = await inferJson(s.url, "bls_py", {
      inputs: [
        { name: "MODEL_NAME", datatype: "BYTES", shape: [1], data: ["no_such_model"] },
        fp32("INPUT0", [4], [0, 0, 0, 0]),
        fp32("INPUT1", [4], [0, 0, 0, 0]),
      ],
    });
    assert.equal(r.status, 500);
    assert.match(String(r.json?.error), /no_such_model/);
  });

  await t.step("bls_async_py awaits two async_exec() calls at the same time", async () => {
    const r = await inferJson(s.url, "bls_async_py", {
      inputs: [int32("INPUT0", [4], [1, 2, 3, 4]), int32("INPUT1", [4], [1, 1, 1, 1])],
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(outputsOf(r), [int32("OUTPUT0", [4], [4, 6, 8, 10])]);
  });

  await t.step(
    "small tensors travel inline and large ones through shared memory, in BLS and decoupled calls alike",
    async () => {
      // 4 elements travel inline in the messages; 40000 (160 kB) through shared-memory files.
      for (const n of [4, 40_000]) {
        const input = Float32Array.from({ length: n }, (_, i) => (i % 1000) - 500);
        const r = await inferBinary(s.url, "bls_large_py", {
          inputs: [{ name: "IN", datatype: "FP32", shape: [n], parameters: { binary_data_size: n * 4 } }],
          outputs: [{ name: "OUT", parameters: { binary_data: true } }],
        }, [bytesOf(input)]);
        assert.equal(r.status, 200, JSON.stringify(r.json));
        const out = new Float32Array(binaryOutputs(r).get("OUT")!.slice().buffer);
        assert.equal(out.length, n);
        for (let i = 0; i < n; i++) {
          if (out[i] !== input[i]! * 5) assert.fail(`OUT[${i}] is ${out[i]}, expected ${input[i]! * 5}`);
        }
      }
      // Every file made for one call is gone once the call is answered.
      const stubs = new Set<string>();
      for (const task of Deno.readDirSync("/proc/self/task")) {
        let kids: string;
        try {
          kids = Deno.readTextFileSync(`/proc/self/task/${task.name}/children`).trim();
        } catch (err) {
          // A thread that ended after the listing: its children, if it had any, belong to another thread now.
          if (err instanceof Deno.errors.NotFound) continue;
          throw err;
        }
        for (const pid of kids ? kids.split(" ") : []) stubs.add(pid);
      }
      const left = [...Deno.readDirSync("/dev/shm")].map((e) => e.name).filter((name) => {
        const m = /^dinfer-(?:bls|blsr|resp)-(\d+)-/.exec(name);
        return m !== null && stubs.has(m[1]!);
      });
      assert.deepEqual(left, []);
    },
  );

  await t.step("concurrent large and small requests to one stub each get their own answer", async () => {
    // The instance takes a second request before the first is answered; only one of them may use the shared
    // file at a time, the other sends its tensors inline whatever their size.
    const sizes = [40_000, 40_000, 3, 70_000, 5, 40_000];
    const answers = await Promise.all(sizes.map(async (n, k) => {
      const input = Float32Array.from({ length: n }, (_, i) => k * 1000 + (i % 997));
      const r = await inferBinary(s.url, "scale_py", {
        inputs: [{ name: "IN", datatype: "FP32", shape: [n], parameters: { binary_data_size: n * 4 } }],
        outputs: [{ name: "OUT", parameters: { binary_data: true } }],
      }, [bytesOf(input)]);
      assert.equal(r.status, 200, JSON.stringify(r.json));
      return { input, out: new Float32Array(binaryOutputs(r).get("OUT")!.slice().buffer) };
    }));
    for (const { input, out } of answers) {
      assert.equal(out.length, input.length);
      for (let i = 0; i < input.length; i++) {
        if (out[i] !== input[i]! * 2) assert.fail(`OUT[${i}] is ${out[i]}, expected ${input[i]! * 2}`);
      }
    }
  });

  await t.step("auto_complete_config fills inputs, outputs and batching", async () => {
    const meta = await get(s.url, "/v2/models/auto_complete_py");
    assert.deepEqual(meta.json?.inputs, [{ name: "IN", datatype: "INT64", shape: [-1, 3] }]);
    assert.deepEqual(meta.json?.outputs, [{ name: "DOUBLED", datatype: "INT64", shape: [-1, 3] }]);
    const config = await get(s.url, "/v2/models/auto_complete_py/config");
    assert.equal(config.json?.max_batch_size, 4);
    assert.ok(config.json?.dynamic_batching);
    const r = await inferJson(s.url, "auto_complete_py", {
      inputs: [{ name: "IN", datatype: "INT64", shape: [1, 3], data: [1, -2, 3] }],
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(outputsOf(r), [{ name: "DOUBLED", datatype: "INT64", shape: [1, 3], data: [2, -4, 6] }]);
  });

  await t.step("error responses and exceptions reach the client with their message and code", async () => {
    const mode = (m: number) => inferJson(s.url, "error_py", { inputs: [int32("MODE", [1], [m])] });
    let r = await mode(0);
    assert.equal(r.status, 500);
    assert.deepEqual(r.json, { error: "MODE 0 is refused" });
    r = await mode(1);
    assert.equal(r.status, 500);
    assert.deepEqual(r.json, {
      error: "Cannot run 'error_py' instance 'error_py_0': ValueError: execute failed on purpose",
    });
    r = await mode(2);
    assert.equal(r.status, 404);
    assert.deepEqual(r.json, { error: "nothing here" });
    r = await mode(3);
    assert.equal(r.status, 200);
    assert.deepEqual(outputsOf(r), [int32("OUT", [1], [3])]);
  });

  await t.step("a stub that kills itself fails its request and is started again", async () => {
    const pid = async () => {
      const r = await inferJson(s.url, "crash_py", { inputs: [int32("ACTION", [1], [0])] });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      return (outputsOf(r)[0]!.data as number[])[0]!;
    };
    const before = await pid();
    const crash = await inferJson(s.url, "crash_py", { inputs: [int32("ACTION", [1], [1])] });
    assert.equal(crash.status, 500);
    assert.deepEqual(crash.json, {
      error: "Cannot run 'crash_py' instance 'crash_py_0': the Python stub was killed by SIGKILL",
    });
    const after = await pid();
    assert.notEqual(after, before);
  });

  await t.step("a stub that hangs past execute_timeout_ms is killed and started again", async () => {
    const hang = await inferJson(s.url, "crash_py", { inputs: [int32("ACTION", [1], [2])] });
    assert.equal(hang.status, 500);
    assert.deepEqual(hang.json, {
      error:
        "Cannot run 'crash_py' instance 'crash_py_0': the Python stub did not answer within 1000 ms and was killed",
    });
    const r = await inferJson(s.url, "crash_py", { inputs: [int32("ACTION", [1], [0])] });
    assert.equal(r.status, 200, JSON.stringify(r.json));
  });
});

Deno.test("decoupled Python models stream through tritonclient; their Logger lines reach the server log", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-decoupled-" });
  const logFile = `${dir}/server.log`;
  const logger = fileLogger(logFile);
  try {
    // Two gRPC threads: the streams reach the main thread or the listener thread, which hands them over.
    await using s = await startPythonServer(
      [PYTHON_MODELS, EXAMPLES],
      ["--allow-grpc=true", "--grpc-thread-count=2"],
      logger,
    );
    const out = await new Deno.Command(pythonPath(), {
      args: ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", "tests/compat/test_decoupled.py"],
      cwd: ROOT,
      stdout: "piped",
      stderr: "piped",
      env: {
        PYTHONDONTWRITEBYTECODE: "1",
        DINFER_GRPC_URL: `127.0.0.1:${s.server.grpcPort}`,
        DINFER_HTTP_URL: s.httpHost,
      },
    }).output();
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    if (out.code !== 0) console.error(text);
    assert.equal(out.code, 0, "pytest tests/compat/test_decoupled.py failed; its output is above");
    assert.match(text, /\d+ passed/);
    const lines = (await Deno.readTextFile(logFile)).split("\n").filter((l) => l.includes("repeat_py took"));
    assert.ok(lines.length > 0, "no pb_utils.Logger line in the server log");
    assert.match(lines[0]!, /^I\d{4} \d\d:\d\d:\d\d\.\d{3} \d+ repeat_py: repeat_py took 1 request\(s\)$/);
  } finally {
    logger.close();
    await Deno.remove(dir, { recursive: true });
  }
});

/**
 * A graceful shutdown with a decoupled stream open: run on one gRPC thread, then three times on two, where the
 * kernel gives the client's connection to the main thread or to the listener thread (which hands the stream
 * over); the answers are the same either way.
 */
for (const [run, threads] of [1, 2, 2, 2].entries()) {
  Deno.test(`a graceful shutdown lets an open decoupled gRPC stream finish (${threads} gRPC threads, run ${run + 1})`, () =>
    shutdownWithOpenStream(threads));
}

async function shutdownWithOpenStream(threads: number): Promise<void> {
  const s = await startPythonServer([PYTHON_MODELS], ["--allow-grpc=true", `--grpc-thread-count=${threads}`]);
  let closed = false;
  try {
    const script = `
import json, queue, sys, numpy as np, tritonclient.grpc as g
c = g.InferenceServerClient(sys.argv[1])
got = queue.Queue()
c.start_stream(callback=lambda result, error: got.put((result, error)))
ins = []
for name, x, dt in (("IN", np.array([1, 2, 3], np.int32), "INT32"),
                    ("DELAY", np.array([300, 300, 300], np.uint32), "UINT32"),
                    ("WAIT", np.array([0], np.uint32), "UINT32")):
    t = g.InferInput(name, list(x.shape), dt); t.set_data_from_numpy(x); ins.append(t)
c.async_stream_infer("repeat_py", ins, request_id="drain", enable_empty_final_response=True)
out = []
for _ in range(4):
    r, e = got.get(timeout=30)
    if e is not None:
        out.append(e.message())
        break
    p = r.get_response().parameters
    out.append(None if not r.get_response().outputs else int(r.as_numpy("OUT")[0]))
c.stop_stream()
print(json.dumps(out))
`;
    const run = new Deno.Command(pythonPath(), {
      args: ["-c", script, `127.0.0.1:${s.server.grpcPort}`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    // Once the model has taken the request (its execute returned), the server is told to stop.
    for (;;) {
      const stats = await fetch(`${s.url}/v2/models/repeat_py/stats`).then((r) => r.json());
      if (stats.model_stats?.[0]?.execution_count >= 1) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    const stopping = s.close();
    closed = true;
    const out = await run;
    await stopping;
    const text = new TextDecoder().decode(out.stdout).trim();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.deepEqual(JSON.parse(text), [1, 2, 3, null]);
  } finally {
    if (!closed) await s.close();
  }
}

Deno.test("python backend passes Triton's initialize args, moves 16 MB tensors and finalizes on unload", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-py-test-" });
  try {
    const marker = `${repo}/marker.txt`;
    await copyDir(`${PYTHON_MODELS}/finalize_py`, `${repo}/finalize_py`);
    const configPath = `${repo}/finalize_py/config.pbtxt`;
    const config = await Deno.readTextFile(configPath);
    await Deno.writeTextFile(configPath, config.replace('string_value: ""', `string_value: "${marker}"`));
    {
      await using s = await startPythonServer([repo]);
      const initialized = await Deno.readTextFile(marker);
      assert.equal(
        initialized,
        'initialized {"model_instance_device_id": "0", "model_instance_kind": "CPU", ' +
          '"model_instance_name": "finalize_py_0", "model_name": "finalize_py", "model_version": "1"}\n',
      );
      const n = 4 << 20; // 16 MiB of FP32
      const input = new Float32Array(n);
      for (let i = 0; i < n; i++) input[i] = i % 1000;
      const r = await inferBinary(s.url, "finalize_py", {
        inputs: [{ name: "INPUT", datatype: "FP32", shape: [n], parameters: { binary_data_size: n * 4 } }],
        outputs: [{ name: "OUTPUT", parameters: { binary_data: true } }],
      }, [bytesOf(input)]);
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const out = binaryOutputs(r).get("OUTPUT")!;
      const values = new Float32Array(out.slice().buffer);
      assert.equal(values.length, n);
      for (let i = 0; i < n; i += 4099) assert.equal(values[i], (i % 1000) * 2);
      assert.equal(values[n - 1], ((n - 1) % 1000) * 2);
    }
    assert.equal(
      (await Deno.readTextFile(marker)).split("\n").filter((l) => l).at(-1),
      "finalized",
    );
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});

Deno.test("python models that cannot start are UNAVAILABLE with the reason, the server keeps serving", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-py-test-" });
  try {
    await copyDir(`${PYTHON_MODELS}/empty_py`, `${repo}/no_python`);
    const config = await Deno.readTextFile(`${repo}/no_python/config.pbtxt`);
    await Deno.writeTextFile(
      `${repo}/no_python/config.pbtxt`,
      config.replace('"empty_py"', '"no_python"') +
        'parameters { key: "python_executable" value: { string_value: "/nonexistent/python3" } }\n',
    );
    await copyDir(`${PYTHON_MODELS}/empty_py`, `${repo}/init_fails`);
    await Deno.writeTextFile(
      `${repo}/init_fails/config.pbtxt`,
      config.replace('"empty_py"', '"init_fails"'),
    );
    await Deno.writeTextFile(
      `${repo}/init_fails/1/model.py`,
      "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('no weights')\n",
    );
    await copyDir(`${PYTHON_MODELS}/empty_py`, `${repo}/empty_py`);
    await using s = await startPythonServer([repo], ["--log-error=false"]);
    const index = await fetch(`${s.url}/v2/repository/index`, { method: "POST" }).then((r) => r.json()) as {
      name: string;
      state: string;
      reason: string;
    }[];
    const byName = new Map(index.map((e) => [e.name, e]));
    assert.equal(byName.get("no_python")?.state, "UNAVAILABLE");
    assert.match(byName.get("no_python")!.reason, /cannot start Python '\/nonexistent\/python3'/);
    assert.equal(byName.get("init_fails")?.state, "UNAVAILABLE");
    assert.equal(
      byName.get("init_fails")!.reason,
      "Cannot load 'init_fails' instance 'init_fails_0': initialize failed: RuntimeError: no weights",
    );
    const r = await inferJson(s.url, "empty_py", {
      inputs: [fp32("INPUT0", [16], Array.from({ length: 16 }, (_, i) => i / 2))],
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(outputsOf(r), [fp32("OUTPUT0", [16], Array.from({ length: 16 }, (_, i) => i / 2))]);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
