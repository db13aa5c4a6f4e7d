/**
 * The batching floor for the MLP benchmark: the least a server on dinfer's stack (Deno.serve, onnxruntime-node,
 * a worker thread) can do to batch this one model, so that what it reaches bounds what a real server can. It
 * has dinfer's shape without dinfer's work: `Deno.serve` reads each single-sample binary request, takes the 784
 * floats from behind the JSON header (whose length the `Inference-Header-Content-Length` header gives; the JSON
 * is not parsed), and queues them; up to 64 queued samples go into one of two shared-memory slots, and a worker
 * thread runs them through onnxruntime-node as one batch while the main thread reads the next requests and
 * fills the other slot. The two threads hand slots over with `Atomics` (the worker waits with `Atomics.wait`, the
 * main thread with `Atomics.waitAsync` for the answers). Each request is answered with its 10 logits as binary
 * tensor data. No validation beyond the sizes, no statistics beyond a few counters, no other model.
 *
 * Usage: `deno run -A bench/mlp_floor_server.ts --http-port=N --model-repository=<bench/models>
 * [--intra-op-threads=K] [--spinning=0]` (other `--flags` are ignored; `--intra-op-threads` defaults to ONNX
 * Runtime's own choice, and `--spinning=0` keeps its pool threads from spinning between runs). It answers
 * `POST /v2/models/{m}/infer`, health, and statistics with its inference, execution, success and failure counts
 * (so the load generators read it as they read the server).
 * @module
 */

import { badRequest, MAX_BATCH, MLP_IN, MLP_OUT, mlpAnswer, mlpServerArgs } from "./mlp_serving.ts";

/** The shared blocks: a control block and the two slots' input and output blocks. */
export interface SlotBlocks {
  control: SharedArrayBuffer;
  inputs: SharedArrayBuffer[];
  outputs: SharedArrayBuffer[];
}

const { port, models, flag } = mlpServerArgs("MLP floor server");
const intraOp = flag("intra-op-threads");

const blocks: SlotBlocks = {
  control: new SharedArrayBuffer(4 * 4),
  inputs: [0, 1].map(() => new SharedArrayBuffer(MAX_BATCH * MLP_IN * 4)),
  outputs: [0, 1].map(() => new SharedArrayBuffer(MAX_BATCH * MLP_OUT * 4)),
};
// [0] batches handed to the worker, [1] batches it finished, [2 + slot] the samples in a slot's batch.
const control = new Int32Array(blocks.control);
const inputs = blocks.inputs.map((b) => new Float32Array(b));
const outputs = blocks.outputs.map((b) => new Uint8Array(b));

const worker = new Worker(new URL("./mlp_floor_worker.ts", import.meta.url).href, { type: "module" });
await new Promise<void>((resolve, reject) => {
  worker.onmessage = (e) => (e.data === "ready" ? resolve() : reject(new Error(String(e.data))));
  worker.onerror = (e) => reject(e.error ?? new Error(e.message));
  worker.postMessage({
    path: `${models}/mlp/1/model.onnx`,
    sampleIn: MLP_IN,
    intraOpNumThreads: intraOp === undefined ? undefined : Number(intraOp),
    spinning: flag("spinning") === undefined ? undefined : flag("spinning") !== "0",
    blocks,
  });
});
// From here on the worker only speaks when it failed: the server cannot go on without it.
worker.onmessage = (e) => {
  console.error(`Cannot serve: ${e.data}`);
  Deno.exit(1);
};
worker.onerror = (e) => {
  console.error(`Cannot serve: the worker failed: ${e.message}`);
  Deno.exit(1);
};

interface Queued {
  sample: Float32Array;
  resolve: (r: Response) => void;
}
let queue: Queued[] = [];
/** The requests of the batch in each slot. */
const inSlot: Queued[][] = [[], []];
let handed = 0;
let finished = 0;
let waiting = false;
let inferences = 0;
let failures = 0;

/** Hands queued samples to free slots: at most two batches on the worker, one running and one waiting. */
function pump(): void {
  while (queue.length > 0 && handed - finished < 2) {
    const slot = handed & 1;
    const batch = queue.length <= MAX_BATCH ? queue : queue.slice(0, MAX_BATCH);
    queue = queue.length <= MAX_BATCH ? [] : queue.slice(MAX_BATCH);
    const input = inputs[slot]!;
    batch.forEach((q, i) => input.set(q.sample, i * MLP_IN));
    inSlot[slot] = batch;
    control[2 + slot] = batch.length;
    Atomics.store(control, 0, ++handed);
    Atomics.notify(control, 0);
  }
  if (handed > finished && !waiting) awaitAnswers();
}

/** Answers the requests of every batch the worker finished, then hands it more. */
function awaitAnswers(): void {
  waiting = true;
  const wait = Atomics.waitAsync(control, 1, finished);
  const done = () => {
    waiting = false;
    const now = Atomics.load(control, 1);
    for (; finished < now; finished++) {
      const slot = finished & 1;
      const logits = outputs[slot]!;
      const batch = inSlot[slot]!;
      inSlot[slot] = [];
      inferences += batch.length;
      batch.forEach((q, i) => q.resolve(mlpAnswer(logits, i)));
    }
    pump();
  };
  if (wait.async) wait.value.then(done);
  else done();
}

function bad(message: string): Response {
  failures++;
  return badRequest(message);
}

Deno.serve({ port, hostname: "127.0.0.1", onListen: () => {} }, async (request) => {
  if (request.method === "POST") {
    const body = new Uint8Array(await request.arrayBuffer());
    const hl = Number(request.headers.get("inference-header-content-length"));
    if (!Number.isInteger(hl) || hl < 0 || body.byteLength - hl !== MLP_IN * 4) {
      return bad("expected [1, 784]");
    }
    // A copy of its own: aligned for Float32Array, and a plain buffer, so that the copy into the slot is fast.
    const sample = new Float32Array(body.slice(hl).buffer);
    return await new Promise<Response>((resolve) => {
      queue.push({ sample, resolve });
      pump();
    });
  }
  if (request.url.endsWith("/stats")) {
    return Response.json({
      model_stats: [{
        inference_count: inferences,
        execution_count: finished,
        inference_stats: { success: { count: inferences }, fail: { count: failures } },
        batch_stats: [],
      }],
    });
  }
  return new Response(null);
});
