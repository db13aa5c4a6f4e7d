/**
 * libtrtshim's GPU builds, compiled from source (`./dinfer test all`): where the CUDA toolkit is installed, the
 * CUDA build compiling and linking, and a plan model refused by it with the reason (no TensorRT here); and
 * the TensorRT build (shim/tests/build_tensorrt.sh) compiling against TensorRT 10.14's headers from PyPI and
 * linking against a stub libnvinfer, skipped with the reason where the headers cannot be downloaded. The MOCK
 * build's own C++ tests are in tests/integration/shim_ctest_test.ts.
 * @module
 */

import assert from "node:assert/strict";
import { ROOT, startTestServer } from "../helpers.ts";
import { openTrtShim } from "../../ffi/trtshim.ts";
import { call } from "../integration/_http.ts";

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

/** Fetches TensorRT's headers (a 235 KB wheel, cached in build/tensorrt); the reason when that is not possible. */
async function tensorRtHeaders(): Promise<string | undefined> {
  if (!nvcc) return "no CUDA toolkit (nvcc) found";
  const out = await new Deno.Command("bash", {
    args: ["shim/tests/build_tensorrt.sh", "--fetch"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (out.success) return undefined;
  const reason = new TextDecoder().decode(out.stderr).trim();
  // 77: not to be had here (no network, no python3); anything else (a changed wheel) fails the test.
  if (out.code !== 77) throw new Error(`shim/tests/build_tensorrt.sh --fetch failed: ${reason}`);
  return reason;
}

const noTensorRt = await tensorRtHeaders();
if (noTensorRt) console.warn(`TensorRT build test skipped: ${noTensorRt}`);

/** A repository with one plan model; the index row of that model served with the library at `path`. */
async function planModelRow(path: string): Promise<{ state: string; reason: string } | undefined> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_trt_build_" });
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
    return row && { state: row.state, reason: row.reason };
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
}

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
  // Bound as optional (libraries built before it lack it): this build must export it.
  assert.notEqual(cuda.symbols.trtshim_device_power, null);
  if (cuda.buildKind() !== "cuda") return; // built with TensorRT after all: nothing to refuse
  assert.deepEqual(await planModelRow(path), {
    state: "UNAVAILABLE",
    reason:
      `Cannot load 'plan': '${path}' was built without TensorRT (rebuild with -DTRTSHIM_WITH_TENSORRT=ON where TensorRT is installed)`,
  });
});

Deno.test({
  name:
    "the TensorRT build compiles against TensorRT's headers and links (stub libnvinfer); without a GPU plan models say so",
  ignore: noTensorRt !== undefined,
}, async () => {
  // TENSORRT_ROOT is left out: this checks the build against the pinned headers whatever the machine has.
  const env = { ...Deno.env.toObject() };
  delete env.TENSORRT_ROOT;
  const out = await new Deno.Command("bash", {
    args: ["shim/tests/build_tensorrt.sh"],
    cwd: ROOT,
    env,
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  const output = dec.decode(out.stdout) + dec.decode(out.stderr);
  assert.ok(out.success, output);
  assert.doesNotMatch(output, /warning:/);
  const path = `${ROOT}build/shim-trt/libtrtshim.so`;
  const trt = openTrtShim(path);
  assert.equal(trt.abiVersion(), 1);
  assert.equal(trt.buildKind(), "cuda+tensorrt");
  if (trt.deviceCount() > 0) return; // a GPU after all: the stub cannot run the plan, nothing to check here
  assert.deepEqual(await planModelRow(path), {
    state: "UNAVAILABLE",
    reason: `Cannot load 'plan': no GPU found ('${path}' is a cuda+tensorrt build)`,
  });
});
