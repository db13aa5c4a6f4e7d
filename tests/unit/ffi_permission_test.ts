/**
 * The native libraries' loaders ask for the FFI permission before they load anything: on a terminal, a process
 * started without `--allow-ffi` gets an error (or the fallback) rather than Deno's interactive prompt, which
 * would stop it there. The process runs under `script` (util-linux), which gives it a pseudo-terminal.
 * @module
 */

import { assertEquals } from "../assert.ts";
import { ROOT } from "../helpers.ts";
import { MOCK_SHIM, mockShim } from "../_trtshim.ts";

const SCRIPT = ["/usr/bin/script", "/bin/script"].find((p) => {
  try {
    return Deno.statSync(p).isFile;
  } catch {
    return false;
  }
});

/** What the three loaders do, one line each. */
const PROBE = `
import { openTrtShim } from "${ROOT}ffi/trtshim.ts";
import { TorchShim } from "${ROOT}ffi/torchshim.ts";
import { openOrtShim } from "${ROOT}ffi/ortshim.ts";
import { glibc } from "${ROOT}server/core/libc.ts";
const tries = {
  trt: () => openTrtShim(${JSON.stringify(MOCK_SHIM)}),
  torch: () => TorchShim.open(${JSON.stringify(MOCK_SHIM)}),
  ort: () => openOrtShim(),
  libc: () => glibc({ getpid: { parameters: [], result: "i32" } }),
};
for (const [name, open] of Object.entries(tries)) {
  try {
    const got = open();
    console.log(name + ": " + (got === undefined ? "undefined" : got === null ? "null" : "opened"));
  } catch (e) {
    console.log(name + ": " + e.name + " " + e.code + " " + e.message);
  }
}
console.log("done");
`;

Deno.test({
  name: "without --allow-ffi on a terminal, the loaders refuse or fall back instead of prompting",
  ignore: SCRIPT === undefined,
  async fn() {
    if (await mockShim() === undefined) throw new Error("the mock libtrtshim cannot be built");
    const dir = await Deno.makeTempDir({ prefix: "dinfer-ffi-" });
    try {
      const probe = `${dir}/probe.ts`;
      await Deno.writeTextFile(probe, PROBE);
      const deno = `'${Deno.execPath()}' run --config '${ROOT}deno.json' --allow-read --allow-env '${probe}'`;
      const out = await new Deno.Command(SCRIPT!, {
        args: ["-qec", deno, "/dev/null"],
        cwd: ROOT,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(30_000),
      }).output();
      const lines = new TextDecoder().decode(out.stdout).replaceAll("\r", "").split("\n").filter((l) =>
        l !== ""
      );
      assertEquals(lines, [
        `trt: ServerError UNAVAILABLE Cannot open the TensorRT shim '${MOCK_SHIM}': the FFI permission does not cover it (run with --allow-ffi)`,
        `torch: ServerError UNAVAILABLE Cannot open libtorchshim '${MOCK_SHIM}': the FFI permission does not cover it (run with --allow-ffi)`,
        "ort: undefined",
        "libc: null",
        "done",
      ]);
      assertEquals(out.code, 0);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
