/**
 * Test helper: the MOCK libtrtshim of build/shim, built on first use when missing (cmake and g++ are
 * present wherever the tests run); undefined, with the reason printed once, when it cannot be built.
 * @module
 */

import { ROOT } from "./helpers.ts";

/** The mock library the tests use (built beside libtrtshim.so in every configuration). */
export const MOCK_SHIM: string = `${ROOT}build/shim/libtrtshim_mock.so`;

let found: Promise<string | undefined> | undefined;

async function run(cmd: string, args: string[]): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(cmd, { args, cwd: ROOT, stdout: "null", stderr: "piped" }).output();
    return out.success
      ? undefined
      : new TextDecoder().decode(out.stderr).trim().split("\n").slice(-3).join(" ");
  } catch (err) {
    return (err as Error).message;
  }
}

async function build(): Promise<string | undefined> {
  const exists = await Deno.stat(MOCK_SHIM).then(() => true, () => false);
  if (!exists) {
    const failed = await run("cmake", ["-S", "shim", "-B", "build/shim", "-DCMAKE_BUILD_TYPE=Release"]) ??
      await run("cmake", ["--build", "build/shim", "-j", "2"]);
    if (failed) {
      console.warn(`trtshim tests skipped: the mock shim could not be built: ${failed}`);
      return undefined;
    }
  }
  return MOCK_SHIM;
}

/** The path of the mock shim, or undefined (with a printed reason) when it cannot be built. */
export function mockShim(): Promise<string | undefined> {
  found ??= build();
  return found;
}
