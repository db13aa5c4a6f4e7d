/**
 * The response cache: a hit against a miss on the MLP (784-1024-1024-10, ONNX Runtime, one instance, no
 * dynamic batching) with `--cache-config=local,size=256 MiB`, at batch 1 and batch 64. One client sends binary
 * HTTP requests one after the other: misses carry new contents every time, hits repeat one request. Rounds
 * alternate misses and hits. Reported: the client's latency (median, p90) and, from the statistics extension,
 * the model's own run (compute_infer), the lookup of a hit and the lookup plus insertion of a miss.
 *
 * Usage: `deno run -A bench/response_cache_bench.ts [--rounds=3] [--requests=100] [--no-write]`; writes its
 * section of bench/RESULTS.md.
 * @module
 */

import { startChildServer } from "./child_server.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const RESULTS = `${ROOT}bench/RESULTS.md`;
const START = "<!-- response_cache:start -->";
const END = "<!-- response_cache:end -->";

function arg(name: string, fallback: number): number {
  const v = Deno.args.find((a) => a.startsWith(`--${name}=`));
  return v ? Number(v.slice(name.length + 3)) : fallback;
}
const rounds = arg("rounds", 3);
const perRound = arg("requests", 100);
const write = !Deno.args.includes("--no-write");

const loadBefore = (await Deno.readTextFile("/proc/loadavg").catch(() => "?")).split(" ")[0];
const repo = await Deno.makeTempDir({ prefix: "dinfer-bench-cache-" });
const config = (await Deno.readTextFile(`${ROOT}bench/models/mlp_nobatch/config.pbtxt`))
  .replace('name: "mlp_nobatch"', 'name: "mlp_cached"') + "response_cache { enable: true }\n";
await Deno.mkdir(`${repo}/mlp_cached`);
await Deno.writeTextFile(`${repo}/mlp_cached/config.pbtxt`, config);
await Deno.symlink(`${ROOT}bench/models/mlp/1`, `${repo}/mlp_cached/1`);

const server = await startChildServer([], [
  `--model-repository=${repo}`,
  `--cache-config=local,size=${256 * 1024 * 1024}`,
]);
const base = `http://127.0.0.1:${server.port}`;

/** A binary request of `batch` rows whose first element is `tag` (other elements fixed). */
function body(batch: number, tag: number): { bytes: Uint8Array; headerLength: number } {
  const values = new Float32Array(batch * 784).map((_, i) => ((i * 37) % 101) / 101);
  values[0] = tag;
  const header = new TextEncoder().encode(JSON.stringify({
    inputs: [{
      name: "input",
      datatype: "FP32",
      shape: [batch, 784],
      parameters: { binary_data_size: values.byteLength },
    }],
    outputs: [{ name: "logits", parameters: { binary_data: true } }],
  }));
  const bytes = new Uint8Array(header.byteLength + values.byteLength);
  bytes.set(header, 0);
  bytes.set(new Uint8Array(values.buffer), header.byteLength);
  return { bytes, headerLength: header.byteLength };
}

async function send(b: { bytes: Uint8Array; headerLength: number }): Promise<number> {
  const t0 = performance.now();
  const r = await fetch(`${base}/v2/models/mlp_cached/infer`, {
    method: "POST",
    headers: {
      "content-type": "application/octet-stream",
      "inference-header-content-length": String(b.headerLength),
    },
    body: b.bytes as BodyInit,
  });
  await r.arrayBuffer();
  const ms = performance.now() - t0;
  if (r.status !== 200) throw new Error(`Status ${r.status}`);
  return ms * 1000;
}

interface Duration {
  count: number;
  ns: number;
}
async function stats(): Promise<Record<string, Duration>> {
  const r = await fetch(`${base}/v2/models/mlp_cached/stats`);
  const j = await r.json() as { model_stats: { inference_stats: Record<string, Duration> }[] };
  return j.model_stats[0]!.inference_stats;
}

const pct = (v: number[], p: number) =>
  [...v].sort((a, b) => a - b)[Math.min(v.length - 1, Math.floor(p * v.length))]!;
const us = (v: number) => v.toFixed(0);

const rows: string[] = [];
let tag = 1;
try {
  for (const batch of [1, 64]) {
    // Warm-up: misses, then the hit request once (a miss that fills its entry).
    for (let i = 0; i < 20; i++) await send(body(batch, tag++));
    const hitBody = body(batch, -1 - batch);
    await send(hitBody);
    const miss: number[] = [], hit: number[] = [];
    let missTotals = { infer: { count: 0, ns: 0 }, miss: { count: 0, ns: 0 } };
    let hitTotals = { count: 0, ns: 0 };
    for (let r = 0; r < rounds; r++) {
      const m0 = await stats();
      const bodies = Array.from({ length: perRound }, () => body(batch, tag++));
      for (const b of bodies) miss.push(await send(b));
      const m1 = await stats();
      for (let i = 0; i < perRound; i++) hit.push(await send(hitBody));
      const h1 = await stats();
      const add = (a: Duration, x: Duration, y: Duration) => ({
        count: a.count + y.count - x.count,
        ns: a.ns + y.ns - x.ns,
      });
      missTotals = {
        infer: add(missTotals.infer, m0.compute_infer!, m1.compute_infer!),
        miss: add(missTotals.miss, m0.cache_miss!, m1.cache_miss!),
      };
      hitTotals = add(hitTotals, m1.cache_hit!, h1.cache_hit!);
    }
    if (hitTotals.count !== rounds * perRound || missTotals.miss.count !== rounds * perRound) {
      throw new Error(
        `Expected ${rounds * perRound} hits and misses, got ${hitTotals.count} and ${missTotals.miss.count}`,
      );
    }
    const infer = missTotals.infer.ns / missTotals.infer.count / 1000;
    const lookup = hitTotals.ns / hitTotals.count / 1000;
    const missCache = missTotals.miss.ns / missTotals.miss.count / 1000;
    rows.push(
      `| ${batch} | ${us(pct(miss, 0.5))} / ${us(pct(miss, 0.9))} | ${us(pct(hit, 0.5))} / ${
        us(pct(hit, 0.9))
      } | ${(pct(miss, 0.5) / pct(hit, 0.5)).toFixed(1)}× | ${us(infer)} | ${lookup.toFixed(1)} | ${
        missCache.toFixed(1)
      } |`,
    );
  }
} finally {
  await server.stop();
  await Deno.remove(repo, { recursive: true });
}

const cpu = (await Deno.readTextFile("/proc/cpuinfo").catch(() => "")).match(/model name\s*:\s*(.*)/)?.[1] ??
  "?";
const section = `${START}
## Response cache: a hit against a miss

\`bench/response_cache_bench.ts\` (${
  new Date().toISOString().slice(0, 10)
}, ${navigator.hardwareConcurrency} cores, ${cpu}, load average ${loadBefore} at the start: the machine
was shared, so only the ratios within one run compare): the MLP 784-1024-1024-10 (ONNX Runtime, one
instance, no dynamic batching) with \`response_cache { enable: true }\` and
\`--cache-config=local,size=268435456\`; one client, sequential binary HTTP requests, ${rounds} rounds of
${perRound} misses (new contents each) then ${perRound} hits (one request repeated). Latencies in µs as the client
sees them (median / p90); the model's run, the hit's lookup and the miss's lookup + insertion are the
statistics extension's averages (\`compute_infer\`, \`cache_hit\`, \`cache_miss\`).

| batch | miss (µs) | hit (µs) | miss / hit (median) | model's run (µs) | hit lookup (µs) | miss lookup + insert (µs) |
| ----: | --------: | -------: | ------------------: | ---------------: | --------------: | ------------------------: |
${rows.join("\n")}

A hit costs the HTTP exchange, decoding and one SHA-256 over the inputs (3 KB at batch 1, 200 KB at batch 64);
a miss adds the model's run and the copy of the outputs into the cache. The cache's own saving is the model's
run against the hit's lookup; the rest of a request, the HTTP exchange, is the same for both, so the ratio of
the client's latencies grows with the model's share of a request.
${END}`;
console.log(section);
if (write) {
  let text = "";
  try {
    text = await Deno.readTextFile(RESULTS);
  } catch {
    // A new file.
  }
  const a = text.indexOf(START), b = text.indexOf(END);
  text = a >= 0 && b > a
    ? text.slice(0, a) + section + text.slice(b + END.length)
    : text.trimEnd() + "\n\n" + section + "\n";
  await Deno.writeTextFile(RESULTS, text);
}
