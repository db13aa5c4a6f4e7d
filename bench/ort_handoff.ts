/**
 * What the hand-off to an ONNX Runtime instance on a worker thread costs, without HTTP: lone runs of a model
 * (batch 1, after an idle pause of 1 ms, as a lone request finds the instance) and back-to-back batches of 64,
 * on an instance on the main thread and one on a worker, in alternating rounds; p50 per run and the ratio to the
 * main thread. `--baseline=DIR` adds the worker instance of another checkout's backend (DIR/server/backends/
 * onnxruntime.ts), to compare a change of the hand-off with what it replaces in the same run.
 *
 * Usage: `deno run -A bench/ort_handoff.ts [--model=bench/models/mlp] [--rounds=3] [--runs=300]
 * [--baseline=DIR] [--param=KEY:VALUE]...` (`--param` sets a config parameter, `intra_op_thread_count:1` say)
 * @module
 */

import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Backend, BackendInstance, InstanceContext } from "../server/backends/backend.ts";
import { onnxRuntimeBackend } from "../server/backends/onnxruntime.ts";
import type { Tensor } from "../server/core/types.ts";
import { applyDefaults, readConfigFile, resolveBackend, toModelConfig } from "../server/repository/config.ts";
import { upperMedian as median } from "./stats.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
let modelDir = join(ROOT, "bench/models/mlp"), rounds = 3, runs = 300;
let baseline: string | undefined;
const params: string[] = [];
for (const arg of Deno.args) {
  const [k, v] = arg.split("=");
  if (k === "--model") modelDir = resolve(v!);
  else if (k === "--rounds") rounds = Number(v);
  else if (k === "--runs") runs = Number(v);
  else if (k === "--baseline") baseline = resolve(v!);
  else if (k === "--param") params.push(v!);
  else throw new Error(`Cannot parse '${arg}': unknown flag`);
}

const config = toModelConfig(await readConfigFile(modelDir, "bench"), "bench");
resolveBackend(config, ["model.onnx"]);
applyDefaults(config, "model.onnx");
for (const p of params) {
  const [key, value] = p.split(":");
  config.parameters = { ...config.parameters, [key!]: { string_value: value! } };
}
const input = config.input[0]!;
const width = input.dims.reduce((a, b) => a * b, 1);
const ctx = (thread: string): InstanceContext => ({
  modelDir,
  versionDir: join(modelDir, "1"),
  version: 1,
  modelPath: join(modelDir, "1", "model.onnx"),
  instanceName: "bench_0",
  kind: "KIND_CPU",
  deviceId: 0,
  backendConfig: { "instance-thread": thread },
});

function batch(instance: BackendInstance, n: number): Map<string, Tensor> {
  const bytes = n * width * 4;
  const data = instance.inputBuffer?.(input.name, bytes) ?? new Uint8Array(bytes);
  new Float32Array(data.buffer, data.byteOffset, n * width).fill(0.5);
  return new Map([[input.name, { name: input.name, datatype: "FP32", shape: [n, width], data }]]);
}

const outputs = config.output.map((o) => o.name);

/** p50 of a lone run after 1 ms idle, and of back-to-back runs of 64, in µs. */
async function measure(instance: BackendInstance): Promise<[number, number]> {
  const lone: number[] = [];
  for (let i = 0; i < runs; i++) {
    await new Promise((r) => setTimeout(r, 1));
    // A lone request's input is its own buffer, not one the instance lent.
    const one = new Map([[input.name, {
      name: input.name,
      datatype: "FP32" as const,
      shape: [1, width],
      data: new Uint8Array(width * 4),
    }]]);
    const t0 = performance.now();
    await instance.execute(one, outputs);
    lone.push(performance.now() - t0);
  }
  const full: number[] = [];
  for (let i = 0; i < runs / 5; i++) {
    const t0 = performance.now();
    await instance.execute(batch(instance, 64), outputs);
    full.push(performance.now() - t0);
  }
  return [median(lone) * 1000, median(full) * 1000];
}

const variants: { name: string; backend: Backend; thread: string }[] = [
  { name: "main thread", backend: onnxRuntimeBackend, thread: "main" },
  { name: "worker", backend: onnxRuntimeBackend, thread: "worker" },
];
if (baseline) {
  const mod = await import(`file://${baseline}/server/backends/onnxruntime.ts`);
  variants.push({
    name: `worker of ${baseline}`,
    backend: mod.onnxRuntimeBackend as Backend,
    thread: "worker",
  });
}
const results = new Map(variants.map((v) => [v.name, { lone: [] as number[], full: [] as number[] }]));
for (let r = 0; r < rounds; r++) {
  for (const v of variants) {
    const instance = await v.backend.createInstance(structuredClone(config), ctx(v.thread));
    try {
      await measure(instance);
      const [lone, full] = await measure(instance);
      results.get(v.name)!.lone.push(lone);
      results.get(v.name)!.full.push(full);
    } finally {
      await instance.close();
    }
  }
}
const main = results.get("main thread")!;
for (const v of variants) {
  const { lone, full } = results.get(v.name)!;
  console.log(
    `${v.name}: lone run p50 ${median(lone).toFixed(0)} µs (${
      (median(lone) / median(main.lone)).toFixed(2)
    }× ` +
      `the main thread), batch of 64 p50 ${median(full).toFixed(0)} µs (${
        (median(full) / median(main.full)).toFixed(2)
      }×)`,
  );
}
