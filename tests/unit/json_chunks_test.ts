/**
 * JSON answers with large outputs, their data written in chunks as the body is read: the same text as the whole
 * answer, every datatype's special values included, and the small answers unchanged.
 * @module
 */

import { assert, assertEquals } from "../assert.ts";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { bytesOf, toJsonText, utf8Decode, utf8Encode } from "../../server/core/dtypes.ts";
import type { InferResponse, Tensor } from "../../server/core/types.ts";
import { encodeInferResponse, inferResponse } from "../../server/frontends/http/infer_codec.ts";
import {
  DEFERRED_DATA,
  JSON_STREAM_BYTES,
  jsonChunks,
  jsonDataPieces,
  jsonWhole,
} from "../../server/frontends/http/json_chunks.ts";

function fp32(n: number, at: (i: number) => number): Tensor {
  const v = new Float32Array(n);
  for (let i = 0; i < n; i++) v[i] = at(i);
  return { name: "F", datatype: "FP32", shape: [n], data: bytesOf(v) };
}

async function read(stream: ReadableStream<Uint8Array>): Promise<{ text: string; chunks: number }> {
  let text = "";
  let chunks = 0;
  for await (const c of stream) {
    text += utf8Decode(c);
    chunks++;
  }
  return { text, chunks };
}

Deno.test("an output's data in pieces is the text toJsonText writes, for every kind of value", () => {
  const cases: Tensor[] = [
    fp32(40_000, (i) => (i % 7) * 0.25 - 1),
    // NaN, infinities and -0 take toJsonValues' spelling, in whichever piece they fall.
    fp32(20_000, (i) => [NaN, Infinity, -Infinity, -0, 1.5][i % 5]!),
    {
      name: "I",
      datatype: "INT64",
      shape: [3],
      data: bytesOf(new BigInt64Array([1n, -(2n ** 63n), 2n ** 62n])),
    },
    { name: "B", datatype: "BOOL", shape: [3], data: new Uint8Array([1, 0, 1]) },
    { name: "H", datatype: "FP16", shape: [2], data: bytesOf(new Uint16Array([0x3c00, 0x8000])) },
    { name: "E", datatype: "FP32", shape: [0], data: new Uint8Array(0) },
    {
      name: "S",
      datatype: "BYTES",
      shape: [20_000],
      data: BytesTensor.of(Array.from({ length: 20_000 }, (_, i) => utf8Encode(`é"${i}\n`))),
    },
  ];
  for (const t of cases) {
    assertEquals([...jsonDataPieces(t)].join(""), toJsonText(t.datatype, t.data), t.name);
  }
  assert([...jsonDataPieces(cases[0]!)].length > 3, "more than one piece of data");
});

Deno.test("a body with stand-ins is the whole text, in chunks of about half a million characters", async () => {
  const a = fp32(300_000, (i) => i);
  const b = fp32(3, (i) => -i);
  const text = `{"x":${DEFERRED_DATA},"y":[${DEFERRED_DATA}]}`;
  const whole = jsonWhole(text, [a, b]);
  assertEquals(whole, `{"x":${toJsonText("FP32", a.data)},"y":[${toJsonText("FP32", b.data)}]}`);
  const { text: streamed, chunks } = await read(jsonChunks(text, [a, b]));
  assertEquals(streamed, whole);
  assert(chunks >= 4, `${chunks} chunks`);
});

function response(outputs: Tensor[]): InferResponse {
  return { model: "m", version: "1", id: "q", outputs, parameters: { k: 1 } };
}

Deno.test("a JSON answer with a large output is written in chunks; its text is the answer whole", async () => {
  const large = fp32(JSON_STREAM_BYTES / 4, (i) => i % 1000);
  const small = fp32(2, (i) => i + 0.5);
  const enc = encodeInferResponse(response([{ ...small, name: "S" }, large]), [], false);
  assertEquals([enc.text, enc.headerLength, enc.byteLength], [undefined, undefined, undefined]);
  const whole = `{"model_name":"m","model_version":"1","id":"q","parameters":{"k":1},"outputs":[` +
    `{"name":"S","datatype":"FP32","shape":[2],"data":[0.5,1.5]},` +
    `{"name":"F","datatype":"FP32","shape":[${large.shape[0]}],"data":${toJsonText("FP32", large.data)}}]}`;
  assertEquals(utf8Decode(enc.body), whole);
  const answer = inferResponse(enc);
  assertEquals([answer.status, answer.headers.get("content-type")], [200, "application/json"]);
  assertEquals(await answer.text(), whole);
});

Deno.test("an output just under the size is written inline; a large JSON output beside binary data is too", () => {
  const under = fp32(JSON_STREAM_BYTES / 4 - 1, () => 2);
  const inline = encodeInferResponse(response([under]), [], false);
  assertEquals(inline.chunks, undefined);
  assertEquals(
    inline.text,
    JSON.stringify({
      model_name: "m",
      model_version: "1",
      id: "q",
      parameters: { k: 1 },
      outputs: [{
        name: "F",
        datatype: "FP32",
        shape: [under.shape[0]],
        data: Array(under.shape[0]).fill(2),
      }],
    }),
  );
  const large = fp32(JSON_STREAM_BYTES / 4, () => 3);
  const binary: Tensor = { name: "B", datatype: "INT32", shape: [1], data: bytesOf(new Int32Array([7])) };
  const requested = [{ name: "B", classification: 0, parameters: { binary_data: true } }];
  const mixed = encodeInferResponse(response([large, binary]), requested, false);
  assertEquals(mixed.chunks, undefined);
  const header = JSON.parse(utf8Decode(mixed.body.subarray(0, mixed.headerLength)));
  assertEquals(header.outputs[0].data.length, large.shape[0]);
  assertEquals(header.outputs[0].data[0], 3);
  assertEquals([...mixed.body.subarray(mixed.headerLength!)], [7, 0, 0, 0]);
});
