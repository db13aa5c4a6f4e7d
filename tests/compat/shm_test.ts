/**
 * The shared-memory extensions against a real server: the official clients and their shared-memory utilities
 * (tests/compat/test_shared_memory.py, run by pytest from the compatibility venv); the server refusing client
 * shared memory without `--allow-client-shm`; CUDA shared memory without a GPU; a region in use by a queued
 * request; and a region whose object was deleted or truncated after registration. POSIX objects are made from
 * Deno as files under /dev/shm (what shm_open does on Linux).
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, FIXTURES, pythonPath, ROOT, startTestServer } from "../helpers.ts";

const SHM_DIR = "/dev/shm";
const DISABLED = "Shared memory is disabled: start the server with --allow-client-shm=true to use it";

/** Runs Python asynchronously, so that the server keeps answering on this event loop meanwhile. */
async function python(args: string[], env: Record<string, string>): Promise<{ code: number; text: string }> {
  const out = await new Deno.Command(pythonPath(), {
    args,
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { PYTHONDONTWRITEBYTECODE: "1", ...env },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, text: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

/** Sends JSON (or nothing) and returns the status and the parsed JSON body (null when empty). */
async function call(url: string, method = "GET", body?: unknown): Promise<{ status: number; json: unknown }> {
  const r = await fetch(url, {
    method,
    ...(body === undefined
      ? {}
      : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
  });
  const text = await r.text();
  return { status: r.status, json: text === "" ? null : JSON.parse(text) };
}

/** A POSIX shared-memory object with a unique name, made as a file under /dev/shm. */
async function shmObject(bytes: Uint8Array): Promise<{ key: string; path: string }> {
  const name = `dinfer_shm_test_${Deno.pid}_${crypto.randomUUID().slice(0, 8)}`;
  const path = `${SHM_DIR}/${name}`;
  await Deno.writeFile(path, bytes, { createNew: true });
  return { key: `/${name}`, path };
}

async function removeIfThere(path: string): Promise<void> {
  try {
    await Deno.remove(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

function int32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(new Int32Array(values).buffer);
}

const A = Array.from({ length: 16 }, (_, i) => i - 5);
const B = Array.from({ length: 16 }, () => 7);

/** A `simple` request whose INPUT0 is read from `region`, OUTPUT0 written to it after INPUT0. */
function simpleRequest(region: string): unknown {
  return {
    inputs: [
      {
        name: "INPUT0",
        datatype: "INT32",
        shape: [1, 16],
        parameters: { shared_memory_region: region, shared_memory_byte_size: 64 },
      },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: B },
    ],
    outputs: [
      {
        name: "OUTPUT0",
        parameters: { shared_memory_region: region, shared_memory_byte_size: 64, shared_memory_offset: 64 },
      },
      { name: "OUTPUT1", parameters: { binary_data: false } },
    ],
  };
}

async function assertStillServing(url: string): Promise<void> {
  const r = await call(`${url}/v2/models/simple/infer`, "POST", {
    inputs: [
      { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: A },
      { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: B },
    ],
  });
  assert.equal(r.status, 200);
  const outputs = (r.json as { outputs: { name: string; data: number[] }[] }).outputs;
  assert.deepEqual(outputs.find((o) => o.name === "OUTPUT1")?.data, A.map((a, i) => a - B[i]!));
}

Deno.test("shared memory with --allow-client-shm=true", async (t) => {
  await using srv = await startTestServer([
    "--allow-client-shm=true",
    "--allow-grpc=true",
    `--model-repository=${EXAMPLES}`,
    `--model-repository=${FIXTURES}`,
    // The fixtures hold a deliberately broken model.
    "--strict-readiness=false",
  ]);
  const port = srv.server.grpcPort;
  assert.ok(port, "the gRPC service did not start");

  await t.step("tritonclient over HTTP and gRPC (tests/compat/test_shared_memory.py)", async () => {
    const { code, text } = await python(
      ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", "tests/compat/test_shared_memory.py"],
      { DINFER_HTTP_URL: srv.httpHost, DINFER_GRPC_URL: `127.0.0.1:${port}` },
    );
    if (code !== 0) console.error(text);
    assert.equal(code, 0, `pytest exited with ${code}; its output is above`);
    assert.match(text, /\d+ passed/);
  });

  await t.step(
    "CUDA registration of a GPU handle answers 503 with the mock shim, and CUDA status is an empty list",
    async () => {
      const r = await call(`${srv.url}/v2/cudasharedmemory/region/gpu/register`, "POST", {
        raw_handle: { b64: btoa("\0".repeat(64)) },
        device_id: 0,
        byte_size: 64,
      });
      assert.deepEqual(r, {
        status: 503,
        json: {
          error:
            "Cannot register CUDA shared memory region 'gpu': CUDA is not available in this server: libtrtshim is the mock build (no CUDA), which cannot open this handle (Not a mock IPC handle)",
        },
      });
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/status`), { status: 200, json: [] });
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/region/gpu/status`), {
        status: 404,
        json: { error: "Unable to find cuda shared memory region: 'gpu'" },
      });
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/unregister`, "POST"), {
        status: 200,
        json: null,
      });
    },
  );

  await t.step("a region whose object was deleted after registration still serves", async () => {
    const obj = await shmObject(new Uint8Array([...int32Bytes(A), ...new Uint8Array(64)]));
    try {
      const reg = await call(`${srv.url}/v2/systemsharedmemory/region/gone/register`, "POST", {
        key: obj.key,
        offset: 0,
        byte_size: 128,
      });
      assert.deepEqual(reg, { status: 200, json: null });
      await Deno.remove(obj.path);
      // The server keeps its open handle: the object lives on until it is unregistered.
      const r = await call(`${srv.url}/v2/models/simple/infer`, "POST", simpleRequest("gone"));
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(r.json, {
        model_name: "simple",
        model_version: "1",
        outputs: [
          {
            name: "OUTPUT0",
            datatype: "INT32",
            shape: [1, 16],
            parameters: {
              shared_memory_region: "gone",
              shared_memory_byte_size: 64,
              shared_memory_offset: 64,
            },
          },
          { name: "OUTPUT1", datatype: "INT32", shape: [1, 16], data: A.map((a, i) => a - B[i]!) },
        ],
      });
      assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/region/gone/status`), {
        status: 200,
        json: [{ name: "gone", key: obj.key, offset: 0, byte_size: 128 }],
      });
      // Registering the deleted key again fails cleanly.
      const again = await call(`${srv.url}/v2/systemsharedmemory/region/again/register`, "POST", {
        key: obj.key,
        offset: 0,
        byte_size: 128,
      });
      assert.deepEqual(again, {
        status: 400,
        json: {
          error:
            `Cannot register shared memory region 'again': cannot open shared-memory object '${obj.key}': ` +
            "no such object",
        },
      });
      await assertStillServing(srv.url);
      assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/region/gone/unregister`, "POST"), {
        status: 200,
        json: null,
      });
    } finally {
      await removeIfThere(obj.path);
    }
  });

  await t.step("a region whose object was truncated after registration errors cleanly", async () => {
    const obj = await shmObject(new Uint8Array([...int32Bytes(A), ...new Uint8Array(64)]));
    try {
      const reg = await call(`${srv.url}/v2/systemsharedmemory/region/short/register`, "POST", {
        key: obj.key,
        byte_size: 128,
      });
      assert.deepEqual(reg, { status: 200, json: null });
      await Deno.truncate(obj.path, 10);
      const r = await call(`${srv.url}/v2/models/simple/infer`, "POST", simpleRequest("short"));
      assert.deepEqual(r, {
        status: 400,
        json: {
          error:
            "Cannot read the inference request for 'simple', input 'INPUT0': shared memory region 'short' has only 10 of 64 bytes",
        },
      });
      await assertStillServing(srv.url);
      // Not left in use.
      assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/unregister`, "POST"), {
        status: 200,
        json: null,
      });
      assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/status`), { status: 200, json: [] });
    } finally {
      await removeIfThere(obj.path);
    }
  });
});

Deno.test("without --allow-client-shm, registration and shared-memory tensors are refused", async () => {
  await using srv = await startTestServer(["--allow-grpc=true", `--model-repository=${EXAMPLES}`]);
  const port = srv.server.grpcPort;
  assert.ok(port, "the gRPC service did not start");
  const obj = await shmObject(new Uint8Array(128));
  try {
    const reg = await call(`${srv.url}/v2/systemsharedmemory/region/r/register`, "POST", {
      key: obj.key,
      offset: 0,
      byte_size: 128,
    });
    assert.deepEqual(reg, { status: 503, json: { error: DISABLED } });
    const cuda = await call(`${srv.url}/v2/cudasharedmemory/region/gpu/register`, "POST", {
      raw_handle: { b64: "" },
      device_id: 0,
      byte_size: 64,
    });
    assert.deepEqual(cuda, { status: 503, json: { error: DISABLED } });
    const infer = await call(`${srv.url}/v2/models/simple/infer`, "POST", simpleRequest("r"));
    assert.deepEqual(infer, { status: 503, json: { error: DISABLED } });
    assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/status`), { status: 200, json: [] });
    await assertStillServing(srv.url);

    const script = `
import sys
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException
c = grpcclient.InferenceServerClient(sys.argv[1])
for register in (lambda: c.register_system_shared_memory("r", sys.argv[2], 128),
                 lambda: c.register_cuda_shared_memory("gpu", b"\\0" * 64, 0, 64)):
    try:
        register()
    except InferenceServerException as e:
        assert e.status() == "StatusCode.UNAVAILABLE", e.status()
        assert e.message() == sys.argv[3], e.message()
    else:
        sys.exit("registration was accepted")
assert len(c.get_system_shared_memory_status().regions) == 0
print("refused")
`;
    const { code, text } = await python(["-c", script, `127.0.0.1:${port}`, obj.key, DISABLED], {});
    assert.equal(code, 0, text);
    assert.match(text, /refused/);
  } finally {
    await removeIfThere(obj.path);
  }
});

const SLOW_BATCH_CONFIG = `name: "slow_batch"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 1000000 preferred_batch_size: [ 8 ] }
`;

Deno.test("a region used by a queued request cannot be unregistered until the response", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_shm_repo_" });
  const x = new Float32Array([1, -2, 0.5]);
  const obj = await shmObject(new Uint8Array([...new Uint8Array(x.buffer), ...new Uint8Array(12)]));
  try {
    await Deno.mkdir(`${repo}/slow_batch/1`, { recursive: true });
    await Deno.copyFile(`${FIXTURES}/no_config_dynamic/1/model.onnx`, `${repo}/slow_batch/1/model.onnx`);
    await Deno.writeTextFile(`${repo}/slow_batch/config.pbtxt`, SLOW_BATCH_CONFIG);
    await using srv = await startTestServer(["--allow-client-shm=true", `--model-repository=${repo}`]);
    const reg = await call(`${srv.url}/v2/systemsharedmemory/region/busy/register`, "POST", {
      key: obj.key,
      offset: 0,
      byte_size: 24,
    });
    assert.deepEqual(reg, { status: 200, json: null });

    // A single request waits ~1 s in the queue for a preferred batch of 8.
    let done = false;
    const pending = call(`${srv.url}/v2/models/slow_batch/infer`, "POST", {
      inputs: [{
        name: "x",
        datatype: "FP32",
        shape: [1, 3],
        parameters: { shared_memory_region: "busy", shared_memory_byte_size: 12 },
      }],
      outputs: [{
        name: "y",
        parameters: { shared_memory_region: "busy", shared_memory_byte_size: 12, shared_memory_offset: 12 },
      }],
    }).finally(() => done = true);
    await new Promise((resolve) => setTimeout(resolve, 300));

    const inUse = { error: "Cannot unregister shared memory region 'busy': 1 running requests use it" };
    assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/region/busy/unregister`, "POST"), {
      status: 503,
      json: inUse,
    });
    assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/unregister`, "POST"), {
      status: 503,
      json: inUse,
    });
    assert.equal(done, false, "the request answered before the unregister attempts");
    assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/status`), {
      status: 200,
      json: [{ name: "busy", key: obj.key, offset: 0, byte_size: 24 }],
    });

    const r = await pending;
    assert.deepEqual(r, {
      status: 200,
      json: {
        model_name: "slow_batch",
        model_version: "1",
        outputs: [{
          name: "y",
          datatype: "FP32",
          shape: [1, 3],
          parameters: { shared_memory_region: "busy", shared_memory_byte_size: 12, shared_memory_offset: 12 },
        }],
      },
    });
    const contents = await Deno.readFile(obj.path);
    assert.deepEqual([...new Float32Array(contents.slice(12, 24).buffer)], [2, -4, 1]);
    assert.deepEqual([...new Float32Array(contents.slice(0, 12).buffer)], [1, -2, 0.5]);

    assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/region/busy/unregister`, "POST"), {
      status: 200,
      json: null,
    });
    assert.deepEqual(await call(`${srv.url}/v2/systemsharedmemory/status`), { status: 200, json: [] });
  } finally {
    await removeIfThere(obj.path);
    await Deno.remove(repo, { recursive: true });
  }
});
