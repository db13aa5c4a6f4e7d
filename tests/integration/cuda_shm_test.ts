/**
 * The CUDA shared-memory extension through the MOCK libtrtshim: the test allocates "device" memory with the
 * shim, exports its IPC handle, registers it over HTTP and gRPC-shaped JSON as a client would, and runs the
 * `simple` model with inputs read from and outputs written to the regions. The mock's device memory is host
 * memory of this process, so the server (started in this process) opens the handles the test exported.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, startTestServer } from "../helpers.ts";
import { mockShim } from "../_trtshim.ts";
import { openTrtShim, type TrtShim } from "../../ffi/trtshim.ts";

/** Sends a request; answers the status and the JSON body (null when empty). */
async function call(url: string, method = "GET", body?: unknown): Promise<{ status: number; json: unknown }> {
  const r = await fetch(url, {
    method,
    body: body === undefined ? undefined : JSON.stringify(body),
    headers: body === undefined ? undefined : { "content-type": "application/json" },
  });
  const text = await r.text();
  return { status: r.status, json: text === "" ? null : JSON.parse(text) };
}

const path = await mockShim();
const ignore = path === undefined;

const A = Array.from({ length: 16 }, (_, i) => i * 3 - 7);
const B = Array.from({ length: 16 }, (_, i) => 100 - i);

function int32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(Int32Array.from(values).buffer);
}

/** Copies bytes into device memory at an offset, through a stream of the shim. */
async function upload(
  shim: TrtShim,
  dev: Deno.PointerValue,
  offset: number,
  bytes: Uint8Array,
): Promise<void> {
  const host = shim.mallocHost(bytes.byteLength);
  const stream = shim.createStream(0);
  try {
    host.bytes.set(bytes);
    stream.copyToDevice(Deno.UnsafePointer.offset(dev!, offset), host, bytes.byteLength);
    await stream.synchronize();
  } finally {
    stream.close();
    host.close();
  }
}

/** Reads device memory back. */
async function download(
  shim: TrtShim,
  dev: Deno.PointerValue,
  offset: number,
  size: number,
): Promise<Uint8Array> {
  const host = shim.mallocHost(size);
  const stream = shim.createStream(0);
  try {
    stream.copyToHost(host, Deno.UnsafePointer.offset(dev!, offset), size);
    await stream.synchronize();
    return host.bytes.slice();
  } finally {
    stream.close();
    host.close();
  }
}

function b64(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes));
}

Deno.test({
  name: "CUDA shared memory: inputs and outputs of 'simple' in device regions opened by IPC handle",
  ignore,
  async fn(t) {
    const shim = openTrtShim(path!);
    const input = shim.mallocDevice(0, 256);
    const output = shim.mallocDevice(0, 256);
    await upload(shim, input.pointer, 0, int32Bytes(A));
    await upload(shim, input.pointer, 128, int32Bytes(B));
    await using srv = await startTestServer([
      `--model-repository=${EXAMPLES}`,
      "--allow-client-shm=true",
      `--backend-config=tensorrt,shim-path=${path}`,
    ]);
    const register = (name: string, handle: Uint8Array, byteSize: number, device = 0) =>
      call(`${srv.url}/v2/cudasharedmemory/region/${name}/register`, "POST", {
        raw_handle: { b64: b64(handle) },
        device_id: device,
        byte_size: byteSize,
      });

    await t.step("registration by handle, and the status in Triton's shape", async () => {
      assert.deepEqual(await register("in", shim.ipcGetHandle(input), 256), { status: 200, json: null });
      assert.deepEqual(await register("out", shim.ipcGetHandle(output), 256), { status: 200, json: null });
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/status`), {
        status: 200,
        json: [
          { name: "in", device_id: 0, byte_size: 256 },
          { name: "out", device_id: 0, byte_size: 256 },
        ],
      });
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/region/out/status`), {
        status: 200,
        json: [{ name: "out", device_id: 0, byte_size: 256 }],
      });
    });

    await t.step("inputs are read from device memory and outputs written to it", async () => {
      const r = await call(`${srv.url}/v2/models/simple/infer`, "POST", {
        id: "cuda",
        inputs: [
          {
            name: "INPUT0",
            datatype: "INT32",
            shape: [1, 16],
            parameters: { shared_memory_region: "in", shared_memory_byte_size: 64 },
          },
          {
            name: "INPUT1",
            datatype: "INT32",
            shape: [1, 16],
            parameters: {
              shared_memory_region: "in",
              shared_memory_byte_size: 64,
              shared_memory_offset: 128,
            },
          },
        ],
        outputs: [
          { name: "OUTPUT0", parameters: { shared_memory_region: "out", shared_memory_byte_size: 64 } },
          {
            name: "OUTPUT1",
            parameters: {
              shared_memory_region: "out",
              shared_memory_byte_size: 64,
              shared_memory_offset: 64,
            },
          },
        ],
      });
      assert.deepEqual(r, {
        status: 200,
        json: {
          id: "cuda",
          model_name: "simple",
          model_version: "1",
          outputs: [
            {
              name: "OUTPUT0",
              datatype: "INT32",
              shape: [1, 16],
              parameters: { shared_memory_region: "out", shared_memory_byte_size: 64 },
            },
            {
              name: "OUTPUT1",
              datatype: "INT32",
              shape: [1, 16],
              parameters: {
                shared_memory_region: "out",
                shared_memory_byte_size: 64,
                shared_memory_offset: 64,
              },
            },
          ],
        },
      });
      const out = new Int32Array((await download(shim, output.pointer, 0, 128)).buffer);
      assert.deepEqual([...out.subarray(0, 16)], A.map((a, i) => a + B[i]!));
      assert.deepEqual([...out.subarray(16, 32)], A.map((a, i) => a - B[i]!));
    });

    await t.step("bad registrations and accesses are precise errors", async () => {
      assert.deepEqual(await register("in", shim.ipcGetHandle(input), 256), {
        status: 409,
        json: {
          error:
            "Cannot register CUDA shared memory region 'in': a region of that name is already registered",
        },
      });
      assert.deepEqual(await register("short", new Uint8Array(10), 64), {
        status: 400,
        json: {
          error:
            "Cannot register CUDA shared memory region 'short': raw_handle has 10 bytes, a CUDA IPC handle has 64",
        },
      });
      assert.deepEqual(await register("dev", shim.ipcGetHandle(input), 64, 3), {
        status: 400,
        json: {
          error:
            "Cannot register CUDA shared memory region 'dev': device_id 3 is not a GPU of this server (it has 1)",
        },
      });
      const r = await call(`${srv.url}/v2/models/simple/infer`, "POST", {
        inputs: [
          {
            name: "INPUT0",
            datatype: "INT32",
            shape: [1, 16],
            parameters: {
              shared_memory_region: "in",
              shared_memory_byte_size: 64,
              shared_memory_offset: 224,
            },
          },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: B },
        ],
      });
      assert.deepEqual(r, {
        status: 400,
        json: {
          error:
            "Cannot read the inference request for 'simple', input 'INPUT0': offset 224 + 64 bytes is beyond region 'in' of 256 bytes",
        },
      });
      // An output that does not fit its region is refused when the request arrives: the model never runs.
      const count = async () =>
        ((await call(`${srv.url}/v2/models/simple/stats`)).json as {
          model_stats: { inference_count: number }[];
        }).model_stats[0]!.inference_count;
      const before = await count();
      const out = await call(`${srv.url}/v2/models/simple/infer`, "POST", {
        inputs: [
          { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: A },
          { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: B },
        ],
        outputs: [{
          name: "OUTPUT0",
          parameters: { shared_memory_region: "out", shared_memory_byte_size: 64, shared_memory_offset: 200 },
        }],
      });
      assert.deepEqual(out, {
        status: 400,
        json: {
          error: "Cannot write output 'OUTPUT0': offset 200 + 64 bytes is beyond region 'out' of 256 bytes",
        },
      });
      assert.equal(await count(), before);
      // The region names are one namespace with system shared memory.
      const sys = await call(`${srv.url}/v2/systemsharedmemory/region/in/register`, "POST", {
        key: "/whatever",
        offset: 0,
        byte_size: 8,
      });
      assert.deepEqual(sys, {
        status: 409,
        json: {
          error: "Cannot register shared memory region 'in': a region of that name is already registered",
        },
      });
    });

    await t.step("unregistering closes the mappings", async () => {
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/region/in/unregister`, "POST"), {
        status: 200,
        json: null,
      });
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/unregister`, "POST"), {
        status: 200,
        json: null,
      });
      assert.deepEqual(await call(`${srv.url}/v2/cudasharedmemory/status`), { status: 200, json: [] });
    });
    input.close();
    output.close();
  },
});
