/**
 * The Python backend's IPC alone: one stub running bench/python_models/add_sub_py, driven straight through
 * the backend (no HTTP, no scheduler), N execute calls in flight. Prints calls/s, p50 and the CPU time per
 * call of this process (the server side) and of the stub.
 *
 * `DINFER_PYTHON=.venv/bin/python deno run -A bench/python_ipc.ts [seconds] [in-flight,...]`
 * @module
 */

import { fileURLToPath } from "node:url";
import { PythonBackend } from "../server/backends/python.ts";
import { readConfigFile, toModelConfig } from "../server/repository/config.ts";
import type { Tensor } from "../server/core/types.ts";
import { cpuSeconds, processTree } from "./cpu_usage.ts";

const DIR = fileURLToPath(new URL("./python_models/add_sub_py", import.meta.url));
const seconds = Number(Deno.args[0] ?? 3);
const points = (Deno.args[1] ?? "1,8").split(",").map(Number);

const config = toModelConfig(await readConfigFile(DIR, "add_sub_py"), "add_sub_py");
const backend = new PythonBackend();
const instance = await backend.createInstance(config, {
  modelDir: DIR,
  versionDir: `${DIR}/1`,
  version: 1,
  modelPath: `${DIR}/1/model.py`,
  instanceName: "add_sub_py_0",
  kind: "KIND_CPU",
  deviceId: 0,
  backendConfig: {},
});
const a = Int32Array.from({ length: 16 }, (_, i) => i);
const b = new Int32Array(16).fill(1);
const tensor = (name: string, v: Int32Array): Tensor => ({
  name,
  datatype: "INT32",
  shape: [1, 16],
  data: new Uint8Array(v.buffer),
});
const inputs = new Map([["INPUT0", tensor("INPUT0", a)], ["INPUT1", tensor("INPUT1", b)]]);
const names = ["OUTPUT0", "OUTPUT1"];

for (const inflight of points) {
  const lat: number[] = [];
  // The stub: this process's only descendant.
  const [, stub] = processTree(Deno.pid);
  const d0 = cpuSeconds("self"), s0 = stub ? cpuSeconds(stub) : NaN;
  const end = performance.now() + seconds * 1000;
  let wrong = 0;
  await Promise.all(Array.from({ length: inflight }, async () => {
    while (performance.now() < end) {
      const t0 = performance.now();
      const [out] = await instance.executeRequests!([{ inputs, outputNames: names, id: "", parameters: {} }]);
      lat.push((performance.now() - t0) * 1000);
      const o = out instanceof Map ? out.get("OUTPUT1") : undefined;
      if (!o || new Int32Array((o.data as Uint8Array).slice().buffer)[3] !== 2) wrong++;
    }
  }));
  const d1 = cpuSeconds("self"), s1 = stub ? cpuSeconds(stub) : NaN;
  lat.sort((x, y) => x - y);
  console.log(JSON.stringify({
    inflight,
    rate: Math.round(lat.length / seconds),
    p50Us: Math.round(lat[Math.floor(lat.length / 2)]!),
    p99Us: Math.round(lat[Math.floor(lat.length * 0.99)]!),
    meanUs: Math.round(lat.reduce((a, b) => a + b, 0) / lat.length),
    denoCpuUs: Math.round(((d1 - d0) * 1e6) / lat.length),
    stubCpuUs: Math.round(((s1 - s0) * 1e6) / lat.length),
    wrong,
  }));
}
await instance.close();
