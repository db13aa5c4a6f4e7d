/**
 * The command line as a real process: bad flags, --help, start-up failures and a clean SIGTERM shutdown.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, FIXTURES, freePorts, loopbackFlags, ROOT, startServerProcess } from "../helpers.ts";

const decoder = new TextDecoder();

function dinfer(args: string[], options: { stdout?: "piped" | "null"; stderr?: "piped" | "null" } = {}) {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "main.ts", ...args],
    cwd: ROOT,
    stdin: "null",
    stdout: options.stdout ?? "piped",
    stderr: options.stderr ?? "piped",
  });
}

/**
 * Runs dinfer to completion. A run stopped by a signal from outside (other test suites on this machine stop
 * stray servers) is retried: these short runs never signal themselves.
 */
async function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  for (let attempt = 1;; attempt++) {
    const out = await dinfer(args).output();
    if (out.signal !== null && attempt < 3) continue;
    return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
  }
}

function lines(text: string): string[] {
  return text.split("\n").filter((l) => l.trim() !== "");
}

Deno.test("an unknown flag exits 2 with one line naming it", async () => {
  const r = await run(["--no-such-flag=1"]);
  assert.equal(r.code, 2);
  assert.deepEqual(lines(r.stderr), ["dinfer: Unknown flag '--no-such-flag' (see --help)"]);
  assert.equal(r.stdout, "");
});

Deno.test("a bad flag value exits 2 with one line naming the flag and the value", async () => {
  const r = await run(["--http-port=eighty"]);
  assert.equal(r.code, 2);
  assert.deepEqual(lines(r.stderr), ["dinfer: Bad value 'eighty' for --http-port: expected an integer"]);
  const range = await run(["serve", "--http-port=70000"]);
  assert.equal(range.code, 2);
  assert.deepEqual(lines(range.stderr), ["dinfer: Bad value '70000' for --http-port: must be at most 65535"]);
});

Deno.test("--help exits 0 and lists the flags", async () => {
  const r = await run(["--help"]);
  assert.equal(r.code, 0);
  assert.equal(r.stderr, "");
  assert.match(r.stdout, /^Usage: dinfer serve/);
  assert.match(r.stdout, /^\s+--model-repository=<string>\s+Path to a model repository/m);
  assert.match(r.stdout, /^\s+--http-port=<int>\s+HTTP port \(default: 8000\)$/m);
});

Deno.test("a model that fails to load exits 1 naming it (--exit-on-error defaults to true)", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_cli_" });
  try {
    for (const name of ["bad_model", "identity_fp32"]) {
      await Deno.mkdir(`${repo}/${name}/1`, { recursive: true });
      await Deno.copyFile(`${FIXTURES}/${name}/config.pbtxt`, `${repo}/${name}/config.pbtxt`);
      await Deno.copyFile(`${FIXTURES}/${name}/1/model.onnx`, `${repo}/${name}/1/model.onnx`);
    }
    const r = await run([`--model-repository=${repo}`, ...loopbackFlags(freePorts(3)), "--log-info=false"]);
    assert.equal(r.code, 1);
    const errors = lines(r.stderr).filter((l) => l.startsWith("dinfer: "));
    assert.equal(errors.length, 1, r.stderr);
    assert.match(errors[0]!, /^dinfer: Cannot start: failed to load all models \('bad_model': .+\)$/);
    assert.doesNotMatch(errors[0]!, /identity_fp32/);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});

Deno.test("a normal start serves, is ready (gRPC started before HTTP), and exits 0 on SIGTERM", async () => {
  const { child, output, http, grpc } = await startServerProcess(
    ["serve", `--model-repository=${EXAMPLES}`],
    {
      timeoutMs: 20_000,
    },
  );
  try {
    const meta = await fetch(`http://127.0.0.1:${http}/v2`);
    assert.equal((await meta.json()).name, "dinfer");
  } finally {
    child.kill("SIGTERM");
  }
  const out = await output;
  assert.equal(out.code, 0, decoder.decode(out.stderr));
  assert.equal(out.signal, null);
  const log = decoder.decode(out.stdout) + decoder.decode(out.stderr);
  assert.match(log, new RegExp(`Started HTTPService at 127\\.0\\.0\\.1:${http}`));
  // As Triton: gRPC, then HTTP (which answers readiness), then metrics.
  const order = ["Started GRPCInferenceService at", "Started HTTPService at", "Started Metrics Service at"]
    .map((line) => log.indexOf(line));
  assert.ok(order.every((at, i) => at >= 0 && (i === 0 || at > order[i - 1]!)), `${order}\n${log}`);
  assert.match(log, new RegExp(`Started GRPCInferenceService at 127\\.0\\.0\\.1:${grpc}`));
});

Deno.test("a server whose stderr has no reader any more still stops on SIGTERM, and exits 0", async () => {
  const ports = freePorts(3);
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "main.ts", "serve", `--model-repository=${EXAMPLES}`, ...loopbackFlags(ports)],
    cwd: ROOT,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const url = `http://127.0.0.1:${ports[0]}/v2/health/ready`;
  try {
    for (let ready = false, until = Date.now() + 20_000; !ready;) {
      assert.ok(Date.now() < until, "dinfer did not get ready");
      ready = await fetch(url).then(async (r) => (await r.body?.cancel(), r.status === 200), () => false);
      if (!ready) await new Promise((r) => setTimeout(r, 50));
    }
    // The reader goes away: every log line from now on fails to be written (EPIPE).
    await child.stderr.cancel();
    child.kill("SIGTERM");
    const status = await Promise.race([
      child.status,
      new Promise<undefined>((r) => setTimeout(() => r(undefined), 15_000)),
    ]);
    assert.ok(status, "the server did not exit within 15 s of SIGTERM");
    assert.equal(status.code, 0);
    assert.equal(status.signal, null);
  } finally {
    try {
      child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    await child.status;
  }
});
