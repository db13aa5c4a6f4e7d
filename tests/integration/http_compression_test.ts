/**
 * Compressed request bodies (Content-Encoding) and responses (Accept-Encoding) over HTTP.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, startTestServer } from "../helpers.ts";
import { binaryBody, call, rawRequest, SIMPLE_DIFF, SIMPLE_REQUEST, SIMPLE_SUM } from "./_http.ts";

type Encoding = "gzip" | "deflate";

async function compress(data: Uint8Array, encoding: Encoding): Promise<Uint8Array> {
  const stream = new Blob([data as BlobPart]).stream().pipeThrough(new CompressionStream(encoding));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function decompress(data: Uint8Array, encoding: Encoding): Promise<Uint8Array> {
  const stream = new Blob([data as BlobPart]).stream().pipeThrough(new DecompressionStream(encoding));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

const EXPECTED = {
  model_name: "simple",
  model_version: "1",
  outputs: [
    { name: "OUTPUT0", datatype: "INT32", shape: [1, 16], data: SIMPLE_SUM },
    { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: SIMPLE_DIFF },
  ],
};

Deno.test("compressed requests and responses", async (t) => {
  await using s = await startTestServer([`--model-repository=${EXAMPLES}`]);
  const path = "/v2/models/simple/infer";
  const plain = new TextEncoder().encode(JSON.stringify(SIMPLE_REQUEST));
  const post = (headers: Record<string, string>, body: Uint8Array) =>
    rawRequest(s.url, { method: "POST", path, headers, body });
  const jsonOf = (bytes: Uint8Array) => JSON.parse(new TextDecoder().decode(bytes));

  for (const encoding of ["gzip", "deflate"] as const) {
    await t.step(`a ${encoding} request body is inflated`, async () => {
      const r = await post(
        { "content-encoding": encoding, "content-type": "application/json" },
        await compress(plain, encoding),
      );
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("content-encoding"), null);
      assert.deepEqual(jsonOf(r.body), EXPECTED);
    });

    await t.step(`Accept-Encoding: ${encoding} compresses the answer`, async () => {
      const r = await post({ "accept-encoding": encoding }, plain);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("content-encoding"), encoding);
      assert.equal(r.headers.get("content-type"), "application/json");
      assert.deepEqual(jsonOf(await decompress(r.body, encoding)), EXPECTED);
    });
  }

  await t.step("the first acceptable encoding of the list is chosen", async () => {
    const r = await post({ "accept-encoding": "br, deflate, gzip" }, plain);
    assert.equal(r.headers.get("content-encoding"), "deflate");
    assert.deepEqual(jsonOf(await decompress(r.body, "deflate")), EXPECTED);
  });

  await t.step("a compressed binary request gets a compressed binary answer", async () => {
    const { body, headerLength } = binaryBody({
      parameters: { binary_data_output: true },
      inputs: ["INPUT0", "INPUT1"].map((name) => ({
        name,
        datatype: "INT32",
        shape: [1, 16],
        parameters: { binary_data_size: 64 },
      })),
    }, [
      new Uint8Array(new Int32Array(Array.from({ length: 16 }, (_, i) => i)).buffer),
      new Uint8Array(new Int32Array(16).fill(1).buffer),
    ]);
    const r = await post({
      "content-encoding": "gzip",
      "accept-encoding": "gzip",
      "inference-header-content-length": String(headerLength),
    }, await compress(body, "gzip"));
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-encoding"), "gzip");
    const hl = Number(r.headers.get("inference-header-content-length"));
    const inflated = await decompress(r.body, "gzip");
    assert.equal(inflated.byteLength, hl + 128);
    assert.deepEqual(jsonOf(inflated.subarray(0, hl)).outputs[0].parameters, { binary_data_size: 64 });
    const bin = inflated.slice(hl);
    assert.deepEqual([...new Int32Array(bin.buffer, 0, 16)], SIMPLE_SUM);
    assert.deepEqual([...new Int32Array(bin.buffer, 64, 16)], SIMPLE_DIFF);
  });

  await t.step("no Accept-Encoding, or only unknown or refused ones, answers uncompressed", async () => {
    for (const accept of [undefined, "br", "gzip;q=0, identity"]) {
      const r = await post(accept ? { "accept-encoding": accept } : {}, plain);
      assert.equal(r.status, 200, String(accept));
      assert.equal(r.headers.get("content-encoding"), null, String(accept));
      assert.deepEqual(jsonOf(r.body), EXPECTED);
    }
  });

  for (const encoding of ["gzip", "deflate"] as const) {
    await t.step(`a body that is not ${encoding} data is 400`, async () => {
      const r = await post({ "content-encoding": encoding }, plain);
      assert.equal(r.status, 400);
      const { error } = jsonOf(r.body);
      assert.match(error, new RegExp(`^Cannot read the request body: it is not valid ${encoding} data: .+`));
    });
  }

  await t.step("a truncated gzip body is 400 and the server answers after it", async () => {
    const gz = await compress(plain, "gzip");
    const r = await post({ "content-encoding": "gzip" }, gz.slice(0, gz.byteLength - 10));
    assert.equal(r.status, 400);
    assert.match(jsonOf(r.body).error, /^Cannot read the request body: it is not valid gzip data: /);
    const ok = await post({}, plain);
    assert.deepEqual(jsonOf(ok.body), EXPECTED);
  });

  await t.step("fetch's own gzip negotiation round-trips", async () => {
    const r = await call(`${s.url}${path}`, { method: "POST", body: plain as BodyInit });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, EXPECTED);
  });
});
