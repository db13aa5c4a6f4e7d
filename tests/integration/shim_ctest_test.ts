/**
 * The C++ unit tests of libtrtshim's MOCK build (ctest), which every machine with cmake and g++ builds. The
 * CUDA and TensorRT builds are compiled in tests/slow/shim_builds_test.ts.
 * @module
 */

import assert from "node:assert/strict";
import { ROOT } from "../helpers.ts";
import { mockShim } from "../_trtshim.ts";

const shim = await mockShim();

async function run(cmd: string, args: string[]): Promise<{ ok: boolean; output: string }> {
  const out = await new Deno.Command(cmd, { args, cwd: ROOT, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  return { ok: out.success, output: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

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
