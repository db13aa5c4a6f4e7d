/**
 * The floor of `bench/bytes_memory.ts`: the same identity model run once in this process through
 * onnxruntime-node's public API, with nothing else: the payload as a server would hold it (BYTES as
 * length-prefixed elements, FP32 as one buffer), the feed built from it (BYTES: one JS string per element, the
 * only form onnxruntime-node takes), the run and its outputs. Prints one JSON line with the peak RSS growth
 * (VmHWM over RSS before the feed is built) in MB and the payload in bytes. No wire, no response.
 *
 * Run: `./dinfer deno run -A --v8-flags=--expose-gc bench/bytes_memory_floor.ts --datatype=BYTES|FP32 [--mb=50] [--element=100]`
 * @module
 */

import * as ort from "onnxruntime-node";

function arg(name: string, fallback: string): string {
  return Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
}

function status(): { rss: number; hwm: number } {
  const text = Deno.readTextFileSync("/proc/self/status");
  const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(text)?.[1] ?? 0);
  return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
}

const datatype = arg("datatype", "BYTES");
const mb = Number(arg("mb", "50"));
const element = Number(arg("element", "100"));
const model = `tests/fixtures/models/${
  datatype === "BYTES" ? "identity_string" : "identity_fp32"
}/1/model.onnx`;
const session = await ort.InferenceSession.create(model);
const input = session.inputNames[0]!;

let payload: Uint8Array;
let count: number;
if (datatype === "BYTES") {
  count = Math.floor((mb * 1e6) / (4 + element));
  payload = new Uint8Array(count * (4 + element));
  const view = new DataView(payload.buffer);
  for (let i = 0; i < count; i++) {
    view.setUint32(i * (4 + element), element, true);
    payload.fill(97 + (i % 26), i * (4 + element) + 4, (i + 1) * (4 + element));
  }
} else {
  count = Math.floor((mb * 1e6) / 4);
  payload = new Uint8Array(count * 4).fill(1);
}
(globalThis as { gc?: () => void }).gc?.();
Deno.writeTextFileSync("/proc/self/clear_refs", "5");
const before = status();
let feed: ort.Tensor;
if (datatype === "BYTES") {
  const decoder = new TextDecoder();
  const strings = new Array<string>(count);
  for (let i = 0; i < count; i++) {
    const at = i * (4 + element) + 4;
    strings[i] = decoder.decode(payload.subarray(at, at + element));
  }
  feed = new ort.Tensor("string", strings, [1, count]);
} else {
  feed = new ort.Tensor("float32", new Float32Array(payload.buffer), [1, count]);
}
const out = await session.run({ [input]: feed });
const peak = status().hwm;
const got = out[session.outputNames[0]!]!.dims[1];
if (got !== count) throw new Error(`Cannot measure the floor: ${got} elements came back, expected ${count}`);
console.log(JSON.stringify({ growthMb: peak - before.rss, payloadBytes: payload.byteLength }));
