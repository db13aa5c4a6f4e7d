/**
 * Test helpers: a real server on free ports, fixture paths, and the Python interpreter of the
 * compatibility tests.
 * @module
 */

import { fileURLToPath } from "node:url";
import { parseCommandLine } from "../server/cli.ts";
import type { ServerConfig } from "../server/config.ts";
import { Logger } from "../server/logging.ts";
import { type RunningServer, startServer } from "../server/server.ts";
import { readUntilClosed } from "../bench/loadgen.ts";

/** The repository root. */
export const ROOT: string = fileURLToPath(new URL("../", import.meta.url));
/** The bundled example repository. */
export const EXAMPLES: string = fileURLToPath(new URL("../examples/models", import.meta.url));
/** The test fixture repository. */
export const FIXTURES: string = fileURLToPath(new URL("./fixtures/models", import.meta.url));

/**
 * Where `freePorts` looks: below the range the kernel picks the local ports of outgoing connections from
 * (`ip_local_port_range`), so that a port found free is not taken by one of the tests' client connections before
 * the server binds it (seen once: a server's gRPC port taken between the pick and the bind). Undefined, and ports
 * come from the kernel (port 0), where that range starts too low to leave room below it.
 */
const PICK_FROM: { low: number; high: number } | undefined = (() => {
  try {
    const start = Number(
      Deno.readTextFileSync("/proc/sys/net/ipv4/ip_local_port_range").trim().split(/\s+/)[0],
    );
    return Number.isInteger(start) && start > 12_000 ? { low: 10_000, high: start - 1 } : undefined;
  } catch {
    return undefined;
  }
})();

/** A process id that is not running (a process that has exited). */
export async function deadPid(): Promise<number> {
  const child = new Deno.Command("true").spawn();
  await child.status;
  return child.pid;
}

/**
 * Ports that were free a moment ago (bound, then closed), for servers started as processes: random ones below
 * the kernel's range for outgoing connections (see {@linkcode PICK_FROM}), else ones the kernel gives.
 * @param n how many
 */
export function freePorts(n: number): number[] {
  const listeners: Deno.Listener[] = [];
  try {
    for (let tries = 0; PICK_FROM && listeners.length < n && tries < 100 * n; tries++) {
      const port = PICK_FROM.low + Math.floor(Math.random() * (PICK_FROM.high - PICK_FROM.low + 1));
      try {
        listeners.push(Deno.listen({ hostname: "127.0.0.1", port }));
      } catch {
        // Taken: another one.
      }
    }
    while (listeners.length < n) listeners.push(Deno.listen({ hostname: "127.0.0.1", port: 0 }));
    return listeners.map((l) => (l.addr as Deno.NetAddr).port);
  } finally {
    for (const l of listeners) l.close();
  }
}

/**
 * The flags that put a server's HTTP, gRPC and metrics endpoints on the given ports of 127.0.0.1.
 * @param ports the HTTP, gRPC and metrics ports
 */
export function loopbackFlags([http, grpc, metrics]: number[]): string[] {
  return [
    `--http-port=${http}`,
    `--grpc-port=${grpc}`,
    `--metrics-port=${metrics}`,
    "--http-address=127.0.0.1",
    "--grpc-address=127.0.0.1",
    "--metrics-address=127.0.0.1",
  ];
}

/** A dinfer process started for a test. */
export interface ServerProcess {
  child: Deno.ChildProcess;
  /** What the process wrote (stdout and stderr), once it has exited. */
  output: Promise<Deno.CommandOutput>;
  /** The HTTP, gRPC and metrics ports. */
  http: number;
  grpc: number;
  metrics: number;
  /** `http://127.0.0.1:<http port>` */
  url: string;
}

/**
 * Starts dinfer as a process (`main.ts`) on free loopback ports and waits until it answers: for tests that need
 * an environment of their own, signals or an exit code.
 * @param flags command-line arguments besides the ports and addresses (they come first, so `serve` may lead)
 * @param options `env`: extra environment variables; `readyPath`: the endpoint that must answer 200 (default
 *   `/v2/health/ready`); `timeoutMs`: how long to wait (default 30 s); `pollMs`: the pause between two
 *   questions (default 50 ms)
 * @returns the process, which the caller stops
 */
export async function startServerProcess(
  flags: string[],
  options: { env?: Record<string, string>; readyPath?: string; timeoutMs?: number; pollMs?: number } = {},
): Promise<ServerProcess> {
  // A port found free can still be taken by another test's server before this one binds it: the start is tried
  // again on other ports then (and only then).
  for (let attempt = 1;; attempt++) {
    const [http = 0, grpc = 0, metrics = 0] = freePorts(3);
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "main.ts", ...flags, ...loopbackFlags([http, grpc, metrics])],
      cwd: ROOT,
      env: options.env,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const output = child.output();
    let exited = false;
    child.status.then(() => (exited = true), () => (exited = true));
    const url = `http://127.0.0.1:${http}`;
    const deadline = Date.now() + (options.timeoutMs ?? 30_000);
    while (!exited && Date.now() < deadline) {
      try {
        const r = await fetch(`${url}${options.readyPath ?? "/v2/health/ready"}`);
        await r.body?.cancel();
        if (r.status === 200) return { child, output, http, grpc, metrics, url };
      } catch {
        // Not listening yet.
      }
      await new Promise((r) => setTimeout(r, options.pollMs ?? 50));
    }
    try {
      child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    const stderr = new TextDecoder().decode((await output).stderr);
    if (attempt < 3 && exited && /Address already in use/.test(stderr)) continue;
    throw new Error(`dinfer did not get ready: ${stderr}`);
  }
}

/** A server started for a test. */
export interface TestServer {
  /** The running server. */
  server: RunningServer;
  /** The HTTP base URL, e.g. `http://127.0.0.1:41234`. */
  url: string;
  /** `host:port` of the HTTP endpoint, as tritonclient takes it. */
  httpHost: string;
  /** Shuts the server down. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Starts a real server on free loopback ports (HTTP and metrics; gRPC off unless flags turn it on).
 * @param flags extra command-line flags, e.g. `["--model-repository=...", "--strict-readiness=false"]`
 * @param log the server log; by default one that logs nothing
 */
/**
 * A logger that writes to a file ("" for none), at levels info, warning and error unless `levels` says otherwise.
 * @param file the log file
 * @param levels the levels to turn off (or on)
 */
export function fileLogger(
  file: string,
  levels: { info?: boolean; warning?: boolean; error?: boolean } = {},
): Logger {
  return new Logger({
    info: true,
    warning: true,
    error: true,
    ...levels,
    verbose: 0,
    format: "default",
    file,
  });
}

export async function startTestServer(flags: string[] = [], log?: Logger): Promise<TestServer> {
  const base = [
    "--http-port=0",
    "--metrics-port=0",
    "--grpc-port=0",
    "--http-address=127.0.0.1",
    "--metrics-address=127.0.0.1",
    "--grpc-address=127.0.0.1",
    "--allow-grpc=false",
    "--exit-on-error=false",
    "--log-info=false",
    "--log-warning=false",
  ];
  // A flag the caller gives replaces the default of the same name (the CLI refuses repeated flags).
  const given = new Set(flags.map((f) => f.split("=")[0]));
  const defaults = base.filter((f) => !given.has(f.split("=")[0]));
  const config = parseCommandLine([...defaults, ...flags]) as ServerConfig;
  const logger = log ?? fileLogger("", { info: false, warning: false, error: false });
  const server = await startServer(config, { logger });
  const port = server.httpAddr?.port ?? 0;
  const close = () => server.shutdown();
  return {
    server,
    url: `http://127.0.0.1:${port}`,
    httpHost: `127.0.0.1:${port}`,
    close,
    [Symbol.asyncDispose]: close,
  };
}

/** The Python interpreter with tritonclient and numpy (`DINFER_PYTHON`, else `.venv/bin/python`). */
export function pythonPath(): string {
  return Deno.env.get("DINFER_PYTHON") ?? `${ROOT}.venv/bin/python`;
}

/** The Python interpreter with torch for PyTorch models (`DINFER_TORCH_PYTHON`, else `.venv-torch/bin/python`). */
export function torchPythonPath(): string {
  return Deno.env.get("DINFER_TORCH_PYTHON") ?? `${ROOT}.venv-torch/bin/python`;
}

/**
 * Runs a Python script of the compatibility tests and returns its exit code and output.
 * @param script path relative to the repository root
 * @param args arguments
 */
export async function runPython(
  script: string,
  args: string[] = [],
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await new Deno.Command(pythonPath(), {
    args: [`${ROOT}${script}`, ...args],
    stdout: "piped",
    stderr: "piped",
    cwd: ROOT,
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

const responseDecoder = new TextDecoder();

/**
 * Reads one HTTP/1.1 response (with Content-Length) from a raw connection.
 * @returns the response's text; what arrived when the connection ends first ("" for nothing); the read's
 *   error message in parentheses when it fails before anything arrived
 */
export async function readHttpResponse(conn: Deno.Conn): Promise<string> {
  let text = "";
  const buf = new Uint8Array(65536);
  for (;;) {
    const end = text.indexOf("\r\n\r\n");
    if (end >= 0) {
      const length = Number(/content-length: *(\d+)/i.exec(text.slice(0, end))?.[1] ?? "0");
      if (text.length >= end + 4 + length) return text.slice(0, end + 4 + length);
    }
    let n: number | null;
    try {
      n = await conn.read(buf);
    } catch (err) {
      return text === "" ? `(${(err as Error).message})` : text;
    }
    if (n === null) return text;
    text += responseDecoder.decode(buf.subarray(0, n));
  }
}

/**
 * What a raw connection received until the server closed (or reset) it.
 * @returns that text, or null when the connection is still open after `ms`
 */
export async function untilClosed(conn: Deno.Conn, ms: number): Promise<string | null> {
  const { text, closed } = await readUntilClosed(conn, ms);
  return closed ? text : null;
}

/** The HTTP status of a GET, or the error message when the request fails. */
export async function httpStatus(url: string): Promise<number | string> {
  try {
    const r = await fetch(url);
    await r.body?.cancel();
    return r.status;
  } catch (err) {
    return (err as Error).message;
  }
}
