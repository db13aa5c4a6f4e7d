/**
 * The server as the benchmarks run it: a child process on a free port, its output kept for error reports.
 * @module
 */

import { fileURLToPath } from "node:url";
import { freePort } from "./loadgen.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

/** A server process the benchmarks started. */
export interface ChildServer {
  port: number;
  pid: number;
  /** The exit code once the process has exited, else undefined. */
  exitCode(): number | undefined;
  stop(): Promise<void>;
  log(): string;
}

/**
 * Starts `main.ts` in a child process on a free HTTP port (gRPC off unless `serverArgs` names a gRPC port,
 * metrics off) and waits until it is ready.
 * @param denoArgs extra arguments for `deno run` (e.g. `--inspect=...`)
 * @param serverArgs extra server flags
 * @param options `script`: the program to run instead of `main.ts` (it gets the same flags), relative to the
 *   repository root; `prefix`: a command that runs Deno (e.g. `["taskset", "-c", "0-3"]`); `port`: the HTTP port
 *   (default: a free one); `readyLine`: text the process must print before it counts as ready (for processes
 *   that share a port, where the health check may reach another one)
 */
export async function startChildServer(
  denoArgs: string[],
  serverArgs: string[],
  options: { script?: string; prefix?: string[]; port?: number; readyLine?: string } = {},
): Promise<ChildServer> {
  const port = options.port ?? freePort();
  const prefix = options.prefix ?? [];
  const child = new Deno.Command(prefix[0] ?? Deno.execPath(), {
    args: [
      ...(prefix.length > 0 ? [...prefix.slice(1), Deno.execPath()] : []),
      "run",
      "-A",
      ...denoArgs,
      options.script ?? "main.ts",
      `--http-port=${port}`,
      ...(serverArgs.some((a) => a.startsWith("--grpc-port=")) ? [] : ["--allow-grpc=false"]),
      "--allow-metrics=false",
      "--log-info=false",
      ...serverArgs,
    ],
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let output = "";
  const drain = async (s: ReadableStream<Uint8Array>) => {
    for await (const chunk of s.pipeThrough(new TextDecoderStream())) output = (output + chunk).slice(-8000);
  };
  const drained = Promise.all([drain(child.stdout), drain(child.stderr)]);
  let exited = false;
  let code: number | undefined;
  const status = child.status.then((s) => {
    exited = true;
    code = s.code;
    output += `\n[server exited: code ${s.code}${s.signal ? `, signal ${s.signal}` : ""}]`;
    return s;
  });
  const server: ChildServer = {
    port,
    pid: child.pid,
    exitCode: () => code,
    async stop() {
      if (!exited) child.kill("SIGTERM");
      const timer = setTimeout(() => !exited && child.kill("SIGKILL"), 5000);
      await status;
      clearTimeout(timer);
      await drained;
    },
    log: () => output,
  };
  const deadline = performance.now() + 60_000;
  while (performance.now() < deadline) {
    if (exited) break;
    try {
      const res = await fetch(`http://127.0.0.1:${port}/v2/health/ready`);
      await res.body?.cancel();
      if (res.status === 200 && (options.readyLine === undefined || output.includes(options.readyLine))) {
        return server;
      }
    } catch { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.stop();
  throw new Error(`Cannot start the server: it was not ready within 60 s: ${output}`);
}
