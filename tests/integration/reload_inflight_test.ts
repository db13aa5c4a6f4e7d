/**
 * Reloads with requests in flight. A request whose body is still arriving when a reload of its model finishes is
 * served by the new version: the frontend had chosen the old version before reading the body, and the old one
 * refuses requests once the reload returns. A reload returns once the new version serves, without waiting for
 * the requests the old one holds, which it answers before it unloads (as Triton).
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, pythonPath, startTestServer } from "../helpers.ts";
import { copyDir, inferJson, outputsOf } from "./_http.ts";
import { writePythonModel } from "./_python.ts";

Deno.test("a request whose body arrives across a reload of its model is answered by the new version", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-reload-" });
  try {
    await copyDir(`${EXAMPLES}/simple`, `${repo}/simple`);
    await using s = await startTestServer([`--model-repository=${repo}`, "--model-control-mode=explicit"]);
    assert.equal((await fetch(`${s.url}/v2/repository/models/simple/load`, { method: "POST" })).status, 200);
    const body = JSON.stringify({
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
      ],
      outputs: [{ name: "OUTPUT0" }],
    });
    const bytes = new TextEncoder().encode(body);
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: s.server.httpAddr!.port });
    try {
      const head = `POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${bytes.byteLength}\r\n\r\n`;
      await conn.write(new TextEncoder().encode(head));
      await conn.write(bytes.subarray(0, 10));
      // The request is in; a reload (a config override makes one) replaces version 1 meanwhile.
      await new Promise((r) => setTimeout(r, 100));
      const config = await (await fetch(`${s.url}/v2/models/simple/config`)).text();
      const reload = await fetch(`${s.url}/v2/repository/models/simple/load`, {
        method: "POST",
        body: JSON.stringify({ parameters: { config } }),
      });
      assert.equal(reload.status, 200, await reload.text());
      await conn.write(bytes.subarray(10));
      const buf = new Uint8Array(64 * 1024);
      let text = "";
      // Read until the head and as much body as its Content-Length says.
      const complete = () => {
        const end = text.indexOf("\r\n\r\n");
        const length = /content-length: (\d+)/i.exec(text)?.[1];
        return end >= 0 && length !== undefined && text.length - end - 4 >= Number(length);
      };
      while (!complete()) {
        const n = await conn.read(buf);
        if (n === null) break;
        text += new TextDecoder().decode(buf.subarray(0, n));
      }
      assert.match(text, /^HTTP\/1\.1 200 /, text);
      assert.match(text, /"data":\[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\]/);
    } finally {
      conn.close();
    }
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});

/** A Python model that answers x × its config's `factor`; a request with x[0] = 1 waits for a `release` file. */
const GATE_PY = `import json, os, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.factor = int(config["parameters"]["factor"]["string_value"])
        self.dir = args["model_repository"]

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "x").as_numpy()
            if x[0] == 1:
                open(os.path.join(self.dir, "started"), "w").close()
                for _ in range(3000):
                    if os.path.exists(os.path.join(self.dir, "release")):
                        break
                    time.sleep(0.01)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x * self.factor)]))
        return out
`;

function gateConfig(factor: number): Record<string, unknown> {
  return {
    name: "gate_py",
    backend: "python",
    max_batch_size: 0,
    input: [{ name: "x", data_type: "TYPE_INT32", dims: [2] }],
    output: [{ name: "y", data_type: "TYPE_INT32", dims: [2] }],
    parameters: { factor: { string_value: String(factor) } },
  };
}

Deno.test("a reload returns once the new version serves; the old one answers the request it holds, then unloads", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-reload-" });
  try {
    const dir = `${repo}/gate_py`;
    await writePythonModel(
      repo,
      "gate_py",
      `name: "gate_py"\nbackend: "python"\nmax_batch_size: 0\n` +
        `input [ { name: "x" data_type: TYPE_INT32 dims: [ 2 ] } ]\n` +
        `output [ { name: "y" data_type: TYPE_INT32 dims: [ 2 ] } ]\n` +
        `parameters { key: "factor" value: { string_value: "1" } }\n`,
      GATE_PY,
    );
    await using s = await startTestServer([
      `--model-repository=${repo}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
      "--model-control-mode=explicit",
      "--load-model=gate_py",
    ]);
    const infer = (x: number[]) =>
      inferJson(s.url, "gate_py", { inputs: [{ name: "x", datatype: "INT32", shape: [2], data: x }] });
    let held: Awaited<ReturnType<typeof infer>> | undefined;
    const holding = infer([1, 5]).then((a) => (held = a));
    for (let i = 0; i < 1000; i++) {
      if (await Deno.stat(`${dir}/started`).then(() => true, () => false)) break;
      await new Promise((r) => setTimeout(r, 10));
    }
    const reload = await fetch(`${s.url}/v2/repository/models/gate_py/load`, {
      method: "POST",
      body: JSON.stringify({ parameters: { config: JSON.stringify(gateConfig(2)) } }),
    });
    assert.equal(reload.status, 200, await reload.text());
    // The load did not wait for the request the old version holds; new requests go to the new version.
    assert.equal(held, undefined);
    const fresh = await infer([3, 4]);
    assert.deepEqual([fresh.status, outputsOf(fresh)[0]!.data], [200, [6, 8]]);
    assert.equal(held, undefined);
    await Deno.writeTextFile(`${dir}/release`, "");
    const old = await holding;
    assert.deepEqual([old.status, outputsOf(old)[0]!.data], [200, [1, 5]]);
    const index = await (await fetch(`${s.url}/v2/repository/index`, { method: "POST", body: "{}" })).json();
    assert.deepEqual(index, [{ name: "gate_py", version: "1", state: "READY", reason: "" }]);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
