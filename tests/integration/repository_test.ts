/**
 * Model repository behaviour over HTTP, on temporary copies of the fixtures: version policies, version
 * folders, model file names, several repositories, label files, auto-complete and explicit model control.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, FIXTURES, startTestServer } from "../helpers.ts";
import { copyDir, get, inferJson, outputsOf } from "./_http.ts";

const X = [1, -2, 0.5, 4];

/** A config of the `versioned` fixture under another name and version policy. */
function versionedConfig(name: string, policy: string, extra = ""): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: 0
${policy}
${extra}
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
`;
}

/** Copies the `versioned` fixture into `repo` as `name` with the given config text. */
async function versioned(repo: string, name: string, config: string): Promise<string> {
  const dir = `${repo}/${name}`;
  await copyDir(`${FIXTURES}/versioned`, dir);
  await Deno.writeTextFile(`${dir}/config.pbtxt`, config);
  return dir;
}

/** Infers `versioned` (or a copy) and returns the version that answered and its output. */
async function multiply(
  base: string,
  model: string,
): Promise<{ status: number; version: unknown; y: unknown }> {
  const r = await inferJson(base, model, {
    inputs: [{ name: "INPUT0", datatype: "FP32", shape: [4], data: X }],
  });
  return { status: r.status, version: r.json?.model_version, y: outputsOf(r)[0]?.data ?? r.json?.error };
}

const times = (n: number) => X.map((x) => x * n);

async function tempRepo(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "dinfer_repo_" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

Deno.test("version policies, version folders and model files", async (t) => {
  await using repo = await tempRepo();
  const r = repo.path;
  await versioned(
    r,
    "latest2",
    versionedConfig("latest2", "version_policy: { latest: { num_versions: 2 } }"),
  );
  await versioned(r, "all", versionedConfig("all", "version_policy: { all: {} }"));
  await versioned(
    r,
    "specific",
    versionedConfig("specific", "version_policy: { specific: { versions: [1, 3] } }"),
  );
  const missing = await versioned(
    r,
    "missing",
    versionedConfig("missing", "version_policy: { specific: { versions: [1, 2, 5] } }"),
  );
  const missingLow = await versioned(
    r,
    "missing_low",
    versionedConfig("missing_low", "version_policy: { specific: { versions: [0, 3] } }"),
  );
  const extra = await versioned(
    r,
    "extra_dirs",
    versionedConfig("extra_dirs", "version_policy: { all: {} }"),
  );
  for (const d of ["abc", "01", "-4", "4.0", ".5", "v6"]) await Deno.mkdir(`${extra}/${d}`);
  await Deno.writeTextFile(`${extra}/7`, "a file, not a folder");
  await copyDir(`${extra}/3`, `${extra}/07`);
  const custom = await versioned(
    r,
    "custom_file",
    versionedConfig("custom_file", "", 'default_model_filename: "times.onnx"'),
  );
  for (const v of [1, 2, 3]) await Deno.rename(`${custom}/${v}/model.onnx`, `${custom}/${v}/times.onnx`);
  await copyDir(`${EXAMPLES}/digits`, `${r}/digits`);
  await Deno.remove(`${r}/digits/labels.txt`);

  await using s = await startTestServer([`--model-repository=${r}`, "--strict-readiness=false"]);

  await t.step("latest 2 serves versions 2 and 3, the default is 3", async () => {
    assert.deepEqual((await get(s.url, "/v2/models/latest2")).json?.versions, ["2", "3"]);
    assert.deepEqual(await multiply(s.url, "latest2"), { status: 200, version: "3", y: times(3) });
    assert.deepEqual(await multiply(s.url, "latest2/versions/2"), { status: 200, version: "2", y: times(2) });
    assert.deepEqual(await multiply(s.url, "latest2/versions/1"), {
      status: 404,
      version: undefined,
      y: "Request for unknown model: 'latest2' version 1 is not found",
    });
  });

  await t.step("all serves every version", async () => {
    assert.deepEqual((await get(s.url, "/v2/models/all")).json?.versions, ["1", "2", "3"]);
    for (const v of [1, 2, 3]) {
      assert.deepEqual(await multiply(s.url, `all/versions/${v}`), {
        status: 200,
        version: String(v),
        y: times(v),
      });
      assert.equal((await get(s.url, `/v2/models/all/versions/${v}/ready`)).status, 200);
    }
    assert.deepEqual(await multiply(s.url, "all"), { status: 200, version: "3", y: times(3) });
  });

  await t.step("specific [1, 3] serves versions 1 and 3 only", async () => {
    assert.deepEqual((await get(s.url, "/v2/models/specific")).json?.versions, ["1", "3"]);
    assert.deepEqual(await multiply(s.url, "specific/versions/1"), {
      status: 200,
      version: "1",
      y: times(1),
    });
    assert.deepEqual(await multiply(s.url, "specific/versions/3"), {
      status: 200,
      version: "3",
      y: times(3),
    });
    assert.equal((await multiply(s.url, "specific/versions/2")).status, 404);
  });

  await t.step("a listed version without its folder is 503 while the others serve", async () => {
    const five = await multiply(s.url, "missing/versions/5");
    assert.equal(five.status, 503);
    assert.equal(
      five.y,
      "Request for unknown model: 'missing' version 5 is not at ready state: " +
        "Cannot load 'missing' version 5: the version folder does not exist",
    );
    assert.equal((await get(s.url, "/v2/models/missing/versions/5/ready")).status, 400);
    assert.deepEqual(await multiply(s.url, "missing/versions/1"), { status: 200, version: "1", y: times(1) });
    assert.deepEqual(await multiply(s.url, "missing"), { status: 200, version: "2", y: times(2) });
    assert.deepEqual((await get(s.url, "/v2/models/missing")).json?.versions, ["1", "2"]);
    assert.ok(missing);

    assert.equal((await multiply(s.url, "missing_low/versions/0")).status, 503);
    assert.deepEqual(await multiply(s.url, "missing_low"), { status: 200, version: "3", y: times(3) });
    assert.ok(missingLow);
  });

  await t.step("folders that are not plain version numbers are ignored", async () => {
    assert.deepEqual((await get(s.url, "/v2/models/extra_dirs")).json?.versions, ["1", "2", "3"]);
    assert.deepEqual(await multiply(s.url, "extra_dirs"), { status: 200, version: "3", y: times(3) });
    assert.equal((await multiply(s.url, "extra_dirs/versions/7")).status, 404);
  });

  await t.step("default_model_filename names the model file of every version", async () => {
    assert.deepEqual(await multiply(s.url, "custom_file"), { status: 200, version: "3", y: times(3) });
    const config = await get(s.url, "/v2/models/custom_file/config");
    assert.equal(config.json?.default_model_filename, "times.onnx");
  });

  await t.step("a missing label file is a load error, reported with the model", async () => {
    const r = await get(s.url, "/v2/models/digits");
    assert.equal(r.status, 404);
    assert.deepEqual(r.json, {
      error: "Request for unknown model: 'digits' has no available versions: Cannot load 'digits': " +
        "output 'probabilities' names label file 'labels.txt', which does not exist in the model folder",
    });
    const infer = await inferJson(s.url, "digits", {
      inputs: [{ name: "input", datatype: "FP32", shape: [1, 64], data: Array(64).fill(0) }],
    });
    assert.equal(infer.status, 404);
    assert.deepEqual(infer.json, r.json);
  });

  await t.step("with --strict-readiness=false the server is ready although models failed", async () => {
    assert.equal((await get(s.url, "/v2/health/live")).status, 200);
    assert.equal((await get(s.url, "/v2/health/ready")).status, 200);
  });
});

Deno.test("several repositories, and a model name found in two of them", async (t) => {
  await using a = await tempRepo();
  await using b = await tempRepo();
  await copyDir(`${EXAMPLES}/simple`, `${a.path}/simple`);
  await copyDir(`${FIXTURES}/identity_int32`, `${a.path}/identity_int32`);
  await copyDir(`${FIXTURES}/add_sub_fp32_nobatch`, `${b.path}/add_sub_fp32_nobatch`);
  await copyDir(`${FIXTURES}/identity_int32`, `${b.path}/identity_int32`);

  await using s = await startTestServer([`--model-repository=${a.path}`, `--model-repository=${b.path}`]);

  await t.step("models of both repositories serve", async () => {
    const simple = await inferJson(s.url, "simple", {
      inputs: ["INPUT0", "INPUT1"].map((name) => ({
        name,
        datatype: "INT32",
        shape: [1, 16],
        data: Array(16).fill(2),
      })),
    });
    assert.equal(simple.status, 200);
    assert.deepEqual(outputsOf(simple)[0]?.data, Array(16).fill(4));
    const addSub = await inferJson(s.url, "add_sub_fp32_nobatch", {
      inputs: ["INPUT0", "INPUT1"].map((name) => ({ name, datatype: "FP32", shape: [4], data: X })),
    });
    assert.equal(addSub.status, 200);
    assert.deepEqual(outputsOf(addSub)[0]?.data, times(2));
  });

  await t.step("the name in both repositories is unavailable with the reason", async () => {
    const r = await get(s.url, "/v2/models/identity_int32");
    assert.equal(r.status, 404);
    assert.deepEqual(r.json, {
      error: "Request for unknown model: 'identity_int32' has no available versions: Cannot load " +
        `'identity_int32': the model is in more than one repository (${a.path}, ${b.path})`,
    });
    assert.equal((await get(s.url, "/v2/models/identity_int32/ready")).status, 400);
    assert.equal((await get(s.url, "/v2/health/ready")).status, 400);
  });
});

Deno.test("--disable-auto-complete-config: a model without config.pbtxt fails to load", async () => {
  await using repo = await tempRepo();
  await copyDir(`${FIXTURES}/no_config_dynamic`, `${repo.path}/no_config_dynamic`);
  await copyDir(`${FIXTURES}/identity_fp32`, `${repo.path}/identity_fp32`);
  await using s = await startTestServer([
    `--model-repository=${repo.path}`,
    "--disable-auto-complete-config",
  ]);
  const r = await get(s.url, "/v2/models/no_config_dynamic");
  assert.equal(r.status, 404);
  assert.deepEqual(r.json, {
    error: "Request for unknown model: 'no_config_dynamic' has no available versions: " +
      "Cannot load 'no_config_dynamic': the config has no inputs",
  });
  assert.equal((await get(s.url, "/v2/models/identity_fp32/ready")).status, 200);
});

Deno.test("--model-control-mode=explicit with --load-model loads only that model", async () => {
  await using s = await startTestServer([
    `--model-repository=${EXAMPLES}`,
    "--model-control-mode=explicit",
    "--load-model=simple",
  ]);
  assert.equal((await get(s.url, "/v2/models/simple/ready")).status, 200);
  assert.equal((await get(s.url, "/v2/health/ready")).status, 200);
  for (const name of ["digits", "simple_string"]) {
    const r = await get(s.url, `/v2/models/${name}`);
    assert.equal(r.status, 404, name);
    assert.deepEqual(r.json, { error: `Request for unknown model: '${name}' is not found` });
    assert.equal((await get(s.url, `/v2/models/${name}/ready`)).status, 400);
  }
});
