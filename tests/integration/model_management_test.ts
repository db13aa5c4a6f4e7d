/**
 * Model management: the repository extension (index, load, unload) in every model control mode, reloads
 * with config overrides and uploaded files, reloads under load, repository polling, warmup, readiness and
 * exit on start-up failures, and a graceful shutdown of a real process.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { tmpdir } from "node:os";
import { StartupError } from "../../server/server.ts";
import { EXAMPLES, FIXTURES, pythonPath, ROOT, startServerProcess, startTestServer } from "../helpers.ts";
import { type Answer, call, copyDir, get, inferJson, outputsOf } from "./_http.ts";
import { pythonJson } from "./_python.ts";

const X = [1, -2, 0.5, 4];
const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");
const times = (n: number) => X.map((x) => x * n);

const IO = {
  input: [{ name: "INPUT0", data_type: "TYPE_FP32", dims: [4] }],
  output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [4] }],
};

/** A JSON config of the `versioned` fixture with a version policy (and more fields). */
function versionedJson(policy: unknown, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    name: "versioned",
    platform: "onnxruntime_onnx",
    max_batch_size: 0,
    version_policy: policy,
    ...IO,
    ...extra,
  });
}

/** The config.pbtxt of an identity_fp32 copy under another name. */
function identityPbtxt(name: string, maxBatchSize: number, extra = ""): string {
  return `name: "${name}"
platform: "onnxruntime_onnx"
max_batch_size: ${maxBatchSize}
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
${extra}
`;
}

async function tempRepo(): Promise<{ path: string } & AsyncDisposable> {
  const path = await Deno.makeTempDir({ prefix: "dinfer_mm_" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

/** A row of the repository index (rows of models never loaded have only the name). */
interface Row {
  name: string;
  version: string;
  state: string;
  reason: string;
}

/** POSTs JSON to a path. */
function post(base: string, path: string, body: unknown = {}): Promise<Answer> {
  return call(base + path, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

/** The repository index (all rows, or READY ones). */
async function index(base: string, ready?: boolean): Promise<unknown> {
  const r = await post(base, "/v2/repository/index", ready === undefined ? {} : { ready });
  assert.equal(r.status, 200);
  return r.json;
}

/** Loads a model with repository-extension parameters. */
function load(base: string, name: string, parameters?: Record<string, string>): Promise<Answer> {
  return post(base, `/v2/repository/models/${name}/load`, parameters ? { parameters } : {});
}

function unload(base: string, name: string): Promise<Answer> {
  return post(base, `/v2/repository/models/${name}/unload`);
}

/** The index row of a READY version. */
function ready(name: string, version: string): Row {
  return { name, version, state: "READY", reason: "" };
}

/** Infers `versioned` (or a copy): the status, the version that answered, its output or error. */
async function multiply(
  base: string,
  model: string,
  version = "",
): Promise<{ status: number; version: unknown; y: unknown }> {
  const path = version === "" ? model : `${model}/versions/${version}`;
  const r = await inferJson(base, path, {
    inputs: [{ name: "INPUT0", datatype: "FP32", shape: [4], data: X }],
  });
  return { status: r.status, version: r.json?.model_version, y: outputsOf(r)[0]?.data ?? r.json?.error };
}

/** The sorted model folder names of a repository. */
async function folderNames(repo: string): Promise<string[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(repo)) if (e.isDirectory) names.push(e.name);
  return names.sort();
}

/** Copies a fixture into a repository under another name, with a config text. */
async function fixtureCopy(repo: string, fixture: string, name: string, config: string): Promise<string> {
  const dir = `${repo}/${name}`;
  await copyDir(`${FIXTURES}/${fixture}`, dir);
  await Deno.writeTextFile(`${dir}/config.pbtxt`, config);
  return dir;
}

Deno.test("--model-control-mode=none: load and unload answer 400, the index lists every model", async () => {
  await using repo = await tempRepo();
  const r = repo.path;
  await fixtureCopy(r, "identity_fp32", "identity_fp32", identityPbtxt("identity_fp32", 8));
  await fixtureCopy(
    r,
    "versioned",
    "versioned",
    `name: "versioned" platform: "onnxruntime_onnx" max_batch_size: 0 version_policy: { latest: { num_versions: 2 } }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]`,
  );
  await copyDir(`${FIXTURES}/bad_model`, `${r}/bad_model`);
  await using s = await startTestServer([`--model-repository=${r}`, "--strict-readiness=false"]);

  for (const [action, name] of [["load", "versioned"], ["unload", "versioned"], ["load", "nope"]]) {
    const a = await post(s.url, `/v2/repository/models/${name}/${action}`);
    assert.equal(a.status, 400);
    assert.deepEqual(a.json, {
      error: `Cannot ${action} '${name}': explicit model load / unload is not allowed in model control ` +
        "mode 'none'",
    });
  }
  const rows = await index(s.url) as Row[];
  assert.equal(rows.length, 4);
  const bad = rows[0]!;
  assert.deepEqual({ ...bad, reason: "" }, {
    name: "bad_model",
    version: "",
    state: "UNAVAILABLE",
    reason: "",
  });
  assert.ok(
    bad.reason.startsWith(`Cannot load ONNX model '${r}/bad_model/1/model.onnx': `),
    bad.reason,
  );
  assert.deepEqual(rows.slice(1), [
    ready("identity_fp32", "1"),
    ready("versioned", "2"),
    ready("versioned", "3"),
  ]);
  assert.deepEqual(await index(s.url, true), rows.slice(1));
  // Nothing changed: versioned still serves its two versions.
  assert.deepEqual(await multiply(s.url, "versioned", "2"), { status: 200, version: "2", y: times(2) });
  // A 'ready' that is not a boolean is refused.
  const wrong = await post(s.url, "/v2/repository/index", { ready: "yes" });
  assert.equal(wrong.status, 400);
  assert.deepEqual(wrong.json, {
    error: "Cannot read the repository index request: 'ready' must be a boolean",
  });
});

Deno.test("--model-control-mode=explicit: --load-model chooses what loads at start", async (t) => {
  const names = await folderNames(EXAMPLES);
  assert.ok(names.includes("simple"));
  await t.step("nothing without --load-model: index rows with only a name", async () => {
    await using s = await startTestServer([
      `--model-repository=${EXAMPLES}`,
      "--model-control-mode=explicit",
    ]);
    assert.deepEqual(await index(s.url), names.map((name) => ({ name })));
    assert.deepEqual(await index(s.url, true), []);
    assert.equal((await get(s.url, "/v2/models/simple/ready")).status, 400);
    // Nothing is known, so nothing is unready: the server is ready.
    assert.equal((await get(s.url, "/v2/health/ready")).status, 200);
  });
  await t.step("--load-model=simple loads only simple", async () => {
    await using s = await startTestServer([
      `--model-repository=${EXAMPLES}`,
      "--model-control-mode=explicit",
      "--load-model=simple",
    ]);
    assert.deepEqual(
      await index(s.url),
      names.map((name) => (name === "simple" ? ready("simple", "1") : { name })),
    );
    assert.deepEqual(await index(s.url, true), [ready("simple", "1")]);
  });
  await t.step("--load-model=* loads every model", async () => {
    await using s = await startTestServer([
      `--model-repository=${EXAMPLES}`,
      "--model-control-mode=explicit",
      "--load-model=*",
    ]);
    const rows = await index(s.url) as Row[];
    assert.deepEqual(rows.map((r) => r.name), names);
    for (const row of rows) assert.equal(row.state, "READY", row.name);
  });
});

Deno.test("--model-control-mode=explicit: load, unload, reload with config overrides and uploaded files", async (t) => {
  await using s = await startTestServer([
    `--model-repository=${FIXTURES}`,
    "--model-control-mode=explicit",
    "--strict-readiness=false",
  ]);
  const u = s.url;
  const versions = async () => (await get(u, "/v2/models/versioned")).json?.versions;

  await t.step("load and unload over HTTP; an unloaded model answers 404", async () => {
    const l = await load(u, "versioned");
    assert.equal(l.status, 200);
    assert.equal(l.bytes.byteLength, 0);
    assert.deepEqual(await multiply(u, "versioned"), { status: 200, version: "3", y: times(3) });
    assert.deepEqual(await index(u, true), [ready("versioned", "3")]);
    assert.equal((await unload(u, "versioned")).status, 200);
    assert.deepEqual(await multiply(u, "versioned"), {
      status: 404,
      version: undefined,
      y: "Request for unknown model: 'versioned' has no available versions: unloaded",
    });
    assert.equal((await get(u, "/v2/models/versioned/ready")).status, 400);
    const rows = await index(u) as Row[];
    assert.deepEqual(rows.filter((r) => r.name === "versioned"), [
      { name: "versioned", version: "3", state: "UNAVAILABLE", reason: "unloaded" },
    ]);
    assert.deepEqual(await index(u, true), []);
    // Unloading again is harmless.
    assert.equal((await unload(u, "versioned")).status, 200);
  });

  await t.step("unknown models", async () => {
    const l = await load(u, "nope");
    assert.equal(l.status, 400);
    assert.deepEqual(l.json, {
      error:
        "Cannot load 'nope': failed to load 'nope': no model folder of that name in the model repositories",
    });
    // As Triton: unloading a model that is not known succeeds.
    const un = await unload(u, "nope");
    assert.equal(un.status, 200);
    assert.equal(un.bytes.byteLength, 0);
  });

  await t.step("a config override chooses the versions that serve; metadata follows", async () => {
    assert.equal((await load(u, "versioned", { config: versionedJson({ all: {} }) })).status, 200);
    assert.deepEqual(await versions(), ["1", "2", "3"]);
    for (const v of [1, 2, 3]) {
      assert.deepEqual(await multiply(u, "versioned", String(v)), {
        status: 200,
        version: String(v),
        y: times(v),
      });
    }
    assert.deepEqual(await index(u, true), [
      ready("versioned", "1"),
      ready("versioned", "2"),
      ready("versioned", "3"),
    ]);

    assert.equal(
      (await load(u, "versioned", { config: versionedJson({ specific: { versions: [2] } }) })).status,
      200,
    );
    assert.deepEqual(await versions(), ["2"]);
    assert.deepEqual(await multiply(u, "versioned"), { status: 200, version: "2", y: times(2) });
    // The versions the new policy drops stay known, UNAVAILABLE "unloaded", as in Triton's index.
    assert.deepEqual(await multiply(u, "versioned", "3"), {
      status: 503,
      version: undefined,
      y: "Request for unknown model: 'versioned' version 3 is not at ready state: unloaded",
    });
    const config = (await get(u, "/v2/models/versioned/config")).json;
    assert.deepEqual(config?.version_policy, { specific: { versions: [2] } });
    assert.deepEqual(await index(u, true), [ready("versioned", "2")]);
    assert.deepEqual(((await index(u)) as { name: string }[]).filter((r) => r.name === "versioned"), [
      { name: "versioned", version: "1", state: "UNAVAILABLE", reason: "unloaded" },
      ready("versioned", "2"),
      { name: "versioned", version: "3", state: "UNAVAILABLE", reason: "unloaded" },
    ]);

    // As Triton: a load without override of a model that serves from unchanged files leaves it as it is...
    assert.equal((await load(u, "versioned")).status, 200);
    assert.deepEqual(await versions(), ["2"]);
    // ...and after an unload, a load reads the config on disk again (latest 1, version 3).
    assert.equal((await unload(u, "versioned")).status, 200);
    assert.equal((await load(u, "versioned")).status, 200);
    assert.deepEqual(await versions(), ["3"]);
    assert.deepEqual((await get(u, "/v2/models/versioned/config")).json?.version_policy, {
      latest: { num_versions: 1 },
    });
  });

  await t.step("a failed reload answers 400 with the reason and the old version keeps serving", async () => {
    assert.equal(
      (await load(u, "versioned", { config: versionedJson({ specific: { versions: [1] } }) })).status,
      200,
    );
    const bad = await load(u, "versioned", { config: JSON.stringify({ platform: "nope" }) });
    assert.equal(bad.status, 400);
    assert.deepEqual(bad.json, {
      error: "Cannot load 'versioned': failed to load 'versioned', the previous versions keep serving: " +
        "Cannot load 'versioned': " +
        "unknown platform 'nope'",
    });
    const notJson = await load(u, "versioned", { config: "{not json" });
    assert.equal(notJson.status, 400);
    assert.match(
      String(notJson.json?.error),
      /^Cannot load 'versioned': failed to load 'versioned': the 'config' parameter is not valid JSON: /,
    );
    const array = await load(u, "versioned", { config: "[1]" });
    assert.equal(array.status, 400);
    assert.deepEqual(array.json, {
      error:
        "Cannot load 'versioned': failed to load 'versioned': the 'config' parameter must be a JSON object",
    });
    assert.deepEqual(await multiply(u, "versioned"), { status: 200, version: "1", y: times(1) });
    assert.deepEqual(await versions(), ["1"]);
    assert.deepEqual((await get(u, "/v2/models/versioned/config")).json?.version_policy, {
      specific: { versions: [1] },
    });
    assert.deepEqual(await index(u, true), [ready("versioned", "1")]);
  });

  await t.step("load from uploaded files a model that is not on disk", async () => {
    const onnx = await Deno.readFile(`${FIXTURES}/identity_fp32/1/model.onnx`);
    const config = JSON.stringify({
      name: "uploaded",
      platform: "onnxruntime_onnx",
      max_batch_size: 8,
      input: [{ name: "INPUT0", data_type: "TYPE_FP32", dims: [-1] }],
      output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [-1] }],
    });
    const l = await load(u, "uploaded", { config, "file:1/model.onnx": b64(onnx) });
    assert.equal(l.status, 200, JSON.stringify(l.json));
    const r = await inferJson(u, "uploaded", {
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [2, 3], data: [1, 2, 3, 4, 5, 6] }],
    });
    assert.equal(r.status, 200);
    assert.deepEqual(outputsOf(r), [{
      name: "OUTPUT0",
      datatype: "FP32",
      shape: [2, 3],
      data: [1, 2, 3, 4, 5, 6],
    }]);
    assert.deepEqual(
      ((await index(u, true)) as Row[]).filter((x) => x.name === "uploaded"),
      [
        ready("uploaded", "1"),
      ],
    );
    // The uploaded files live in a temporary repository until the model is unloaded.
    const uploadedAt = s.server.registry.entry("uploaded")!.location.repository;
    assert.equal((await Deno.stat(`${uploadedAt}/uploaded/1/model.onnx`)).size, onnx.byteLength);
    assert.equal((await unload(u, "uploaded")).status, 200);
    assert.equal((await get(u, "/v2/models/uploaded/ready")).status, 400);
    await assert.rejects(Deno.stat(uploadedAt), Deno.errors.NotFound);
    // A reload from new files replaces the temporary repository; a failed one leaves nothing behind.
    assert.equal((await load(u, "uploaded", { config, "file:1/model.onnx": b64(onnx) })).status, 200);
    const first = s.server.registry.entry("uploaded")!.location.repository;
    assert.equal((await load(u, "uploaded", { config, "file:1/model.onnx": b64(onnx) })).status, 200);
    const second = s.server.registry.entry("uploaded")!.location.repository;
    assert.notEqual(second, first);
    // The old version's files go once it has finished its requests and unloaded, after the load returned.
    for (let i = 0; i < 500 && await Deno.stat(first).then(() => true, () => false); i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await assert.rejects(Deno.stat(first), Deno.errors.NotFound);
    const broken = await load(u, "uploaded", { config, "file:1/model.onnx": b64(onnx.subarray(0, 10)) });
    assert.equal(broken.status, 400);
    assert.match(
      String(broken.json?.error),
      /^Cannot load 'uploaded': failed to load 'uploaded', the previous versions keep serving: /,
    );
    assert.equal(s.server.registry.entry("uploaded")!.location.repository, second);
    assert.equal((await Deno.stat(`${second}/uploaded/1/model.onnx`)).size, onnx.byteLength);
    assert.equal((await unload(u, "uploaded")).status, 200);
    await assert.rejects(Deno.stat(second), Deno.errors.NotFound);

    // A config that fails before any version is built (an ensemble whose steps are not a list) is a 400, and
    // its files go too.
    const uploads = () =>
      [...Deno.readDirSync(tmpdir())].filter((e) => e.name.startsWith(`dinfer-upload-${Deno.pid}-`)).length;
    const uploadsBefore = uploads();
    for (const step of [1, [null], [1]]) {
      const ensemble = JSON.stringify({
        name: "uploaded_ens",
        platform: "ensemble",
        max_batch_size: 0,
        input: [{ name: "IN", data_type: "TYPE_FP32", dims: [1] }],
        output: [{ name: "OUT", data_type: "TYPE_FP32", dims: [1] }],
        ensemble_scheduling: { step },
      });
      const bad = await load(u, "uploaded_ens", {
        config: ensemble,
        "file:1/notes.txt": b64(new Uint8Array(4)),
      });
      assert.equal(bad.status, 400, `${JSON.stringify(step)}: ${JSON.stringify(bad.json)}`);
      assert.equal(uploads(), uploadsBefore, JSON.stringify(step));
    }

    const noConfig = await load(u, "uploaded", { "file:1/model.onnx": b64(onnx) });
    assert.equal(noConfig.status, 400);
    assert.deepEqual(noConfig.json, {
      error:
        "Cannot load 'uploaded': failed to load 'uploaded': loading from files needs the 'config' parameter too",
    });
    for (const path of ["../evil/1/model.onnx", "1/../../model.onnx", "/etc/model.onnx"]) {
      const evil = await load(u, "evil", { config, [`file:${path}`]: b64(onnx) });
      assert.equal(evil.status, 400, path);
      assert.deepEqual(evil.json, {
        error:
          `Cannot load 'evil': failed to load 'evil': file path '${path}' must be relative, without '..'`,
      });
    }
    assert.equal((await get(u, "/v2/models/evil/ready")).status, 400);
    // The model name becomes a folder name too: it cannot climb out of the upload folder (a bare '..' never
    // reaches the handler over HTTP, URLs normalize it; test_model_repository.py sends it over gRPC).
    for (const name of ["../dinfer_mm_evil", "a/b"]) {
      const evil = await load(u, encodeURIComponent(name), { config, "file:1/model.onnx": b64(onnx) });
      assert.equal(evil.status, 400, name);
      assert.deepEqual(evil.json, {
        error:
          `Cannot load '${name}': failed to load '${name}': a model name must be a folder name, without '/' or '..'`,
      });
    }
    await assert.rejects(Deno.stat(`${tmpdir()}/dinfer_mm_evil`), Deno.errors.NotFound);
  });
});

Deno.test("no request fails while a model reloads under load", async () => {
  await using s = await startTestServer([
    `--model-repository=${FIXTURES}`,
    "--model-control-mode=explicit",
    "--load-model=versioned",
    "--load-model=identity_fp32",
  ]);
  const u = s.url;
  // The generator runs until the reloads are done (at most 10 s); each reload waits for requests after it.
  const deadline = Date.now() + 10_000;
  let done = false;
  const failures: string[] = [];
  const seen = new Map<string, number>();
  let total = 0;
  const loop = async () => {
    while (!done && Date.now() < deadline) {
      const r = await multiply(u, "versioned");
      total++;
      if (r.status !== 200) {
        failures.push(`${r.status} ${JSON.stringify(r.y)}`);
        continue;
      }
      const v = Number(r.version);
      if (![1, 2, 3].includes(v) || JSON.stringify(r.y) !== JSON.stringify(times(v))) {
        failures.push(`version ${r.version} answered ${JSON.stringify(r.y)}`);
      }
      seen.set(String(r.version), (seen.get(String(r.version)) ?? 0) + 1);
    }
  };
  /** Waits at least `ms` and until `n` more requests were answered. */
  const settle = async (ms: number, n: number) => {
    const from = total;
    await new Promise((r) => setTimeout(r, ms));
    while (total < from + n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  };
  const policies: [unknown, string[]][] = [
    [{ all: {} }, ["1", "2", "3"]],
    [{ specific: { versions: [1] } }, ["1"]],
    [{ latest: { num_versions: 2 } }, ["2", "3"]],
    [{ specific: { versions: [2] } }, ["2"]],
    [{ all: {} }, ["1", "2", "3"]],
    [{ specific: { versions: [1] } }, ["1"]],
  ];
  const reloads = async () => {
    await settle(100, 8);
    for (const [policy, expected] of policies) {
      const l = await load(u, "versioned", { config: versionedJson(policy) });
      assert.equal(l.status, 200, JSON.stringify(l.json));
      assert.deepEqual((await get(u, "/v2/models/versioned")).json?.versions, expected);
      // 8 answers: at least 4 of requests sent after the reload (one in flight per loop before it).
      await settle(150, 8);
    }
  };
  const other = async () => {
    for (let i = 0; i < 3; i++) {
      await new Promise((r) => setTimeout(r, 200));
      assert.equal((await unload(u, "identity_fp32")).status, 200);
      assert.equal((await load(u, "identity_fp32")).status, 200);
    }
  };
  const generators = [loop(), loop(), loop(), loop()];
  try {
    await Promise.all([reloads(), other()]);
  } finally {
    done = true;
    await Promise.all(generators);
  }
  assert.deepEqual(failures, []);
  assert.ok(total >= 50, `only ${total} requests`);
  // Each policy's highest version answered: the reloads happened under load.
  assert.deepEqual([...seen.keys()].sort(), ["1", "2", "3"], JSON.stringify([...seen]));
  assert.deepEqual(await index(u, true), [ready("identity_fp32", "1"), ready("versioned", "1")]);
});

Deno.test("--model-control-mode=poll: explicit polls load, reload and unload repository changes", async (t) => {
  await using repo = await tempRepo();
  const r = repo.path;
  await fixtureCopy(r, "identity_fp32", "pi", identityPbtxt("pi", 8));
  await using s = await startTestServer([
    `--model-repository=${r}`,
    "--model-control-mode=poll",
    "--repository-poll-secs=0",
  ]);
  const u = s.url;
  const poll = () => s.server.poller!.pollOnce();
  const inferPi = (batch: number) =>
    inferJson(u, "pi", {
      inputs: [{
        name: "INPUT0",
        datatype: "FP32",
        shape: [batch, 1],
        data: Array.from({ length: batch }, (_, i) => i),
      }],
    });
  assert.deepEqual(await index(u), [ready("pi", "1")]);

  await t.step("load and unload are refused in poll mode", async () => {
    const a = await load(u, "pi");
    assert.equal(a.status, 400);
    assert.deepEqual(a.json, {
      error: "Cannot load 'pi': explicit model load / unload is not allowed in model control mode 'poll'",
    });
  });

  await t.step("a new model folder loads", async () => {
    const dir = `${r}/pv`;
    await Deno.mkdir(`${dir}/1`, { recursive: true });
    await Deno.copyFile(`${FIXTURES}/versioned/1/model.onnx`, `${dir}/1/model.onnx`);
    await Deno.writeTextFile(
      `${dir}/config.pbtxt`,
      `name: "pv" platform: "onnxruntime_onnx" max_batch_size: 0 version_policy: { latest: { num_versions: 2 } }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]`,
    );
    assert.equal((await get(u, "/v2/models/pv/ready")).status, 400);
    await poll();
    assert.deepEqual(await index(u), [ready("pi", "1"), ready("pv", "1")]);
    assert.deepEqual(await multiply(u, "pv"), { status: 200, version: "1", y: times(1) });
  });

  await t.step("a new version folder serves beside the old one (latest 2)", async () => {
    await copyDir(`${FIXTURES}/versioned/2`, `${r}/pv/2`);
    await poll();
    assert.deepEqual((await get(u, "/v2/models/pv")).json?.versions, ["1", "2"]);
    assert.deepEqual(await multiply(u, "pv", "1"), { status: 200, version: "1", y: times(1) });
    assert.deepEqual(await multiply(u, "pv"), { status: 200, version: "2", y: times(2) });
    assert.deepEqual(await index(u), [ready("pi", "1"), ready("pv", "1"), ready("pv", "2")]);
  });

  await t.step("a changed config reloads", async () => {
    assert.equal((await inferPi(3)).status, 200);
    await Deno.writeTextFile(`${r}/pi/config.pbtxt`, identityPbtxt("pi", 2, "# max_batch_size lowered"));
    await poll();
    assert.equal((await get(u, "/v2/models/pi/config")).json?.max_batch_size, 2);
    const big = await inferPi(3);
    assert.equal(big.status, 400);
    assert.deepEqual(big.json, {
      error: "Cannot infer 'pi': inference request batch-size must be <= 2 for 'pi', input 'INPUT0' has 3",
    });
    assert.equal((await inferPi(2)).status, 200);
  });

  await t.step("a broken config keeps the old version serving", async () => {
    await Deno.writeTextFile(`${r}/pi/config.pbtxt`, "this is { not a config");
    await poll();
    assert.equal((await get(u, "/v2/models/pi/config")).json?.max_batch_size, 2);
    const ok = await inferPi(2);
    assert.equal(ok.status, 200);
    assert.deepEqual(outputsOf(ok)[0]?.data, [0, 1]);
    assert.deepEqual(await index(u, true), [ready("pi", "1"), ready("pv", "1"), ready("pv", "2")]);
  });

  await t.step("a polled repository with no change does nothing", async () => {
    await poll();
    assert.deepEqual(await index(u, true), [ready("pi", "1"), ready("pv", "1"), ready("pv", "2")]);
  });

  await t.step("a deleted model folder unloads", async () => {
    await Deno.remove(`${r}/pv`, { recursive: true });
    await poll();
    assert.deepEqual(await index(u), [
      ready("pi", "1"),
      { name: "pv", version: "1", state: "UNAVAILABLE", reason: "unloaded" },
      { name: "pv", version: "2", state: "UNAVAILABLE", reason: "unloaded" },
    ]);
    assert.deepEqual(await multiply(u, "pv"), {
      status: 404,
      version: undefined,
      y: "Request for unknown model: 'pv' has no available versions: unloaded",
    });
    // An unloaded model does not make a strict server unready.
    assert.equal((await get(u, "/v2/health/ready")).status, 200);
  });
});

Deno.test("model_warmup: zero, random and file data; a failing sample fails the load", async (t) => {
  await using repo = await tempRepo();
  const r = repo.path;
  await fixtureCopy(r, "identity_fp32", "identity_fp32", identityPbtxt("identity_fp32", 8));
  const dir = await fixtureCopy(
    r,
    "versioned",
    "versioned",
    await Deno.readTextFile(`${FIXTURES}/versioned/config.pbtxt`),
  );
  await Deno.mkdir(`${dir}/warmup`);
  await Deno.writeFile(`${dir}/warmup/input.bin`, new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer));
  await Deno.writeFile(`${dir}/warmup/short.bin`, new Uint8Array(8));
  await using s = await startTestServer([`--model-repository=${r}`, "--model-control-mode=explicit"]);
  const u = s.url;
  const warmupSample = (
    name: string,
    input: Record<string, unknown>,
    extra: Record<string, unknown> = {},
  ) => ({
    name,
    batch_size: 1,
    count: 1,
    inputs: { INPUT0: { data_type: "TYPE_FP32", dims: [4], ...input } },
    ...extra,
  });

  await t.step("zero_data and random_data samples with batch_size and count load READY", async () => {
    const config = JSON.stringify({
      name: "identity_fp32",
      platform: "onnxruntime_onnx",
      max_batch_size: 8,
      input: [{ name: "INPUT0", data_type: "TYPE_FP32", dims: [-1] }],
      output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [-1] }],
      model_warmup: [
        warmupSample("zeros", { dims: [16], zero_data: true }, { batch_size: 8, count: 3 }),
        warmupSample("random", { dims: [5], random_data: true }, { batch_size: 2, count: 2 }),
      ],
    });
    const l = await load(u, "identity_fp32", { config });
    assert.equal(l.status, 200, JSON.stringify(l.json));
    assert.deepEqual(await index(u, true), [ready("identity_fp32", "1")]);
    const warm = (await get(u, "/v2/models/identity_fp32/config")).json?.model_warmup as { name: string }[];
    assert.deepEqual(warm.map((w) => w.name), ["zeros", "random"]);
    // Warmup runs are not inference statistics.
    const stats = (await get(u, "/v2/models/identity_fp32/stats")).json?.model_stats as Record<
      string,
      unknown
    >[];
    assert.equal(stats[0]?.inference_count, 0);
  });

  await t.step("a sample with the wrong shape fails the load: UNAVAILABLE, 'Cannot warm up'", async () => {
    const config = versionedJson({ latest: { num_versions: 1 } }, {
      model_warmup: [warmupSample("wrong_shape", { dims: [5], zero_data: true })],
    });
    const l = await load(u, "versioned", { config });
    assert.equal(l.status, 400);
    const prefix = "Cannot warm up 'versioned' with sample 'wrong_shape': ";
    assert.ok(
      String(l.json?.error).startsWith(`Cannot load 'versioned': failed to load 'versioned': ${prefix}`),
      String(l.json?.error),
    );
    const rows = (await index(u) as Row[]).filter((x) => x.name === "versioned");
    assert.equal(rows.length, 1);
    assert.deepEqual({ ...rows[0], reason: "" }, {
      name: "versioned",
      version: "3",
      state: "UNAVAILABLE",
      reason: "",
    });
    assert.ok(rows[0]!.reason.startsWith(prefix), rows[0]!.reason);
    assert.equal((await get(u, "/v2/models/versioned/ready")).status, 400);
    assert.equal((await get(u, "/v2/health/ready")).status, 400);
  });

  await t.step("input_data_file is read from <model>/warmup/", async () => {
    const ok = await load(u, "versioned", {
      config: versionedJson({ all: {} }, {
        model_warmup: [warmupSample("file", { input_data_file: "input.bin" })],
      }),
    });
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
    assert.deepEqual(await index(u, true), [
      ready("identity_fp32", "1"),
      ready("versioned", "1"),
      ready("versioned", "2"),
      ready("versioned", "3"),
    ]);
    const short = await load(u, "versioned", {
      config: versionedJson({ all: {} }, {
        model_warmup: [warmupSample("short", { input_data_file: "short.bin" })],
      }),
    });
    assert.equal(short.status, 400);
    const why = "Cannot warm up 'versioned' with sample 'short': 'warmup/short.bin' has 8 bytes, expected 16";
    assert.deepEqual(short.json, {
      error:
        `Cannot load 'versioned': failed to load 'versioned', the previous versions keep serving: ${why}`,
    });
    const missing = await load(u, "versioned", {
      config: versionedJson({ specific: { versions: [2] } }, {
        model_warmup: [warmupSample("missing", { input_data_file: "missing.bin" })],
      }),
    });
    assert.equal(missing.status, 400);
    assert.match(
      String(missing.json?.error),
      /^Cannot load 'versioned': failed to load 'versioned', the previous versions keep serving: Cannot warm up 'versioned' with sample 'missing': cannot read 'warmup\/missing\.bin': /,
    );
    assert.deepEqual((await get(u, "/v2/models/versioned")).json?.versions, ["1", "2", "3"]);
    assert.deepEqual(await multiply(u, "versioned", "1"), { status: 200, version: "1", y: times(1) });
  });
});

Deno.test("--strict-readiness and --exit-on-error with a model that fails to load", async (t) => {
  await using repo = await tempRepo();
  const r = repo.path;
  await copyDir(`${FIXTURES}/bad_model`, `${r}/bad_model`);
  await fixtureCopy(r, "identity_fp32", "identity_fp32", identityPbtxt("identity_fp32", 8));
  await t.step("--strict-readiness=true: not ready; false: ready", async () => {
    for (const [strict, status] of [["true", 400], ["false", 200]] as const) {
      await using s = await startTestServer([`--model-repository=${r}`, `--strict-readiness=${strict}`]);
      assert.equal((await get(s.url, "/v2/health/ready")).status, status, strict);
      assert.equal((await get(s.url, "/v2/health/live")).status, 200);
      assert.equal((await get(s.url, "/v2/models/identity_fp32/ready")).status, 200);
      assert.equal((await get(s.url, "/v2/models/bad_model/ready")).status, 400);
    }
  });
  await t.step("--exit-on-error=true: start-up fails naming the model", async () => {
    let err: unknown;
    try {
      const s = await startTestServer([`--model-repository=${r}`, "--exit-on-error=true"]);
      await s.close();
    } catch (e) {
      err = e;
    }
    assert.ok(err instanceof StartupError, String(err));
    // The reason's end comes from ONNX Runtime; the frame around it is ours.
    const model = `${r}/bad_model/1/model.onnx`;
    const prefix =
      `Cannot start: failed to load all models ('bad_model': Cannot load ONNX model '${model}': `;
    assert.ok(err.message.startsWith(prefix), err.message);
    assert.ok(err.message.endsWith(")"));
    assert.doesNotMatch(err.message, /identity_fp32/);
  });
});

const decoder = new TextDecoder();

/** Whether a new TCP connection to the port is refused. */
async function refused(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return false;
  } catch (err) {
    if (err instanceof Deno.errors.ConnectionRefused) return true;
    throw err;
  }
}

/** A dinfer process serving one slow model: each request waits 1.5 s in the dynamic batcher's queue. */
async function slowServer(repo: string, flags: string[]) {
  await fixtureCopy(
    repo,
    "identity_fp32",
    "slow",
    identityPbtxt(
      "slow",
      8,
      `dynamic_batching { max_queue_delay_microseconds: 1500000 }
instance_group [ { count: 1 kind: KIND_CPU } ]`,
    ),
  );
  const { child, output, url: base, http } = await startServerProcess([
    `--model-repository=${repo}`,
    ...flags,
  ], {
    timeoutMs: 20_000,
  });
  /** Sends one request of batch 1 holding [i, i + 0.5]. */
  const send = (i: number) =>
    inferJson(base, "slow", {
      inputs: [{ name: "INPUT0", datatype: "FP32", shape: [1, 2], data: [i, i + 0.5] }],
    });
  return { child, output, base, http, send };
}

Deno.test("SIGTERM: in-flight requests finish, new connections are refused, the process exits 0", async () => {
  await using repo = await tempRepo();
  const { child, output, http, send } = await slowServer(repo.path, []);
  let answered = 0;
  const inflight = [0, 1, 2].map(async (i) => {
    const answer = await send(i);
    answered++;
    return { i, answer };
  });
  await new Promise((r) => setTimeout(r, 300));
  child.kill("SIGTERM");
  await new Promise((r) => setTimeout(r, 300));
  // The batcher holds the requests for 1.5 s: none has been answered yet, all are in flight.
  assert.equal(answered, 0);
  assert.equal(await refused(http), true, "a new connection after SIGTERM is accepted");
  const answers = await Promise.all(inflight);
  for (const { i, answer } of answers) {
    assert.equal(answer.status, 200, JSON.stringify(answer.json));
    assert.deepEqual(outputsOf(answer), [{
      name: "OUTPUT0",
      datatype: "FP32",
      shape: [1, 2],
      data: [i, i + 0.5],
    }]);
  }
  const out = await output;
  assert.equal(out.signal, null);
  assert.equal(out.code, 0, decoder.decode(out.stderr));
  assert.match(
    decoder.decode(out.stdout) + decoder.decode(out.stderr),
    /Shutting down: finishing in-flight requests/,
  );
});

Deno.test({
  name: "SIGTERM with --exit-timeout-secs=0 exits 0 at once, dropping the queued requests",
  fn: async () => {
    await using repo = await tempRepo();
    const { child, output, send } = await slowServer(repo.path, ["--exit-timeout-secs=0"]);
    const inflight = [0, 1].map((i) => send(i).then((a) => String(a.status), (e: Error) => e.name));
    await new Promise((r) => setTimeout(r, 300));
    const signalled = performance.now();
    child.kill("SIGTERM");
    const out = await output;
    const ms = performance.now() - signalled;
    const stderr = decoder.decode(out.stderr);
    assert.equal(out.signal, null);
    assert.equal(out.code, 0, stderr);
    // The requests would wait 1.5 s in the queue; the process does not wait for them.
    assert.ok(ms < 1000, `exited ${ms} ms after SIGTERM`);
    assert.match(stderr, /In-flight requests did not finish within --exit-timeout-secs=0/);
    assert.deepEqual(await Promise.all(inflight), ["TypeError", "TypeError"]);
  },
});

Deno.test("tritonclient.http and .grpc: load_model, unload_model, get_model_repository_index", async () => {
  await using s = await startTestServer([
    `--model-repository=${FIXTURES}`,
    "--model-control-mode=explicit",
    "--allow-grpc=true",
  ]);
  assert.ok(s.server.grpcPort, "the gRPC service did not start");
  // Asynchronous: the server answers on this event loop while pytest runs.
  const out = await new Deno.Command(pythonPath(), {
    args: ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", "tests/compat/test_model_repository.py"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: {
      DINFER_HTTP_URL: s.httpHost,
      DINFER_GRPC_URL: `127.0.0.1:${s.server.grpcPort}`,
      PYTHONDONTWRITEBYTECODE: "1",
    },
  }).output();
  const text = decoder.decode(out.stdout) + decoder.decode(out.stderr);
  if (out.code !== 0) console.error(text);
  assert.equal(out.code, 0, `pytest exited with ${out.code}; its output is above`);
  assert.match(text, /\b12 passed\b/);
});

Deno.test("explicit mode: loading an ensemble loads its composing models; unload_dependents unloads them", async () => {
  const ENSEMBLES = `${ROOT}tests/fixtures/ensembles`;
  await using s = await startTestServer([
    `--model-repository=${FIXTURES}`,
    `--model-repository=${ENSEMBLES}`,
    "--model-control-mode=explicit",
    "--strict-readiness=false",
    "--allow-grpc=true",
  ]);
  const state = async (name: string) => {
    const rows = await index(s.url) as { name: string; state?: string; reason?: string }[];
    const row = rows.find((r) => r.name === name);
    return row?.state ? `${row.state}${row.reason ? ` (${row.reason})` : ""}` : "not loaded";
  };
  assert.equal(await state("add_sub_fp32_nobatch"), "not loaded");
  const loaded = await load(s.url, "ens_add_sub");
  assert.equal(loaded.status, 200, JSON.stringify(loaded.json));
  assert.equal(await state("add_sub_fp32_nobatch"), "READY");
  const r = await inferJson(s.url, "ens_add_sub", {
    inputs: [
      { name: "IN0", datatype: "FP32", shape: [4], data: [1, 2, 3, 4] },
      { name: "IN1", datatype: "FP32", shape: [4], data: [0.5, 0.5, 0.5, 0.5] },
    ],
    outputs: [{ name: "OUT_A" }],
  });
  assert.equal(r.status, 200, JSON.stringify(r.json));
  assert.deepEqual(outputsOf(r).map((o) => o.data), [[2, 4, 6, 8]]);

  // A plain unload leaves the composing model serving.
  assert.equal((await unload(s.url, "ens_add_sub")).status, 200);
  assert.equal(await state("ens_add_sub"), "UNAVAILABLE (unloaded)");
  assert.equal(await state("add_sub_fp32_nobatch"), "READY");

  // With unload_dependents the composing model goes too.
  assert.equal((await load(s.url, "ens_add_sub")).status, 200);
  const bad = await post(s.url, "/v2/repository/models/ens_add_sub/unload", {
    parameters: { unload_dependents: "yes" },
  });
  assert.equal(bad.status, 400);
  assert.deepEqual(bad.json, {
    error: "Cannot unload 'ens_add_sub': parameter 'unload_dependents' must be a boolean",
  });
  const gone = await post(s.url, "/v2/repository/models/ens_add_sub/unload", {
    parameters: { unload_dependents: true },
  });
  assert.equal(gone.status, 200, JSON.stringify(gone.json));
  assert.equal(await state("ens_add_sub"), "UNAVAILABLE (unloaded)");
  assert.equal(await state("add_sub_fp32_nobatch"), "UNAVAILABLE (unloaded)");

  // The same over gRPC with tritonclient: load_model, then unload_model(unload_dependents=True).
  const seen = await pythonJson(
    `
import json, os, tritonclient.grpc as g
c = g.InferenceServerClient(os.environ["URL"])
c.load_model("ens_add_sub")
a = [c.is_model_ready("ens_add_sub"), c.is_model_ready("add_sub_fp32_nobatch")]
c.unload_model("ens_add_sub", unload_dependents=True)
b = [c.is_model_ready("ens_add_sub"), c.is_model_ready("add_sub_fp32_nobatch")]
print(json.dumps([a, b]))
`,
    { URL: `127.0.0.1:${s.server.grpcPort}` },
  );
  assert.deepEqual(seen, [[true, true], [false, false]]);

  // As Triton: a composing model loaded on its own stays when the ensemble goes with unload_dependents...
  assert.equal((await load(s.url, "add_sub_fp32_nobatch")).status, 200);
  assert.equal((await load(s.url, "ens_add_sub")).status, 200);
  const kept = await post(s.url, "/v2/repository/models/ens_add_sub/unload", {
    parameters: { unload_dependents: true },
  });
  assert.equal(kept.status, 200, JSON.stringify(kept.json));
  assert.deepEqual(
    [await state("ens_add_sub"), await state("add_sub_fp32_nobatch")],
    ["UNAVAILABLE (unloaded)", "READY"],
  );
  // ...and unloading a composing model unloads the ensembles that use it.
  assert.equal((await load(s.url, "ens_add_sub")).status, 200);
  assert.equal((await get(s.url, "/v2/models/ens_add_sub/ready")).status, 200);
  assert.equal((await unload(s.url, "add_sub_fp32_nobatch")).status, 200);
  assert.equal((await get(s.url, "/v2/models/ens_add_sub/ready")).status, 400);
  assert.deepEqual(
    [await state("ens_add_sub"), await state("add_sub_fp32_nobatch")],
    ["UNAVAILABLE (unloaded)", "UNAVAILABLE (unloaded)"],
  );
});

Deno.test("once the server has stopped, a load still asked for (a poller's late change) starts nothing", async () => {
  const s = await startTestServer([`--model-repository=${EXAMPLES}`, "--model-control-mode=explicit"]);
  await s.close();
  await assert.rejects(s.server.registry.reloadModel("simple"), {
    code: "UNAVAILABLE",
    message: "Cannot change 'simple': the server is stopping",
  });
  assert.equal(s.server.registry.isReady("simple", ""), false);
});
