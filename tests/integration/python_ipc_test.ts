/**
 * The Python backend's messages with many calls in flight on one stub, driven straight through the backend:
 * the calls issued together go out in one write and the stub reads them together; each call must still get its
 * own answer, error or failure.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { PythonBackend, spinAllowance, waitSpinUs } from "../../server/backends/python.ts";
import { readConfigFile, toModelConfig } from "../../server/repository/config.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { ParamValue, Tensor } from "../../server/core/types.ts";
import type { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { pythonPath, startTestServer } from "../helpers.ts";
import { inferJson } from "./_http.ts";
import { pythonJson, writePythonModel } from "./_python.ts";

const DIR = fileURLToPath(new URL("../fixtures/python_models/error_py", import.meta.url));

/** The context of instance 0 of the model in `dir`. */
function context(dir: string, name: string) {
  return {
    modelDir: dir,
    versionDir: `${dir}/1`,
    version: 1,
    modelPath: `${dir}/1/model.py`,
    instanceName: `${name}_0`,
    kind: "KIND_CPU",
    deviceId: 0,
    backendConfig: { "python-executable": pythonPath() } as Record<string, string>,
  };
}

function mode(n: number): Map<string, Tensor> {
  const data = new Uint8Array(Int32Array.of(n).buffer);
  return new Map([["MODE", { name: "MODE", datatype: "INT32", shape: [1], data }]]);
}

Deno.test("calls sent together to one stub each get their own answer, error or failure", async () => {
  const config = toModelConfig(await readConfigFile(DIR, "error_py"), "error_py");
  const backend = new PythonBackend();
  const instance = await backend.createInstance(config, context(DIR, "error_py"));
  try {
    // MODE 0 and 2 answer an error response, 1 fails the call, any other value comes back as OUT.
    const modes = [5, 0, 7, 1, 9, 2, 11, 13, 1, 15, 0, 17];
    for (let round = 0; round < 3; round++) {
      const settled = await Promise.allSettled(
        modes.map((m) =>
          instance.executeRequests!([{ inputs: mode(m), outputNames: ["OUT"], id: `r${m}`, parameters: {} }])
        ),
      );
      settled.forEach((s, i) => {
        const m = modes[i]!;
        if (m === 1) {
          assert.equal(s.status, "rejected");
          const err = (s as PromiseRejectedResult).reason as ServerError;
          assert.equal(err.code, "INTERNAL");
          assert.equal(
            err.message,
            "Cannot run 'error_py' instance 'error_py_0': ValueError: execute failed on purpose",
          );
          return;
        }
        assert.equal(s.status, "fulfilled");
        const [out] = (s as PromiseFulfilledResult<(Map<string, Tensor> | Error)[]>).value;
        if (m === 0 || m === 2) {
          assert.ok(out instanceof ServerError);
          assert.equal(out.code, m === 0 ? "INTERNAL" : "NOT_FOUND");
          assert.equal(out.message, m === 0 ? "MODE 0 is refused" : "nothing here");
          return;
        }
        assert.ok(out instanceof Map);
        const t = out.get("OUT")!;
        assert.equal(t.datatype, "INT32");
        assert.deepEqual(t.shape, [1]);
        const bytes = t.data as Uint8Array;
        assert.deepEqual([...new Int32Array(bytes.buffer, bytes.byteOffset, 1)], [m]);
      });
    }
  } finally {
    await instance.close();
  }
});

/** How a call may end its stub: the MODE that does it, its name, and how the failure names the end. */
const ENDINGS = [
  [3, "os._exit", "exited with code 3"],
  [4, "SIGKILL", "was killed by SIGKILL"],
] as const;

for (const [last, how, reason] of ENDINGS) {
  Deno.test(`a call that ends the stub (${how}) takes no answer of the calls read with it`, async () => {
    // MODE 3 ends the process at once (no Python exit, no exception), MODE 4 kills it with a signal; any other
    // value comes back as OUT.
    const config = `name: "exit_py"
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`;
    const model = `import os
import signal

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = r.inputs()[0].as_numpy()
            if int(a[0]) == 3:
                os._exit(3)
            if int(a[0]) == 4:
                os.kill(os.getpid(), signal.SIGKILL)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", a.copy())]))
        return out
`;
    await withModel("exit_py", config, model, async (instance) => {
      const call = (m: number) =>
        instance.executeRequests!([{ inputs: mode(m), outputNames: ["OUT"], id: "", parameters: {} }]);
      const value = (r: PromiseSettledResult<(Map<string, Tensor> | Error)[]>) => {
        assert.equal(r.status, "fulfilled", r.status === "rejected" ? String(r.reason) : "");
        const out = (r as PromiseFulfilledResult<(Map<string, Tensor> | Error)[]>).value[0];
        assert.ok(out instanceof Map);
        const bytes = out.get("OUT")!.data as Uint8Array;
        return new Int32Array(bytes.buffer, bytes.byteOffset, 1)[0];
      };
      // Quick calls first (a stub that held a quick call's answer for the next call's write did so only after
      // a run of quick calls).
      for (let i = 0; i < 30; i++) assert.equal(value((await Promise.allSettled([call(5)]))[0]!), 5);
      // 7 goes alone; 9 and the last go out together in one write, so the stub reads them together: it runs 9,
      // then the call that ends the process.
      const settled = await Promise.allSettled([call(7), call(9), call(last)]);
      assert.equal(value(settled[0]!), 7);
      assert.equal(value(settled[1]!), 9);
      assert.equal(settled[2]!.status, "rejected");
      assert.equal(
        ((settled[2] as PromiseRejectedResult).reason as ServerError).message,
        `Cannot run 'exit_py' instance 'exit_py_0': the Python stub ${reason}`,
      );
    });
  });
}

Deno.test("empty tensors travel both ways, alone and beside others", async () => {
  const config = `name: "echo_py"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ -1 ] }, { name: "LEN" data_type: TYPE_INT32 dims: [ 1 ] } ]
`;
  const model = `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = r.inputs()[0].as_numpy()
            tensors = [pb_utils.Tensor("OUT", a.copy())]
            if "LEN" in r.requested_output_names():
                tensors.append(pb_utils.Tensor("LEN", np.array([a.size], dtype=np.int32)))
            out.append(pb_utils.InferenceResponse(tensors))
        return out
`;
  await withModel("echo_py", config, model, async (instance) => {
    for (const outputNames of [["OUT"], ["OUT", "LEN"]]) {
      const inputs = new Map([["IN", {
        name: "IN",
        datatype: "INT32" as const,
        shape: [0],
        data: new Uint8Array(0),
      }]]);
      const [out] = await instance.executeRequests!([{ inputs, outputNames, id: "", parameters: {} }]);
      assert.ok(out instanceof Map, String(out));
      const t = out.get("OUT")!;
      assert.deepEqual([t.datatype, t.shape, (t.data as Uint8Array).byteLength], ["INT32", [0], 0]);
      if (outputNames.length === 2) {
        const len = out.get("LEN")!.data as Uint8Array;
        assert.deepEqual([...new Int32Array(len.buffer, len.byteOffset, 1)], [0]);
      }
    }
  });
});

/** A model in a temporary repository (config.pbtxt and 1/model.py), loaded as one instance. */
async function withModel(
  name: string,
  config: string,
  model: string,
  body: (instance: Awaited<ReturnType<PythonBackend["createInstance"]>>) => Promise<void>,
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-pyipc-test-" });
  try {
    await writePythonModel(dir, name, config, model);
    const parsed = toModelConfig(await readConfigFile(`${dir}/${name}`, name), name);
    const instance = await new PythonBackend().createInstance(parsed, context(`${dir}/${name}`, name));
    try {
      await body(instance);
    } finally {
      await instance.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The one INT32 value of output OUT of a call's only response. */
function outValue(answer: (Map<string, Tensor> | Error)[]): number {
  const [out] = answer;
  assert.ok(out instanceof Map, String(out));
  const bytes = out.get("OUT")!.data as Uint8Array;
  return new Int32Array(bytes.buffer, bytes.byteOffset, 1)[0]!;
}

/** The promise's value, or a rejection after 30 s without one. */
async function within<T>(promise: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error("no answer in 30 s")), 30_000);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

const MODE_CONFIG = (name: string) =>
  `name: "${name}"
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
`;

Deno.test("a model that reuses its output array answers each call with its own values", async () => {
  // Quick calls the stub has read together: each answer must carry its call's values, not those the model writes
  // into its array for the next call.
  await withModel(
    "reuse_py",
    MODE_CONFIG("reuse_py"),
    `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.out = np.zeros(1, dtype=np.int32)

    def execute(self, requests):
        out = []
        for r in requests:
            self.out[:] = r.inputs()[0].as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", self.out)]))
        return out
`,
    async (instance) => {
      for (let round = 0; round < 5; round++) {
        const values = Array.from({ length: 32 }, (_, i) => 1000 * round + i);
        const answers = await Promise.all(
          values.map((v) =>
            instance.executeRequests!([{ inputs: mode(v), outputNames: ["OUT"], id: "", parameters: {} }])
          ),
        );
        assert.deepEqual(answers.map(outValue), values);
      }
    },
  );
});

Deno.test("a response whose parameters hold NaN (a float) fails its own call, and the stub goes on answering", async () => {
  await withModel(
    "nan_py",
    MODE_CONFIG("nan_py"),
    `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            m = r.inputs()[0].as_numpy()
            parameters = {"score": float("nan")} if m[0] == 0 else {}
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", m.copy())], parameters=parameters))
        return out
`,
    async (instance) => {
      // Each wait is bounded: a header the server could not parse stopped its reading, and every call after it
      // waited for ever.
      const call = (v: number) =>
        within(
          instance.executeRequests!([{ inputs: mode(v), outputNames: ["OUT"], id: "", parameters: {} }]),
        );
      const failed = await call(0).then(() => undefined, (err) => err as Error);
      assert.ok(failed instanceof ServerError, `the call with NaN must fail with a ServerError: ${failed}`);
      assert.equal(failed.code, "INTERNAL");
      assert.equal(
        failed.message,
        "Cannot run 'nan_py' instance 'nan_py_0': TritonModelException: Expect parameters values to have type " +
          "bool/int/str, found type <class 'float'>",
      );
      // The calls after it are read and answered.
      const values = [5, 6, 7, 8];
      assert.deepEqual((await Promise.all(values.map(call))).map(outValue), values);
    },
  );
});

Deno.test("a stub that exits in a call: the calls it answered before keep their answers", async () => {
  // MODE 1 ends the process; any other value comes back after 2 ms.
  await withModel(
    "exit_py",
    MODE_CONFIG("exit_py"),
    `import os, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            m = r.inputs()[0].as_numpy()
            if m[0] == 1:
                os._exit(3)
            time.sleep(0.002)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", m.copy())]))
        return out
`,
    async (instance) => {
      for (let round = 0; round < 3; round++) {
        const call = (v: number) =>
          within(
            instance.executeRequests!([{ inputs: mode(v), outputNames: ["OUT"], id: "", parameters: {} }]),
          );
        const [a, b, c] = await Promise.allSettled([call(5), call(6), call(1)]);
        assert.equal(a.status, "fulfilled", String((a as PromiseRejectedResult).reason));
        assert.equal(b.status, "fulfilled", String((b as PromiseRejectedResult).reason));
        assert.deepEqual([outValue((a as PromiseFulfilledResult<(Map<string, Tensor> | Error)[]>).value)], [
          5,
        ]);
        assert.deepEqual([outValue((b as PromiseFulfilledResult<(Map<string, Tensor> | Error)[]>).value)], [
          6,
        ]);
        assert.equal(c.status, "rejected");
        assert.match(String((c as PromiseRejectedResult).reason), /the Python stub exited with code 3/);
      }
    },
  );
});

Deno.test("quick calls read together with a call that exits keep their answers", async () => {
  // Quick calls read together with one whose sys.exit() ends the stub: the quick ones keep their answers.
  await withModel(
    "quickexit_py",
    MODE_CONFIG("quickexit_py"),
    `import sys
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        m = requests[0].inputs()[0].as_numpy()
        if m[0] == 1:
            sys.exit(5)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", m.copy())])]
`,
    async (instance) => {
      for (let round = 0; round < 3; round++) {
        const call = (v: number) =>
          within(
            instance.executeRequests!([{ inputs: mode(v), outputNames: ["OUT"], id: "", parameters: {} }]),
          );
        const [a, b, c, d] = await Promise.allSettled([call(5), call(6), call(7), call(1)]);
        for (const [s, v] of [[a, 5], [b, 6], [c, 7]] as const) {
          assert.equal(
            s.status,
            "fulfilled",
            `round ${round + 1}, ${v}: ${(s as PromiseRejectedResult).reason}`,
          );
          assert.equal(outValue((s as PromiseFulfilledResult<(Map<string, Tensor> | Error)[]>).value), v);
        }
        assert.match(String((d as PromiseRejectedResult).reason), /the Python stub exited with code 5/);
      }
    },
  );
});

Deno.test("a model that calls sys.exit() with a thread of its own running ends its stub, which is started again", async () => {
  await withModel(
    "sysexit_py",
    MODE_CONFIG("sysexit_py"),
    `import sys, threading, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # A thread that never ends, and is not a daemon: the interpreter's exit would wait for it.
        threading.Thread(target=lambda: time.sleep(3600)).start()

    def execute(self, requests):
        if requests[0].inputs()[0].as_numpy()[0] == 1:
            sys.exit(4)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.inputs()[0].as_numpy().copy())]) for r in requests]
`,
    async (instance) => {
      const call = (v: number) =>
        within(
          instance.executeRequests!([{ inputs: mode(v), outputNames: ["OUT"], id: "", parameters: {} }]),
        );
      const failed = await call(1).then(() => undefined, (err) => err as Error);
      assert.match(String(failed), /the Python stub exited with code 4/);
      // A new stub answers the next call.
      assert.equal(outValue(await call(9)), 9);
    },
  );
});

Deno.test("a quick call's answer does not wait for a slow call read with it", async () => {
  // MODE 2 waits until the file GO exists, which the test makes only once the quick call's answer has come: an
  // answer that waited for the slow call's would never come, and both calls would wait for ever.
  const go = `${await Deno.makeTempDir({ prefix: "dinfer-pyipc-go-" })}/go`;
  try {
    await withModel(
      "vary_py",
      MODE_CONFIG("vary_py"),
      `import os, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        m = requests[0].inputs()[0].as_numpy()
        if m[0] == 2:
            deadline = time.monotonic() + 60
            while not os.path.exists(${JSON.stringify(go)}) and time.monotonic() < deadline:
                time.sleep(0.001)
        elif m[0] == 3:
            time.sleep(0.01)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", m.copy())])]
`,
      async (instance) => {
        const call = (v: number) =>
          within(
            instance.executeRequests!([{ inputs: mode(v), outputNames: ["OUT"], id: "", parameters: {} }]),
          );
        // A slow call first, while the quick and the blocking one arrive: the stub reads both together after it,
        // and has seen that this model's calls take long.
        const busy = call(3);
        const quick = call(1);
        const slow = call(2);
        assert.equal(outValue(await busy), 3);
        assert.equal(outValue(await quick), 1);
        await Deno.writeTextFile(go, "");
        assert.equal(outValue(await slow), 2);
      },
    );
  } finally {
    await Deno.remove(go.slice(0, -3), { recursive: true });
  }
});

Deno.test("an output whose bytes do not fit its shape and datatype fails its request, not misread", async () => {
  await withModel(
    "wrongsize_py",
    MODE_CONFIG("wrongsize_py"),
    `import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        m = requests[0].inputs()[0].as_numpy()
        if m[0] == 3:
            # int64 bytes named INT32: 8 bytes for one element of 4.
            return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([3], dtype=np.int64), "INT32")])]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", m.copy())])]
`,
    async (instance) => {
      const call = (v: number) =>
        within(
          instance.executeRequests!([{ inputs: mode(v), outputNames: ["OUT"], id: "", parameters: {} }]),
        );
      const [out] = await call(3);
      assert.ok(out instanceof ServerError, String(out));
      assert.equal(out.code, "INTERNAL");
      assert.equal(
        out.message,
        "Cannot read output 'OUT' of 'wrongsize_py' instance 'wrongsize_py_0': it has 8 bytes, expected 4 for shape [1] of INT32",
      );
      assert.equal(outValue(await call(4)), 4);
    },
  );
});

Deno.test("calls that overflow the stub's pipe, sent together and after, each get their own answer in order", async () => {
  const dir = fileURLToPath(new URL("../fixtures/python_models/scale_py", import.meta.url));
  const config = toModelConfig(await readConfigFile(dir, "scale_py"), "scale_py");
  const instance = await new PythonBackend().createInstance(config, context(dir, "scale_py"));
  const call = async (n: number, k: number) => {
    const input = Float32Array.from({ length: n }, (_, i) => k * 1000 + (i % 997));
    const data = new Uint8Array(input.buffer);
    const inputs = new Map([["IN", { name: "IN", datatype: "FP32" as const, shape: [n], data }]]);
    const [out] = await instance.executeRequests!([{
      inputs,
      outputNames: ["OUT"],
      id: `c${k}`,
      parameters: {},
    }]);
    assert.ok(out instanceof Map, String(out));
    const bytes = out.get("OUT")!.data as Uint8Array;
    const got = new Float32Array(bytes.slice().buffer);
    assert.equal(got.length, n);
    for (let i = 0; i < n; i++) {
      if (got[i] !== input[i]! * 2) {
        assert.fail(`call ${k}: OUT[${i}] is ${got[i]}, expected ${input[i]! * 2}`);
      }
    }
    return k;
  };
  try {
    for (let round = 0; round < 2; round++) {
      // One call holds the shared file; the others go inline, 300 kB each: together several MB, more than
      // the pipe holds, so that they go out through a thread while the stub answers with as much.
      const big = Array.from({ length: 16 }, (_, k) => call(75_000, k));
      // Small calls sent while those are still being written must follow them, not overtake them.
      await Promise.resolve();
      const small = Array.from({ length: 8 }, (_, k) => call(3 + k, 100 + k));
      assert.deepEqual(await Promise.all([...big, ...small]), [
        ...Array.from({ length: 16 }, (_, k) => k),
        ...Array.from({ length: 8 }, (_, k) => 100 + k),
      ]);
    }
  } finally {
    await instance.close();
  }
});

Deno.test("the stub's spin: the config's setting, then as much of it as the cores allow", async (t) => {
  const base = toModelConfig(await readConfigFile(DIR, "error_py"), "error_py");
  const withParameter = (v: string) => ({
    ...base,
    parameters: { ...base.parameters, wait_spin_us: { string_value: v } },
  });
  await t.step("the setting: parameter, else --backend-config, else 800 µs", () => {
    assert.equal(waitSpinUs(base, {}), 800);
    assert.equal(waitSpinUs(base, { "wait-spin-us": "500" }), 500);
    assert.equal(waitSpinUs(withParameter("0"), { "wait-spin-us": "500" }), 0);
    assert.equal(waitSpinUs(withParameter("10000"), {}), 10000);
    for (const bad of ["-1", "1.5", "abc", " 5", "10001"]) {
      assert.throws(() => waitSpinUs(base, { "wait-spin-us": bad }), (err: ServerError) => {
        assert.equal(err.code, "INVALID_ARG");
        assert.equal(
          err.message,
          `Cannot load 'error_py': wait_spin_us is '${bad}', expected whole microseconds from 0 to 10000`,
        );
        return true;
      });
    }
  });
  await t.step("stubs spin while requests arrive alone and the stubs are at most half the cores", () => {
    assert.equal(spinAllowance(200, 1, 2, false), 0);
    assert.equal(spinAllowance(200, 1, 2, true), 200);
    assert.equal(spinAllowance(200, 1, 2), 200);
    assert.equal(spinAllowance(200, 2, 2), 0);
    assert.equal(spinAllowance(200, 1, 1), 0);
    assert.equal(spinAllowance(300, 8, 16), 300);
    assert.equal(spinAllowance(300, 9, 16), 0);
    assert.equal(spinAllowance(300, 8, 17), 300);
  });
  for (const flag of ["0", "500"]) {
    await t.step(`with wait-spin-us=${flag}, every call gets its own answer`, async () => {
      const ctx = context(DIR, "error_py");
      ctx.backendConfig = { ...ctx.backendConfig, "wait-spin-us": flag };
      const instance = await new PythonBackend().createInstance(base, ctx);
      try {
        for (const m of [3, 8, 21, 1, 34]) {
          const call = instance.executeRequests!([
            { inputs: mode(m), outputNames: ["OUT"], id: "", parameters: {} },
          ]);
          if (m === 1) {
            await assert.rejects(call, /ValueError: execute failed on purpose/);
            continue;
          }
          const [out] = await call;
          const bytes = (out as Map<string, Tensor>).get("OUT")!.data as Uint8Array;
          assert.deepEqual([...new Int32Array(bytes.buffer, bytes.byteOffset, 1)], [m]);
          // Past the spin: the stub sleeps, and the next call wakes it.
          await new Promise((r) => setTimeout(r, 5));
        }
      } finally {
        await instance.close();
      }
    });
  }
  await t.step("each call asks the server's arrival counter whether requests arrive alone", async () => {
    const answers = [true, false, false, true];
    let asked = 0;
    const ctx = {
      ...context(DIR, "error_py"),
      arrivals: { alone: () => answers[asked++ % answers.length]! },
    };
    const instance = await new PythonBackend().createInstance(base, ctx);
    try {
      for (const m of [3, 8, 21, 34]) {
        const [out] = await instance.executeRequests!([
          { inputs: mode(m), outputNames: ["OUT"], id: "", parameters: {} },
        ]);
        const bytes = (out as Map<string, Tensor>).get("OUT")!.data as Uint8Array;
        assert.deepEqual([...new Int32Array(bytes.buffer, bytes.byteOffset, 1)], [m]);
      }
      assert.equal(asked, 4);
    } finally {
      await instance.close();
    }
  });
  await t.step("a refused setting fails the load", async () => {
    const ctx = context(DIR, "error_py");
    ctx.backendConfig = { ...ctx.backendConfig, "wait-spin-us": "abc" };
    await assert.rejects(
      () => new PythonBackend().createInstance(base, ctx),
      /Cannot load 'error_py': wait_spin_us is 'abc', expected whole microseconds from 0 to 10000/,
    );
  });
});

Deno.test("the stub spins before a wait only while the recent waits were short enough for a spin", async () => {
  // The stub's reader on a pipe of our own, spin_s 50 ms: waits averaging under 75 ms (1.5 times the spin; the
  // average weighs the last wait a quarter) keep the next wait spinning. A frame already written, one after
  // 600 ms, then three already written: averages of about 0, 150, 112, 84 and 63 ms. Frames written before the
  // read keep the short waits near zero however slow the machine; the long one may come 110 ms late.
  const source = `
import json, os, struct, sys, threading, time
sys.path.insert(0, "server/backends/python")
import stub
r, w = os.pipe()
conn = stub.Connection(None, r, "/tmp")
conn.spin_s = 0.05
stub._core_free = lambda: True
def frame():
    head = json.dumps({"op": "noop"}).encode()
    return struct.pack("<III", 8 + len(head), len(head), 0) + head
seen = []
for delay in (0, 0.6, 0, 0, 0):
    if delay:
        threading.Timer(delay, lambda: os.write(w, frame())).start()
    else:
        os.write(w, frame())
    msg, payload, tag = conn._recv_frame()
    seen.append([msg["op"], conn.spin])
print(json.dumps(seen))
`;
  assert.deepEqual(await pythonJson(source), [
    ["noop", true],
    ["noop", false],
    ["noop", false],
    ["noop", false],
    ["noop", true],
  ]);
});

Deno.test("the stub spins only while the machine's ready tasks exceed its cores by at most one", async () => {
  // _core_free reads the running count of /proc/loadavg: here files standing in for it.
  const source = `
import json, os, sys, tempfile
sys.path.insert(0, "server/backends/python")
import stub
stub._CORES = 4
seen = []
for text in (b"0.50 0.40 0.30 1/120 999\\n", b"0.50 0.40 0.30 5/120 999\\n", b"3.0 2.0 1.0 6/120 999\\n", b"garbage\\n"):
    with tempfile.TemporaryFile() as f:
        f.write(text)
        f.flush()
        stub._LOADAVG = f.fileno()
        seen.append(stub._core_free())
stub._LOADAVG = None
seen.append(stub._core_free())
print(json.dumps(seen))
`;
  assert.deepEqual(await pythonJson(source), [true, true, false, false, false]);
});

Deno.test("requests at once go to different instances, not into one instance's pipeline", async () => {
  await using s = await startTestServer([
    `--model-repository=${fileURLToPath(new URL("../fixtures/python_models", import.meta.url))}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
    "--model-control-mode=explicit",
    "--load-model=pid_py",
  ]);
  const pidOf = async (ms: number) => {
    const r = await inferJson(s.url, "pid_py", {
      inputs: [{ name: "MS", datatype: "INT32", shape: [1], data: [ms] }],
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return (r.json as { outputs: { data: number[] }[] }).outputs[0]!.data[0]!;
  };
  // Each instance takes several calls at a time; two at once each go to an idle stub (two processes), and four
  // at once two to each.
  for (const n of [2, 4]) {
    const pids = await Promise.all(Array.from({ length: n }, () => pidOf(200)));
    const counts = [...Map.groupBy(pids, (p) => p).values()].map((g) => g.length);
    assert.deepEqual(counts, n === 2 ? [1, 1] : [2, 2], `stubs of ${n} calls: ${pids.join(", ")}`);
  }
});

Deno.test("calls of alternating forms each reach the model as they were sent", async () => {
  const dir = fileURLToPath(new URL("../fixtures/python_models/describe_py", import.meta.url));
  const config = toModelConfig(await readConfigFile(dir, "describe_py"), "describe_py");
  const instance = await new PythonBackend().createInstance(config, context(dir, "describe_py"));
  // The server found the stub's socket, to look at it for lone calls' answers (server/core/fd_poll.ts).
  assert.equal((instance as unknown as { looksForAnswers: boolean }).looksForAnswers, true);
  type Form = [number[], number[], string, Record<string, ParamValue>];
  // One shape array for every call, changed in place between them: the stub must be told the shape of the
  // call, not the one the array had when an earlier call of the same form went out.
  const shape = [1, 2];
  const call = ([dims, values, id, parameters]: Form) => {
    shape.splice(0, 2, ...dims);
    const data = new Uint8Array(Float32Array.from(values).buffer);
    const inputs = new Map([["INPUT0", { name: "INPUT0", datatype: "FP32" as const, shape, data }]]);
    return { inputs, outputNames: ["DESC"], id, parameters };
  };
  const described = (out: Map<string, Tensor> | Error) => {
    assert.ok(out instanceof Map, String(out));
    return JSON.parse((out.get("DESC")!.data as BytesTensor).strings()[0]!);
  };
  const want = ([dims, values, id, p]: Form) => {
    const { sequence_id, sequence_start, sequence_end, ...parameters } = p;
    return {
      correlation_id: sequence_id ?? 0,
      flags: (sequence_start ? 1 : 0) | (sequence_end ? 2 : 0),
      id,
      parameters,
      shape: dims,
      values,
    };
  };
  try {
    const forms: Form[] = [
      [[1, 2], [1, 2], "", {}],
      [[1, 2], [3, 4], "", {}],
      [[2, 1], [5, 6], "", {}],
      [[1, 3], [5, 6, 7], "", {}],
      [[1, 2], [8, 9], "a", {}],
      [[1, 2], [10, 11], "a", { k: 1 }],
      [[1, 2], [12, 13], "a", { k: 2 }],
      [[1, 2], [14, 15], "a", { k: "2" }],
      [[1, 2], [16, 17], "a", { j: 2 }],
      [[1, 2], [18, 19], "", { sequence_id: 7, sequence_start: true }],
      [[1, 2], [20, 21], "", { sequence_id: 7 }],
      [[1, 2], [22, 23], "", { sequence_id: 8, sequence_end: true }],
      [[2, 1], [24, 25], "", {}],
    ];
    for (const form of [...forms, ...forms.toReversed()]) {
      const [out] = await instance.executeRequests!([call(form)]);
      assert.deepEqual(described(out!), want(form));
    }
    // Two requests in one call, then one: the header names as many as the call has.
    const two = await instance.executeRequests!([call(forms[0]!), call(forms[1]!)]);
    assert.deepEqual(two.map(described), [forms[0]!, forms[1]!].map(want));
    const [one] = await instance.executeRequests!([call(forms[1]!)]);
    assert.deepEqual(described(one!), want(forms[1]!));
    // Calls in flight together: the one holding the shared file and the others go with headers of two forms,
    // both kept; each call still reaches the model as it was sent.
    const own = ([dims, values, id, parameters]: Form) => {
      const data = new Uint8Array(Float32Array.from(values).buffer);
      const inputs = new Map([["INPUT0", {
        name: "INPUT0",
        datatype: "FP32" as const,
        shape: [...dims],
        data,
      }]]);
      return { inputs, outputNames: ["DESC"], id, parameters };
    };
    for (let round = 0; round < 3; round++) {
      const batch = [forms[0]!, forms[1]!, forms[4]!, forms[0]!, forms[2]!, forms[1]!, forms[5]!, forms[0]!];
      const outs = await Promise.all(batch.map((f) => instance.executeRequests!([own(f)])));
      assert.deepEqual(outs.map(([o]) => described(o!)), batch.map(want));
    }
  } finally {
    await instance.close();
  }
});
