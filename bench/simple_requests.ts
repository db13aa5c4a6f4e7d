/**
 * The benchmarks' request to `simple` (and to the Python backend's add_sub model, which has the same
 * signature): fixed INT32 [1,16] inputs, the outputs the model must give, and the request bodies in JSON and
 * in the binary tensor data extension.
 * @module
 */

import { httpRequest } from "./loadgen.ts";

/** INPUT0: 3i − 7. */
export const INPUT0: Int32Array = Int32Array.from({ length: 16 }, (_, i) => i * 3 - 7);
/** INPUT1: 100 − i². */
export const INPUT1: Int32Array = Int32Array.from({ length: 16 }, (_, i) => 100 - i * i);
/** The sum. */
export const OUTPUT0: Int32Array = INPUT0.map((v, i) => v + INPUT1[i]!);
/** The difference. */
export const OUTPUT1: Int32Array = INPUT0.map((v, i) => v - INPUT1[i]!);

const encoder = new TextEncoder();

/** The request in JSON: both inputs as data arrays, all outputs in JSON. */
export function jsonBody(): Uint8Array {
  return encoder.encode(JSON.stringify({
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: [...INPUT0] },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: [...INPUT1] },
    ],
  }));
}

/**
 * The request as tritonclient's HTTP client sends it: a JSON header, then the inputs' bytes; both outputs
 * asked for in binary.
 * @returns the body and the value of Inference-Header-Content-Length
 */
export function binaryBody(): { body: Uint8Array; headerLength: number } {
  const header = encoder.encode(JSON.stringify({
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
    ],
    outputs: [
      { name: "OUTPUT0", parameters: { binary_data: true } },
      { name: "OUTPUT1", parameters: { binary_data: true } },
    ],
  }));
  const body = new Uint8Array(header.byteLength + 128);
  body.set(header, 0);
  body.set(new Uint8Array(INPUT0.buffer), header.byteLength);
  body.set(new Uint8Array(INPUT1.buffer), header.byteLength + 64);
  return { body, headerLength: header.byteLength };
}

/**
 * The whole HTTP/1.1 request, head and body, for bench/loadgen.ts: POST `path` with jsonBody() or, as
 * tritonclient sends it, binaryBody() with its Inference-Header-Content-Length.
 * @param format the body
 * @param host the Host header
 * @param path the infer path (default `simple`'s)
 */
export function inferRequest(
  format: "json" | "binary",
  host: string,
  path = "/v2/models/simple/infer",
): Uint8Array {
  if (format === "json") {
    return httpRequest(
      { method: "POST", path, host, headers: { "content-type": "application/json" } },
      jsonBody(),
    );
  }
  const { body, headerLength } = binaryBody();
  return httpRequest({
    method: "POST",
    path,
    host,
    headers: {
      "content-type": "application/octet-stream",
      "inference-header-content-length": String(headerLength),
    },
  }, body);
}
