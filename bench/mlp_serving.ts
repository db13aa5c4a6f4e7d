/**
 * What the MLP benchmark's hand-written servers (bench/mlp_peer_server.ts, bench/mlp_floor_server.ts) share:
 * their command line, the model's sizes, and the binary answer and refusal they send.
 * @module
 */

/** The most samples in one batch. */
export const MAX_BATCH = 64;
/** Floats per sample in. */
export const MLP_IN = 784;
/** Logits per sample out. */
export const MLP_OUT = 10;

/**
 * The command line of a hand-written MLP server: `--http-port=N` and `--model-repository=DIR` are required (the
 * process exits with status 2 without them), other `--name=value` flags are read with `flag`.
 * @param what the server, for the error message
 */
export function mlpServerArgs(what: string): {
  port: number;
  models: string;
  flag: (name: string) => string | undefined;
} {
  const flag = (name: string) => Deno.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const port = Number(flag("http-port"));
  const models = flag("model-repository");
  if (!Number.isInteger(port) || port <= 0 || !models) {
    console.error(`Cannot start the ${what}: --http-port=N and --model-repository=DIR are required`);
    Deno.exit(2);
  }
  return { port, models, flag };
}

/** The JSON part of every answer: one FP32 [1, 10] output, `logits`, as binary data. */
const header = new TextEncoder().encode(JSON.stringify({
  model_name: "mlp",
  model_version: "1",
  outputs: [{
    name: "logits",
    datatype: "FP32",
    shape: [1, MLP_OUT],
    parameters: { binary_data_size: MLP_OUT * 4 },
  }],
}));
const headers = {
  "content-type": "application/octet-stream",
  "inference-header-content-length": String(header.byteLength),
};

/**
 * The answer of sample `i` of a batch: its 10 logits as binary tensor data.
 * @param logits the batch's logits, as bytes
 * @param i the sample
 */
export function mlpAnswer(logits: Uint8Array, i: number): Response {
  const answer = new Uint8Array(header.byteLength + MLP_OUT * 4);
  answer.set(header, 0);
  answer.set(logits.subarray(i * MLP_OUT * 4, (i + 1) * MLP_OUT * 4), header.byteLength);
  return new Response(answer, { headers });
}

/** A refused request: 400 with the reason. */
export function badRequest(message: string): Response {
  return Response.json({ error: message }, { status: 400 });
}
