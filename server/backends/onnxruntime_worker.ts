/**
 * The worker side of an ONNX Runtime instance that runs on its own thread: it opens one InferenceSession
 * and runs the batches the main thread posts, answering with the outputs (buffers transferred, not copied).
 * @module
 */

/// <reference lib="deno.worker" />

import * as ort from "onnxruntime-node";

/** Messages from the main thread. */
export type WorkerRequest =
  | { op: "open"; path: string; options: ort.InferenceSession.SessionOptions }
  | {
    op: "run";
    id: number;
    feeds: { name: string; type: ort.Tensor.Type; data: ArrayBufferView | string[]; dims: number[] }[];
    fetches: string[];
  }
  | { op: "close" };

/** Messages to the main thread. */
export type WorkerReply =
  | {
    op: "opened";
    inputNames: string[];
    inputMetadata: ort.InferenceSession.ValueMetadata[];
    outputMetadata: ort.InferenceSession.ValueMetadata[];
  }
  | {
    op: "result";
    id: number;
    outputs: { name: string; type: string; data: ArrayBufferView | string[]; dims: number[] }[];
  }
  | { op: "error"; id: number; message: string }
  | { op: "closed" };

let session: ort.InferenceSession | undefined;

function reply(message: WorkerReply, transfer: Transferable[] = []): void {
  self.postMessage(message, transfer);
}

self.onmessage = async (event: MessageEvent<WorkerRequest>) => {
  const msg = event.data;
  if (msg.op === "open") {
    try {
      session = await ort.InferenceSession.create(msg.path, msg.options);
      reply({
        op: "opened",
        inputNames: [...session.inputNames],
        inputMetadata: [...session.inputMetadata],
        outputMetadata: [...session.outputMetadata],
      });
    } catch (err) {
      reply({ op: "error", id: -1, message: err instanceof Error ? err.message : String(err) });
    }
    return;
  }
  if (msg.op === "close") {
    await session?.release();
    session = undefined;
    reply({ op: "closed" });
    return;
  }
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const f of msg.feeds) {
      const t = new ort.Tensor(f.type, f.data as ort.Tensor.DataType, f.dims);
      // The bit patterns of FP16 must reach the binding as they are (see onnxruntime.ts).
      if (f.type === "float16") (t as unknown as { cpuData: unknown }).cpuData = f.data;
      feeds[f.name] = t;
    }
    const results = await session!.run(feeds, msg.fetches);
    const outputs = msg.fetches.map((name) => {
      const v = results[name] as ort.Tensor;
      return { name, type: v.type, data: v.data as ArrayBufferView | string[], dims: v.dims.map(Number) };
    });
    const transfer = outputs
      .map((o) => (ArrayBuffer.isView(o.data) ? o.data.buffer : undefined))
      .filter((b): b is ArrayBuffer => b instanceof ArrayBuffer);
    reply({ op: "result", id: msg.id, outputs }, [...new Set(transfer)]);
  } catch (err) {
    reply({ op: "error", id: msg.id, message: err instanceof Error ? err.message : String(err) });
  }
};
