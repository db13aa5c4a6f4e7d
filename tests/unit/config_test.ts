import { join } from "node:path";
import { assertEquals, assertRejects, assertThrows } from "../assert.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { ModelConfig } from "../../server/core/model_config.ts";
import {
  applyDefaults,
  readConfigFile,
  readLabels,
  resolveBackend,
  toModelConfig,
  validateConfig,
} from "../../server/repository/config.ts";
import {
  listVersions,
  scanRepositories,
  selectVersions,
  versionFileNames,
} from "../../server/repository/repository.ts";

const IO = {
  input: [{ name: "x", data_type: "TYPE_FP32", dims: [4] }],
  output: [{ name: "y", data_type: "TYPE_FP32", dims: [4] }],
};

/** A normalized config of model 'm' (ONNX, max_batch_size 8, one FP32 [4] input and output) with overrides. */
function config(extra: Record<string, unknown> = {}): ModelConfig {
  return toModelConfig({ name: "m", platform: "onnxruntime_onnx", max_batch_size: 8, ...IO, ...extra }, "m");
}

/** The config as the registry has it before validation: backend resolved and defaults applied. */
function prepared(extra: Record<string, unknown> = {}): ModelConfig {
  const c = config(extra);
  resolveBackend(c, []);
  applyDefaults(c, "model.onnx");
  return c;
}

async function withTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer_config_test_" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

// ---------------------------------------------------------------------------------------------------------
// toModelConfig

Deno.test("toModelConfig fills every scalar and list with its proto default and leaves unset messages out", () => {
  assertEquals(toModelConfig({ name: "m" }, "m"), {
    name: "m",
    platform: "",
    backend: "",
    runtime: "",
    max_batch_size: 0,
    input: [],
    output: [],
    batch_input: [],
    batch_output: [],
    instance_group: [],
    default_model_filename: "",
    cc_model_filenames: {},
    metric_tags: {},
    parameters: {},
    model_warmup: [],
  });
});

Deno.test("toModelConfig fills nested messages, writes enums as names and 64-bit integers as numbers", () => {
  const c = toModelConfig({
    name: "m",
    input: [{ name: "a", data_type: 11, dims: [-1, 3] }],
    version_policy: { specific: { versions: [1, 3] } },
    dynamic_batching: { max_queue_delay_microseconds: 100 },
    instance_group: [{ kind: "KIND_CPU", count: 2 }],
    parameters: { k: { string_value: "v" } },
  }, "m");
  assertEquals(c.input, [{
    name: "a",
    data_type: "TYPE_FP32",
    format: "FORMAT_NONE",
    dims: [-1, 3],
    is_shape_tensor: false,
    allow_ragged_batch: false,
    optional: false,
    is_non_linear_format_io: false,
  }]);
  assertEquals(c.version_policy, { specific: { versions: [1, 3] } });
  assertEquals(c.dynamic_batching, {
    preferred_batch_size: [],
    max_queue_delay_microseconds: 100,
    preserve_ordering: false,
    priority_levels: 0,
    default_priority_level: 0,
    priority_queue_policy: {},
  });
  assertEquals(c.instance_group, [{
    name: "",
    kind: "KIND_CPU",
    count: 2,
    gpus: [],
    secondary_devices: [],
    profile: [],
    passive: false,
    host_policy: "",
  }]);
  assertEquals(c.parameters, { k: { string_value: "v" } });
  assertEquals(c.sequence_batching, undefined);
  assertEquals(c.optimization, undefined);
});

Deno.test("toModelConfig of a normalized config gives it back unchanged", () => {
  const c = config({
    instance_group: [{ kind: "KIND_CPU" }],
    version_policy: { latest: { num_versions: 2 } },
  });
  assertEquals(toModelConfig(c, "m"), c);
});

Deno.test("toModelConfig refuses values of the wrong shape", () => {
  assertThrows(() => toModelConfig({ name: "m", input: 5 }, "m"), ServerError, {
    code: "INVALID_ARG",
    message:
      "Cannot load 'm': the config is not a valid ModelConfig: .inference.ModelConfig.input: array expected",
  });
  assertThrows(() => toModelConfig({ name: "m", dynamic_batching: 3 }, "m"), ServerError, {
    code: "INVALID_ARG",
    message:
      "Cannot load 'm': the config is not a valid ModelConfig: .inference.ModelConfig.dynamic_batching: object expected",
  });
});

// ---------------------------------------------------------------------------------------------------------
// resolveBackend

function resolve(fields: Record<string, unknown>, files: string[] = []): [unknown, string, string] {
  const c = toModelConfig({ name: "m", ...fields }, "m");
  const choice = resolveBackend(c, files);
  return [choice, c.platform, c.backend];
}

function resolveFails(fields: Record<string, unknown>, files: string[], code: string, message: string): void {
  const c = toModelConfig({ name: "m", ...fields }, "m");
  assertThrows(() => resolveBackend(c, files), ServerError, { code, message });
}

Deno.test("resolveBackend derives the backend from the platform", () => {
  assertEquals(resolve({ platform: "onnxruntime_onnx" }), [
    { backend: "onnxruntime", platform: "onnxruntime_onnx" },
    "onnxruntime_onnx",
    "onnxruntime",
  ]);
  assertEquals(resolve({ platform: "tensorrt_plan" }), [
    { backend: "tensorrt", platform: "tensorrt_plan" },
    "tensorrt_plan",
    "tensorrt",
  ]);
  assertEquals(resolve({ platform: "ensemble" }), [
    { backend: "ensemble", platform: "ensemble" },
    "ensemble",
    "",
  ]);
});

Deno.test("resolveBackend derives the platform from the backend", () => {
  assertEquals(resolve({ backend: "onnxruntime" }), [
    { backend: "onnxruntime", platform: "onnxruntime_onnx" },
    "onnxruntime_onnx",
    "onnxruntime",
  ]);
  assertEquals(resolve({ backend: "tensorrt" }), [
    { backend: "tensorrt", platform: "tensorrt_plan" },
    "tensorrt_plan",
    "tensorrt",
  ]);
  assertEquals(resolve({ backend: "python" }), [{ backend: "python", platform: "" }, "", "python"]);
});

Deno.test("resolveBackend accepts a platform and backend that agree", () => {
  assertEquals(resolve({ platform: "onnxruntime_onnx", backend: "onnxruntime" })[0], {
    backend: "onnxruntime",
    platform: "onnxruntime_onnx",
  });
});

Deno.test("resolveBackend without platform or backend looks at the model files", () => {
  assertEquals(resolve({}, ["model.onnx"])[0], { backend: "onnxruntime", platform: "onnxruntime_onnx" });
  assertEquals(resolve({}, ["model.plan"])[0], { backend: "tensorrt", platform: "tensorrt_plan" });
  assertEquals(resolve({}, ["model.py"])[0], { backend: "python", platform: "" });
  assertEquals(resolve({}, ["model.pt"])[0], { backend: "pytorch", platform: "pytorch_libtorch" });
  assertEquals(resolve({}, ["labels.txt", "model.onnx"])[0], {
    backend: "onnxruntime",
    platform: "onnxruntime_onnx",
  });
  // The lookup order decides, whatever the listing order.
  assertEquals(resolve({}, ["model.pt", "model.onnx"])[0], {
    backend: "onnxruntime",
    platform: "onnxruntime_onnx",
  });
  assertEquals(resolve({}, ["model.savedmodel", "model.pt"])[0], {
    backend: "pytorch",
    platform: "pytorch_libtorch",
  });
});

Deno.test("resolveBackend without platform, backend or model file is refused", () => {
  resolveFails(
    {},
    ["weights.bin"],
    "INVALID_ARG",
    "Cannot load 'm': the config names no platform or backend and no version folder holds a model file (model.onnx, model.plan, model.py, model.pt)",
  );
  resolveFails(
    {},
    [],
    "INVALID_ARG",
    "Cannot load 'm': the config names no platform or backend and no version folder holds a model file (model.onnx, model.plan, model.py, model.pt)",
  );
});

Deno.test("resolveBackend refuses a platform that contradicts the backend", () => {
  resolveFails(
    { platform: "onnxruntime_onnx", backend: "tensorrt" },
    [],
    "INVALID_ARG",
    "Cannot load 'm': platform 'onnxruntime_onnx' does not match backend 'tensorrt'",
  );
  resolveFails(
    { platform: "tensorrt_plan", backend: "python" },
    [],
    "INVALID_ARG",
    "Cannot load 'm': platform 'tensorrt_plan' does not match backend 'python'",
  );
});

Deno.test("resolveBackend refuses unknown platforms and backends", () => {
  resolveFails({ platform: "onnx" }, [], "INVALID_ARG", "Cannot load 'm': unknown platform 'onnx'");
  resolveFails({ backend: "caffe" }, [], "INVALID_ARG", "Cannot load 'm': unknown backend 'caffe'");
});

Deno.test("resolveBackend maps the PyTorch platform and backend to each other", () => {
  assertEquals(resolve({ platform: "pytorch_libtorch" })[0], {
    backend: "pytorch",
    platform: "pytorch_libtorch",
  });
  assertEquals(resolve({ backend: "pytorch" })[0], { backend: "pytorch", platform: "pytorch_libtorch" });
  resolveFails(
    { platform: "pytorch_libtorch", backend: "python" },
    [],
    "INVALID_ARG",
    "Cannot load 'm': platform 'pytorch_libtorch' does not match backend 'python'",
  );
});

Deno.test("resolveBackend answers UNSUPPORTED for Triton platforms and backends dinfer does not run", () => {
  for (const platform of ["tensorflow_graphdef", "tensorflow_savedmodel"]) {
    resolveFails(
      { platform },
      [],
      "UNSUPPORTED",
      `Cannot load 'm': '${platform}' models are not supported by dinfer`,
    );
  }
  for (const backend of ["tensorflow", "openvino", "dali", "fil", "vllm", "tensorrtllm"]) {
    resolveFails(
      { backend },
      [],
      "UNSUPPORTED",
      `Cannot load 'm': '${backend}' models are not supported by dinfer`,
    );
  }
  resolveFails(
    {},
    ["model.savedmodel"],
    "UNSUPPORTED",
    "Cannot load 'm': 'tensorflow' models are not supported by dinfer",
  );
  resolveFails(
    {},
    ["model.graphdef"],
    "UNSUPPORTED",
    "Cannot load 'm': 'tensorflow' models are not supported by dinfer",
  );
});

// ---------------------------------------------------------------------------------------------------------
// applyDefaults

function groups(c: ModelConfig): unknown[] {
  return c.instance_group.map(({ name, kind, count }) => ({ name, kind, count }));
}

Deno.test("applyDefaults serves the latest version and names the default model file", () => {
  const c = prepared();
  assertEquals(c.version_policy, { latest: { num_versions: 1 } });
  assertEquals(c.default_model_filename, "model.onnx");
});

Deno.test("applyDefaults keeps a version policy and model file name the config gives", () => {
  const c = config({ version_policy: { all: {} }, default_model_filename: "net.onnx" });
  resolveBackend(c, []);
  applyDefaults(c, "model.onnx");
  assertEquals(c.version_policy, { all: {} });
  assertEquals(c.default_model_filename, "net.onnx");
});

Deno.test("applyDefaults gives an ONNX Runtime model one KIND_CPU group of 2 named after the model", () => {
  const c = prepared();
  assertEquals(c.instance_group, [{ name: "m", kind: "KIND_CPU", count: 2, gpus: [] }]);
});

Deno.test("applyDefaults gives KIND_CPU groups without a count 2 instances for ONNX Runtime", () => {
  const c = prepared({ instance_group: [{ kind: "KIND_CPU" }] });
  // As Triton: a group of the config without a name is named <model>_<index>.
  assertEquals(groups(c), [{ name: "m_0", kind: "KIND_CPU", count: 2 }]);
});

Deno.test("applyDefaults gives other backends and kinds 1 instance, keeps explicit counts and names", () => {
  const trt = config({ platform: "tensorrt_plan", instance_group: [{ kind: "KIND_CPU" }] });
  resolveBackend(trt, []);
  applyDefaults(trt, "model.plan");
  assertEquals(groups(trt), [{ name: "m_0", kind: "KIND_CPU", count: 1 }]);
  assertEquals(trt.default_model_filename, "model.plan");

  const c = prepared({
    instance_group: [
      { kind: "KIND_GPU" },
      { name: "mine", kind: "KIND_CPU", count: 3 },
      { kind: "KIND_AUTO" },
    ],
  });
  assertEquals(groups(c), [
    { name: "m_0", kind: "KIND_GPU", count: 1 },
    { name: "mine", kind: "KIND_CPU", count: 3 },
    { name: "m_2", kind: "KIND_CPU", count: 2 },
  ]);
});

Deno.test("applyDefaults gives an ensemble no instance groups", () => {
  const c = toModelConfig({ name: "e", platform: "ensemble", instance_group: [{ kind: "KIND_CPU" }] }, "e");
  resolveBackend(c, []);
  applyDefaults(c, "");
  assertEquals(c.instance_group, []);
  assertEquals(c.version_policy, { latest: { num_versions: 1 } });
});

// ---------------------------------------------------------------------------------------------------------
// validateConfig

async function invalid(c: ModelConfig, message: string, folder = "m", dir = "/nonexistent"): Promise<void> {
  await assertRejects(() => validateConfig(c, folder, dir), ServerError, { code: "INVALID_ARG", message });
}

Deno.test("validateConfig accepts a complete config", async () => {
  await validateConfig(prepared(), "m", "/nonexistent");
  await validateConfig(
    prepared({ max_batch_size: 0, dynamic_batching: { preferred_batch_size: [2] } }),
    "m",
    "/x",
  );
});

Deno.test("validateConfig refuses a name that is not the folder's", async () => {
  await invalid(
    prepared(),
    "Cannot load 'other': the config's name 'm' does not match the model folder 'other'",
    "other",
  );
});

Deno.test("validateConfig refuses a negative max_batch_size", async () => {
  await invalid(
    prepared({ max_batch_size: -1 }),
    "Cannot load 'm': max_batch_size is -1, expected 0 or more",
  );
});

Deno.test("validateConfig refuses a config without inputs or outputs", async () => {
  await invalid(prepared({ input: [] }), "Cannot load 'm': the config has no inputs");
  await invalid(prepared({ output: [] }), "Cannot load 'm': the config has no outputs");
});

Deno.test("validateConfig refuses nameless and duplicate inputs and outputs", async () => {
  const x = { name: "x", data_type: "TYPE_FP32", dims: [4] };
  await invalid(prepared({ input: [x, x] }), "Cannot load 'm': input 'x' is declared more than once");
  await invalid(
    prepared({
      output: [{ name: "y", data_type: "TYPE_FP32", dims: [4] }, {
        name: "y",
        data_type: "TYPE_INT32",
        dims: [1],
      }],
    }),
    "Cannot load 'm': output 'y' is declared more than once",
  );
  await invalid(
    prepared({ input: [{ data_type: "TYPE_FP32", dims: [4] }] }),
    "Cannot load 'm': an input has no name",
  );
});

Deno.test("validateConfig refuses an invalid data_type", async () => {
  await invalid(
    prepared({ input: [{ name: "x", dims: [4] }] }),
    "Cannot load 'm': input 'x' has no valid data_type (got 'TYPE_INVALID')",
  );
  await invalid(
    prepared({ output: [{ name: "y", data_type: "TYPE_INVALID", dims: [4] }] }),
    "Cannot load 'm': output 'y' has no valid data_type (got 'TYPE_INVALID')",
  );
});

Deno.test("validateConfig refuses missing, zero and negative dims", async () => {
  await invalid(
    prepared({ input: [{ name: "x", data_type: "TYPE_FP32" }] }),
    "Cannot load 'm': input 'x' has no dims",
  );
  await invalid(
    prepared({ input: [{ name: "x", data_type: "TYPE_FP32", dims: [2, 0] }] }),
    "Cannot load 'm': input 'x' has dim 0 in dims [2,0], expected -1 or a positive size",
  );
  await invalid(
    prepared({ output: [{ name: "y", data_type: "TYPE_FP32", dims: [-2] }] }),
    "Cannot load 'm': output 'y' has dim -2 in dims [-2], expected -1 or a positive size",
  );
});

Deno.test("validateConfig accepts empty dims with a reshape when the model batches", async () => {
  await validateConfig(
    prepared({ input: [{ name: "x", data_type: "TYPE_FP32", dims: [], reshape: { shape: [1] } }] }),
    "m",
    "/x",
  );
  await invalid(
    prepared({
      max_batch_size: 0,
      input: [{ name: "x", data_type: "TYPE_FP32", dims: [], reshape: { shape: [1] } }],
    }),
    "Cannot load 'm': input 'x' has no dims",
  );
});

Deno.test("validateConfig refuses a reshape of a different size", async () => {
  await invalid(
    prepared({ input: [{ name: "x", data_type: "TYPE_FP32", dims: [4], reshape: { shape: [3] } }] }),
    "Cannot load 'm': input 'x' has dims [4] and reshape [3] of different sizes",
  );
  await invalid(
    prepared({ output: [{ name: "y", data_type: "TYPE_FP32", dims: [2, 3], reshape: { shape: [5] } }] }),
    "Cannot load 'm': output 'y' has dims [2,3] and reshape [5] of different sizes",
  );
  await validateConfig(
    prepared({ input: [{ name: "x", data_type: "TYPE_FP32", dims: [2, 3], reshape: { shape: [3, 2] } }] }),
    "m",
    "/x",
  );
  await validateConfig(
    prepared({ input: [{ name: "x", data_type: "TYPE_FP32", dims: [-1, 3], reshape: { shape: [5] } }] }),
    "m",
    "/x",
  );
});

Deno.test("validateConfig refuses a label file that does not exist, accepts one that does", async () => {
  await withTempDir(async (dir) => {
    const labelled = prepared({
      output: [{ name: "y", data_type: "TYPE_FP32", dims: [4], label_filename: "labels.txt" }],
    });
    await invalid(
      labelled,
      "Cannot load 'm': output 'y' names label file 'labels.txt', which does not exist in the model folder",
      "m",
      dir,
    );
    await Deno.writeTextFile(join(dir, "labels.txt"), "a\nb\n");
    await validateConfig(labelled, "m", dir);
  });
});

Deno.test("validateConfig refuses a preferred batch size above max_batch_size or below 1", async () => {
  await invalid(
    prepared({ max_batch_size: 4, dynamic_batching: { preferred_batch_size: [2, 8] } }),
    "Cannot load 'm': dynamic_batching preferred_batch_size 8 must be between 1 and max_batch_size 4",
  );
  await invalid(
    prepared({ max_batch_size: 4, dynamic_batching: { preferred_batch_size: [0] } }),
    "Cannot load 'm': dynamic_batching preferred_batch_size 0 must be between 1 and max_batch_size 4",
  );
  await validateConfig(
    prepared({ max_batch_size: 4, dynamic_batching: { preferred_batch_size: [2, 4] } }),
    "m",
    "/x",
  );
});

Deno.test("validateConfig refuses a latest policy of no versions and instance groups without instances", async () => {
  await invalid(
    prepared({ version_policy: { latest: { num_versions: 0 } } }),
    "Cannot load 'm': version_policy latest num_versions must be at least 1",
  );
  await invalid(
    prepared({ instance_group: [{ kind: "KIND_CPU", count: -1 }] }),
    "Cannot load 'm': instance group 'm_0' has count -1, expected at least 1",
  );
});

Deno.test("validateConfig accepts an ensemble without inputs or outputs", async () => {
  const c = toModelConfig({ name: "e", platform: "ensemble" }, "e");
  resolveBackend(c, []);
  applyDefaults(c, "");
  await validateConfig(c, "e", "/x");
});

// ---------------------------------------------------------------------------------------------------------
// readConfigFile, readLabels

Deno.test("readConfigFile reads config.pbtxt as a partial object, {} when there is none", async () => {
  await withTempDir(async (dir) => {
    assertEquals(await readConfigFile(dir, "m"), {});
    await Deno.writeTextFile(join(dir, "config.pbtxt"), 'name: "m"\nmax_batch_size: 4\n');
    assertEquals(await readConfigFile(dir, "m"), { name: "m", max_batch_size: 4 });
  });
});

Deno.test("readConfigFile refuses a config.pbtxt that does not parse", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(join(dir, "config.pbtxt"), 'name: "m"\nmax_batch: 4\n');
    const err = await assertRejects(() => readConfigFile(dir, "m"), ServerError, {
      code: "INVALID_ARG",
      message:
        "Cannot load 'm': Cannot parse 'config.pbtxt' at 2:1: unknown field 'max_batch' in inference.ModelConfig",
    });
    assertEquals(err.name, "ServerError");
  });
});

Deno.test("readLabels reads one label per line, without a trailing empty line", async () => {
  await withTempDir(async (dir) => {
    await Deno.writeTextFile(join(dir, "labels.txt"), "cat\r\ndog\n\nbird\n");
    assertEquals(await readLabels(dir, "labels.txt"), ["cat", "dog", "", "bird"]);
  });
});

// ---------------------------------------------------------------------------------------------------------
// Repositories and versions

Deno.test("selectVersions serves the newest N for latest, every one for all, the listed ones for specific", () => {
  const available = [1, 2, 3, 7];
  assertEquals(selectVersions(undefined, available), [7]);
  assertEquals(selectVersions({}, available), [7]);
  assertEquals(selectVersions({ latest: { num_versions: 1 } }, available), [7]);
  assertEquals(selectVersions({ latest: { num_versions: 2 } }, available), [3, 7]);
  assertEquals(selectVersions({ latest: { num_versions: 10 } }, available), [1, 2, 3, 7]);
  assertEquals(selectVersions({ all: {} }, available), [1, 2, 3, 7]);
  assertEquals(selectVersions({ specific: { versions: [3, 1, 3, 9] } }, available), [1, 3, 9]);
  assertEquals(selectVersions({ specific: { versions: [] } }, available), []);
  assertEquals(selectVersions({ latest: { num_versions: 1 } }, []), []);
  assertEquals(selectVersions({ all: {} }, []), []);
});

Deno.test("listVersions lists numeric folders ascending, ignoring files, names starting with 0 and others", async () => {
  await withTempDir(async (dir) => {
    for (const d of ["1", "2", "10", "007", "0", "abc", "-1", "+4", "1.5", "3a", "99999999999999999999"]) {
      await Deno.mkdir(join(dir, d));
    }
    await Deno.writeTextFile(join(dir, "3"), "a file");
    await Deno.writeTextFile(join(dir, "config.pbtxt"), "");
    await Deno.symlink(join(dir, "abc"), join(dir, "5"));
    await Deno.symlink(join(dir, "3"), join(dir, "6"));
    await Deno.symlink(join(dir, "missing"), join(dir, "8"));
    assertEquals(await listVersions(dir), [1, 2, 5, 10]);
  });
});

Deno.test("listVersions of a model without version folders is empty", async () => {
  await withTempDir(async (dir) => {
    assertEquals(await listVersions(dir), []);
  });
});

Deno.test("versionFileNames lists the file names inside the version folders", async () => {
  await withTempDir(async (dir) => {
    await Deno.mkdir(join(dir, "1"));
    await Deno.mkdir(join(dir, "2"));
    await Deno.writeTextFile(join(dir, "1", "model.onnx"), "");
    await Deno.writeTextFile(join(dir, "2", "model.onnx"), "");
    await Deno.writeTextFile(join(dir, "2", "extra.bin"), "");
    assertEquals((await versionFileNames(dir, [1, 2])).sort(), ["extra.bin", "model.onnx"]);
    assertEquals(await versionFileNames(dir, []), []);
  });
});

Deno.test("scanRepositories finds model folders across repositories and reports duplicates", async () => {
  await withTempDir(async (root) => {
    const a = join(root, "a"), b = join(root, "b"), c = join(root, "c");
    for (const d of [a, b, c]) await Deno.mkdir(d);
    for (const m of ["m1", "m2", ".hidden"]) await Deno.mkdir(join(a, m));
    for (const m of ["m2", "m3"]) await Deno.mkdir(join(b, m));
    await Deno.mkdir(join(c, "m2"));
    await Deno.mkdir(join(root, "elsewhere"));
    await Deno.symlink(join(root, "elsewhere"), join(c, "linked"));
    await Deno.symlink(join(root, "nowhere"), join(c, "dangling"));
    await Deno.writeTextFile(join(a, "README.md"), "not a model");
    const { models, duplicates } = await scanRepositories([a, b, c]);
    assertEquals([...models.keys()].sort(), ["linked", "m1", "m2", "m3"]);
    assertEquals(models.get("m1"), { name: "m1", repository: a, dir: join(a, "m1") });
    assertEquals(models.get("m2"), { name: "m2", repository: a, dir: join(a, "m2") });
    assertEquals(models.get("m3"), { name: "m3", repository: b, dir: join(b, "m3") });
    assertEquals(models.get("linked"), { name: "linked", repository: c, dir: join(c, "linked") });
    assertEquals([...duplicates], [["m2", [a, b, c]]]);
  });
});

Deno.test("scanRepositories of no repositories finds nothing", async () => {
  const { models, duplicates } = await scanRepositories([]);
  assertEquals(models.size, 0);
  assertEquals(duplicates.size, 0);
});

Deno.test("scanRepositories refuses a repository it cannot read", async () => {
  await assertRejects(() => scanRepositories(["/nonexistent/repo"]), ServerError, {
    code: "INVALID_ARG",
    message:
      "Cannot read model repository '/nonexistent/repo': No such file or directory (os error 2): readdir '/nonexistent/repo'",
  });
});

Deno.test("validateConfig refuses ragged batching's batch_input and batch_output as not supported", async () => {
  const cases: [Record<string, unknown>, string][] = [
    [
      {
        max_batch_size: 4,
        batch_input: [{
          kind: "BATCH_ELEMENT_COUNT",
          target_name: ["INDEX"],
          data_type: "TYPE_FP32",
          source_input: ["x"],
        }],
      },
      "Cannot load 'm': batch_input (ragged batching) is not supported by dinfer",
    ],
    [
      { max_batch_size: 4, batch_output: [{ target_name: ["y"], kind: "BATCH_SCATTER_WITH_INPUT_SHAPE" }] },
      "Cannot load 'm': batch_output (ragged batching) is not supported by dinfer",
    ],
  ];
  for (const [extra, message] of cases) {
    await assertRejects(() => validateConfig(prepared(extra), "m", "/x"), ServerError, {
      code: "UNSUPPORTED",
      message,
    });
  }
  // Empty lists (as a config from the model configuration endpoint has them) are fine.
  await validateConfig(prepared({ batch_input: [], batch_output: [] }), "m", "/x");
});
