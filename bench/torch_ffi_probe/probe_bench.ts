/**
 * A measurement for the PyTorch backend's design: the time of one execution of digits_torch through the
 * backend as built (a Python stub running torch, server/backends/pytorch.ts) against a call into libtorch
 * through Deno.dlopen (probe.cpp, the smallest C ABI that runs the model), in one process and one run.
 * No server and no HTTP: only what the backend path itself costs.
 *
 * Build the probe against the torch venv's libtorch (about a minute on 2 cores), then run:
 *
 *   T=.venv-torch/lib/python3.11/site-packages/torch
 *   g++ -std=c++20 -O2 -fPIC -shared -w -I$T/include -I$T/include/torch/csrc/api/include \
 *     bench/torch_ffi_probe/probe.cpp -L$T/lib -ltorch -ltorch_cpu -lc10 -Wl,-rpath,$T/lib \
 *     -o /tmp/libtorchprobe.so
 *   deno run -A bench/torch_ffi_probe/probe_bench.ts /tmp/libtorchprobe.so
 * @module
 */

import { fileURLToPath } from "node:url";
import { TorchBackend } from "../../server/backends/pytorch.ts";
import {
  applyDefaults,
  readConfigFile,
  resolveBackend,
  toModelConfig,
} from "../../server/repository/config.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MODEL_DIR = `${ROOT}examples/pytorch_models/digits_torch`;
const MODEL_PT = `${MODEL_DIR}/1/model.pt`;
const SECONDS = 3;
const BATCHES = [1, 16];

const samples = JSON.parse(await Deno.readTextFile(`${ROOT}examples/models/digits/samples.json`)) as {
  inputs: number[][];
};

function input(batch: number): Float32Array {
  return Float32Array.from(Array.from({ length: batch }, (_, i) => samples.inputs[i % 8]!).flat());
}

/** Calls `fn` repeatedly for SECONDS after a warm-up; returns the median µs per call and the calls made. */
async function time(fn: () => unknown): Promise<{ p50Us: number; calls: number }> {
  for (let i = 0; i < 50; i++) await fn();
  const times: number[] = [];
  const end = performance.now() + SECONDS * 1000;
  while (performance.now() < end) {
    const a = performance.now();
    await fn();
    times.push(performance.now() - a);
  }
  times.sort((a, b) => a - b);
  return { p50Us: times[times.length >> 1]! * 1000, calls: times.length };
}

const rows: string[] = [];
/** p50 µs per execution by path and batch, for the summary. */
const p50 = new Map<string, number>();

// The native path.
const lib = Deno.dlopen(
  Deno.args[0] ?? "/tmp/libtorchprobe.so",
  {
    // void* probe_load(const char* path, int threads)
    probe_load: { parameters: ["buffer", "i32"], result: "pointer" },
    // int64_t probe_forward(void*, const float*, int64_t rows, int64_t cols, float* out, int64_t out_len)
    probe_forward: { parameters: ["pointer", "buffer", "i64", "i64", "buffer", "i64"], result: "i64" },
    probe_forward_async: {
      name: "probe_forward",
      parameters: ["pointer", "buffer", "i64", "i64", "buffer", "i64"],
      result: "i64",
      nonblocking: true,
    },
    // void probe_free(void*)
    probe_free: { parameters: ["pointer"], result: "void" },
  } as const satisfies Deno.ForeignLibraryInterface,
);
const handle = lib.symbols.probe_load(new TextEncoder().encode(MODEL_PT + "\0"), 1);
if (!handle) throw new Error("probe_load failed");
for (const batch of BATCHES) {
  const x = input(batch);
  const out = new Float32Array(batch * 10);
  const sync = await time(() =>
    lib.symbols.probe_forward(handle, x, BigInt(batch), 64n, out, BigInt(out.length))
  );
  rows.push(`| Deno.dlopen, synchronous call | ${batch} | ${sync.calls} | ${sync.p50Us.toFixed(1)} |`);
  const nb = await time(() =>
    lib.symbols.probe_forward_async(handle, x, BigInt(batch), 64n, out, BigInt(out.length))
  );
  rows.push(`| Deno.dlopen, nonblocking call | ${batch} | ${nb.calls} | ${nb.p50Us.toFixed(1)} |`);
  p50.set(`ffi:${batch}`, nb.p50Us);
}
lib.symbols.probe_free(handle);
lib.close();

// The backend as built.
const config = toModelConfig(await readConfigFile(MODEL_DIR, "digits_torch"), "digits_torch");
resolveBackend(config, ["model.pt"]);
applyDefaults(config, "model.pt");
const backend = new TorchBackend();
const instance = await backend.createInstance(config, {
  modelDir: MODEL_DIR,
  versionDir: `${MODEL_DIR}/1`,
  version: 1,
  modelPath: MODEL_PT,
  instanceName: "digits_torch_0",
  kind: "KIND_CPU",
  deviceId: 0,
  backendConfig: {},
});
try {
  for (const batch of BATCHES) {
    const x = input(batch);
    const inputs = new Map([["INPUT__0", {
      name: "INPUT__0",
      datatype: "FP32" as const,
      shape: [batch, 64],
      data: new Uint8Array(x.buffer),
    }]]);
    const r = await time(() => instance.execute(inputs, ["OUTPUT__0"]));
    rows.push(`| PyTorch backend (Python stub) | ${batch} | ${r.calls} | ${r.p50Us.toFixed(1)} |`);
    p50.set(`stub:${batch}`, r.p50Us);
  }
} finally {
  await instance.close();
}

console.log("| path | batch | calls | p50 µs per execution |\n|---|---:|---:|---:|\n" + rows.join("\n"));
const summary = BATCHES.map((b) => {
  const stub = p50.get(`stub:${b}`)!, ffi = p50.get(`ffi:${b}`)!;
  return `at batch ${b} ${(stub / ffi).toFixed(1)}× as long (${(stub - ffi).toFixed(0)} µs more)`;
});
console.log(
  `\nAn execution through the stub takes, against a nonblocking FFI call (the kind a server uses, so that the\n` +
    `event loop keeps serving), ${summary.join(", ")}.`,
);
