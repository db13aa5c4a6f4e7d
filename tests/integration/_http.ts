/**
 * HTTP helpers of the integration tests: JSON and binary inference requests built by hand, and responses
 * read back (every body is consumed).
 * @module
 */

/** A response with its body read. */
export interface Answer {
  /** The HTTP status. */
  status: number;
  /** The response headers. */
  headers: Headers;
  /** The whole body. */
  bytes: Uint8Array;
  /** The JSON part of the body (all of it without Inference-Header-Content-Length); undefined if empty. */
  json: Record<string, unknown> | undefined;
  /** The binary part that follows the JSON part (empty for pure JSON). */
  binary: Uint8Array;
}

/** One output tensor of an inference response. */
export interface OutputTensor {
  name: string;
  datatype: string;
  shape: number[];
  data?: unknown[];
  parameters?: Record<string, unknown>;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * Reads a response body whole and splits it at Inference-Header-Content-Length.
 * @param response the response
 */
export async function readAnswer(response: Response): Promise<Answer> {
  const bytes = new Uint8Array(await response.arrayBuffer());
  const hl = response.headers.get("inference-header-content-length");
  const cut = hl === null ? bytes.byteLength : Number(hl);
  const head = bytes.subarray(0, cut);
  const json = head.byteLength === 0 ? undefined : JSON.parse(decoder.decode(head));
  return { status: response.status, headers: response.headers, bytes, json, binary: bytes.subarray(cut) };
}

/**
 * Sends a request and reads the answer.
 * @param url the full URL
 * @param init the fetch options
 */
export async function call(url: string, init?: RequestInit): Promise<Answer> {
  return await readAnswer(await fetch(url, init));
}

/**
 * GETs a path of a server.
 * @param base the server's base URL
 * @param path the path, e.g. `/v2/models/simple`
 */
export function get(base: string, path: string): Promise<Answer> {
  return call(base + path);
}

/**
 * POSTs a JSON inference request to a model.
 * @param base the server's base URL
 * @param model the model name (with `/versions/N` when needed)
 * @param body the JSON request
 * @param headers extra headers
 */
export function inferJson(
  base: string,
  model: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<Answer> {
  return call(`${base}/v2/models/${model}/infer`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

/**
 * Builds a body of the binary tensor data extension: the JSON header, then the binary chunks.
 * @param header the JSON part
 * @param chunks the binary parts, in input order
 * @returns the body and the value of Inference-Header-Content-Length
 */
export function binaryBody(
  header: unknown,
  chunks: Uint8Array[],
): { body: Uint8Array; headerLength: number } {
  const head = encoder.encode(JSON.stringify(header));
  const total = head.byteLength + chunks.reduce((n, c) => n + c.byteLength, 0);
  const body = new Uint8Array(total);
  body.set(head, 0);
  let off = head.byteLength;
  for (const c of chunks) {
    body.set(c, off);
    off += c.byteLength;
  }
  return { body, headerLength: head.byteLength };
}

/**
 * POSTs a binary-extension inference request.
 * @param base the server's base URL
 * @param model the model name
 * @param header the JSON part (inputs with `parameters.binary_data_size`)
 * @param chunks the binary parts
 */
export function inferBinary(
  base: string,
  model: string,
  header: unknown,
  chunks: Uint8Array[],
): Promise<Answer> {
  const { body, headerLength } = binaryBody(header, chunks);
  return call(`${base}/v2/models/${model}/infer`, {
    method: "POST",
    headers: {
      "content-type": "application/octet-stream",
      "inference-header-content-length": String(headerLength),
    },
    body: body as BodyInit,
  });
}

/**
 * The outputs of an inference response.
 * @param answer the answer
 */
export function outputsOf(answer: Answer): OutputTensor[] {
  return (answer.json?.outputs ?? []) as OutputTensor[];
}

/**
 * The binary data of each binary output, by name, in response order.
 * @param answer the answer
 */
export function binaryOutputs(answer: Answer): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  let off = 0;
  for (const o of outputsOf(answer)) {
    const size = o.parameters?.binary_data_size;
    if (typeof size !== "number") continue;
    out.set(o.name, answer.binary.subarray(off, off + size));
    off += size;
  }
  if (off !== answer.binary.byteLength) {
    throw new Error(`The binary outputs claim ${off} bytes, the body holds ${answer.binary.byteLength}`);
  }
  return out;
}

/**
 * The little-endian bytes of a typed array.
 * @param a the array
 */
export function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength).slice();
}

/**
 * Serializes BYTES elements as the binary extension does (4-byte little-endian length, then the bytes).
 * @param elements the strings
 */
export function serializeStrings(elements: readonly string[]): Uint8Array {
  const parts = elements.map((e) => encoder.encode(e));
  const out = new Uint8Array(parts.reduce((n, p) => n + 4 + p.byteLength, 0));
  const dv = new DataView(out.buffer);
  let off = 0;
  for (const p of parts) {
    dv.setUint32(off, p.byteLength, true);
    out.set(p, off + 4);
    off += 4 + p.byteLength;
  }
  return out;
}

/**
 * Splits serialized BYTES elements into strings.
 * @param buf the serialized elements
 */
export function deserializeStrings(buf: Uint8Array): string[] {
  const out: string[] = [];
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let off = 0;
  while (off < buf.byteLength) {
    const len = dv.getUint32(off, true);
    out.push(decoder.decode(buf.subarray(off + 4, off + 4 + len)));
    off += 4 + len;
  }
  return out;
}

/** The request of `simple` used throughout: INPUT0 = 0..15, INPUT1 = all ones. */
export const SIMPLE_REQUEST = {
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
  ],
};

/** OUTPUT0 of SIMPLE_REQUEST (INPUT0 + INPUT1). */
export const SIMPLE_SUM: number[] = Array.from({ length: 16 }, (_, i) => i + 1);
/** OUTPUT1 of SIMPLE_REQUEST (INPUT0 - INPUT1). */
export const SIMPLE_DIFF: number[] = Array.from({ length: 16 }, (_, i) => i - 1);

/**
 * Copies a folder recursively.
 * @param from the source folder
 * @param to the destination folder (created)
 */
export async function copyDir(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    const src = `${from}/${e.name}`;
    const dst = `${to}/${e.name}`;
    if (e.isDirectory) await copyDir(src, dst);
    else await Deno.copyFile(src, dst);
  }
}

/** An answer read off the socket as sent: headers and body untouched (no transparent decompression). */
export interface RawAnswer {
  /** The HTTP status. */
  status: number;
  /** The response headers, names in lower case. */
  headers: Headers;
  /** The body bytes as sent (chunked transfer decoded, nothing else). */
  body: Uint8Array;
}

/**
 * Sends one HTTP/1.1 request over a plain TCP connection and reads the answer as it comes: unlike fetch,
 * nothing adds Accept-Encoding or inflates the body.
 * @param base the server's base URL, e.g. `http://127.0.0.1:8000`
 * @param request method, path, headers and body
 */
export async function rawRequest(
  base: string,
  request: { method: string; path: string; headers?: Record<string, string>; body?: Uint8Array },
): Promise<RawAnswer> {
  const url = new URL(base);
  const body = request.body ?? new Uint8Array(0);
  const lines = [`${request.method} ${request.path} HTTP/1.1`, `Host: ${url.host}`, "Connection: close"];
  for (const [k, v] of Object.entries(request.headers ?? {})) lines.push(`${k}: ${v}`);
  lines.push(`Content-Length: ${body.byteLength}`, "", "");
  const conn = await Deno.connect({ hostname: url.hostname, port: Number(url.port) });
  try {
    const head = encoder.encode(lines.join("\r\n"));
    const out = new Uint8Array(head.byteLength + body.byteLength);
    out.set(head, 0);
    out.set(body, head.byteLength);
    for (let off = 0; off < out.byteLength;) off += await conn.write(out.subarray(off));
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(65536);
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
    const all = new Uint8Array(chunks.reduce((a, c) => a + c.byteLength, 0));
    let off = 0;
    for (const c of chunks) {
      all.set(c, off);
      off += c.byteLength;
    }
    return parseRawAnswer(all);
  } finally {
    conn.close();
  }
}

function parseRawAnswer(all: Uint8Array): RawAnswer {
  let end = -1;
  for (let i = 0; i + 3 < all.byteLength; i++) {
    if (all[i] === 13 && all[i + 1] === 10 && all[i + 2] === 13 && all[i + 3] === 10) {
      end = i;
      break;
    }
  }
  if (end < 0) throw new Error("The answer has no end of headers");
  const [statusLine, ...headerLines] = decoder.decode(all.subarray(0, end)).split("\r\n");
  const status = Number(statusLine!.split(" ")[1]);
  const headers = new Headers();
  for (const line of headerLines) {
    const colon = line.indexOf(":");
    headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim());
  }
  let body = all.subarray(end + 4);
  if (headers.get("transfer-encoding")?.includes("chunked")) {
    const parts: Uint8Array[] = [];
    let off = 0;
    for (;;) {
      let eol = off;
      while (!(body[eol] === 13 && body[eol + 1] === 10)) eol++;
      const size = parseInt(decoder.decode(body.subarray(off, eol)), 16);
      if (size === 0) break;
      parts.push(body.subarray(eol + 2, eol + 2 + size));
      off = eol + 2 + size + 2;
    }
    const joined = new Uint8Array(parts.reduce((a, p) => a + p.byteLength, 0));
    let o = 0;
    for (const p of parts) {
      joined.set(p, o);
      o += p.byteLength;
    }
    body = joined;
  }
  return { status, headers, body };
}
