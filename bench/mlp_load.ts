/**
 * The load process of the MLP benchmark (bench/mlp_bench.ts): closed-loop single-sample binary requests to
 * one model, run in a process of its own so that its CPU time is the load generator's alone (the benchmark's
 * own process holds the in-process ONNX Runtime session). Over the measured window it also records the CPU
 * time of the server (per thread), of itself and of the whole machine, and the server's inference and
 * execution counts (the mean batch size).
 *
 * Usage: `deno run -A bench/mlp_load.ts '<LoadSpec as JSON>'`; prints one line of JSON, a LoadReport.
 * @module
 */

import { cpuSeconds, machineBusySeconds, threadCpuSeconds } from "./cpu_usage.ts";
import { httpRequest, type LoadResult, runLoad, type SampledResponse } from "./loadgen.ts";

/** What to measure. */
export interface LoadSpec {
  /** The server's HTTP port on 127.0.0.1. */
  port: number;
  /** The server's process id, for its CPU time. */
  serverPid: number;
  /** The model to call. */
  model: string;
  /** Connections, each with one request in flight. */
  connections: number;
  /** Measured seconds. */
  durationS: number;
  /** Warm-up seconds (not counted). */
  warmupS: number;
  /** The logits the model gives for mlpInput() (from ONNX Runtime in-process). */
  expected: number[];
}

/** CPU seconds used over the measured window. */
export interface WindowCpu {
  /** The server process, all threads. */
  server: number;
  /** The server's main thread (the event loop, and the ONNX Runtime runs of instances on the main thread). */
  serverMain: number;
  /** The server's other threads by name (ONNX Runtime's pool threads carry the process's name, `deno`). */
  serverThreads: Record<string, number>;
  /** This load process. */
  load: number;
  /** The whole machine. */
  machine: number;
}

/** What the load process reports. */
export interface LoadReport {
  /** Throughput, latency, errors and checks. */
  load: LoadResult;
  /** CPU over the measured window. */
  cpu: WindowCpu;
  /** Inferences the server counted over the measured window. */
  inferences: number;
  /** Executions (batches) the server counted over the measured window. */
  executions: number;
  /**
   * Seconds the executions took over the window (the statistics' compute input, infer and output, once per
   * batch): for instances on the server's main thread, the main thread's time in ONNX Runtime runs.
   */
  executionSeconds: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The one sample every request sends: 784 values in [0, 1). */
export function mlpInput(): Float32Array {
  return Float32Array.from({ length: 784 }, (_, i) => ((i * 37) % 101) / 101);
}

/**
 * The bytes of one single-sample binary request (input and output as binary tensor data).
 * @param host the Host header
 * @param model the model name
 */
export function mlpRequest(host: string, model: string): Uint8Array {
  const header = encoder.encode(JSON.stringify({
    inputs: [{ name: "input", datatype: "FP32", shape: [1, 784], parameters: { binary_data_size: 784 * 4 } }],
    outputs: [{ name: "logits", parameters: { binary_data: true } }],
  }));
  const body = new Uint8Array(header.byteLength + 784 * 4);
  body.set(header, 0);
  body.set(new Uint8Array(mlpInput().buffer), header.byteLength);
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

/**
 * Checks a response: status 200, one FP32 output of 10 values equal to `expected` within 1e-4 (relative;
 * the server's batches round differently from a batch of one).
 * @param expected the logits ONNX Runtime gives in-process
 * @returns the check for runLoad
 */
export function mlpCheck(expected: number[]): (r: SampledResponse) => string | undefined {
  return (r) => {
    if (r.status !== 200) return `status ${r.status}: ${decoder.decode(r.body).slice(0, 200)}`;
    const m = /\r\ninference-header-content-length: *([0-9]+)/.exec(r.headers);
    if (!m) return "no Inference-Header-Content-Length";
    const hl = Number(m[1]);
    if (r.body.byteLength - hl !== 40) return `${r.body.byteLength - hl} bytes of logits, expected 40`;
    const view = new DataView(r.body.buffer, r.body.byteOffset + hl, 40);
    for (let i = 0; i < 10; i++) {
      const got = view.getFloat32(i * 4, true);
      const want = expected[i]!;
      if (!(Math.abs(got - want) <= 1e-4 * Math.max(1, Math.abs(want)))) {
        return `logit ${i} is ${got}, expected ${want}`;
      }
    }
    return undefined;
  };
}

interface Counts {
  inferences: number;
  executions: number;
  /** Nanoseconds the executions took (compute input + infer + output, once per batch). */
  executionNs: number;
}

async function counts(port: number, model: string): Promise<Counts> {
  type Duration = { ns: number | string };
  const res = await fetch(`http://127.0.0.1:${port}/v2/models/${model}/stats`);
  const body = await res.json() as {
    model_stats: {
      inference_count: number;
      execution_count: number;
      batch_stats: { compute_input: Duration; compute_infer: Duration; compute_output: Duration }[];
    }[];
  };
  const s = body.model_stats?.[0];
  if (!s) throw new Error(`Cannot read the statistics of '${model}': ${res.status} ${JSON.stringify(body)}`);
  let executionNs = 0;
  for (const b of s.batch_stats) {
    executionNs += Number(b.compute_input.ns) + Number(b.compute_infer.ns) + Number(b.compute_output.ns);
  }
  return { inferences: Number(s.inference_count), executions: Number(s.execution_count), executionNs };
}

interface Sample {
  server: number;
  threads: Map<number, { name: string; seconds: number }>;
  load: number;
  machine: number;
}

function sample(pid: number): Sample {
  return {
    server: cpuSeconds(pid),
    threads: threadCpuSeconds(pid),
    load: cpuSeconds("self"),
    machine: machineBusySeconds(),
  };
}

function windowCpu(pid: number, a: Sample, b: Sample): WindowCpu {
  const serverThreads: Record<string, number> = {};
  let serverMain = 0;
  for (const [tid, t] of b.threads) {
    const used = t.seconds - (a.threads.get(tid)?.seconds ?? 0);
    if (tid === pid) serverMain = used;
    else serverThreads[t.name] = (serverThreads[t.name] ?? 0) + used;
  }
  return {
    server: b.server - a.server,
    serverMain,
    serverThreads,
    load: b.load - a.load,
    machine: b.machine - a.machine,
  };
}

/**
 * Runs the load and measures the window.
 * @param spec what to measure
 * @returns the report
 */
export async function measureLoad(spec: LoadSpec): Promise<LoadReport> {
  let first: Sample | undefined;
  let last: Sample | undefined;
  let before: Promise<Counts> | undefined;
  let after: Promise<Counts> | undefined;
  const load = await runLoad({ hostname: "127.0.0.1", port: spec.port }, {
    request: mlpRequest(`127.0.0.1:${spec.port}`, spec.model),
    connections: spec.connections,
    durationS: spec.durationS,
    warmupS: spec.warmupS,
    check: mlpCheck(spec.expected),
    checkEvery: 200,
    onWindow(edge) {
      if (edge === "start") {
        first = sample(spec.serverPid);
        before = counts(spec.port, spec.model);
      } else {
        last = sample(spec.serverPid);
        after = counts(spec.port, spec.model);
      }
    },
  });
  const [b, a] = await Promise.all([before!, after!]);
  return {
    load,
    cpu: windowCpu(spec.serverPid, first!, last!),
    inferences: a.inferences - b.inferences,
    executions: a.executions - b.executions,
    executionSeconds: (a.executionNs - b.executionNs) / 1e9,
  };
}

if (import.meta.main) {
  const spec = JSON.parse(Deno.args[0] ?? "") as LoadSpec;
  console.log(JSON.stringify(await measureLoad(spec)));
}
