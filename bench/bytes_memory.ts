/**
 * Memory per request: one large request per wire form (gRPC raw contents, HTTP binary extension, HTTP JSON) to
 * an identity model (BYTES and FP32), each against a fresh server process. Prints, per case, the server's RSS
 * before the request, its peak during it (VmHWM), and its RSS after some idle seconds, with the peak's growth
 * over idle as a multiple of the request body.
 *
 * Below the table, the floor of each datatype: the same model run once in a process of its own through
 * onnxruntime-node with nothing else (`bench/bytes_memory_floor.ts`), its peak growth over the payload.
 *
 * Run: `./dinfer deno run -A bench/bytes_memory.ts [--mb=50] [--element=100] [--idle=5] [--only=grpc-BYTES,...]`
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../server/core/protos.ts";
import { startChildServer } from "./child_server.ts";
import { freePort } from "./loadgen.ts";

/** One measured case. */
export interface MemoryRow {
  /** `<wire>-<datatype>`. */
  name: string;
  /** The request body's size in bytes. */
  bodyBytes: number;
  /** RSS before the request, MB. */
  idleMb: number;
  /** Peak RSS during the request, MB. */
  peakMb: number;
  /** RSS after the idle wait, MB. */
  afterMb: number;
}

function arg(name: string, fallback: string): string {
  return Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
}

function status(pid: number): { rss: number; hwm: number } {
  const text = Deno.readTextFileSync(`/proc/${pid}/status`);
  const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(text)?.[1] ?? 0);
  return { rss: kb("VmRSS") / 1024, hwm: kb("VmHWM") / 1024 };
}

/** The peak RSS is taken from VmHWM; writing 5 to clear_refs resets it to the current RSS. */
function resetPeak(pid: number): void {
  Deno.writeTextFileSync(`/proc/${pid}/clear_refs`, "5");
}

/** BYTES elements of `size` bytes each, `count` of them, length-prefixed (the binary extension's layout). */
function bytesPayload(count: number, size: number): Uint8Array {
  const out = new Uint8Array(count * (4 + size));
  const view = new DataView(out.buffer);
  for (let i = 0; i < count; i++) {
    const off = i * (4 + size);
    view.setUint32(off, size, true);
    out.fill(97 + (i % 26), off + 4, off + 4 + size);
  }
  return out;
}

interface Case {
  wire: "grpc" | "http-binary" | "http-json";
  datatype: "BYTES" | "FP32";
}

function model(dt: string): string {
  return dt === "BYTES" ? "identity_string" : "identity_fp32";
}

/** The request for one case: the body (HTTP) or the encoded message (gRPC), and the element count. */
function buildRequest(c: Case, mb: number, element: number): { body: Uint8Array; headerLength?: number } {
  const target = mb * 1e6;
  const count = c.datatype === "BYTES" ? Math.floor(target / (4 + element)) : Math.floor(target / 4);
  const input = { name: "INPUT0", datatype: c.datatype, shape: [1, count] };
  const raw = c.datatype === "BYTES" ? bytesPayload(count, element) : new Uint8Array(count * 4).fill(1);
  if (c.wire === "grpc") {
    const type = lookupType("ModelInferRequest");
    return {
      body: type.encode(type.fromObject({
        model_name: model(c.datatype),
        inputs: [input],
        raw_input_contents: [raw],
      })).finish(),
    };
  }
  if (c.wire === "http-binary") {
    const header = new TextEncoder().encode(JSON.stringify({
      inputs: [{ ...input, parameters: { binary_data_size: raw.byteLength } }],
      outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
    }));
    const body = new Uint8Array(header.byteLength + raw.byteLength);
    body.set(header);
    body.set(raw, header.byteLength);
    return { body, headerLength: header.byteLength };
  }
  const values = c.datatype === "BYTES"
    ? JSON.stringify(
      Array.from({ length: count }, (_, i) => String.fromCharCode(97 + (i % 26)).repeat(element)),
    )
    : `[${new Array(count).fill("1.5").join(",")}]`;
  const text =
    `{"inputs":[{"name":"INPUT0","datatype":"${c.datatype}","shape":[1,${count}],"data":${values}}]}`;
  return { body: new TextEncoder().encode(text) };
}

async function send(
  c: Case,
  req: { body: Uint8Array; headerLength?: number },
  httpPort: number,
  grpcPort: number,
): Promise<number> {
  if (c.wire === "grpc") {
    const client = new grpc.Client(`127.0.0.1:${grpcPort}`, grpc.credentials.createInsecure(), {
      "grpc.max_receive_message_length": -1,
      "grpc.max_send_message_length": -1,
    });
    try {
      const res = await new Promise<Buffer>((resolve, reject) => {
        client.makeUnaryRequest(
          "/inference.GRPCInferenceService/ModelInfer",
          (x: Buffer) => x,
          (x: Buffer) => x,
          Buffer.from(req.body.buffer, req.body.byteOffset, req.body.byteLength),
          { deadline: Date.now() + 300_000 },
          (err: grpc.ServiceError | null, r?: Buffer) => (err ? reject(err) : resolve(r!)),
        );
      });
      return res.byteLength;
    } finally {
      client.close();
    }
  }
  const headers: Record<string, string> = req.headerLength === undefined
    ? { "content-type": "application/json" }
    : { "inference-header-content-length": String(req.headerLength) };
  const res = await fetch(`http://127.0.0.1:${httpPort}/v2/models/${model(c.datatype)}/infer`, {
    method: "POST",
    headers,
    body: req.body as Uint8Array<ArrayBuffer>,
  });
  const answer = new Uint8Array(await res.arrayBuffer());
  if (res.status !== 200) {
    throw new Error(
      `Cannot measure ${c.wire}: HTTP ${res.status}: ${new TextDecoder().decode(answer.slice(0, 300))}`,
    );
  }
  return answer.byteLength;
}

/**
 * Measures one case against a fresh server.
 * @param c the wire form and datatype
 * @param options payload size in MB, BYTES element size, idle seconds, extra deno and server arguments
 */
export async function measure(
  c: Case,
  options: { mb: number; element: number; idleS: number; denoArgs?: string[]; serverArgs?: string[] },
): Promise<MemoryRow> {
  const grpcPort = freePort();
  const server = await startChildServer(options.denoArgs ?? [], [
    "--model-repository=tests/fixtures/models",
    "--model-control-mode=explicit",
    `--load-model=${model(c.datatype)}`,
    `--grpc-port=${grpcPort}`,
    "--http-max-input-size=2000000000",
    ...(options.serverArgs ?? []),
  ]);
  try {
    // One small request first, so that the path is warm and idle RSS includes it.
    await send(c, buildRequest(c, 0.001, options.element), server.port, grpcPort);
    let req: { body: Uint8Array; headerLength?: number } | undefined = buildRequest(
      c,
      options.mb,
      options.element,
    );
    const bodyBytes = req.body.byteLength;
    await new Promise((r) => setTimeout(r, 1000));
    const idleMb = status(server.pid).rss;
    resetPeak(server.pid);
    await send(c, req, server.port, grpcPort);
    req = undefined;
    const peakMb = status(server.pid).hwm;
    await new Promise((r) => setTimeout(r, options.idleS * 1000));
    const afterMb = status(server.pid).rss;
    return { name: `${c.wire}-${c.datatype}`, bodyBytes, idleMb, peakMb, afterMb };
  } finally {
    await server.stop();
  }
}

/**
 * The rows as a table: peak growth over the body size, and what idle RSS is left over.
 * @param rows the measured cases
 */
export function formatRows(rows: MemoryRow[]): string {
  const head =
    "| case | body MB | idle MB | peak MB | peak-idle / body | after idle MB | after-idle / body |";
  const sep = "| --- | --: | --: | --: | --: | --: | --: |";
  const lines = rows.map((r) => {
    const body = r.bodyBytes / 2 ** 20;
    return `| ${r.name} | ${body.toFixed(1)} | ${r.idleMb.toFixed(0)} | ${r.peakMb.toFixed(0)} | ${
      ((r.peakMb - r.idleMb) / body).toFixed(1)
    } | ${r.afterMb.toFixed(0)} | ${((r.afterMb - r.idleMb) / body).toFixed(1)} |`;
  });
  return [head, sep, ...lines].join("\n");
}

if (import.meta.main) {
  const mb = Number(arg("mb", "50"));
  const element = Number(arg("element", "100"));
  const idleS = Number(arg("idle", "5"));
  const only = arg("only", "");
  const cases: Case[] = [];
  for (const datatype of ["BYTES", "FP32"] as const) {
    for (const wire of ["grpc", "http-binary", "http-json"] as const) {
      if (!only || only.split(",").includes(`${wire}-${datatype}`)) cases.push({ wire, datatype });
    }
  }
  const rows: MemoryRow[] = [];
  for (const c of cases) {
    console.error(`- ${c.wire} ${c.datatype}`);
    rows.push(await measure(c, { mb, element, idleS }));
  }
  console.log(`${mb} MB payload, BYTES elements of ${element} bytes, RSS after ${idleS} s idle\n`);
  console.log(formatRows(rows));
  console.log(
    "\nThe floor: the model alone in-process (bench/bytes_memory_floor.ts), peak growth / payload:",
  );
  for (const datatype of ["BYTES", "FP32"]) {
    const { stdout, success } = await new Deno.Command(Deno.execPath(), {
      args: [
        ...["run", "-A", "--v8-flags=--expose-gc", "bench/bytes_memory_floor.ts"],
        ...[`--datatype=${datatype}`, `--mb=${mb}`, `--element=${element}`],
      ],
      stderr: "inherit",
    }).output();
    if (!success) throw new Error(`Cannot measure the ${datatype} floor: bench/bytes_memory_floor.ts failed`);
    const floor = JSON.parse(new TextDecoder().decode(stdout)) as { growthMb: number; payloadBytes: number };
    console.log(`- ${datatype}: ${(floor.growthMb / (floor.payloadBytes / 2 ** 20)).toFixed(1)}×`);
  }
}
