/**
 * The generation benchmark: the bundled `textgen` model (examples/genai_models, Python backend) streamed
 * through the OpenAI API (`/v1/completions`, `stream: true`) and Triton's `generate_stream`, at several
 * concurrencies. Reports what genai-perf reports: time to first token, inter-token latency, output token
 * throughput and request throughput; writes its section of `bench/RESULTS.md` (between `<!-- genai_bench:start -->`
 * and `<!-- genai_bench:end -->`; the aiperf section beside it is written by hand from aiperf's reports).
 *
 * Run: `./dinfer deno run -A bench/genai_bench.ts` (the Python of `DINFER_PYTHON`, else `.venv/bin/python`,
 * with numpy). Flags: `--requests=<n>` per point (default 40), `--tokens=<n>` max_tokens (default 64),
 * `--concurrency=1,4`, `--no-write` (print only).
 * @module
 */

import { fileURLToPath } from "node:url";
import { startChildServer } from "./child_server.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const OUT = `${ROOT}bench/RESULTS.md`;
const START = "<!-- genai_bench:start -->";
const END = "<!-- genai_bench:end -->";

interface RequestResult {
  ttftMs: number;
  gapsMs: number[];
  tokens: number;
  totalMs: number;
}

interface Point {
  endpoint: string;
  concurrency: number;
  requests: number;
  ttft: { mean: number; p50: number; p99: number };
  itl: { mean: number; p50: number; p99: number };
  tokensPerS: number;
  requestsPerS: number;
}

function flag(name: string, fallback: string): string {
  const a = Deno.args.find((x) => x.startsWith(`--${name}=`));
  return a ? a.slice(name.length + 3) : fallback;
}

function stats(values: number[]): { mean: number; p50: number; p99: number } {
  const s = [...values].sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
  return { mean: s.reduce((a, b) => a + b, 0) / Math.max(1, s.length), p50: at(0.5), p99: at(0.99) };
}

/** One streamed request: times each SSE event that carries text. */
async function streamOnce(
  url: string,
  body: unknown,
  textOf: (event: unknown) => string,
): Promise<RequestResult> {
  const start = performance.now();
  const r = await fetch(url, { method: "POST", body: JSON.stringify(body) });
  if (r.status !== 200) throw new Error(`${url}: HTTP ${r.status}: ${await r.text()}`);
  const times: number[] = [];
  let buffer = "";
  const decoder = new TextDecoder();
  for await (const chunk of r.body!) {
    buffer += decoder.decode(chunk, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = event.slice(6);
      if (data === "[DONE]") continue;
      if (textOf(JSON.parse(data)) !== "") times.push(performance.now());
    }
  }
  const gapsMs = times.slice(1).map((t, i) => t - times[i]!);
  return {
    ttftMs: (times[0] ?? performance.now()) - start,
    gapsMs,
    tokens: times.length,
    totalMs: performance.now() - start,
  };
}

async function measure(
  endpoint: string,
  concurrency: number,
  requests: number,
  one: (i: number) => Promise<RequestResult>,
): Promise<Point> {
  await one(-1); // warm-up
  const results: RequestResult[] = [];
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < requests) results.push(await one(next++));
  }));
  const seconds = (performance.now() - start) / 1000;
  const tokens = results.reduce((n, r) => n + r.tokens, 0);
  return {
    endpoint,
    concurrency,
    requests,
    ttft: stats(results.map((r) => r.ttftMs)),
    itl: stats(results.flatMap((r) => r.gapsMs)),
    tokensPerS: tokens / seconds,
    requestsPerS: results.length / seconds,
  };
}

function row(p: Point): string {
  const f = (n: number) => n.toFixed(2);
  return `| ${p.endpoint} | ${p.concurrency} | ${p.requests} | ${f(p.ttft.mean)} | ${f(p.ttft.p50)} | ${
    f(p.ttft.p99)
  } | ` +
    `${f(p.itl.mean)} | ${f(p.itl.p50)} | ${f(p.itl.p99)} | ${p.tokensPerS.toFixed(0)} | ${
      f(p.requestsPerS)
    } |`;
}

async function main(): Promise<void> {
  const requests = Number(flag("requests", "40"));
  const maxTokens = Number(flag("tokens", "64"));
  const concurrencies = flag("concurrency", "1,4").split(",").map(Number);
  const python = Deno.env.get("DINFER_PYTHON") ?? `${ROOT}.venv/bin/python`;
  const server = await startChildServer([], [
    `--model-repository=${ROOT}examples/genai_models`,
    `--backend-config=python,python-executable=${python}`,
  ]);
  const base = `http://127.0.0.1:${server.port}`;
  const points: Point[] = [];
  try {
    for (const c of concurrencies) {
      points.push(
        await measure("/v1/completions", c, requests, (i) =>
          streamOnce(
            `${base}/v1/completions`,
            {
              model: "textgen",
              prompt: "the for statement",
              max_tokens: maxTokens,
              seed: i + 1000,
              stream: true,
            },
            (e) => ((e as { choices: { text?: string }[] }).choices[0]?.text ?? ""),
          )),
      );
      points.push(
        await measure("/v2/.../generate_stream", c, requests, (i) =>
          streamOnce(
            `${base}/v2/models/textgen/generate_stream`,
            { text_input: "the for statement", max_tokens: maxTokens, seed: i + 1000, stream: true },
            (e) => ((e as { text_output?: string }).text_output ?? ""),
          )),
      );
    }
  } finally {
    await server.stop();
  }
  const load = (await Deno.readTextFile("/proc/loadavg").catch(() => "")).split(" ").slice(0, 3).join(" ");
  const table = [
    "| endpoint | concurrency | requests | TTFT mean ms | TTFT p50 | TTFT p99 | ITL mean ms | ITL p50 | ITL p99 | output tokens/s | requests/s |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ...points.map(row),
  ].join("\n");
  console.log(table);
  if (Deno.args.includes("--no-write")) return;
  const text = `${START}
## Generation (bench/genai_bench.ts)

The bundled \`textgen\` model (examples/genai_models: a word-level trigram model in the Python backend, one
instance, decoupled, one response per token) streamed over HTTP, ${requests} requests per point after one
warm-up request, \`max_tokens\` ${maxTokens}, sampling with a seed per request (so runs repeat the same
texts; a request ends early when the model samples its end-of-text token). TTFT: from sending the request to
the first event with text; ITL: the gaps between a request's text events; throughput over the whole point.
The client runs in the benchmark's process on the same machine.

Machine: ${navigator.hardwareConcurrency} cores, load average before the run ${load}. Numbers from one run compare
with each other only (the machines of this kind differ 3-4x from one session to the next).

${table}
${END}`;
  const prior = await Deno.readTextFile(OUT).catch(() => "");
  const a = prior.indexOf(START), b = prior.indexOf(END);
  await Deno.writeTextFile(
    OUT,
    a >= 0 && b > a
      ? prior.slice(0, a) + text + prior.slice(b + END.length)
      : `${prior.trimEnd()}\n\n${text}\n`,
  );
  console.log(`wrote ${OUT}`);
}

if (import.meta.main) await main();
