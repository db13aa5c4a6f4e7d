/**
 * The PyTorch backend benchmark: the digits_torch example (examples/pytorch_models, TorchScript MLP
 * 64-64-10) through the server, in both runtimes (native: libtorch in the server through libtorchshim; stub:
 * a Python stub running torch), against the same model run in-process by torch (bench/torch_inprocess.py, in
 * the torch venv), reported as ratios; the ONNX digits example (same shapes) through the same server beside
 * it. A second part times one backend execution without server or HTTP in each runtime.
 *
 * The server runs as a child process; the load (closed loop over raw TCP, single-sample binary requests,
 * responses checked against the samples' labels) runs in this process, on the same cores.
 *
 * Run (after `./dinfer setup-torch`): `DINFER_TORCH_PYTHON=.venv-torch/bin/python deno run -A
 * bench/torch_bench.ts [--duration=5] [--no-write]` rewrites the PyTorch section of bench/RESULTS.md.
 * @module
 */

import { fileURLToPath } from "node:url";
import { startChildServer } from "./child_server.ts";
import { TorchBackend } from "../server/backends/pytorch.ts";
import { applyDefaults, readConfigFile, resolveBackend, toModelConfig } from "../server/repository/config.ts";
import { httpRequest, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const RESULTS = `${ROOT}bench/RESULTS.md`;
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
  runtime: string;
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

async function serverPoints(runtime: string, withOnnx: boolean): Promise<ServerPoint[]> {
  const server = await startChildServer([], [
    `--model-repository=${ROOT}examples/models`,
    `--model-repository=${ROOT}examples/pytorch_models`,
    `--backend-config=pytorch,python-executable=${python}`,
    `--backend-config=pytorch,runtime=${runtime}`,
  ]);
  const points: ServerPoint[] = [];
  try {
    const host = `127.0.0.1:${server.port}`;
    const models = [
      { model: "digits_torch", backend: "pytorch", input: "INPUT__0", output: "OUTPUT__0" },
      ...(withOnnx
        ? [{ model: "digits", backend: "onnxruntime", input: "input", output: "probabilities" }]
        : []),
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
        const rt = m.backend === "pytorch" ? runtime : "";
        points.push({
          ...r,
          model: m.model,
          backend: m.backend,
          runtime: rt,
          meanBatch: (i1 - i0) / Math.max(1, e1 - e0),
        });
        console.error(
          `${m.model} ${rt} ${connections} conn: ${r.rate.toFixed(0)}/s p50 ${
            r.p50Us.toFixed(0)
          } µs errors ${r.errors}`,
        );
      }
    }
  } finally {
    await server.stop();
  }
  return points;
}

/** One backend execution of digits_torch in a runtime, without server or HTTP: median µs per execute. */
async function executions(runtime: string): Promise<{ batch: number; p50Us: number; calls: number }[]> {
  const dir = `${ROOT}examples/pytorch_models/digits_torch`;
  const config = toModelConfig(await readConfigFile(dir, "digits_torch"), "digits_torch");
  resolveBackend(config, ["model.pt"]);
  applyDefaults(config, "model.pt");
  const instance = await new TorchBackend().createInstance(config, {
    modelDir: dir,
    versionDir: `${dir}/1`,
    version: 1,
    modelPath: `${dir}/1/model.pt`,
    instanceName: "digits_torch_0",
    kind: "KIND_CPU",
    deviceId: 0,
    backendConfig: { runtime, "python-executable": python },
  });
  const out = [];
  try {
    for (const batch of [1, 16]) {
      const x = Float32Array.from(Array.from({ length: batch }, (_, i) => samples.inputs[i % 8]!).flat());
      const inputs = new Map([["INPUT__0", {
        name: "INPUT__0",
        datatype: "FP32" as const,
        shape: [batch, 64],
        data: new Uint8Array(x.buffer),
      }]]);
      for (let i = 0; i < 50; i++) await instance.execute(inputs, ["OUTPUT__0"]);
      const times: number[] = [];
      const end = performance.now() + Math.min(durationS, 3) * 1000;
      while (performance.now() < end) {
        const a = performance.now();
        await instance.execute(inputs, ["OUTPUT__0"]);
        times.push(performance.now() - a);
      }
      times.sort((a, b) => a - b);
      out.push({ batch, p50Us: times[times.length >> 1]! * 1000, calls: times.length });
    }
  } finally {
    await instance.close();
  }
  return out;
}

async function commit(): Promise<string> {
  const git = await new Deno.Command("git", { args: ["rev-parse", "--short", "HEAD"], cwd: ROOT }).output();
  return new TextDecoder().decode(git.stdout).trim();
}

/** The best in-process row at the measured batch size nearest `batch`. */
function near(all: (InProcessPoint & { threads: number })[], batch: number): InProcessPoint {
  const size = all.map((p) => p.batch).reduce((a, b) => (Math.abs(b - batch) < Math.abs(a - batch) ? b : a));
  return all.filter((p) => p.batch === size).reduce((a, b) => (b.rate > a.rate ? b : a));
}

function fmt(n: number): string {
  return Math.round(n).toLocaleString("en-US");
}

interface Execution {
  runtime: string;
  batch: number;
  p50Us: number;
  calls: number;
}

function section(runs: InProcess[], points: ServerPoint[], execs: Execution[], code: string): string {
  const cores = navigator.hardwareConcurrency;
  const all = runs.flatMap((r) => r.points.map((p) => ({ ...p, threads: r.threads })));
  const one = all.filter((p) => p.batch === 1).reduce((a, b) => (b.rate > a.rate ? b : a));
  const best = all.reduce((a, b) => (b.rate > a.rate ? b : a));
  const onnx1 = points.find((p) => p.model === "digits" && p.connections === 1)!;
  const last = CONNECTIONS.at(-1)!;
  const ratios = ["native", "stub"].flatMap((rt) => {
    const p1 = points.find((p) => p.runtime === rt && p.connections === 1)!;
    const pN = points.find((p) => p.runtime === rt && p.connections === last)!;
    const nearN = near(all, pN.meanBatch);
    return [
      `- ${rt}, one request at a time: ${fmt(p1.rate)} vs ${
        fmt(one.rate)
      } inferences/s in-process at batch 1 (${one.threads} thread(s)), **${
        (p1.rate / one.rate).toFixed(3)
      }×**; latency p50 ${fmt(p1.p50Us)} µs vs ${one.p50Us.toFixed(1)} µs per forward call.`,
      `- ${rt}, ${last} connections with dynamic batching: ${fmt(pN.rate)} vs the best in-process ${
        fmt(best.rate)
      } (batch ${best.batch}), **${
        (pN.rate / best.rate).toFixed(3)
      }×**; against in-process at the batch size nearest the mean the server formed (${
        pN.meanBatch.toFixed(1)
      }, batch ${nearN.batch}): ${fmt(nearN.rate)}, **${(pN.rate / nearN.rate).toFixed(3)}×**.`,
    ];
  });
  const ex = (rt: string, b: number) => execs.find((e) => e.runtime === rt && e.batch === b)!;
  const lines = [
    "## PyTorch backend: digits_torch",
    "",
    `Measured ${new Date().toISOString().replace(/\.\d+Z$/, "Z")} on ${cores} cores, server code ${code};`,
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
    "**Server**: `digits_torch` (dynamic batching, one KIND_CPU instance on one intra-op thread, as its config",
    "sets) in each runtime, native (libtorch in the server through libtorchshim, nonblocking FFI calls) and",
    "stub (a Python backend stub process running torch), each in a server of its own; `digits` (ONNX Runtime,",
    "same shapes, no dynamic batching) beside the native one for comparison. Single-sample binary HTTP requests",
    "from a closed loop in the benchmark's process, responses checked against the sample's label.",
    "",
    "| model | backend | runtime | connections | infer/s | p50 µs | p99 µs | mean batch | errors | checked (wrong) |",
    "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ...points.map((p) =>
      `| ${p.model} | ${p.backend} | ${p.runtime || "-"} | ${p.connections} | ${fmt(p.rate)} | ${
        fmt(p.p50Us)
      } | ${fmt(p.p99Us)} | ${p.meanBatch.toFixed(1)} | ${p.errors} | ${p.checked} (${p.mismatches}) |`
    ),
    "",
    "**Ratios** (server / in-process):",
    "",
    ...ratios,
    `- For scale, ONNX digits through the same HTTP path: p50 ${fmt(onnx1.p50Us)} µs at one connection.`,
    "",
    "**One backend execution** (no server, no HTTP; `TorchBackend` instances in the benchmark's process, median",
    "of sequential `execute` calls):",
    "",
    "| runtime | batch | calls | p50 µs per execution |",
    "|---|---:|---:|---:|",
    ...execs.map((e) => `| ${e.runtime} | ${e.batch} | ${fmt(e.calls)} | ${e.p50Us.toFixed(1)} |`),
    "",
    `The stub runtime's execution takes ${
      (ex("stub", 1).p50Us / ex("native", 1).p50Us).toFixed(1)
    }× as long as the native one at batch 1 (${
      fmt(ex("stub", 1).p50Us - ex("native", 1).p50Us)
    } µs more: Unix socket, shared file and Python per execution) and ${
      (ex("stub", 16).p50Us / ex("native", 16).p50Us).toFixed(1)
    }× at batch 16. The native runtime is therefore the default wherever libtorchshim is built (\`./dinfer\``,
    "builds it against `.venv-torch`, about a minute on 2 cores); the stub runtime remains for KIND_GPU with a",
    "CUDA build of torch in another interpreter, and as `--backend-config=pytorch,runtime=stub`.",
    "",
  ];
  return lines.join("\n");
}

const runs = [await inProcess(0), await inProcess(1)];
for (const r of runs) {
  console.error(
    `in-process, ${r.threads} threads: ${
      r.points.map((p) => `batch ${p.batch} ${p.rate.toFixed(0)}/s`).join(", ")
    }`,
  );
}
const points = [...await serverPoints("native", true), ...await serverPoints("stub", false)];
const execs: Execution[] = [];
for (const runtime of ["native", "stub"]) {
  for (const e of await executions(runtime)) execs.push({ runtime, ...e });
}
const text = section(runs, points, execs, await commit());
console.log(text);
if (write) {
  const old = await Deno.readTextFile(RESULTS);
  // The section sits between markers, so that the other benchmarks that rewrite the file keep it.
  const START = "<!-- torch_bench:start -->", END = "<!-- torch_bench:end -->";
  const marked = `${START}\n${text.trimEnd()}\n${END}`;
  const a = old.indexOf(START), b = old.indexOf(END);
  const next = a >= 0 && b > a
    ? old.slice(0, a) + marked + old.slice(b + END.length)
    : `${old.trimEnd()}\n\n${marked}\n`;
  await Deno.writeTextFile(RESULTS, next);
}
