/**
 * The worker thread of bench/mlp_floor_server.ts: runs each batch the main thread puts in a shared-memory slot
 * through onnxruntime-node and writes the logits back into the slot's output block.
 * @module
 */

/// <reference lib="deno.worker" />

import * as ort from "onnxruntime-node";
import type { SlotBlocks } from "./mlp_floor_server.ts";

interface Start {
  path: string;
  /** Floats per sample in. */
  sampleIn: number;
  intraOpNumThreads?: number;
  /** Whether ONNX Runtime's intra-op pool threads spin between runs (its default: they do). */
  spinning?: boolean;
  blocks: SlotBlocks;
}

/** Runs batches as the main thread hands them over, in order, for as long as the thread lives. */
async function serve(start: Start): Promise<void> {
  const options: ort.InferenceSession.SessionOptions = {};
  if (start.intraOpNumThreads !== undefined) options.intraOpNumThreads = start.intraOpNumThreads;
  if (start.spinning === false) options.extra = { "session.intra_op.allow_spinning": "0" };
  const session = await ort.InferenceSession.create(start.path, options);
  const control = new Int32Array(start.blocks.control);
  const inputs = start.blocks.inputs.map((b) => new Float32Array(b));
  const outputs = start.blocks.outputs.map((b) => new Float32Array(b));
  self.postMessage("ready");
  for (let done = 0;; done++) {
    // A blocking wait, as dinfer's instance workers do: a thread with nothing else to do may not be woken for an
    // `Atomics.waitAsync` (https://github.com/denoland/deno/issues/14786), and a floor server that waited so once
    // stopped answering under load.
    Atomics.wait(control, 0, done);
    const slot = done & 1;
    const n = control[2 + slot]!;
    // onnxruntime-node takes tensors over plain memory: the batch is copied out of the slot.
    const input = inputs[slot]!.slice(0, n * start.sampleIn);
    const out = await session.run({ input: new ort.Tensor("float32", input, [n, start.sampleIn]) });
    outputs[slot]!.set(out.logits!.data as Float32Array);
    Atomics.store(control, 1, done + 1);
    Atomics.notify(control, 1);
  }
}

self.onmessage = (e: MessageEvent<Start>) => {
  serve(e.data).catch((err) => self.postMessage(`the worker failed: ${(err as Error).message}`));
};
