/**
 * libtrtshim's builds: the C++ unit tests of the mock (ctest) and, where the CUDA toolkit is installed, the
 * CUDA build compiling and linking, and a plan model refused by it with the reason (no TensorRT here).
 * @module
 */

import assert from "node:assert/strict";
import { ROOT, startTestServer } from "../helpers.ts";
import { mockShim } from "../_trtshim.ts";
import { openTrtShim } from "../../ffi/trtshim.ts";
import { call } from "./_http.ts";

const shim = await mockShim();

async function run(cmd: string, args: string[]): Promise<{ ok: boolean; output: string }> {
  const out = await new Deno.Command(cmd, { args, cwd: ROOT, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  return { ok: out.success, output: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

function cudaToolkit(): string | undefined {
  for (
    const nvcc of [
      "/usr/local/cuda/bin/nvcc",
      ...(Deno.env.get("PATH") ?? "").split(":").map((d) => `${d}/nvcc`),
    ]
  ) {
    try {
      if (Deno.statSync(nvcc).isFile) return nvcc;
    } catch {
      // not here
    }
  }
  return undefined;
}

const nvcc = cudaToolkit();
if (!nvcc) console.warn("CUDA build test skipped: no CUDA toolkit (nvcc) found");

Deno.test(
  { name: "the C++ unit tests of the mock shim pass (ctest)", ignore: shim === undefined },
  async () => {
    const build = await run("cmake", ["--build", "build/shim", "--target", "mock_test"]);
    assert.ok(build.ok, build.output);
    const r = await run("ctest", ["--test-dir", "build/shim", "--output-on-failure", "-R", "mock_test"]);
    assert.ok(r.ok, r.output);
    assert.match(r.output, /100% tests passed/);
  },
);

Deno.test({
  name: "the CUDA build compiles and links, and refuses plan models for want of TensorRT",
  ignore: nvcc === undefined,
}, async () => {
  const configure = await run("cmake", [
    "-S",
    "shim",
    "-B",
    "build/shim-cuda",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DTRTSHIM_WITH_CUDA=ON",
    "-DTRTSHIM_BUILD_TESTS=OFF",
    `-DCUDAToolkit_ROOT=${nvcc!.replace(/\/bin\/nvcc$/, "")}`,
  ]);
  assert.ok(configure.ok, configure.output);
  const build = await run("cmake", ["--build", "build/shim-cuda", "-j", "2", "--target", "trtshim"]);
  assert.ok(build.ok, build.output);
  const path = `${ROOT}build/shim-cuda/libtrtshim.so`;
  const cuda = openTrtShim(path);
  assert.equal(cuda.abiVersion(), 1);
  assert.ok(cuda.buildKind().startsWith("cuda"));
  if (cuda.buildKind() !== "cuda") return; // built with TensorRT after all: nothing to refuse
  const repo = await Deno.makeTempDir({ prefix: "dinfer_trt_cuda_" });
  try {
    await Deno.mkdir(`${repo}/plan/1`, { recursive: true });
    await Deno.writeTextFile(`${repo}/plan/config.pbtxt`, `platform: "tensorrt_plan"`);
    await Deno.writeTextFile(`${repo}/plan/1/model.plan`, "not a plan");
    await using s = await startTestServer([
      `--model-repository=${repo}`,
      `--backend-config=tensorrt,shim-path=${path}`,
    ]);
    const index = await call(`${s.url}/v2/repository/index`, { method: "POST", body: "{}" });
    const row = (index.json as unknown as { name: string; state: string; reason: string }[])
      .find((m) => m.name === "plan");
    assert.equal(row?.state, "UNAVAILABLE");
    assert.equal(
      row?.reason,
      `Cannot load 'plan': '${path}' was built without TensorRT (rebuild with -DTRTSHIM_WITH_TENSORRT=ON where TensorRT is installed)`,
    );
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
