/**
 * Bad requests over HTTP: each one a 4xx or 5xx with Triton's status and an exact message, and the server
 * answering good requests after it and alongside it.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, startTestServer } from "../helpers.ts";
import {
  type Answer,
  binaryBody,
  bytesOf,
  call,
  get,
  inferBinary,
  inferJson,
  outputsOf,
  SIMPLE_DIFF,
  SIMPLE_REQUEST,
  SIMPLE_SUM,
} from "./_http.ts";

const LIMIT = 1024;
const READ = "Cannot read the inference request for 'simple'";

function input(name: string, shape: number[], data: unknown, datatype = "INT32") {
  return { name, datatype, shape, data };
}

const ones = (n: number) => Array.from({ length: n }, () => 1);

/** A bad request and the answer it must get. */
interface BadCase {
  name: string;
  send: (url: string) => Promise<Answer>;
  status: number;
  error: string;
}

function post(url: string, path: string, body: BodyInit, headers: Record<string, string> = {}) {
  return call(`${url}${path}`, { method: "POST", headers, body });
}

const simpleHeader = (size0: number, size1: number) => ({
  inputs: ["INPUT0", "INPUT1"].map((name, i) => ({
    name,
    datatype: "INT32",
    shape: [1, 16],
    parameters: { binary_data_size: i === 0 ? size0 : size1 },
  })),
});
const zeros64 = new Uint8Array(64);

const BAD: BadCase[] = [
  {
    name: "malformed JSON",
    send: (url) =>
      post(url, "/v2/models/simple/infer", '{"inputs": [', { "content-type": "application/json" }),
    status: 400,
    error: `${READ}: malformed JSON: Unexpected end of JSON input`,
  },
  {
    name: "a JSON body that is not an object",
    send: (url) => post(url, "/v2/models/simple/infer", "[1, 2]"),
    status: 400,
    error: `${READ}: the JSON body must be an object`,
  },
  {
    name: "no inputs array",
    send: (url) => inferJson(url, "simple", { outputs: [] }),
    status: 400,
    error: `${READ}: 'inputs' must be an array`,
  },
  {
    name: "data shorter than the shape",
    send: (url) =>
      inferJson(url, "simple", {
        inputs: [input("INPUT0", [1, 16], [1, 2, 3]), input("INPUT1", [1, 16], ones(16))],
      }),
    status: 400,
    error: `${READ}: input 'INPUT0' has 3 data elements, expected 16 for shape [1,16]`,
  },
  {
    name: "a shape that does not match the model",
    send: (url) =>
      inferJson(url, "simple", {
        inputs: [input("INPUT0", [1, 15], ones(15)), input("INPUT1", [1, 16], ones(16))],
      }),
    status: 400,
    error:
      "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]",
  },
  {
    name: "an unknown input",
    send: (url) =>
      inferJson(url, "simple", {
        inputs: [input("INPUT0", [1, 16], ones(16)), input("INPUT9", [1, 16], ones(16))],
      }),
    status: 400,
    error:
      "Cannot infer 'simple': unexpected inference input 'INPUT9' for model 'simple', the model's inputs are 'INPUT0', 'INPUT1'",
  },
  {
    name: "a missing input",
    send: (url) => inferJson(url, "simple", { inputs: [input("INPUT0", [1, 16], ones(16))] }),
    status: 400,
    error:
      "Cannot infer 'simple': expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], " +
      "but missing required input(s) ['INPUT1']. Please provide all required input(s).",
  },
  {
    name: "an unknown output",
    send: (url) => inferJson(url, "simple", { ...SIMPLE_REQUEST, outputs: [{ name: "OUTPUT7" }] }),
    status: 400,
    error:
      "Cannot infer 'simple': unexpected inference output 'OUTPUT7' for model 'simple', the model's outputs are 'OUTPUT0', 'OUTPUT1'",
  },
  {
    name: "the wrong datatype",
    send: (url) =>
      inferJson(url, "simple", {
        inputs: [input("INPUT0", [1, 16], ones(16), "FP32"), input("INPUT1", [1, 16], ones(16))],
      }),
    status: 400,
    error:
      "Cannot infer 'simple': inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
  },
  {
    name: "an unknown datatype",
    send: (url) =>
      inferJson(url, "simple", {
        inputs: [input("INPUT0", [1, 16], ones(16), "INT33"), input("INPUT1", [1, 16], ones(16))],
      }),
    status: 400,
    error: `${READ}: input 'INPUT0' has unknown datatype "INT33"`,
  },
  {
    name: "a value that is not an integer for INT32",
    send: (url) =>
      inferJson(url, "simple", {
        inputs: [input("INPUT0", [1, 16], [1.5, ...ones(15)]), input("INPUT1", [1, 16], ones(16))],
      }),
    status: 400,
    error: "Cannot read input 'INPUT0': element 0 is 1.5, expected an integer for INT32",
  },
  {
    name: "a batch above max_batch_size",
    send: (url) =>
      inferJson(url, "simple", {
        inputs: [input("INPUT0", [9, 16], Array(144).fill(0)), input("INPUT1", [9, 16], Array(144).fill(0))],
      }),
    status: 400,
    error:
      "Cannot infer 'simple': inference request batch-size must be <= 8 for 'simple', input 'INPUT0' has 9",
  },
  {
    name: "a body above --http-max-input-size (Content-Length)",
    send: (url) => post(url, "/v2/models/simple/infer", new Uint8Array(LIMIT + 1)),
    status: 400,
    error: `Cannot read the request body: ${
      LIMIT + 1
    } bytes is more than --http-max-input-size (${LIMIT} bytes)`,
  },
  {
    name: "a chunked body above --http-max-input-size",
    send: (url) =>
      post(
        url,
        "/v2/models/simple/infer",
        new ReadableStream<Uint8Array>({
          start(c) {
            for (let i = 0; i < 8; i++) c.enqueue(new Uint8Array(200).fill(32));
            c.close();
          },
        }),
      ),
    status: 400,
    error: `Cannot read the request body: it is more than --http-max-input-size (${LIMIT} bytes)`,
  },
  {
    name: "binary data larger than the body holds",
    send: (url) => inferBinary(url, "simple", simpleHeader(64, 100), [zeros64, zeros64]),
    status: 400,
    error: `${READ}: input 'INPUT1' claims 100 bytes of binary data but only 64 remain`,
  },
  {
    name: "binary data of the wrong size for the shape",
    send: (url) => inferBinary(url, "simple", simpleHeader(60, 68), [zeros64, zeros64]),
    status: 400,
    error:
      "Cannot infer 'simple': input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 60",
  },
  {
    name: "binary data left over after the inputs",
    send: (url) => inferBinary(url, "simple", simpleHeader(64, 64), [zeros64, zeros64, new Uint8Array(3)]),
    status: 400,
    error: `${READ}: the body has 131 bytes of binary data but the inputs claim 128`,
  },
  {
    name: "Inference-Header-Content-Length beyond the body",
    send: (url) => {
      const { body } = binaryBody(simpleHeader(64, 64), [zeros64, zeros64]);
      return post(url, "/v2/models/simple/infer", body as BodyInit, {
        "inference-header-content-length": "900",
      });
    },
    status: 400,
    error: `${READ}: Inference-Header-Content-Length is 900 but the body has ${
      binaryBody(simpleHeader(64, 64), []).headerLength + 128
    } bytes`,
  },
  {
    name: "Inference-Header-Content-Length that is not a number",
    send: (url) =>
      post(url, "/v2/models/simple/infer", JSON.stringify(SIMPLE_REQUEST), {
        "inference-header-content-length": "ten",
      }),
    status: 400,
    error: `${READ}: Inference-Header-Content-Length 'ten' is not a number`,
  },
  {
    name: "the raw form on a model with two inputs",
    send: (url) =>
      post(url, "/v2/models/simple/infer", new Uint8Array(64), { "inference-header-content-length": "0" }),
    status: 400,
    error: `${READ}: the raw binary form needs a model with exactly one input, it has 2`,
  },
  {
    name: "an unsupported Content-Encoding",
    send: (url) =>
      post(url, "/v2/models/simple/infer", JSON.stringify(SIMPLE_REQUEST), { "content-encoding": "br" }),
    status: 501,
    error: "Cannot read the request body: unsupported Content-Encoding 'br'",
  },
  {
    name: "an unknown model",
    send: (url) => inferJson(url, "nope", SIMPLE_REQUEST),
    status: 404,
    error: "Request for unknown model: 'nope' is not found",
  },
  {
    name: "an unknown model with a body that is not JSON",
    send: (url) => post(url, "/v2/models/nope/infer", "not json"),
    status: 404,
    error: "Request for unknown model: 'nope' is not found",
  },
  {
    name: "an unknown version",
    send: (url) => inferJson(url, "simple/versions/3", SIMPLE_REQUEST),
    status: 404,
    error: "Request for unknown model: 'simple' version 3 is not found",
  },
  {
    name: "an unknown path",
    send: (url) => get(url, "/v2/nothing/here"),
    status: 404,
    error: "Not found: GET '/v2/nothing/here'",
  },
  {
    name: "a path outside /v2",
    send: (url) => get(url, "/v3/models"),
    status: 404,
    error: "Not found: '/v3/models'",
  },
  {
    name: "GET on the infer endpoint",
    send: (url) => get(url, "/v2/models/simple/infer"),
    status: 404,
    error: "Not found: GET '/v2/models/simple/infer'",
  },
  {
    name: "registering system shared memory without --allow-client-shm",
    send: (url) =>
      post(url, "/v2/systemsharedmemory/region/r0/register", JSON.stringify({ key: "/r0", byte_size: 64 })),
    status: 503,
    error: "Shared memory is disabled: start the server with --allow-client-shm=true to use it",
  },
  {
    name: "registering CUDA shared memory without --allow-client-shm",
    send: (url) => post(url, "/v2/cudasharedmemory/region/r0/register", "{}"),
    status: 503,
    error: "Shared memory is disabled: start the server with --allow-client-shm=true to use it",
  },
  {
    name: "an unknown extension path",
    send: (url) => get(url, "/v2/systemsharedmemory/nothing"),
    status: 404,
    error: "Not found: GET '/v2/systemsharedmemory/nothing'",
  },
];

async function assertGood(url: string): Promise<void> {
  const r = await inferJson(url, "simple", SIMPLE_REQUEST);
  assert.equal(r.status, 200);
  assert.deepEqual(outputsOf(r).map((o) => o.data), [SIMPLE_SUM, SIMPLE_DIFF]);
}

Deno.test("bad requests get Triton's status and an exact message", async (t) => {
  await using s = await startTestServer([`--model-repository=${EXAMPLES}`, `--http-max-input-size=${LIMIT}`]);

  for (const c of BAD) {
    await t.step(`${c.name} is ${c.status}, and the server still answers`, async () => {
      const r = await c.send(s.url);
      assert.equal(r.status, c.status, JSON.stringify(r.json));
      assert.equal(r.headers.get("content-type"), "application/json");
      assert.deepEqual(r.json, { error: c.error });
      await assertGood(s.url);
    });
  }

  await t.step("a body just under the limit is accepted", async () => {
    const text = JSON.stringify(SIMPLE_REQUEST);
    const padded = text.slice(0, -1) + " ".repeat(LIMIT - text.length) + "}";
    assert.equal(padded.length, LIMIT);
    const r = await post(s.url, "/v2/models/simple/infer", padded);
    assert.equal(r.status, 200);
  });

  await t.step("50 good requests interleaved with 50 bad ones all get their exact answer", async () => {
    const good = (k: number) =>
      inferBinary(s.url, "simple", {
        id: `good-${k}`,
        inputs: ["INPUT0", "INPUT1"].map((name) => ({
          name,
          datatype: "INT32",
          shape: [1, 16],
          parameters: { binary_data_size: 64 },
        })),
      }, [
        bytesOf(new Int32Array(Array.from({ length: 16 }, (_, i) => k * 100 + i))),
        bytesOf(new Int32Array(16).fill(k)),
      ]);
    const tasks: Promise<void>[] = [];
    for (let k = 0; k < 50; k++) {
      tasks.push(
        good(k).then((r) => {
          assert.equal(r.status, 200);
          assert.equal(r.json?.id, `good-${k}`);
          assert.deepEqual(outputsOf(r).map((o) => o.data), [
            Array.from({ length: 16 }, (_, i) => k * 100 + i + k),
            Array.from({ length: 16 }, (_, i) => k * 100 + i - k),
          ]);
        }),
      );
      const bad = BAD[k % BAD.length]!;
      tasks.push(
        bad.send(s.url).then((r) => {
          assert.equal(r.status, bad.status, bad.name);
          assert.deepEqual(r.json, { error: bad.error });
        }),
      );
    }
    await Promise.all(tasks);
    await assertGood(s.url);
  });
});
