/**
 * `deno task compile` completes for the whole server. Offline `deno compile` needs a local `denort`
 * (`DENORT_BIN`), which no reachable registry ships, so the test gives it the running Deno binary instead:
 * every step that reads and embeds the program, its npm packages and the included folders runs as in a real
 * build (that is where Deno's stack overflow was), only the result starts a REPL instead of the server. The
 * task runs exactly as deno.json writes it, with the output moved to a temporary folder. About 30 seconds.
 * @module
 */

import { join } from "node:path";
import { assert, assertEquals } from "../assert.ts";
import { ROOT } from "../helpers.ts";

Deno.test("deno task compile completes for the whole server (DENORT_BIN set to a local file)", async () => {
  const task: string = JSON.parse(Deno.readTextFileSync(join(ROOT, "deno.json"))).tasks.compile;
  const args = task.split(/\s+/);
  assertEquals(args.slice(0, 2), ["deno", "compile"]);
  const at = args.indexOf("--output");
  assertEquals(args[at + 1], "build/dinfer");
  const work = Deno.makeTempDirSync({ prefix: "dinfer-compile-test-" });
  try {
    const output = join(work, "dinfer");
    args.splice(at + 1, 1, output);
    const out = await new Deno.Command(Deno.execPath(), {
      args: args.slice(1),
      cwd: ROOT,
      env: { DENORT_BIN: Deno.execPath(), NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const log = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
    assertEquals(out.code, 0, log);
    // The embedded tree, as deno compile lists it: the included folders and linux-x64's ONNX Runtime only.
    for (
      const line of [
        "examples/models/*",
        "protos/*",
        "python/*",
        "onnxruntime_worker.ts",
        "bin/napi-v6/linux/x64/*",
      ]
    ) {
      assert(log.includes(line), `'${line}' is not embedded:\n${log}`);
    }
    assert(!/darwin|win32|arm64/.test(log), `other platforms' ONNX Runtime builds are embedded:\n${log}`);
    const size = Deno.statSync(output).size;
    const runtime = Deno.statSync(Deno.execPath()).size;
    // ONNX Runtime for linux-x64 alone is 44 MB, and the program with its npm packages about 150 MB; every
    // platform's ONNX Runtime would add about 240 MB.
    assert(size > runtime + 44e6 && size < runtime + 200e6, `unexpected size ${size} (runtime ${runtime})`);
  } finally {
    Deno.removeSync(work, { recursive: true });
  }
});
