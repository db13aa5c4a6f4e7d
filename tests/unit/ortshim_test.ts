import { join } from "node:path";
import { assert, assertEquals, assertThrows } from "../assert.ts";
import { FIXTURES, ROOT } from "../helpers.ts";
import { openOrtShim, type OrtShim } from "../../ffi/ortshim.ts";
import { onnxRuntimeBackend } from "../../server/backends/onnxruntime.ts";
import { ShimSession } from "../../server/backends/onnxruntime_shim.ts";
import type { InstanceContext } from "../../server/backends/backend.ts";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { bytesOf, type Datatype } from "../../server/core/dtypes.ts";
import type { Tensor } from "../../server/core/types.ts";
import { applyDefaults, resolveBackend, toModelConfig } from "../../server/repository/config.ts";

const SIMPLE = join(ROOT, "examples/models/simple/1/model.onnx");

/** libortshim, which the launcher builds with the shim; its tests are skipped, with the reason, without it. */
const LOADED = openOrtShim();
if (!LOADED) {
  console.warn("libortshim tests skipped: build/shim/libortshim.so did not load (./dinfer setup builds it)");
}
const ignore = !LOADED;

function shim(): OrtShim {
  assert(LOADED);
  return LOADED;
}

const identity = (model: string) => join(FIXTURES, model, "1/model.onnx");

Deno.test({
  name: "libortshim reads a model's inputs and outputs and runs it: simple's sums and differences",
  ignore,
}, () => {
  using session = shim().open(SIMPLE, { intraOpThreads: 1, logSeverity: 3 });
  assertEquals(session.inputs, [
    { name: "INPUT0", isTensor: true, type: 6, shape: [-1, 16] },
    { name: "INPUT1", isTensor: true, type: 6, shape: [-1, 16] },
  ]);
  assertEquals(session.outputs, [
    { name: "OUTPUT0", isTensor: true, type: 6, shape: [-1, 16] },
    { name: "OUTPUT1", isTensor: true, type: 6, shape: [-1, 16] },
  ]);
  const a = Int32Array.from({ length: 32 }, (_, i) => i);
  const b = new Int32Array(32).fill(3);
  // 128 bytes an input: borrowed by the run, not copied.
  const feeds = [{ index: 0, type: 6, data: a, dims: [2, 16] }, {
    index: 1,
    type: 6,
    data: b,
    dims: [2, 16],
  }];
  // Outputs in the order asked for.
  const [diff, sum] = session.run(feeds, [1, 0]);
  assertEquals(sum!.type, 6);
  assertEquals(sum!.dims, [2, 16]);
  assertEquals([...new Int32Array(sum!.data.buffer)], [...a].map((v) => v + 3));
  assertEquals(diff!.dims, [2, 16]);
  assertEquals([...new Int32Array(diff!.data.buffer)], [...a].map((v) => v - 3));
});

Deno.test({
  name: "libortshim carries every numeric type unchanged, small inputs (copied) and large ones (borrowed)",
  ignore,
}, () => {
  const cases: [string, number, ArrayBufferView][] = [
    ["identity_bool", 9, new Uint8Array([1, 0, 1, 1])],
    ["identity_uint8", 2, new Uint8Array([0, 1, 254, 255])],
    ["identity_int8", 3, new Int8Array([-128, -1, 0, 127])],
    ["identity_uint16", 4, new Uint16Array([0, 1, 65534, 65535])],
    ["identity_int16", 5, new Int16Array([-32768, -1, 0, 32767])],
    ["identity_fp16", 10, new Uint16Array([0x3c00, 0xc000, 0x7bff, 0x0001])],
    ["identity_uint32", 12, new Uint32Array([0, 1, 2 ** 32 - 2, 2 ** 32 - 1])],
    ["identity_int32", 6, new Int32Array([-(2 ** 31), -1, 0, 2 ** 31 - 1])],
    ["identity_fp32", 1, new Float32Array([1.5, -0, Infinity, 3.4e38])],
    ["identity_uint64", 13, new BigUint64Array([0n, 1n, 2n ** 64n - 2n, 2n ** 64n - 1n])],
    ["identity_int64", 7, new BigInt64Array([-(2n ** 63n), -1n, 1n << 40n, 2n ** 63n - 1n])],
    ["identity_fp64", 11, new Float64Array([Math.PI, -0, -Infinity, Number.MIN_VALUE])],
  ];
  for (const [model, type, small] of cases) {
    using session = shim().open(identity(model), {});
    const [out] = session.run([{ index: 0, type, data: small, dims: [2, 2] }], [0]);
    assertEquals(out, { type, data: new Uint8Array(bytesOf(small)), dims: [2, 2] }, model);
    // 256 elements: more than 64 bytes for every type.
    const bytes = new Uint8Array(256 * small.byteLength / 4).map((_, i) => (i * 7) & (type === 9 ? 1 : 255));
    const [large] = session.run([{ index: 0, type, data: bytes, dims: [16, 16] }], [0]);
    assertEquals(large, { type, data: bytes, dims: [16, 16] }, `${model}, large`);
  }
});

Deno.test({ name: "libortshim runs empty tensors and inputs in shared memory", ignore }, () => {
  using session = shim().open(identity("identity_fp32"), {});
  assertEquals(session.run([{ index: 0, type: 1, data: new Float32Array(0), dims: [0, 8] }], [0]), [
    { type: 1, data: new Uint8Array(0), dims: [0, 8] },
  ]);
  const shared = new Float32Array(new SharedArrayBuffer(128)).fill(2.5);
  const [out] = session.run([{ index: 0, type: 1, data: shared, dims: [4, 8] }], [0]);
  assertEquals([...new Float32Array(out!.data.buffer)], new Array(32).fill(2.5));
});

Deno.test({
  name: "libortshim reports ONNX Runtime's errors and its own, and the session runs on after them",
  ignore,
}, () => {
  const s = shim();
  const message = (m: string) => ({ message: m });
  assertThrows(
    () => s.open("/no/such/model.onnx", {}),
    Error,
    message(
      "Load model from /no/such/model.onnx failed:Load model /no/such/model.onnx failed. File doesn't exist",
    ),
  );
  assertThrows(
    () => s.open(SIMPLE, { graphOptimization: 3 }),
    Error,
    message("cannot set graphOptimization: graph optimization level 3 is not 0, 1, 2 or 99"),
  );
  // A session config entry reaches ONNX Runtime: this one makes it read the file as its own format.
  assertThrows(
    () => s.open(SIMPLE, { entries: { "session.load_model_format": "ORT" } }),
    Error,
    message("inference_session.cc:2119 LoadOrtModelWithLoader ORT model verification failed."),
  );
  using session = s.open(SIMPLE, { logSeverity: 4 });
  const a = new Int32Array(16).fill(1);
  const feed = (index: number, type: number, dims: number[]) => ({ index, type, data: a, dims });
  assertThrows(
    () => session.run([feed(0, 6, [1, 15])], [0]),
    Error,
    message("cannot feed the input: input 'INPUT0' has 64 bytes where its shape needs 60"),
  );
  assertThrows(
    () => session.run([feed(0, 1, [1, 16]), feed(1, 6, [1, 16])], [0]),
    Error,
    message("Unexpected input data type. Actual: (tensor(float)) , expected: (tensor(int32))"),
  );
  assertThrows(
    () => session.run([feed(0, 21, [1, 16])], [0]),
    Error,
    message("cannot feed the input: input 'INPUT0' has element type 21, not carried"),
  );
  assertThrows(
    () => session.run([feed(2, 6, [1, 16])], [0]),
    Error,
    message("cannot feed the input: the model has no input 2"),
  );
  assertThrows(
    () => session.run([], [2]),
    Error,
    message("cannot fetch the output: the model has no output 2"),
  );
  // A string tensor's shape that its bytes cannot hold is refused before anything is allocated.
  assertThrows(
    () => session.run([{ index: 0, type: 8, data: new Uint8Array(8), dims: [1e9, 1] }], [0]),
    Error,
    message("cannot feed the input: input 'INPUT0' has 8 bytes, too few for 1000000000 elements"),
  );
  // Length-prefixed elements that run past the bytes.
  assertThrows(
    () => session.run([{ index: 0, type: 8, data: new Uint8Array([9, 0, 0, 0, 97]), dims: [1, 1] }], [0]),
    Error,
    message("cannot feed the input: input 'INPUT0' ends inside element 0"),
  );
  const [sum] = session.run([feed(0, 6, [1, 16]), feed(1, 6, [1, 16])], [0]);
  assertEquals([...new Int32Array(sum!.data.buffer)], new Array(16).fill(2));
  session.close();
  assertThrows(() => session.run([feed(0, 6, [1, 16])], [0]), Error, message("the session is closed"));
});

function context(model: string): InstanceContext {
  const modelDir = join(FIXTURES, model);
  return {
    modelDir,
    versionDir: join(modelDir, "1"),
    version: 1,
    modelPath: join(modelDir, "1", "model.onnx"),
    instanceName: `${model}_0`,
    kind: "KIND_CPU",
    deviceId: 0,
    backendConfig: {},
  };
}

function identityConfig(model: string, type: string) {
  const c = toModelConfig({
    name: model,
    platform: "onnxruntime_onnx",
    max_batch_size: 0,
    input: [{ name: "INPUT0", data_type: type, dims: [-1, -1] }],
    output: [{ name: "OUTPUT0", data_type: type, dims: [-1, -1] }],
  }, model);
  resolveBackend(c, ["model.onnx"]);
  applyDefaults(c, onnxRuntimeBackend.defaultModelFilename);
  return c;
}

Deno.test({
  name:
    "an instance on the server's thread runs numeric and string models through libortshim, string bytes as they are",
  ignore,
}, async () => {
  const cases: [string, string, Datatype, Uint8Array][] = [
    ["identity_int64", "TYPE_INT64", "INT64", bytesOf(new BigInt64Array([1n, -2n, 1n << 40n, -(1n << 62n)]))],
    ["identity_fp16", "TYPE_FP16", "FP16", bytesOf(new Uint16Array([0x3c00, 0xc000, 0x7bff, 0x0001]))],
  ];
  for (const [model, type, datatype, data] of cases) {
    const instance = await onnxRuntimeBackend.createInstance(identityConfig(model, type), context(model));
    try {
      assertEquals(instance.runsOn, "the server's thread, through libortshim");
      const input = new Map<string, Tensor>([["INPUT0", { name: "INPUT0", datatype, shape: [2, 2], data }]]);
      const out = instance.executeSync!(input, ["OUTPUT0"]);
      assertEquals(out.get("OUTPUT0"), { name: "OUTPUT0", datatype, shape: [2, 2], data });
    } finally {
      await instance.close();
    }
  }
  const strings = await onnxRuntimeBackend.createInstance(
    identityConfig("identity_string", "TYPE_STRING"),
    context("identity_string"),
  );
  try {
    assertEquals(strings.runsOn, "the server's thread, through libortshim");
    const words = ["a", "", "xyz", "é"];
    const data = BytesTensor.of(words.map((w) => new TextEncoder().encode(w)));
    const input = new Map<string, Tensor>([["INPUT0", {
      name: "INPUT0",
      datatype: "BYTES",
      shape: [2, 2],
      data,
    }]]);
    const out = strings.executeSync!(input, ["OUTPUT0"]);
    assertEquals(out.get("OUTPUT0")!.shape, [2, 2]);
    assertEquals((out.get("OUTPUT0")!.data as BytesTensor).strings(), words);
    // Bytes that are not UTF-8 come back as they went; ONNX Runtime's C strings end an element at a NUL byte.
    const raw = [
      new Uint8Array([0xff, 0xfe, 0x80]),
      new Uint8Array([0x61, 0x00, 0x62]),
      new Uint8Array([0xc3]),
    ];
    const input2 = new Map<string, Tensor>([["INPUT0", {
      name: "INPUT0",
      datatype: "BYTES",
      shape: [1, 3],
      data: BytesTensor.of(raw),
    }]]);
    const out2 = strings.executeSync!(input2, ["OUTPUT0"]).get("OUTPUT0")!;
    assertEquals(out2.shape, [1, 3]);
    assertEquals((out2.data as BytesTensor).elements(), [raw[0], new Uint8Array([0x61]), raw[2]]);
  } finally {
    await strings.close();
  }
});

Deno.test({
  name: "BF16 tensors run through libortshim on the server's thread and on an instance's own thread",
  ignore,
}, async () => {
  // 1.5, 0, -1, 3.140625, +Infinity, -123.5 as bfloat16 bit patterns.
  const data = bytesOf(new Uint16Array([0x3fc0, 0x0000, 0xbf80, 0x4049, 0x7f80, 0xc2f7]));
  const input = new Map<string, Tensor>([["INPUT0", {
    name: "INPUT0",
    datatype: "BF16",
    shape: [2, 3],
    data,
  }]]);
  for (const thread of ["main", "worker"]) {
    const ctx = { ...context("identity_bf16"), backendConfig: { "instance-thread": thread } };
    const instance = await onnxRuntimeBackend.createInstance(
      identityConfig("identity_bf16", "TYPE_BF16"),
      ctx,
    );
    try {
      assertEquals(
        instance.runsOn,
        thread === "main"
          ? "the server's thread, through libortshim"
          : "a thread of its own, through libortshim",
      );
      const out = await instance.execute(input, ["OUTPUT0"]);
      assertEquals(out.get("OUTPUT0"), { name: "OUTPUT0", datatype: "BF16", shape: [2, 3], data });
    } finally {
      await instance.close();
    }
  }
});

Deno.test("without libortshim, models run through onnxruntime-node's binding and a BF16 model is refused at load", async () => {
  const code = `
    import { onnxRuntimeBackend } from "./server/backends/onnxruntime.ts";
    import { toModelConfig, resolveBackend, applyDefaults } from "./server/repository/config.ts";
    const out = [];
    for (const [model, type] of [["identity_int32", "TYPE_INT32"], ["identity_bf16", "TYPE_BF16"]]) {
      const c = toModelConfig({ name: model, platform: "onnxruntime_onnx", max_batch_size: 0,
        input: [{ name: "INPUT0", data_type: type, dims: [-1, -1] }],
        output: [{ name: "OUTPUT0", data_type: type, dims: [-1, -1] }] }, model);
      resolveBackend(c, ["model.onnx"]);
      applyDefaults(c, "model.onnx");
      const dir = "tests/fixtures/models/" + model;
      try {
        const i = await onnxRuntimeBackend.createInstance(c, { modelDir: dir, versionDir: dir + "/1", version: 1,
          modelPath: dir + "/1/model.onnx", instanceName: model, kind: "KIND_CPU", deviceId: 0, backendConfig: {} });
        out.push(i.runsOn);
        await i.close();
      } catch (err) {
        out.push(err.code + ": " + err.message);
      }
    }
    console.log(JSON.stringify(out));
  `;
  const run = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--config", join(ROOT, "deno.json"), code],
    cwd: ROOT,
    env: { DINFER_ORTSHIM: "off" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(run.stdout);
  assertEquals(run.code, 0, new TextDecoder().decode(run.stderr));
  assertEquals(JSON.parse(text), [
    "the server's thread, through onnxruntime-node's binding",
    "UNSUPPORTED: Cannot load 'identity_bf16': 'INPUT0' is BF16, which needs libortshim (build/shim/libortshim.so); this server runs the model through onnxruntime-node, which cannot make BF16 tensors",
  ]);
});

Deno.test({
  name: "a session opens through libortshim only with options it takes",
  ignore,
}, () => {
  const taken = ShimSession.open(SIMPLE, {
    logSeverityLevel: 3,
    intraOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  assert(taken, "simple with the options libortshim takes opens through it");
  assertEquals(taken.inputMetadata.map((m) => m.name), ["INPUT0", "INPUT1"]);
  taken.close();
  // An option the shim does not set (here an execution provider list) leaves the model to the binding.
  assertEquals(ShimSession.open(SIMPLE, { executionProviders: ["cpu"] }), undefined);
  // String models are carried too.
  const strings = ShimSession.open(identity("identity_string"), {});
  assertEquals(strings?.outputMetadata, [{ name: "OUTPUT0", isTensor: true, type: 8, shape: [-1, -1] }]);
  strings?.close();
});
