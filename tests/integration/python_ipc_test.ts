/**
 * The Python backend's messages with many calls in flight on one stub, driven straight through the backend:
 * the calls issued together go out in one write and the stub answers those it has read together; each call
 * must still get its own answer, error or failure.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { PythonBackend } from "../../server/backends/python.ts";
import { readConfigFile, toModelConfig } from "../../server/repository/config.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { Tensor } from "../../server/core/types.ts";
import { pythonPath } from "../helpers.ts";

const DIR = fileURLToPath(new URL("../fixtures/python_models/error_py", import.meta.url));

function mode(n: number): Map<string, Tensor> {
  const data = new Uint8Array(Int32Array.of(n).buffer);
  return new Map([["MODE", { name: "MODE", datatype: "INT32", shape: [1], data }]]);
}

Deno.test("calls sent together to one stub each get their own answer, error or failure", async () => {
  const config = toModelConfig(await readConfigFile(DIR, "error_py"), "error_py");
  const backend = new PythonBackend();
  const instance = await backend.createInstance(config, {
    modelDir: DIR,
    versionDir: `${DIR}/1`,
    version: 1,
    modelPath: `${DIR}/1/model.py`,
    instanceName: "error_py_0",
    kind: "KIND_CPU",
    deviceId: 0,
    backendConfig: { "python-executable": pythonPath() },
  });
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
