/**
 * Runs h2load (nghttp2's HTTP/2 and HTTP/1.1 load generator, Debian package `nghttp2-client`) for the
 * benchmark and parses what it prints: request counts, status classes, the time per request and the CPU
 * h2load itself used.
 *
 * @example
 * ```ts
 * const path = findH2load();
 * if (path) {
 *   const r = await runH2load(["--h1", "-c", "16", "-n", "10000", "http://127.0.0.1:8000/v2/health/live"], { path });
 *   console.log(r.succeeded / r.seconds, r.meanUs);
 * }
 * ```
 * @module
 */

/** What one h2load run reported. */
export interface H2loadResult {
  /** The run's length as h2load reports it ("finished in"), in seconds. */
  seconds: number;
  /** Requests done per second, as h2load reports it (failed ones included). */
  reqPerSecond: number;
  /** Requests counted by h2load (warm-up excluded). */
  total: number;
  /** Requests started. */
  started: number;
  /** Requests done. */
  done: number;
  /** Requests answered with a 2xx or 3xx status. */
  succeeded: number;
  /** Requests answered with another status. */
  failed: number;
  /** Requests that failed below HTTP (reset streams, closed connections). */
  errored: number;
  /** Requests that timed out. */
  timeout: number;
  /** Responses by status class: 2xx, 3xx, 4xx, 5xx. */
  status: [number, number, number, number];
  /** "time for request" (first byte sent to last byte received): minimum, in microseconds. */
  minUs: number;
  /** Maximum time for request, in microseconds. */
  maxUs: number;
  /** Mean time for request, in microseconds. */
  meanUs: number;
  /** Standard deviation of the time for request, in microseconds. */
  sdUs: number;
  /** User + system CPU seconds h2load used (NaN when it could not be read). */
  cpuSeconds: number;
  /** Wall-clock seconds from starting h2load to its exit. */
  wallSeconds: number;
  /** What h2load printed. */
  output: string;
}

/** Options of {@linkcode runH2load}. */
export interface RunH2loadOptions {
  /** The h2load executable (from {@linkcode findH2load}). */
  path: string;
  /** Kill h2load after this many seconds (default 120). */
  timeoutS?: number;
}

/**
 * Finds h2load on PATH.
 * @returns the executable's path, or undefined when there is none
 */
export function findH2load(): string | undefined {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (!dir) continue;
    const path = `${dir}/h2load`;
    try {
      const info = Deno.statSync(path);
      if (info.isFile && ((info.mode ?? 0o111) & 0o111) !== 0) return path;
    } catch { /* not here */ }
  }
  return undefined;
}

/** A duration as h2load prints it ("953.60ms", "1.52s", "484us") in microseconds. */
function durationUs(text: string): number {
  const m = /^([0-9.]+)(us|ms|s)$/.exec(text.trim());
  if (!m) return NaN;
  const v = Number(m[1]);
  return m[2] === "s" ? v * 1e6 : m[2] === "ms" ? v * 1e3 : v;
}

/**
 * Parses h2load's report.
 * @param output what h2load printed on stdout
 * @returns the counts and times (CPU and wall time NaN: only {@linkcode runH2load} knows them)
 */
export function parseH2load(output: string): H2loadResult {
  const finished = /^finished in ([0-9.]+(?:us|ms|s)), ([0-9.]+) req\/s/m.exec(output);
  const requests =
    /^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout/m
      .exec(output);
  if (!finished || !requests) {
    throw new Error(
      `Cannot parse h2load's output: no 'finished in' or 'requests:' line: ${output.slice(-2000)}`,
    );
  }
  const [total, started, done, succeeded, failed, errored, timeout] = requests.slice(1).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const codes = /^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx/m.exec(output);
  const times = /^time for request:\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)/m.exec(output);
  return {
    seconds: durationUs(finished[1]!) / 1e6,
    reqPerSecond: Number(finished[2]),
    total,
    started,
    done,
    succeeded,
    failed,
    errored,
    timeout,
    status: codes
      ? [Number(codes[1]), Number(codes[2]), Number(codes[3]), Number(codes[4])]
      : [NaN, NaN, NaN, NaN],
    minUs: times ? durationUs(times[1]!) : NaN,
    maxUs: times ? durationUs(times[2]!) : NaN,
    meanUs: times ? durationUs(times[3]!) : NaN,
    sdUs: times ? durationUs(times[4]!) : NaN,
    cpuSeconds: NaN,
    wallSeconds: NaN,
    output,
  };
}

/** The line a shell wrapper prints after h2load exits: its own /proc stat, whose cutime/cstime are h2load's. */
const STAT_MARK = "H2LOAD-WRAPPER-STAT ";

/**
 * Runs h2load to its end and parses its report. h2load runs under `sh`, which prints its own
 * `/proc/<pid>/stat` once h2load has exited: the children's CPU fields there are h2load's CPU time.
 * h2load is killed after `timeoutS` where coreutils' `timeout` exists.
 * @param args h2load's arguments
 * @param options the executable and a time limit
 * @returns the parsed report with h2load's CPU and wall time
 */
export async function runH2load(args: string[], options: RunH2loadOptions): Promise<H2loadResult> {
  const limit = Math.ceil(options.timeoutS ?? 120);
  // `timeout` (coreutils) ends h2load if the server stops answering; sh waits for it, so the children's CPU
  // in sh's stat still holds h2load's.
  const script = `if command -v timeout >/dev/null 2>&1; then timeout -s KILL ${limit} "$0" "$@"; ` +
    `else "$0" "$@"; fi; s=$?; read -r l < /proc/$$/stat; echo "${STAT_MARK}$l"; exit $s`;
  const t0 = performance.now();
  const out = await new Deno.Command("sh", {
    args: ["-c", script, options.path, ...args],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const wallSeconds = (performance.now() - t0) / 1000;
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  if (!out.success) {
    const why = out.code === 137 ? `killed after ${limit} s` : `exit code ${out.code}`;
    throw new Error(`Cannot run 'h2load ${args.join(" ")}': ${why}: ${(stderr || stdout).slice(-2000)}`);
  }
  const result = parseH2load(stdout);
  const statLine = stdout.split("\n").find((l) => l.startsWith(STAT_MARK));
  if (statLine) {
    const fields = statLine.slice(statLine.lastIndexOf(")") + 2).split(" ");
    // Fields 16 and 17 of /proc/<pid>/stat (cutime, cstime), counted from field 3 after the name.
    result.cpuSeconds = (Number(fields[13]) + Number(fields[14])) / 100;
  }
  result.wallSeconds = wallSeconds;
  return result;
}

/**
 * h2load's arguments for gRPC ModelInfer calls: `connections` HTTP/2 connections (one unless given) with
 * `streams` calls in flight on each, each sending the file `body` (one gRPC-framed ModelInferRequest) with the
 * headers gRPC needs.
 * @param port the server's gRPC port on 127.0.0.1
 * @param body the request file
 * @param streams calls in flight per connection
 * @param connections connections
 */
export function grpcInferArgs(port: number, body: string, streams: number, connections = 1): string[] {
  return [
    ...["-c", String(connections), "-m", String(streams), "-d", body],
    ...["-H", "content-type: application/grpc", "-H", "te: trailers"],
    `http://127.0.0.1:${port}/inference.GRPCInferenceService/ModelInfer`,
  ];
}

/**
 * The version h2load prints (`nghttp2/1.52.0` from `h2load nghttp2/1.52.0`).
 * @param path the h2load executable
 * @returns the version, or "unknown"
 */
export function h2loadVersion(path: string): string {
  try {
    const out = new Deno.Command(path, { args: ["--version"], stdout: "piped", stderr: "null" }).outputSync();
    return new TextDecoder().decode(out.stdout).trim().split("\n")[0]?.replace(/^h2load /, "") || "unknown";
  } catch {
    return "unknown";
  }
}
