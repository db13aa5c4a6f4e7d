/**
 * The PyTorch backend benchmark: the digits_torch example (examples/pytorch_models, TorchScript MLP
 * 64-64-10) through the server against the same model run in-process by torch (bench/torch_inprocess.py, in
 * the torch venv), reported as ratios; the ONNX digits example (same shapes) through the same server beside
 * it, so that the cost of the stub round trip shows.
 *
 * The server runs as a child process; the load (closed loop over raw TCP, single-sample binary requests,
 * responses checked against the samples' labels) runs in this process, on the same cores.
 *
 * Run: `DINFER_TORCH_PYTHON=.venv-torch/bin/python deno run -A bench/torch_bench.ts [--duration=5]
 * [--no-write] [--probe=/tmp/libtorchprobe.so]` rewrites the PyTorch section of bench/RESULTS.md; with
 * `--probe` (a build of bench/torch_ffi_probe/probe.cpp) the section also compares one execution through the
 * backend's stub with one call into libtorch through Deno.dlopen (bench/torch_ffi_probe/probe_bench.ts).
 * @module
 */

import { fileURLToPath } from "node:url";
import { startChildServer } from "./child_server.ts";
import { httpRequest, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RESULTS = `${ROOT}bench/RESULTS.md`;
const HEADING = "## PyTorch backend: digits_torch";
const CONNECTIONS = [1, 16];

const args = new Map(
  Deno.args.map((a) => [a.replace(/=.*/, ""), a.includes("=") ? a.replace(/^[^=]*=/, "") : ""]),
);
const durationS = Number(args.get("--duration") || "5");
const write = !args.has("--no-write");
const python = Deno.env.get("DINFER_TORCH_PYTHON") ?? `${ROOT}.venv-torch/bin/python`;

const samples = JSON.parse(await Deno.readTextFile(`${ROOT}examples/models/digits/samples.json`)) as {
  inputs: number[][];
  labels: number[];
};

interface InProcessPoint {
  batch: number;
  calls: number;
  rate: number;
  p50Us: number;
  p99Us: number;
  cpuUsPerInference: number;
}

interface ServerPoint extends LoadResult {
  model: string;
  backend: string;
  /** Inferences per model execution over the point (warm-up included). */
  meanBatch: number;
}

/** The model's inference and execution counts so far. */
async function counts(port: number, model: string): Promise<[number, number]> {
  const r = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/stats`);
  const m = ((await r.json()) as { model_stats: { inference_count: number; execution_count: number }[] })
    .model_stats[0]!;
  return [m.inference_count, m.execution_count];
}

/** The single-sample binary request for a model: sample 0, output in binary. */
function request(host: string, model: string, input: string, output: string): Uint8Array {
  const data = new Float32Array(samples.inputs[0]!);
  const header = new TextEncoder().encode(JSON.stringify({
    inputs: [{ name: input, datatype: "FP32", shape: [1, 64], parameters: { binary_data_size: 256 } }],
    outputs: [{ name: output, parameters: { binary_data: true } }],
  }));
  const body = new Uint8Array(header.byteLength + 256);
  body.set(header, 0);
  body.set(new Uint8Array(data.buffer), header.byteLength);
  return httpRequest({
    method: "POST",
    path: `/v2/models/${model}/infer`,
    host,
    headers: {
      "content-type": "application/octet-stream",
      "inference-header-content-length": String(header.byteLength),
    },
  }, body);
}

/** Checks that a response classifies sample 0 as its label. */
function check(r: SampledResponse): string | undefined {
  if (r.status !== 200) return `status ${r.status}: ${new TextDecoder().decode(r.body).slice(0, 200)}`;
  const m = /\r\ninference-header-content-length: *([0-9]+)/.exec(r.headers);
  if (!m) return "no Inference-Header-Content-Length";
  const hl = Number(m[1]);
  if (r.body.byteLength - hl !== 40) return `${r.body.byteLength - hl} bytes of probabilities, expected 40`;
  const p = new Float32Array(r.body.slice(hl).buffer);
  const best = p.indexOf(Math.max(...p));
  return best === samples.labels[0] ? undefined : `classified as ${best}, expected ${samples.labels[0]}`;
}

interface InProcess {
  torch: string;
  threads: number;
  points: InProcessPoint[];
}

/** Runs the model in-process with `threads` intra-op threads (0: torch's default). */
async function inProcess(threads: number): Promise<InProcess> {
  const out = await new Deno.Command(python, {
    args: [
      `${ROOT}bench/torch_inprocess.py`,
      `${ROOT}examples/pytorch_models/digits_torch/1/model.pt`,
      String(durationS),
      String(threads),
      "1",
      "8",
      "16",
      "64",
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (out.code !== 0) throw new Error(`The in-process run failed: ${new TextDecoder().decode(out.stderr)}`);
  return JSON.parse(text.trim().split("\n").at(-1)!);
}

async function serverPoints(): Promise<{ points: ServerPoint[]; commit: string }> {
  const server = await startChildServer([], [
    `--model-repository=${ROOT}examples/models`,
    `--model-repository=${ROOT}examples/pytorch_models`,
    `--backend-config=pytorch,python-executable=${python}`,
  ]);
  const points: ServerPoint[] = [];
  try {
    const host = `127.0.0.1:${server.port}`;
    const models = [
      { model: "digits_torch", backend: "pytorch", input: "INPUT__0", output: "OUTPUT__0" },
      { model: "digits", backend: "onnxruntime", input: "input", output: "probabilities" },
    ];
    for (const m of models) {
      for (const connections of CONNECTIONS) {
        const [i0, e0] = await counts(server.port, m.model);
        const r = await runLoad({ hostname: "127.0.0.1", port: server.port }, {
          request: request(host, m.model, m.input, m.output),
          connections,
          durationS,
          warmupS: 1,
          check,
          checkEvery: 500,
        });
        const [i1, e1] = await counts(server.port, m.model);
        points.push({
          ...r,
          model: m.model,
          backend: m.backend,
          meanBatch: (i1 - i0) / Math.max(1, e1 - e0),
        });
        console.error(
          `${m.model} ${connections} conn: ${r.rate.toFixed(0)}/s p50 ${
            r.p50Us.toFixed(0)
          } µs errors ${r.errors}`,
        );
      }
    }
  } finally {
    await server.stop();
  }
  const git = await new Deno.Command("git", { args: ["rev-parse", "--short", "HEAD"], cwd: ROOT }).output();
  return { points, commit: new TextDecoder().decode(git.stdout).trim() };
}

/** The best in-process row at the measured batch size nearest `batch`. */
function near(all: (InProcessPoint & { threads: number })[], batch: number): InProcessPoint {
  const size = all.map((p) => p.batch).reduce((a, b) => (Math.abs(b - batch) < Math.abs(a - batch) ? b : a));
  return all.filter((p) => p.batch === size).reduce((a, b) => (b.rate > a.rate ? b : a));
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

function section(runs: InProcess[], sp: { points: ServerPoint[]; commit: string }): string {
  const cores = navigator.hardwareConcurrency;
  const all = runs.flatMap((r) => r.points.map((p) => ({ ...p, threads: r.threads })));
  const one = all.filter((p) => p.batch === 1).reduce((a, b) => (b.rate > a.rate ? b : a));
  const best = all.reduce((a, b) => (b.rate > a.rate ? b : a));
  const t1 = sp.points.find((p) => p.model === "digits_torch" && p.connections === 1)!;
  const tN = sp.points.find((p) => p.model === "digits_torch" && p.connections === CONNECTIONS.at(-1))!;
  const o1 = sp.points.find((p) => p.model === "digits" && p.connections === 1)!;
  const lines = [
    HEADING,
    "",
    `Measured ${
      new Date().toISOString().replace(/\.\d+Z$/, "Z")
    } on ${cores} cores, server code ${sp.commit};`,
    "`deno run -A bench/torch_bench.ts` rewrites this section alone. Only ratios within one run compare (see",
    "Machine).",
    "",
    `**In-process** (no server): torch ${
      runs[0]!.torch
    } runs the same \`model.pt\` in one Python process, as the`,
    "backend loads it (`torch.jit.load`, eval, inference mode), sequential `forward` calls on the digits",
    "samples, with torch's default threads and with the example's one thread; the best row of each batch size",
    "is the baseline.",
    "",
    "| intra-op threads | batch | forward calls | infer/s | p50 µs per call | p99 µs per call | CPU µs/infer |",
    "|---:|---:|---:|---:|---:|---:|---:|",
    ...all.map((p) =>
      `| ${p.threads} | ${p.batch} | ${fmt(p.calls)} | ${fmt(p.rate)} | ${p.p50Us.toFixed(1)} | ${
        p.p99Us.toFixed(1)
      } | ${p.cpuUsPerInference.toFixed(1)} |`
    ),
    "",
    "**Server**: `digits_torch` (PyTorch backend, dynamic batching, one KIND_CPU instance: a stub process",
    "running torch on one intra-op thread, as its config sets) and, for comparison, `digits` (ONNX Runtime, same shapes, no dynamic batching) in one",
    "server; single-sample binary HTTP requests from a closed loop in the benchmark's process, responses",
    "checked against the sample's label.",
    "",
    "| model | backend | connections | infer/s | p50 µs | p99 µs | mean batch | errors | checked (wrong) |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ...sp.points.map((p) =>
      `| ${p.model} | ${p.backend} | ${p.connections} | ${fmt(p.rate)} | ${fmt(p.p50Us)} | ${
        fmt(p.p99Us)
      } | ${p.meanBatch.toFixed(1)} | ${p.errors} | ${p.checked} (${p.mismatches}) |`
    ),
    "",
    "**Ratios** (server / in-process):",
    "",
    `- One request at a time: ${fmt(t1.rate)} vs ${
      fmt(one.rate)
    } inferences/s at batch 1 (${one.threads} thread(s)), **${
      (t1.rate / one.rate).toFixed(3)
    }×**; latency p50 ${fmt(t1.p50Us)} µs vs ${one.p50Us.toFixed(1)} µs per forward call (${
      (t1.p50Us / one.p50Us).toFixed(0)
    }× as long).`,
    `- ${CONNECTIONS.at(-1)} connections with dynamic batching: ${fmt(tN.rate)} vs the best in-process ${
      fmt(best.rate)
    } (batch ${best.batch}, ${best.threads} thread(s)), **${(tN.rate / best.rate).toFixed(3)}×**; against`,
    `  in-process at the batch size nearest the mean the server formed (${tN.meanBatch.toFixed(1)}): ${
      fmt(near(all, tN.meanBatch).rate)
    } inferences/s, **${(tN.rate / near(all, tN.meanBatch).rate).toFixed(3)}×**.`,
    `- The HTTP path bounds both: ONNX digits through the same server answers ${
      fmt(Math.max(...sp.points.filter((p) => p.model === "digits").map((p) => p.rate)))
    } inferences/s at best here.`,
    `- The stub round trip: at one connection digits_torch's p50 is ${fmt(t1.p50Us)} µs, ONNX digits' ${
      fmt(o1.p50Us)
    } µs through the same HTTP path; the difference, ${fmt(t1.p50Us - o1.p50Us)} µs, is the Unix-socket`,
    `  and shared-file exchange with the stub plus the Python side of the call (the forward itself takes ${
      one.p50Us.toFixed(0)
    } µs).`,
    "",
  ];
  return lines.join("\n");
}

/** The stub-versus-FFI table of bench/torch_ffi_probe/probe_bench.ts, or "" without `--probe`. */
async function probe(): Promise<string> {
  const lib = args.get("--probe");
  if (!lib) return "";
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", `${ROOT}bench/torch_ffi_probe/probe_bench.ts`, lib],
    env: { DINFER_TORCH_PYTHON: python },
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (out.code !== 0) throw new Error("bench/torch_ffi_probe/probe_bench.ts failed");
  return [
    "**The design measured**: one execution of `digits_torch` without server or HTTP, through the backend as",
    "built (the Python stub: Unix socket, shared file, Python) against a call into libtorch through Deno.dlopen",
    "(`bench/torch_ffi_probe/probe.cpp`, the smallest C ABI that runs the model, one torch thread), in one",
    "process (`bench/torch_ffi_probe/probe_bench.ts`):",
    "",
    new TextDecoder().decode(out.stdout).trim(),
    "",
    "What this means for the design: the backend runs TorchScript in a Python backend stub, which reuses the",
    "Python backend's process, restart and shared-memory machinery, keeps libtorch (and a crash in it) out of",
    "the server's process, and needs no C++ build. Its price is the stub round trip above, paid once per",
    "execution (per batch, not per request). A C ABI over libtorch bound with Deno.dlopen, the shape of",
    "libtrtshim, would cut it to the nonblocking FFI call's cost; building a libtorch translation unit takes",
    "about a minute on 2 cores. That path is not built yet.",
    "",
  ].join("\n");
}

const runs = [await inProcess(0), await inProcess(1)];
for (const r of runs) {
  console.error(
    `in-process, ${r.threads} threads: ${
      r.points.map((p) => `batch ${p.batch} ${p.rate.toFixed(0)}/s`).join(", ")
    }`,
  );
}
const sp = await serverPoints();
const text = section(runs, sp) + "\n" + await probe();
console.log(text);
if (write) {
  const old = await Deno.readTextFile(RESULTS);
  const start = old.indexOf(HEADING);
  let next;
  if (start < 0) {
    next = old.trimEnd() + "\n\n" + text;
  } else {
    const end = old.indexOf("\n## ", start + HEADING.length);
    next = old.slice(0, start) + text + (end < 0 ? "" : old.slice(end + 1));
  }
  await Deno.writeTextFile(RESULTS, next);
}
