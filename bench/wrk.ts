/**
 * `wrk` (Debian package `wrk`) as a load generator for JSON requests: a client in C that needs far less CPU per
 * request than the bench's own load generator, which shares the machine's cores with the server. Each run
 * checks every answer's status and that its body holds the expected texts (a Lua `response` hook) and reports
 * the answers that fail the check.
 * @module
 */

/** What one wrk run measured. */
export interface WrkResult {
  /** Requests per second, as wrk reports it. */
  rate: number;
  /** Requests answered in the run. */
  count: number;
  /** The median latency in microseconds. */
  p50Us: number;
  /** Answers whose status was not 200 or whose body lacked an expected text, and socket errors. */
  wrong: number;
}

/** Where `wrk` is on PATH, or undefined. */
export function findWrk(): string | undefined {
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (!dir) continue;
    try {
      if (Deno.statSync(`${dir}/wrk`).isFile) return `${dir}/wrk`;
    } catch {
      // Not in this directory.
    }
  }
  return undefined;
}

/** The Lua script of a run: the request, and the check of each answer, counted per thread. */
function script(body: string, expected: readonly string[]): string {
  const lua = (s: string) => JSON.stringify(s); // a JSON string of ASCII text is a valid Lua string
  return `wrk.method = "POST"
wrk.body = ${lua(body)}
wrk.headers["Content-Type"] = "application/json"
local expected = { ${expected.map(lua).join(", ")} }
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) wrong = 0 end
function response(status, headers, body)
  if status ~= 200 then wrong = wrong + 1 return end
  for _, e in ipairs(expected) do
    if not string.find(body, e, 1, true) then wrong = wrong + 1 return end
  end
end
function done(summary, latency, requests)
  local w = 0
  for _, t in ipairs(threads) do w = w + t:get("wrong") end
  local e = summary.errors
  io.write(string.format("DINFER-WRK count=%d wrong=%d errors=%d p50=%d\\n", summary.requests, w,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50)))
end
`;
}

/**
 * Runs wrk against `url` with one thread and `connections` keep-alive connections.
 * @param wrk the executable
 * @param url the infer URL
 * @param body the JSON request body (ASCII)
 * @param expected texts every answer's body must hold
 * @param connections connections, one request in flight each
 * @param seconds the run's length (whole seconds, at least 1: wrk takes no shorter unit)
 */
export async function runWrk(
  wrk: string,
  url: string,
  body: string,
  expected: readonly string[],
  connections: number,
  seconds: number,
): Promise<WrkResult> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-wrk-" });
  try {
    const file = `${dir}/request.lua`;
    await Deno.writeTextFile(file, script(body, expected));
    const out = await new Deno.Command(wrk, {
      args: ["-t1", `-c${connections}`, `-d${Math.max(1, Math.round(seconds))}s`, "-s", file, url],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    const line = text.match(/DINFER-WRK count=(\d+) wrong=(\d+) errors=(\d+) p50=(\d+)/);
    const rate = Number(text.match(/Requests\/sec:\s+([\d.]+)/)?.[1]);
    if (!out.success || !line || !Number.isFinite(rate)) {
      throw new Error(`wrk failed (${out.code}): ${text}${new TextDecoder().decode(out.stderr)}`);
    }
    return {
      rate,
      count: Number(line[1]),
      wrong: Number(line[2]) + Number(line[3]),
      p50Us: Number(line[4]),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}
