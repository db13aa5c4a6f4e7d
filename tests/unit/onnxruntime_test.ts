import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { join } from "node:path";
import { assert, assertEquals, assertRejects, assertThrows } from "../assert.ts";
import { FIXTURES, ROOT } from "../helpers.ts";
import {
  DEFAULT_MAX_BATCH_SIZE,
  DEFAULT_SESSION_ENTRIES,
  instanceThread,
  mainSessionOptions,
  onnxRuntimeBackend,
  sessionOptions,
  threadCopyParameter,
  WORKER_MIN_MODEL_BYTES,
  workerIntraOpThreads,
} from "../../server/backends/onnxruntime.ts";
import { openOrtShim } from "../../ffi/ortshim.ts";
import { CTL, CTL_WORDS, reached, slotOf, SLOTS, slotWord } from "../../server/backends/onnxruntime_shm.ts";
import type { InstanceContext } from "../../server/backends/backend.ts";
import { bytesOf } from "../../server/core/dtypes.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { ModelConfig } from "../../server/core/model_config.ts";
import type { Tensor } from "../../server/core/types.ts";
import {
  applyDefaults,
  resolveBackend,
  toModelConfig,
  validateConfig,
} from "../../server/repository/config.ts";

function context(model: string, kind = "KIND_CPU"): InstanceContext {
  const modelDir = join(FIXTURES, model);
  const versionDir = join(modelDir, "1");
  return {
    modelDir,
    versionDir,
    version: 1,
    modelPath: join(versionDir, "model.onnx"),
    instanceName: `${model}_0`,
    kind,
    deviceId: 0,
    backendConfig: {},
  };
}

/** A config as the registry prepares it before auto-complete: normalized, backend resolved, defaults applied. */
function prepared(obj: Record<string, unknown>): ModelConfig {
  const name = obj.name as string;
  const c = toModelConfig(obj, name);
  resolveBackend(c, ["model.onnx"]);
  applyDefaults(c, onnxRuntimeBackend.defaultModelFilename);
  return c;
}

function io(c: ModelConfig): unknown {
  const pick = ({ name, data_type, dims }: { name: string; data_type: string; dims: number[] }) => ({
    name,
    data_type,
    dims,
  });
  return { input: c.input.map(pick), output: c.output.map(pick) };
}

const f32 = (...v: number[]) => bytesOf(new Float32Array(v));

Deno.test("the ONNX Runtime backend is named onnxruntime and reads model.onnx", () => {
  assertEquals(onnxRuntimeBackend.name, "onnxruntime");
  assertEquals(onnxRuntimeBackend.defaultModelFilename, "model.onnx");
  assertEquals(DEFAULT_MAX_BATCH_SIZE, 4);
});

Deno.test("auto-complete of a model with a dynamic first dim sets max_batch_size 4 and dynamic batching", async () => {
  const c = prepared({ name: "no_config_dynamic" });
  await onnxRuntimeBackend.autoComplete(c, context("no_config_dynamic"));
  assertEquals(c.max_batch_size, 4);
  assertEquals(c.dynamic_batching, {});
  assertEquals(io(c), {
    input: [{ name: "x", data_type: "TYPE_FP32", dims: [3] }],
    output: [{ name: "y", data_type: "TYPE_FP32", dims: [3] }],
  });
  const normalized = toModelConfig(c, "no_config_dynamic");
  await validateConfig(normalized, "no_config_dynamic", context("no_config_dynamic").modelDir);
  assertEquals(normalized.dynamic_batching?.max_queue_delay_microseconds, 0);
});

Deno.test("auto-complete of a model with static dims keeps max_batch_size 0 and the full dims", async () => {
  const c = prepared({ name: "no_config_static" });
  await onnxRuntimeBackend.autoComplete(c, context("no_config_static"));
  assertEquals(c.max_batch_size, 0);
  assertEquals(c.dynamic_batching, undefined);
  assertEquals(io(c), {
    input: [{ name: "a", data_type: "TYPE_INT64", dims: [2, 2] }],
    output: [{ name: "b", data_type: "TYPE_INT64", dims: [2, 2] }],
  });
  await validateConfig(
    toModelConfig(c, "no_config_static"),
    "no_config_static",
    context("no_config_static").modelDir,
  );
});

Deno.test("auto-complete keeps a max_batch_size the config gives and strips the batch dim", async () => {
  const c = prepared({ name: "no_config_dynamic", max_batch_size: 16 });
  await onnxRuntimeBackend.autoComplete(c, context("no_config_dynamic"));
  assertEquals(c.max_batch_size, 16);
  assertEquals(c.dynamic_batching, undefined);
  assertEquals(io(c), {
    input: [{ name: "x", data_type: "TYPE_FP32", dims: [3] }],
    output: [{ name: "y", data_type: "TYPE_FP32", dims: [3] }],
  });
});

Deno.test("auto-complete keeps a scheduler the config gives", async () => {
  const c = prepared({ name: "no_config_dynamic", sequence_batching: {} });
  await onnxRuntimeBackend.autoComplete(c, context("no_config_dynamic"));
  assertEquals(c.max_batch_size, 4);
  assertEquals(c.dynamic_batching, undefined);
});

Deno.test("auto-complete fills what a partial config leaves out and keeps what it says", async () => {
  const c = prepared({
    name: "no_config_dynamic",
    max_batch_size: 2,
    input: [{ name: "x", dims: [3] }],
    output: [{ name: "y", data_type: "TYPE_FP32", dims: [-1] }],
  });
  await onnxRuntimeBackend.autoComplete(c, context("no_config_dynamic"));
  assertEquals(c.max_batch_size, 2);
  assertEquals(io(c), {
    input: [{ name: "x", data_type: "TYPE_FP32", dims: [3] }],
    output: [{ name: "y", data_type: "TYPE_FP32", dims: [-1] }],
  });
});

Deno.test("auto-complete of a file that is not an ONNX model is refused", async () => {
  const ctx = context("bad_model");
  await assertRejects(
    () => onnxRuntimeBackend.autoComplete(prepared({ name: "bad_model" }), ctx),
    ServerError,
    {
      code: "INVALID_ARG",
      message:
        `Cannot load ONNX model '${ctx.modelPath}': Load model from ${ctx.modelPath} failed:Protobuf parsing failed.`,
    },
  );
});

Deno.test("createInstance of a file that is not an ONNX model is refused", async () => {
  const ctx = context("bad_model");
  await assertRejects(
    () => onnxRuntimeBackend.createInstance(prepared({ name: "bad_model" }), ctx),
    ServerError,
    {
      code: "INVALID_ARG",
      message:
        `Cannot load ONNX model '${ctx.modelPath}': Load model from ${ctx.modelPath} failed:Protobuf parsing failed.`,
    },
  );
});

function addSubConfig(): ModelConfig {
  return prepared({
    name: "add_sub_fp32_nobatch",
    platform: "onnxruntime_onnx",
    input: [
      { name: "INPUT0", data_type: "TYPE_FP32", dims: [4] },
      { name: "INPUT1", data_type: "TYPE_FP32", dims: [4] },
    ],
    output: [
      { name: "OUTPUT0", data_type: "TYPE_FP32", dims: [4] },
      { name: "OUTPUT1", data_type: "TYPE_FP32", dims: [4] },
    ],
  });
}

function inputs(a: Uint8Array, b: Uint8Array): Map<string, Tensor> {
  return new Map([
    ["INPUT0", { name: "INPUT0", datatype: "FP32", shape: [4], data: a }],
    ["INPUT1", { name: "INPUT1", datatype: "FP32", shape: [4], data: b }],
  ]);
}

Deno.test("an instance of add_sub_fp32_nobatch computes the sum and the difference", async () => {
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), context("add_sub_fp32_nobatch"));
  try {
    const out = await instance.execute(inputs(f32(1, 2, 3, 4), f32(0.5, -1, 10, 4)), ["OUTPUT0", "OUTPUT1"]);
    assertEquals([...out.keys()], ["OUTPUT0", "OUTPUT1"]);
    assertEquals(out.get("OUTPUT0"), {
      name: "OUTPUT0",
      datatype: "FP32",
      shape: [4],
      data: f32(1.5, 1, 13, 8),
    });
    assertEquals(out.get("OUTPUT1"), {
      name: "OUTPUT1",
      datatype: "FP32",
      shape: [4],
      data: f32(0.5, 3, -7, 0),
    });

    const only = await instance.execute(inputs(f32(1, 1, 1, 1), f32(1, 2, 3, 4)), ["OUTPUT1"]);
    assertEquals([...only.keys()], ["OUTPUT1"]);
    assertEquals(only.get("OUTPUT1")!.data, f32(0, -1, -2, -3));
  } finally {
    await instance.close();
  }
});

Deno.test("an instance reads input bytes that are not aligned for FP32", async () => {
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), context("add_sub_fp32_nobatch"));
  try {
    const backing = new Uint8Array(33);
    backing.set(f32(1, 2, 3, 4), 1);
    backing.set(f32(4, 3, 2, 1), 17);
    const out = await instance.execute(inputs(backing.subarray(1, 17), backing.subarray(17)), ["OUTPUT0"]);
    assertEquals(out.get("OUTPUT0")!.data, f32(5, 5, 5, 5));
  } finally {
    await instance.close();
  }
});

Deno.test("an instance refuses an input the model does not take, and reports a failed run as INTERNAL", async () => {
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), context("add_sub_fp32_nobatch"));
  try {
    const extra = inputs(f32(1, 2, 3, 4), f32(1, 2, 3, 4));
    extra.set("W", { name: "W", datatype: "FP32", shape: [1], data: f32(1) });
    await assertRejects(() => instance.execute(extra, ["OUTPUT0"]), ServerError, {
      code: "UNSUPPORTED",
      message:
        "Cannot run 'add_sub_fp32_nobatch': input 'W' is an initializer of the ONNX model, which onnxruntime-node cannot override; leave it out to use the model's value",
    });
    const short = new Map([["INPUT0", {
      name: "INPUT0",
      datatype: "FP32" as const,
      shape: [4],
      data: f32(1, 2, 3, 4),
    }]]);
    const err = await instance.execute(short, ["OUTPUT0"]).then(() => undefined, (e: unknown) => e);
    assert(err instanceof ServerError, "a ServerError");
    assertEquals(err.code, "INTERNAL");
    assert(err.message.startsWith("Cannot run 'add_sub_fp32_nobatch' in ONNX Runtime: "), err.message);
    // The instance stays usable after a failed run.
    const out = await instance.execute(inputs(f32(1, 2, 3, 4), f32(1, 1, 1, 1)), ["OUTPUT1"]);
    assertEquals(out.get("OUTPUT1")!.data, f32(0, 1, 2, 3));
  } finally {
    await instance.close();
  }
});

Deno.test("createInstance refuses KIND_GPU on the CPU build", async () => {
  await assertRejects(
    () => onnxRuntimeBackend.createInstance(addSubConfig(), context("add_sub_fp32_nobatch", "KIND_GPU")),
    ServerError,
    {
      code: "UNSUPPORTED",
      message:
        "Cannot load 'add_sub_fp32_nobatch': instance group kind KIND_GPU is not supported by the CPU build of ONNX Runtime, use KIND_CPU",
    },
  );
});

Deno.test("createInstance honours the session options of the config", async () => {
  const c = addSubConfig();
  c.parameters = {
    intra_op_thread_count: { string_value: "1" },
    execution_mode: { string_value: "1" },
    enable_mem_arena: { string_value: "0" },
    "session.intra_op.allow_spinning": { string_value: "1" },
  };
  c.optimization = { graph: { level: 2 } };
  const instance = await onnxRuntimeBackend.createInstance(c, context("add_sub_fp32_nobatch"));
  try {
    const out = await instance.execute(inputs(f32(1, 2, 3, 4), f32(1, 2, 3, 4)), ["OUTPUT0"]);
    assertEquals(out.get("OUTPUT0")!.data, f32(2, 4, 6, 8));
  } finally {
    await instance.close();
  }
});

function withParameters(params: Record<string, string>, extra: Record<string, unknown> = {}): ModelConfig {
  return toModelConfig({
    name: "m",
    parameters: Object.fromEntries(Object.entries(params).map(([k, v]) => [k, { string_value: v }])),
    ...extra,
  }, "m");
}

/** The session config entries the server sets by default: ONNX Runtime's thread pools do not spin. */
const NO_SPIN = {
  "session.intra_op.allow_spinning": "0",
  "session.inter_op.allow_spinning": "0",
};

Deno.test("sessionOptions without parameters enables every graph optimization and keeps the pools from spinning", () => {
  assertEquals(DEFAULT_SESSION_ENTRIES, NO_SPIN);
  assertEquals(sessionOptions(withParameters({})), {
    logSeverityLevel: 3,
    extra: NO_SPIN,
    graphOptimizationLevel: "all",
  });
});

Deno.test("sessionOptions passes parameters named session.* to ONNX Runtime as session config entries", () => {
  assertEquals(
    sessionOptions(withParameters({
      "session.intra_op.allow_spinning": "1",
      "session.disable_prepacking": "1",
      intra_op_thread_count: "2",
    })).extra,
    {
      "session.intra_op.allow_spinning": "1",
      "session.inter_op.allow_spinning": "0",
      "session.disable_prepacking": "1",
    },
  );
  // Only the session.* prefix: other parameters are Triton's or the server's, not ONNX Runtime entries.
  assertEquals(sessionOptions(withParameters({ instance_thread: "main", sessionx: "1" })).extra, NO_SPIN);
});

Deno.test("sessionOptions maps Triton's ONNX Runtime parameters", () => {
  assertEquals(
    sessionOptions(withParameters({
      intra_op_thread_count: "4",
      inter_op_thread_count: "2",
      execution_mode: "1",
      enable_mem_arena: "0",
    })),
    {
      logSeverityLevel: 3,
      extra: NO_SPIN,
      intraOpNumThreads: 4,
      interOpNumThreads: 2,
      executionMode: "parallel",
      enableCpuMemArena: false,
      graphOptimizationLevel: "all",
    },
  );
  assertEquals(
    sessionOptions(withParameters({
      intra_op_thread_count: "0",
      inter_op_thread_count: "0",
      execution_mode: "0",
      enable_mem_arena: "1",
    })),
    {
      logSeverityLevel: 3,
      extra: NO_SPIN,
      executionMode: "sequential",
      enableCpuMemArena: true,
      graphOptimizationLevel: "all",
    },
  );
  assertEquals(
    sessionOptions(withParameters({ intra_op_thread_count: "" })),
    { logSeverityLevel: 3, extra: NO_SPIN, graphOptimizationLevel: "all" },
  );
});

Deno.test("sessionOptions maps the graph level as Triton does: -1 basic, 1 extended, 2 disabled, else all", () => {
  const level = (l: number) =>
    sessionOptions(withParameters({}, { optimization: { graph: { level: l } } })).graphOptimizationLevel;
  assertEquals(level(-1), "basic");
  assertEquals(level(0), "all");
  assertEquals(level(1), "extended");
  assertEquals(level(2), "disabled");
  assertEquals(level(3), "all");
  assertEquals(
    sessionOptions(withParameters({}, { optimization: { priority: "PRIORITY_MAX" } })).graphOptimizationLevel,
    "all",
  );
});

Deno.test("sessionOptions refuses a parameter that is not a non-negative integer", () => {
  for (
    const [key, value] of [
      ["intra_op_thread_count", "x"],
      ["inter_op_thread_count", "-1"],
      ["execution_mode", "1.5"],
      ["enable_mem_arena", "true"],
    ]
  ) {
    assertThrows(() => sessionOptions(withParameters({ [key!]: value! })), ServerError, {
      code: "INVALID_ARG",
      message: `Cannot load 'm': parameter '${key}' is '${value}', expected a non-negative integer`,
    });
  }
});

Deno.test("instances on worker threads compute the same results and run at the same time", async () => {
  const ctx = { ...context("add_sub_fp32_nobatch"), backendConfig: { "instance-thread": "worker" } };
  const [a, b] = await Promise.all([
    onnxRuntimeBackend.createInstance(addSubConfig(), ctx),
    onnxRuntimeBackend.createInstance(addSubConfig(), ctx),
  ]);
  try {
    const x = f32(1, 2, 3, 4);
    const [outA, outB] = await Promise.all([
      a!.execute(inputs(x, f32(0.5, -1, 10, 4)), ["OUTPUT0", "OUTPUT1"]),
      b!.execute(inputs(x, f32(1, 1, 1, 1)), ["OUTPUT0"]),
    ]);
    assertEquals(outA.get("OUTPUT0")!.data, f32(1.5, 1, 13, 8));
    assertEquals(outA.get("OUTPUT1")!.data, f32(0.5, 3, -7, 0));
    assertEquals([...outB.keys()], ["OUTPUT0"]);
    assertEquals(outB.get("OUTPUT0")!.data, f32(2, 3, 4, 5));
    // The request's own buffers are left as they were (the worker gets copies).
    assertEquals(x, f32(1, 2, 3, 4));
  } finally {
    await Promise.all([a!.close(), b!.close()]);
  }
});

/** Fills a buffer the instance lends with the given floats. */
function lent(
  instance: { inputBuffer?: (name: string, n: number) => Uint8Array },
  name: string,
  v: Uint8Array,
) {
  const buf = instance.inputBuffer!(name, v.byteLength);
  buf.set(v);
  return buf;
}

Deno.test("a worker instance lends views of one shared arena, which keep their place from batch to batch", async () => {
  const ctx = { ...context("add_sub_fp32_nobatch"), backendConfig: { "instance-thread": "worker" } };
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), ctx);
  try {
    for (let round = 0; round < 3; round++) {
      const a = lent(instance, "INPUT0", f32(1, 2, 3, round));
      const b = lent(instance, "INPUT1", f32(0.5, -1, 10, 4));
      assert(
        a.buffer instanceof SharedArrayBuffer && a.buffer === b.buffer,
        "the inputs lie in one shared arena",
      );
      assertEquals([a.byteOffset, a.byteLength, b.byteOffset, b.byteLength], [0, 16, 16, 16]);
      const out = await instance.execute(inputs(a, b), ["OUTPUT0", "OUTPUT1"]);
      assertEquals(out.get("OUTPUT0")!.data, f32(1.5, 1, 13, round + 4));
      assertEquals(out.get("OUTPUT1")!.data, f32(0.5, 3, -7, round - 4));
      // The outputs are copies: the next batch's outputs do not overwrite them.
      const o0 = out.get("OUTPUT0")!.data as Uint8Array;
      assert(!(o0.buffer instanceof SharedArrayBuffer), "the outputs are copied out");
    }
  } finally {
    await instance.close();
  }
});

Deno.test("a worker instance lends the next slot while a run is in flight, plain buffers while both are, and runs in order", async () => {
  const ctx = { ...context("add_sub_fp32_nobatch"), backendConfig: { "instance-thread": "worker" } };
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), ctx);
  try {
    assertEquals(instance.pipelineDepth, 2);
    const first = instance.execute(inputs(f32(1, 2, 3, 4), f32(1, 1, 1, 1)), ["OUTPUT0"]);
    const a = lent(instance, "INPUT0", f32(10, 20, 30, 40));
    const b = lent(instance, "INPUT1", f32(1, 2, 3, 4));
    assert(a.buffer instanceof SharedArrayBuffer, "the other slot is lent while the worker runs the first");
    const second = instance.execute(inputs(a, b), ["OUTPUT1"]);
    const c = lent(instance, "INPUT0", f32(5, 6, 7, 8));
    const d = lent(instance, "INPUT1", f32(1, 1, 1, 1));
    assert(!(c.buffer instanceof SharedArrayBuffer), "no slot is lent while both are in use");
    const third = instance.execute(inputs(c, d), ["OUTPUT0"]);
    const fourth = instance.execute(inputs(f32(0, 0, 0, 1), f32(0, 0, 0, 1)), ["OUTPUT0", "OUTPUT1"]);
    const order: number[] = [];
    const track = <T>(p: Promise<T>, i: number) => p.then((v) => (order.push(i), v));
    const [one, two, three, four] = await Promise.all([
      track(first, 0),
      track(second, 1),
      track(third, 2),
      track(fourth, 3),
    ]);
    assertEquals(order, [0, 1, 2, 3]);
    assertEquals(one.get("OUTPUT0")!.data, f32(2, 3, 4, 5));
    assertEquals(two.get("OUTPUT1")!.data, f32(9, 18, 27, 36));
    assertEquals(three.get("OUTPUT0")!.data, f32(6, 7, 8, 9));
    assertEquals(four.get("OUTPUT0")!.data, f32(0, 0, 0, 2));
    assertEquals(four.get("OUTPUT1")!.data, f32(0, 0, 0, 0));
  } finally {
    await instance.close();
  }
});

Deno.test("an error in a worker run rejects that run only", async () => {
  const ctx = { ...context("add_sub_fp32_nobatch"), backendConfig: { "instance-thread": "worker" } };
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), ctx);
  try {
    const wrong = new Map<string, Tensor>([
      ["INPUT0", { name: "INPUT0", datatype: "FP32", shape: [2, 2], data: f32(1, 2, 3, 4) }],
      ["INPUT1", { name: "INPUT1", datatype: "FP32", shape: [4], data: f32(1, 1, 1, 1) }],
    ]);
    const [bad, good] = await Promise.allSettled([
      instance.execute(wrong, ["OUTPUT0"]),
      instance.execute(inputs(f32(1, 2, 3, 4), f32(1, 1, 1, 1)), ["OUTPUT0"]),
    ]);
    assertEquals(bad.status, "rejected");
    const err = (bad as PromiseRejectedResult).reason as ServerError;
    assertEquals(err.code, "INTERNAL");
    assertEquals(
      err.message,
      "Cannot run 'add_sub_fp32_nobatch' in ONNX Runtime: Invalid rank for input: INPUT0 Got: 2 Expected: 1 " +
        "Please fix either the inputs/outputs or the model.",
    );
    assertEquals(
      (good as PromiseFulfilledResult<Map<string, Tensor>>).value.get("OUTPUT0")!.data,
      f32(2, 3, 4, 5),
    );
  } finally {
    await instance.close();
  }
});

Deno.test("closing a worker instance lets the runs in flight finish and refuses the ones after them", async () => {
  const ctx = { ...context("add_sub_fp32_nobatch"), backendConfig: { "instance-thread": "worker" } };
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), ctx);
  // Two runs go to the worker at once (one per slot); the third waits for a slot.
  const running = instance.execute(inputs(f32(1, 2, 3, 4), f32(1, 1, 1, 1)), ["OUTPUT0"]);
  const next = instance.execute(inputs(f32(1, 2, 3, 4), f32(3, 3, 3, 3)), ["OUTPUT0"]);
  const queued = instance.execute(inputs(f32(1, 2, 3, 4), f32(2, 2, 2, 2)), ["OUTPUT0"]);
  const closed = instance.close();
  const refused = {
    code: "INTERNAL",
    message: "Cannot run 'add_sub_fp32_nobatch' in ONNX Runtime: the instance is closing",
  };
  await assertRejects(() => queued, ServerError, refused);
  assertEquals((await running).get("OUTPUT0")!.data, f32(2, 3, 4, 5));
  assertEquals((await next).get("OUTPUT0")!.data, f32(4, 5, 6, 7));
  await closed;
  await assertRejects(
    () => instance.execute(inputs(f32(1, 2, 3, 4), f32(1, 1, 1, 1)), ["OUTPUT0"]),
    ServerError,
    refused,
  );
});

function identityConfig(model: string, type: string): ModelConfig {
  return prepared({
    name: model,
    platform: "onnxruntime_onnx",
    max_batch_size: 8,
    input: [{ name: "INPUT0", data_type: type, dims: [-1] }],
    output: [{ name: "OUTPUT0", data_type: type, dims: [-1] }],
  });
}

Deno.test("INT64 and FP16 tensors cross to a worker instance in shared memory unchanged", async () => {
  const cases: [string, string, "INT64" | "FP16", Uint8Array][] = [
    ["identity_int64", "TYPE_INT64", "INT64", bytesOf(new BigInt64Array([1n, -2n, 1n << 40n, -(1n << 62n)]))],
    ["identity_fp16", "TYPE_FP16", "FP16", bytesOf(new Uint16Array([0x3c00, 0xc000, 0x7bff, 0x0001]))],
  ];
  for (const [model, type, datatype, data] of cases) {
    const ctx = { ...context(model), backendConfig: { "instance-thread": "worker" } };
    const instance = await onnxRuntimeBackend.createInstance(identityConfig(model, type), ctx);
    try {
      const input = new Map<string, Tensor>([["INPUT0", { name: "INPUT0", datatype, shape: [2, 2], data }]]);
      const out = await instance.execute(input, ["OUTPUT0"]);
      assertEquals(out.get("OUTPUT0"), { name: "OUTPUT0", datatype, shape: [2, 2], data });
    } finally {
      await instance.close();
    }
  }
});

Deno.test("a batch bigger than a worker instance's arenas grows them, and its outputs come back whole", async () => {
  const ctx = { ...context("identity_fp32"), backendConfig: { "instance-thread": "worker" } };
  const instance = await onnxRuntimeBackend.createInstance(identityConfig("identity_fp32", "TYPE_FP32"), ctx);
  try {
    for (const n of [100_000, 300_000]) {
      const values = Float32Array.from({ length: n }, (_, i) => i * 0.5 - 7);
      const data = lent(instance, "INPUT0", bytesOf(values));
      const input = new Map<string, Tensor>([["INPUT0", {
        name: "INPUT0",
        datatype: "FP32",
        shape: [4, n / 4],
        data,
      }]]);
      const out = await instance.execute(input, ["OUTPUT0"]);
      assertEquals(out.get("OUTPUT0")!.shape, [4, n / 4]);
      assertEquals(out.get("OUTPUT0")!.data, bytesOf(values));
    }
  } finally {
    await instance.close();
  }
});

Deno.test("BYTES tensors cross to a worker instance by message, and the runs after them still run", async () => {
  const ctx = { ...context("identity_string"), backendConfig: { "instance-thread": "worker" } };
  const instance = await onnxRuntimeBackend.createInstance(
    identityConfig("identity_string", "TYPE_STRING"),
    ctx,
  );
  const utf8 = (s: string) => new TextEncoder().encode(s);
  try {
    for (const words of [["a", "bc"], ["é", "", "xyz"], ["last"]]) {
      const data = BytesTensor.of(words.map(utf8));
      const input = new Map<string, Tensor>([
        ["INPUT0", { name: "INPUT0", datatype: "BYTES", shape: [1, words.length], data }],
      ]);
      const out = await instance.execute(input, ["OUTPUT0"]);
      assertEquals(out.get("OUTPUT0")!.shape, [1, words.length]);
      assertEquals((out.get("OUTPUT0")!.data as BytesTensor).strings(), words);
    }
  } finally {
    await instance.close();
  }
});

Deno.test("an instance on the main thread reuses the input buffers it lends once a run is over", async () => {
  const ctx = { ...context("add_sub_fp32_nobatch"), backendConfig: { "instance-thread": "main" } };
  const instance = await onnxRuntimeBackend.createInstance(addSubConfig(), ctx);
  try {
    const a = lent(instance, "INPUT0", f32(1, 2, 3, 4));
    const b = lent(instance, "INPUT1", f32(1, 1, 1, 1));
    const out = await instance.execute(inputs(a, b), ["OUTPUT0"]);
    assertEquals(out.get("OUTPUT0")!.data, f32(2, 3, 4, 5));
    const again = instance.inputBuffer!("INPUT0", 16);
    assert(again.buffer === a.buffer, "the buffer of the finished run is lent again");
    assert(instance.inputBuffer!("INPUT0", 16).buffer !== a.buffer, "a lent buffer is not lent twice");
  } finally {
    await instance.close();
  }
});

Deno.test("instance_thread comes from the config parameter, then the backend config, and is checked", () => {
  const config = addSubConfig();
  assertEquals(instanceThread(config, {}), "main");
  // Dynamic batching means many requests in flight: the instance of a model big enough that a run outweighs
  // the hop gets a thread of its own by default.
  const batching = { ...config, max_batch_size: 8, dynamic_batching: {} };
  assertEquals(instanceThread(batching, {}, WORKER_MIN_MODEL_BYTES), "worker");
  assertEquals(instanceThread(batching, {}, WORKER_MIN_MODEL_BYTES - 1), "main");
  assertEquals(instanceThread({ ...batching, max_batch_size: 1 }, {}, WORKER_MIN_MODEL_BYTES), "main");
  assertEquals(instanceThread(config, {}, WORKER_MIN_MODEL_BYTES), "main");
  assertEquals(instanceThread(batching, { "instance-thread": "main" }, WORKER_MIN_MODEL_BYTES), "main");
  assertEquals(WORKER_MIN_MODEL_BYTES, 1048576);
  assertEquals(instanceThread(config, { "instance-thread": "worker" }), "worker");
  config.parameters = { instance_thread: { string_value: "main" } };
  assertEquals(instanceThread(config, { "instance-thread": "worker" }), "main");
  config.parameters = { instance_thread: { string_value: "gpu" } };
  assertThrows(
    () => instanceThread(config, {}),
    ServerError,
    {
      code: "INVALID_ARG",
      message: "Cannot load 'add_sub_fp32_nobatch': instance_thread is 'gpu', expected 'main' or 'worker'",
    },
  );
});

Deno.test("thread_copy_max_bytes is a number of bytes, or not set", () => {
  const config = addSubConfig();
  assertEquals(threadCopyParameter(config), undefined);
  config.parameters = { thread_copy_max_bytes: { string_value: "" } };
  assertEquals(threadCopyParameter(config), undefined);
  config.parameters = { thread_copy_max_bytes: { string_value: "16777216" } };
  assertEquals(threadCopyParameter(config), 16777216);
  for (const bad of ["16M", "-1", "1.5", " 8"]) {
    config.parameters = { thread_copy_max_bytes: { string_value: bad } };
    assertThrows(() => threadCopyParameter(config), ServerError, {
      code: "INVALID_ARG",
      message:
        `Cannot load 'add_sub_fp32_nobatch': thread_copy_max_bytes is '${bad}', expected a number of bytes`,
    });
  }
});

Deno.test("a default worker instance answers a lone request and a batch alike (lone on the server's thread, batch on the worker)", async () => {
  const dir = join(ROOT, "bench/models/mlp");
  const config = prepared({
    name: "mlp",
    platform: "onnxruntime_onnx",
    max_batch_size: 64,
    input: [{ name: "input", data_type: "TYPE_FP32", dims: [784] }],
    output: [{ name: "logits", data_type: "TYPE_FP32", dims: [10] }],
    dynamic_batching: {},
  });
  const ctx: InstanceContext = {
    ...context("mlp"),
    modelDir: dir,
    versionDir: join(dir, "1"),
    modelPath: join(dir, "1", "model.onnx"),
  };
  const instance = await onnxRuntimeBackend.createInstance(config, ctx);
  try {
    const via = openOrtShim() ? "libortshim" : "onnxruntime-node's binding";
    assertEquals(
      instance.runsOn,
      `a thread of its own, through ${via}; a lone request on the server's thread, through ${via}`,
    );
    const row = (seed: number) => new Float32Array(784).map((_, i) => ((i * seed) % 17) / 17);
    const bytes = (a: Float32Array) => new Uint8Array(a.buffer);
    const one = (data: Uint8Array) =>
      new Map<string, Tensor>([["input", {
        name: "input",
        datatype: "FP32",
        shape: [data.byteLength / 3136, 784],
        data,
      }]]);
    const lone1 = await instance.execute(one(bytes(row(3))), ["logits"]);
    const lone2 = await instance.execute(one(bytes(row(5))), ["logits"]);
    // The scheduler concatenates a batch into a buffer the instance lends: the worker's shared arena.
    const batch = instance.inputBuffer!("input", 2 * 3136);
    assert(batch.buffer instanceof SharedArrayBuffer, "a batch is lent the worker's shared memory");
    batch.set(bytes(row(3)), 0);
    batch.set(bytes(row(5)), 3136);
    const both = await instance.execute(one(batch), ["logits"]);
    const logits = (m: Map<string, Tensor>) =>
      Array.from(new Float32Array((m.get("logits")!.data as Uint8Array).slice().buffer));
    assertEquals(both.get("logits")!.shape, [2, 10]);
    assertEquals(logits(both), [...logits(lone1), ...logits(lone2)]);
  } finally {
    await instance.close();
  }
});

Deno.test("worker requests alternate between the two slots and count past the Int32 wrap-around", () => {
  assertEquals(SLOTS, 2);
  const max = 2147483647, min = -2147483648;
  assertEquals([1, 2, 3, max, (max + 1) | 0, min + 1].map(slotOf), [1, 0, 1, 1, 0, 1]);
  assertEquals(reached(5, 5), true);
  assertEquals(reached(6, 5), true);
  assertEquals(reached(4, 5), false);
  assertEquals(reached(min, max), true);
  assertEquals(reached(max, min), false);
  assertEquals([
    slotWord(CTL.KIND, 0),
    slotWord(CTL.STATUS, 0),
    slotWord(CTL.KIND, 1),
    slotWord(CTL.STATUS, 1),
  ], [
    2,
    3,
    4,
    5,
  ]);
  assertEquals(CTL_WORDS, 6);
});

Deno.test("a model on the server's thread runs on one intra-op thread if small, else one per core it may use, unless its config says otherwise", () => {
  const base = { logSeverityLevel: 3 as const };
  assertEquals(mainSessionOptions(base, 1000, 16), { logSeverityLevel: 3, intraOpNumThreads: 1 });
  assertEquals(mainSessionOptions(base, WORKER_MIN_MODEL_BYTES - 1, 16), {
    logSeverityLevel: 3,
    intraOpNumThreads: 1,
  });
  assertEquals(mainSessionOptions(base, WORKER_MIN_MODEL_BYTES, 16), {
    logSeverityLevel: 3,
    intraOpNumThreads: 16,
  });
  assertEquals(mainSessionOptions(base, WORKER_MIN_MODEL_BYTES, 3), {
    logSeverityLevel: 3,
    intraOpNumThreads: 3,
  });
  assertEquals(mainSessionOptions({ ...base, intraOpNumThreads: 4 }, 1000, 16), {
    logSeverityLevel: 3,
    intraOpNumThreads: 4,
  });
  assertEquals(mainSessionOptions({ ...base, intraOpNumThreads: 4 }, WORKER_MIN_MODEL_BYTES, 16), {
    logSeverityLevel: 3,
    intraOpNumThreads: 4,
  });
});

Deno.test("a worker instance's session leaves one core to the server's thread", () => {
  assertEquals([1, 2, 3, 4, 16].map(workerIntraOpThreads), [1, 1, 2, 3, 15]);
});
