/**
 * A lean closed-loop HTTP/1.1 load generator over raw TCP: N keep-alive connections, each with one request in
 * flight, the same precomputed request bytes every time, minimal response parsing (status line and
 * Content-Length), per-request latency, a warm-up that is not counted and a fixed measured duration.
 *
 * A sample of the responses (the first one and every `checkEvery`-th) is handed to a check function so that
 * a server answering wrongly cannot look fast.
 *
 * @example
 * ```ts
 * const result = await runLoad({ hostname: "127.0.0.1", port: 8000 }, {
 *   request: httpRequest("POST", "/v2/models/simple/infer", "127.0.0.1:8000", body),
 *   connections: 16,
 *   durationS: 5,
 * });
 * console.log(result.rate, result.p50Us);
 * ```
 * @module
 */

/** One response as the check function sees it. */
export interface SampledResponse {
  /** The HTTP status code. */
  status: number;
  /** The header block (status line included), decoded as Latin-1, lower-cased. */
  headers: string;
  /** The body bytes. */
  body: Uint8Array;
}

/** What to send and for how long. */
export interface LoadOptions {
  /** The whole HTTP/1.1 request, head and body, sent as is for every request. */
  request: Uint8Array;
  /** How many connections, each with one request in flight. */
  connections: number;
  /** Measured seconds (after the warm-up). */
  durationS: number;
  /** Seconds before the measurement starts; requests completing then are not counted (default 1). */
  warmupS?: number;
  /** Checks a sampled response; returns why it is wrong, or undefined when it is right. */
  check?: (response: SampledResponse) => string | undefined;
  /** Check the first response and then every this many (default 1000). */
  checkEvery?: number;
  /** Called when the measured window starts and when it ends (for example to sample CPU use). */
  onWindow?: (edge: "start" | "end") => void;
}

/** What a run measured. */
export interface LoadResult {
  /** Connections used. */
  connections: number;
  /** Requests completed with status 200 inside the measured window. */
  count: number;
  /** The measured window in seconds. */
  seconds: number;
  /** Completed requests (status 200) per second. */
  rate: number;
  /** Latency percentiles in microseconds, over the 200 responses of the window. */
  p50Us: number;
  /** 90th percentile latency in microseconds. */
  p90Us: number;
  /** 99th percentile latency in microseconds. */
  p99Us: number;
  /** Mean latency in microseconds. */
  meanUs: number;
  /** Responses with a status other than 200, plus connection failures (whole run, warm-up included). */
  errors: number;
  /** Responses handed to the check function. */
  checked: number;
  /** Checked responses that were wrong. */
  mismatches: number;
  /** The first error or mismatch seen, for the report. */
  firstError?: string;
}

const encoder = new TextEncoder();
const CR = 13;
const LF = 10;

/**
 * Builds the bytes of an HTTP/1.1 request with a Content-Length.
 * @param head the request line parts and headers: method, path, host and any extra headers
 * @param body the body (empty for none)
 * @returns the request bytes
 */
/** A loopback port that was free a moment ago (bound to port 0, then closed). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

export function httpRequest(
  head: { method: string; path: string; host: string; headers?: Record<string, string> },
  body: Uint8Array = new Uint8Array(0),
): Uint8Array {
  let text = `${head.method} ${head.path} HTTP/1.1\r\nhost: ${head.host}\r\n`;
  for (const [k, v] of Object.entries(head.headers ?? {})) text += `${k}: ${v}\r\n`;
  if (body.byteLength > 0 || head.method !== "GET") text += `content-length: ${body.byteLength}\r\n`;
  text += "\r\n";
  const h = encoder.encode(text);
  const out = new Uint8Array(h.byteLength + body.byteLength);
  out.set(h, 0);
  out.set(body, h.byteLength);
  return out;
}

/** Index just past the "\r\n\r\n" that ends the head, or -1. */
function headEnd(buf: Uint8Array, from: number, to: number): number {
  for (let i = Math.max(from, 3); i < to; i++) {
    if (buf[i] === LF && buf[i - 1] === CR && buf[i - 2] === LF && buf[i - 3] === CR) return i + 1;
  }
  return -1;
}

const CONTENT_LENGTH = encoder.encode("\r\ncontent-length:");

/** The Content-Length value in a head, or -1 when there is none. */
function contentLength(buf: Uint8Array, end: number): number {
  const n = CONTENT_LENGTH.length;
  outer: for (let i = 0; i + n <= end; i++) {
    for (let j = 0; j < n; j++) {
      const b = buf[i + j]!;
      // ASCII lower-casing; harmless for the punctuation in the pattern.
      if ((b >= 65 && b <= 90 ? b | 0x20 : b) !== CONTENT_LENGTH[j]) continue outer;
    }
    let k = i + n;
    while (buf[k] === 32) k++;
    let v = 0;
    let digits = 0;
    for (; k < end; k++, digits++) {
      const c = buf[k]!;
      if (c < 48 || c > 57) break;
      v = v * 10 + (c - 48);
    }
    return digits > 0 ? v : -1;
  }
  return -1;
}

function latin1(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 4096) {
    s += String.fromCharCode(...bytes.subarray(i, i + 4096));
  }
  return s;
}

function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i]!;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.byteLength) off += await conn.write(off === 0 ? bytes : bytes.subarray(off));
}

/**
 * Runs a closed-loop load against one address and measures it.
 * @param addr where the server listens
 * @param options what to send, with how many connections, for how long
 * @returns throughput, latency percentiles, errors and check results
 */
export async function runLoad(
  addr: { hostname: string; port: number },
  options: LoadOptions,
): Promise<LoadResult> {
  const warmupMs = (options.warmupS ?? 1) * 1000;
  const checkEvery = options.checkEvery ?? 1000;
  const request = options.request;
  const start = performance.now();
  const measureFrom = start + warmupMs;
  const measureTo = measureFrom + options.durationS * 1000;
  const latencies: number[] = [];
  let count = 0;
  let errors = 0;
  let completed = 0;
  let checked = 0;
  let mismatches = 0;
  let firstError: string | undefined;
  const fail = (why: string) => {
    firstError ??= why;
  };

  async function connection(): Promise<void> {
    let buf = new Uint8Array(64 * 1024);
    while (performance.now() < measureTo) {
      let conn: Deno.TcpConn;
      try {
        conn = await Deno.connect({ hostname: addr.hostname, port: addr.port });
        conn.setNoDelay(true);
      } catch (err) {
        errors++;
        fail(`Cannot connect: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 10));
        continue;
      }
      try {
        let filled = 0;
        while (true) {
          const t0 = performance.now();
          if (t0 >= measureTo) break;
          await writeAll(conn, request);
          let end = -1;
          let length = -1;
          let scanned = 0;
          while (true) {
            if (end < 0) {
              end = headEnd(buf, scanned, filled);
              scanned = filled;
              if (end >= 0) {
                length = contentLength(buf, end);
                if (length < 0) throw new Error("the response has no Content-Length");
              }
            }
            if (end >= 0 && filled >= end + length) break;
            if (filled === buf.length) {
              const bigger = new Uint8Array(Math.max(buf.length * 2, end + length));
              bigger.set(buf);
              buf = bigger;
            }
            const n = await conn.read(buf.subarray(filled));
            if (n === null) throw new Error("the server closed the connection");
            filled += n;
          }
          const t1 = performance.now();
          // Status line: "HTTP/1.1 200 ..."
          const status = (buf[9]! - 48) * 100 + (buf[10]! - 48) * 10 + (buf[11]! - 48);
          const n = completed++;
          if (options.check && (n === 0 || n % checkEvery === 0)) {
            checked++;
            const why = options.check({
              status,
              headers: latin1(buf.subarray(0, end)).toLowerCase(),
              body: buf.slice(end, end + length),
            });
            if (why !== undefined) {
              mismatches++;
              fail(`Response ${n} is wrong: ${why}`);
            }
          }
          if (status !== 200) {
            errors++;
            fail(
              `Response ${n} has status ${status}: ${latin1(buf.subarray(end, end + Math.min(length, 200)))}`,
            );
          } else if (t1 >= measureFrom && t1 <= measureTo) {
            count++;
            latencies.push((t1 - t0) * 1000);
          }
          const used = end + length;
          if (filled > used) buf.copyWithin(0, used, filled);
          filled -= used;
        }
        conn.close();
        return;
      } catch (err) {
        errors++;
        fail(`Connection failed: ${(err as Error).message}`);
        try {
          conn.close();
        } catch { /* already closed */ }
      }
    }
  }

  const edges = [
    new Promise<void>((r) => setTimeout(() => (options.onWindow?.("start"), r()), measureFrom - start)),
    new Promise<void>((r) => setTimeout(() => (options.onWindow?.("end"), r()), measureTo - start)),
  ];
  await Promise.all(Array.from({ length: options.connections }, () => connection()));
  await Promise.all(edges);
  const sorted = Float64Array.from(latencies).sort();
  const seconds = options.durationS;
  let sum = 0;
  for (const v of sorted) sum += v;
  const result: LoadResult = {
    connections: options.connections,
    count,
    seconds,
    rate: count / seconds,
    p50Us: percentile(sorted, 0.5),
    p90Us: percentile(sorted, 0.9),
    p99Us: percentile(sorted, 0.99),
    meanUs: sorted.length > 0 ? sum / sorted.length : NaN,
    errors,
    checked,
    mismatches,
  };
  if (firstError !== undefined) result.firstError = firstError;
  return result;
}

/**
 * Reads what a connection receives within `ms`: its text, and whether the server closed it in that time (a
 * reset counts as closed).
 * @param conn the connection
 * @param ms how long to wait
 */
export async function readUntilClosed(
  conn: Deno.Conn,
  ms: number,
): Promise<{ text: string; closed: boolean }> {
  let text = "";
  const decoder = new TextDecoder();
  const buf = new Uint8Array(65536);
  const read = (async () => {
    try {
      for (;;) {
        const n = await conn.read(buf);
        if (n === null) return true;
        text += decoder.decode(buf.subarray(0, n), { stream: true });
      }
    } catch {
      return true; // reset: closed too
    }
  })();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((r) => (timer = setTimeout(() => r(false), ms)));
  const closed = await Promise.race([read, late]);
  clearTimeout(timer);
  return { text, closed };
}
