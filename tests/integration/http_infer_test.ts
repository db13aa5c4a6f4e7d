/**
 * Inference over HTTP against a real server: JSON, the binary tensor data extension, the raw single-input
 * form, every datatype, classification, auto-completed and non-batching models, optional inputs.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, FIXTURES, startTestServer } from "../helpers.ts";
import {
  binaryOutputs,
  bytesOf,
  call,
  deserializeStrings,
  inferBinary,
  inferJson,
  outputsOf,
  serializeStrings,
  SIMPLE_DIFF,
  SIMPLE_REQUEST,
  SIMPLE_SUM,
} from "./_http.ts";

const DIGIT_NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"];

/** One datatype's identity fixture, with values that exercise its range. */
interface DatatypeCase {
  datatype: string;
  model: string;
  /** The JSON values sent and expected back. */
  json: unknown[];
  /** The binary contents sent and expected back (full range where JSON cannot carry it). */
  binary: Uint8Array;
  /** The JSON values of `binary` as the server writes them. */
  binaryAsJson: unknown[];
}

const DATATYPES: DatatypeCase[] = [
  {
    datatype: "BOOL",
    model: "identity_bool",
    json: [true, false, true],
    binary: new Uint8Array([1, 0, 1]),
    binaryAsJson: [true, false, true],
  },
  {
    datatype: "UINT8",
    model: "identity_uint8",
    json: [0, 255, 7],
    binary: new Uint8Array([0, 255, 7]),
    binaryAsJson: [0, 255, 7],
  },
  {
    datatype: "UINT16",
    model: "identity_uint16",
    json: [0, 65535, 300],
    binary: bytesOf(new Uint16Array([0, 65535, 300])),
    binaryAsJson: [0, 65535, 300],
  },
  {
    datatype: "UINT32",
    model: "identity_uint32",
    json: [0, 4294967295, 70000],
    binary: bytesOf(new Uint32Array([0, 4294967295, 70000])),
    binaryAsJson: [0, 4294967295, 70000],
  },
  {
    datatype: "UINT64",
    model: "identity_uint64",
    json: [0, 9007199254740991, 12345],
    binary: bytesOf(new BigUint64Array([0n, 9007199254740991n, 12345n])),
    binaryAsJson: [0, 9007199254740991, 12345],
  },
  {
    datatype: "INT8",
    model: "identity_int8",
    json: [-128, 127, 0],
    binary: bytesOf(new Int8Array([-128, 127, 0])),
    binaryAsJson: [-128, 127, 0],
  },
  {
    datatype: "INT16",
    model: "identity_int16",
    json: [-32768, 32767, 5],
    binary: bytesOf(new Int16Array([-32768, 32767, 5])),
    binaryAsJson: [-32768, 32767, 5],
  },
  {
    datatype: "INT32",
    model: "identity_int32",
    json: [-2147483648, 2147483647, 0],
    binary: bytesOf(new Int32Array([-2147483648, 2147483647, 0])),
    binaryAsJson: [-2147483648, 2147483647, 0],
  },
  {
    datatype: "INT64",
    model: "identity_int64",
    json: [-9007199254740991, 9007199254740991, 0],
    binary: bytesOf(new BigInt64Array([-9007199254740991n, 9007199254740991n, 0n])),
    binaryAsJson: [-9007199254740991, 9007199254740991, 0],
  },
  {
    datatype: "FP16",
    model: "identity_fp16",
    // Values a half represents exactly: 0.5, -2, the largest half, and the half nearest 0.1.
    json: [0.5, -2, 65504, 0.0999755859375],
    binary: bytesOf(new Uint16Array([0x3800, 0xc000, 0x7bff, 0x2e66])),
    binaryAsJson: [0.5, -2, 65504, 0.0999755859375],
  },
  {
    datatype: "FP32",
    model: "identity_fp32",
    json: [1.5, -0.25, 3.4028234663852886e38],
    binary: bytesOf(new Float32Array([1.5, -0.25, 3.4028234663852886e38])),
    binaryAsJson: [1.5, -0.25, 3.4028234663852886e38],
  },
  {
    datatype: "FP64",
    model: "identity_fp64",
    json: [Math.PI, -1e-300, 1.7976931348623157e308],
    binary: bytesOf(new Float64Array([Math.PI, -1e-300, 1.7976931348623157e308])),
    binaryAsJson: [Math.PI, -1e-300, 1.7976931348623157e308],
  },
  {
    datatype: "BYTES",
    model: "identity_string",
    json: ["", "héllo wörld", "日本語", "", "emoji 🎉"],
    binary: serializeStrings(["", "héllo wörld", "日本語", "", "emoji 🎉"]),
    binaryAsJson: ["", "héllo wörld", "日本語", "", "emoji 🎉"],
  },
];

Deno.test("inference over HTTP", async (t) => {
  await using s = await startTestServer([`--model-repository=${EXAMPLES}`, `--model-repository=${FIXTURES}`]);

  await t.step("simple answers a JSON request with flat data", async () => {
    const r = await inferJson(s.url, "simple", SIMPLE_REQUEST);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "application/json");
    assert.equal(r.headers.get("inference-header-content-length"), null);
    assert.deepEqual(r.json, {
      model_name: "simple",
      model_version: "1",
      outputs: [
        { name: "OUTPUT0", datatype: "INT32", shape: [1, 16], data: SIMPLE_SUM },
        { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: SIMPLE_DIFF },
      ],
    });
  });

  await t.step("simple answers a JSON request with nested data and echoes the request id", async () => {
    const nested = {
      id: "request-42",
      inputs: SIMPLE_REQUEST.inputs.map((i) => ({ ...i, data: [[i.data.slice(0, 8), i.data.slice(8)]] })),
    };
    const r = await inferJson(s.url, "simple", nested);
    assert.equal(r.status, 200);
    assert.equal(r.json?.id, "request-42");
    assert.deepEqual(outputsOf(r).map((o) => o.data), [SIMPLE_SUM, SIMPLE_DIFF]);
  });

  await t.step("a specific version answers as the default one", async () => {
    const r = await inferJson(s.url, "simple/versions/1", SIMPLE_REQUEST);
    assert.equal(r.status, 200);
    assert.equal(r.json?.model_version, "1");
    assert.deepEqual(outputsOf(r).map((o) => o.data), [SIMPLE_SUM, SIMPLE_DIFF]);
  });

  const simpleBinaryHeader = (extra: Record<string, unknown> = {}) => ({
    ...extra,
    inputs: ["INPUT0", "INPUT1"].map((name) => ({
      name,
      datatype: "INT32",
      shape: [1, 16],
      parameters: { binary_data_size: 64 },
    })),
  });
  const simpleChunks = [
    bytesOf(new Int32Array(Array.from({ length: 16 }, (_, i) => i))),
    bytesOf(new Int32Array(16).fill(1)),
  ];

  await t.step("binary inputs with a JSON answer", async () => {
    const r = await inferBinary(s.url, "simple", simpleBinaryHeader(), simpleChunks);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("inference-header-content-length"), null);
    assert.deepEqual(r.json, {
      model_name: "simple",
      model_version: "1",
      outputs: [
        { name: "OUTPUT0", datatype: "INT32", shape: [1, 16], data: SIMPLE_SUM },
        { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: SIMPLE_DIFF },
      ],
    });
  });

  await t.step("binary_data_output answers every output in binary", async () => {
    const r = await inferBinary(
      s.url,
      "simple",
      simpleBinaryHeader({ parameters: { binary_data_output: true } }),
      simpleChunks,
    );
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "application/octet-stream");
    const hl = Number(r.headers.get("inference-header-content-length"));
    assert.equal(hl, r.bytes.byteLength - 128);
    assert.deepEqual(r.json, {
      model_name: "simple",
      model_version: "1",
      outputs: [
        { name: "OUTPUT0", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
        { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], parameters: { binary_data_size: 64 } },
      ],
    });
    const bin = binaryOutputs(r);
    assert.deepEqual([...new Int32Array(bin.get("OUTPUT0")!.slice().buffer)], SIMPLE_SUM);
    assert.deepEqual([...new Int32Array(bin.get("OUTPUT1")!.slice().buffer)], SIMPLE_DIFF);
  });

  await t.step("JSON inputs may ask for one output in binary and the other in JSON", async () => {
    const r = await inferJson(s.url, "simple", {
      ...SIMPLE_REQUEST,
      outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }, { name: "OUTPUT1" }],
    });
    assert.equal(r.status, 200);
    const [o0, o1] = outputsOf(r);
    assert.deepEqual(o0, {
      name: "OUTPUT0",
      datatype: "INT32",
      shape: [1, 16],
      parameters: { binary_data_size: 64 },
    });
    assert.deepEqual(o1, { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: SIMPLE_DIFF });
    assert.deepEqual([...new Int32Array(binaryOutputs(r).get("OUTPUT0")!.slice().buffer)], SIMPLE_SUM);
  });

  await t.step("binary_data false on an output overrides binary_data_output", async () => {
    const r = await inferJson(s.url, "simple", {
      ...SIMPLE_REQUEST,
      parameters: { binary_data_output: true },
      outputs: [{ name: "OUTPUT0" }, { name: "OUTPUT1", parameters: { binary_data: false } }],
    });
    assert.equal(r.status, 200);
    const [o0, o1] = outputsOf(r);
    assert.deepEqual(o0?.parameters, { binary_data_size: 64 });
    assert.deepEqual(o1?.data, SIMPLE_DIFF);
    assert.equal(r.binary.byteLength, 64);
  });

  await t.step("a subset of the outputs is answered in the order asked", async () => {
    const only1 = await inferJson(s.url, "simple", { ...SIMPLE_REQUEST, outputs: [{ name: "OUTPUT1" }] });
    assert.equal(only1.status, 200);
    assert.deepEqual(outputsOf(only1), [
      { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: SIMPLE_DIFF },
    ]);
    const both = await inferJson(s.url, "simple", {
      ...SIMPLE_REQUEST,
      outputs: [{ name: "OUTPUT1" }, { name: "OUTPUT0" }],
    });
    assert.deepEqual(outputsOf(both).map((o) => o.name), ["OUTPUT1", "OUTPUT0"]);
  });

  await t.step("a batch of 8 answers every row", async () => {
    const a = Array.from({ length: 8 * 16 }, (_, i) => i * 3 - 100);
    const b = Array.from({ length: 8 * 16 }, (_, i) => (i % 7) - 3);
    const r = await inferJson(s.url, "simple", {
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [8, 16], data: a },
        { name: "INPUT1", datatype: "INT32", shape: [8, 16], data: b },
      ],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(outputsOf(r), [
      { name: "OUTPUT0", datatype: "INT32", shape: [8, 16], data: a.map((x, i) => x + b[i]!) },
      { name: "OUTPUT1", datatype: "INT32", shape: [8, 16], data: a.map((x, i) => x - b[i]!) },
    ]);
  });

  await t.step(
    "the raw single-input form (Inference-Header-Content-Length: 0) answers in binary",
    async () => {
      const values = new Float32Array([1.5, -2, 3, 4.25, 1e-3]);
      const r = await call(`${s.url}/v2/models/identity_fp32/infer`, {
        method: "POST",
        headers: { "inference-header-content-length": "0", "content-type": "application/octet-stream" },
        body: bytesOf(values) as BodyInit,
      });
      assert.equal(r.status, 200);
      assert.deepEqual(r.json, {
        model_name: "identity_fp32",
        model_version: "1",
        outputs: [{ name: "OUTPUT0", datatype: "FP32", shape: [1, 5], parameters: { binary_data_size: 20 } }],
      });
      assert.deepEqual(r.binary, bytesOf(values));

      const x = new Float32Array([1, -2, 0.5]);
      const doubled = await call(`${s.url}/v2/models/no_config_dynamic/infer`, {
        method: "POST",
        headers: { "inference-header-content-length": "0" },
        body: bytesOf(x) as BodyInit,
      });
      assert.equal(doubled.status, 200);
      assert.deepEqual(outputsOf(doubled)[0]?.shape, [1, 3]);
      assert.deepEqual([...new Float32Array(doubled.binary.slice().buffer)], [2, -4, 1]);
    },
  );

  for (const c of DATATYPES) {
    const shape = [1, c.json.length];
    await t.step({
      name: `${c.datatype} round-trips through ${c.model} in JSON`,
      fn: async () => {
        const r = await inferJson(s.url, c.model, {
          inputs: [{ name: "INPUT0", datatype: c.datatype, shape, data: c.json }],
        });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.deepEqual(r.json, {
          model_name: c.model,
          model_version: "1",
          outputs: [{ name: "OUTPUT0", datatype: c.datatype, shape, data: c.json }],
        });
      },
    });
    await t.step({
      name: `${c.datatype} round-trips through ${c.model} in binary`,
      fn: async () => {
        const header = {
          inputs: [{
            name: "INPUT0",
            datatype: c.datatype,
            shape,
            parameters: { binary_data_size: c.binary.byteLength },
          }],
        };
        const asBinary = await inferBinary(
          s.url,
          c.model,
          { ...header, outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }] },
          [c.binary],
        );
        assert.equal(asBinary.status, 200, JSON.stringify(asBinary.json));
        assert.deepEqual(outputsOf(asBinary), [{
          name: "OUTPUT0",
          datatype: c.datatype,
          shape,
          parameters: { binary_data_size: c.binary.byteLength },
        }]);
        assert.deepEqual(asBinary.binary, c.binary);
        if (c.datatype === "BYTES") assert.deepEqual(deserializeStrings(asBinary.binary), c.json);

        const asJson = await inferBinary(s.url, c.model, header, [c.binary]);
        assert.equal(asJson.status, 200);
        assert.deepEqual(outputsOf(asJson), [
          { name: "OUTPUT0", datatype: c.datatype, shape, data: c.binaryAsJson },
        ]);
      },
    });
  }

  await t.step("UINT64 and INT64 keep their full range in binary", async () => {
    for (
      const [model, datatype, values] of [
        ["identity_uint64", "UINT64", new BigUint64Array([0n, 2n ** 64n - 1n, 2n ** 63n + 1n])],
        ["identity_int64", "INT64", new BigInt64Array([-(2n ** 63n), 2n ** 63n - 1n, -1n])],
      ] as const
    ) {
      const r = await inferBinary(s.url, model, {
        parameters: { binary_data_output: true },
        inputs: [{ name: "INPUT0", datatype, shape: [1, 3], parameters: { binary_data_size: 24 } }],
      }, [bytesOf(values)]);
      assert.equal(r.status, 200);
      assert.deepEqual(r.binary, bytesOf(values));
    }
  });

  await t.step("BYTES in a batch of 2 keeps every element in place", async () => {
    const data = [["a", ""], ["ünï", "cödé"]];
    const r = await inferJson(s.url, "identity_string", {
      inputs: [{ name: "INPUT0", datatype: "BYTES", shape: [2, 2], data }],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(outputsOf(r)[0]?.data, data.flat());
    assert.deepEqual(outputsOf(r)[0]?.shape, [2, 2]);
  });

  await t.step("simple_string adds and subtracts decimal strings in JSON and binary", async () => {
    const a = Array.from({ length: 16 }, (_, i) => String(i * 10));
    const b = Array.from({ length: 16 }, (_, i) => String(-i));
    const sum = a.map((x, i) => String(Number(x) + Number(b[i])));
    const diff = a.map((x, i) => String(Number(x) - Number(b[i])));
    const r = await inferJson(s.url, "simple_string", {
      inputs: [
        { name: "INPUT0", datatype: "BYTES", shape: [1, 16], data: a },
        { name: "INPUT1", datatype: "BYTES", shape: [1, 16], data: b },
      ],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(outputsOf(r), [
      { name: "OUTPUT0", datatype: "BYTES", shape: [1, 16], data: sum },
      { name: "OUTPUT1", datatype: "BYTES", shape: [1, 16], data: diff },
    ]);

    const chunks = [serializeStrings(a), serializeStrings(b)];
    const bin = await inferBinary(s.url, "simple_string", {
      parameters: { binary_data_output: true },
      inputs: ["INPUT0", "INPUT1"].map((name, i) => ({
        name,
        datatype: "BYTES",
        shape: [1, 16],
        parameters: { binary_data_size: chunks[i]!.byteLength },
      })),
    }, chunks);
    assert.equal(bin.status, 200);
    const outs = binaryOutputs(bin);
    assert.deepEqual(deserializeStrings(outs.get("OUTPUT0")!), sum);
    assert.deepEqual(deserializeStrings(outs.get("OUTPUT1")!), diff);
  });

  const samples = JSON.parse(await Deno.readTextFile(`${EXAMPLES}/digits/samples.json`)) as {
    inputs: number[][];
    labels: number[];
  };

  await t.step("digits classifies the samples with their labels (classification 3)", async () => {
    const r = await inferJson(s.url, "digits", {
      inputs: [{ name: "input", datatype: "FP32", shape: [8, 64], data: samples.inputs }],
      outputs: [{ name: "probabilities", parameters: { classification: 3 } }],
    });
    assert.equal(r.status, 200);
    const [out] = outputsOf(r);
    assert.equal(out?.name, "probabilities");
    assert.equal(out?.datatype, "BYTES");
    assert.deepEqual(out?.shape, [8, 3]);
    const classes = out!.data as string[];
    assert.equal(classes.length, 24);
    for (let row = 0; row < 8; row++) {
      const top = classes.slice(row * 3, row * 3 + 3).map((c) => {
        const m = /^([01]\.[0-9]{6}):([0-9]):([a-z]+)$/.exec(c);
        assert.ok(m, `'${c}' is "<value with 6 decimals>:<index>:<label>"`);
        return { value: Number(m[1]), index: Number(m[2]), label: m[3] };
      });
      const want = samples.labels[row]!;
      assert.equal(top[0]!.index, want, `sample ${row}`);
      assert.equal(top[0]!.label, DIGIT_NAMES[want]);
      for (const c of top) assert.equal(c.label, DIGIT_NAMES[c.index]);
      assert.ok(top[0]!.value >= top[1]!.value && top[1]!.value >= top[2]!.value, "descending values");
      assert.equal(new Set(top.map((c) => c.index)).size, 3);
    }
  });

  await t.step("digits answers classification in binary and the plain probabilities", async () => {
    const bin = await inferJson(s.url, "digits", {
      inputs: [{ name: "input", datatype: "FP32", shape: [1, 64], data: samples.inputs[1] }],
      outputs: [{ name: "probabilities", parameters: { classification: 1, binary_data: true } }],
    });
    assert.equal(bin.status, 200);
    assert.deepEqual(outputsOf(bin)[0]?.shape, [1, 1]);
    const [label] = deserializeStrings(bin.binary);
    const want = samples.labels[1]!;
    assert.match(label!, new RegExp(`^[01]\\.[0-9]{6}:${want}:${DIGIT_NAMES[want]}$`));

    const plain = await inferJson(s.url, "digits", {
      inputs: [{ name: "input", datatype: "FP32", shape: [8, 64], data: samples.inputs }],
    });
    assert.equal(plain.status, 200);
    const [probs] = outputsOf(plain);
    assert.deepEqual(probs?.shape, [8, 10]);
    const p = probs!.data as number[];
    for (let row = 0; row < 8; row++) {
      const r = p.slice(row * 10, row * 10 + 10);
      assert.ok(Math.abs(r.reduce((a, b) => a + b, 0) - 1) < 1e-4, "probabilities sum to 1");
      assert.equal(r.indexOf(Math.max(...r)), samples.labels[row]);
    }
  });

  await t.step("auto-completed no_config_dynamic batches up to 4 and refuses 5", async () => {
    const x = Array.from({ length: 12 }, (_, i) => i - 5.5);
    const ok = await inferJson(s.url, "no_config_dynamic", {
      inputs: [{ name: "x", datatype: "FP32", shape: [4, 3], data: x }],
    });
    assert.equal(ok.status, 200);
    assert.deepEqual(ok.json, {
      model_name: "no_config_dynamic",
      model_version: "1",
      outputs: [{ name: "y", datatype: "FP32", shape: [4, 3], data: x.map((v) => v * 2) }],
    });
    const five = await inferJson(s.url, "no_config_dynamic", {
      inputs: [{ name: "x", datatype: "FP32", shape: [5, 3], data: Array(15).fill(1) }],
    });
    assert.equal(five.status, 400);
    assert.deepEqual(five.json, {
      error: "Cannot infer 'no_config_dynamic': inference request batch-size must be <= 4 for " +
        "'no_config_dynamic', input 'x' has 5",
    });
  });

  await t.step("auto-completed no_config_static takes exactly [2,2]", async () => {
    const r = await inferJson(s.url, "no_config_static", {
      inputs: [{ name: "a", datatype: "INT64", shape: [2, 2], data: [[1, -2], [3, 9007199254740991]] }],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(outputsOf(r), [
      { name: "b", datatype: "INT64", shape: [2, 2], data: [1, -2, 3, 9007199254740991] },
    ]);
    const batched = await inferJson(s.url, "no_config_static", {
      inputs: [{ name: "a", datatype: "INT64", shape: [1, 2, 2], data: [1, 2, 3, 4] }],
    });
    assert.equal(batched.status, 400);
    assert.deepEqual(batched.json, {
      error:
        "Cannot infer 'no_config_static': unexpected shape for input 'a' for model 'no_config_static'. Expected [2,2], got [1,2,2]",
    });
  });

  await t.step("add_sub_fp32_nobatch takes shape [4] without a batch dim", async () => {
    const r = await inferJson(s.url, "add_sub_fp32_nobatch", {
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [4], data: [1, 2, 3, 4] },
        { name: "INPUT1", datatype: "FP32", shape: [4], data: [0.5, 0.5, 0.5, 8] },
      ],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, {
      model_name: "add_sub_fp32_nobatch",
      model_version: "1",
      outputs: [
        { name: "OUTPUT0", datatype: "FP32", shape: [4], data: [1.5, 2.5, 3.5, 12] },
        { name: "OUTPUT1", datatype: "FP32", shape: [4], data: [0.5, 1.5, 2.5, -4] },
      ],
    });
    const batched = await inferJson(s.url, "add_sub_fp32_nobatch", {
      inputs: [
        { name: "INPUT0", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] },
        { name: "INPUT1", datatype: "FP32", shape: [1, 4], data: [1, 2, 3, 4] },
      ],
    });
    assert.equal(batched.status, 400);
    assert.deepEqual(batched.json, {
      error:
        "Cannot infer 'add_sub_fp32_nobatch': unexpected shape for input 'INPUT0' for model 'add_sub_fp32_nobatch'. Expected [4], got [1,4]",
    });
  });

  await t.step("optional_input uses the model's bias [1,2,3,4] when bias is left out", async () => {
    const r = await inferJson(s.url, "optional_input", {
      inputs: [{ name: "x", datatype: "FP32", shape: [2, 4], data: [0, 0, 0, 0, 10, 20, 30, 40] }],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(outputsOf(r), [
      { name: "y", datatype: "FP32", shape: [2, 4], data: [1, 2, 3, 4, 11, 22, 33, 44] },
    ]);
  });

  await t.step("optional_input refuses a given bias as UNSUPPORTED (501)", async () => {
    const r = await inferJson(s.url, "optional_input", {
      inputs: [
        { name: "x", datatype: "FP32", shape: [1, 4], data: [0, 0, 0, 0] },
        { name: "bias", datatype: "FP32", shape: [1, 4], data: [5, 5, 5, 5] },
      ],
    });
    assert.equal(r.status, 501);
    assert.deepEqual(r.json, {
      error: "Cannot run 'optional_input': input 'bias' is an initializer of the ONNX model, which " +
        "onnxruntime-node cannot override; leave it out to use the model's value",
    });
    const after = await inferJson(s.url, "optional_input", {
      inputs: [{ name: "x", datatype: "FP32", shape: [1, 4], data: [1, 1, 1, 1] }],
    });
    assert.deepEqual(outputsOf(after)[0]?.data, [2, 3, 4, 5]);
  });
});
