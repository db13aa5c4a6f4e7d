/**
 * The FFI layer (ffi/trtshim.ts) against the MOCK libtrtshim: ABI, devices, streams, memory, engines,
 * contexts, errors and handle disposal.
 * @module
 */

import assert from "node:assert/strict";
import { ServerError } from "../../server/core/errors.ts";
import { openTrtShim, Status, type TrtShim, TrtShimError } from "../../ffi/trtshim.ts";
import { mockShim } from "../_trtshim.ts";

const path = await mockShim();
const ignore = path === undefined;

function shim(): TrtShim {
  return openTrtShim(path!);
}

const enc = new TextEncoder();

const ADD_SUB = enc.encode(`trtshim-mock-engine 1
input INPUT0 INT32 -1,4
input INPUT1 INT32 -1,4
output OUTPUT0 INT32 -1,4
output OUTPUT1 INT32 -1,4
op add INPUT0 INPUT1 OUTPUT0
op sub INPUT0 INPUT1 OUTPUT1
profile 0 INPUT0 1,4 2,4 8,4
profile 0 INPUT1 1,4 2,4 8,4
`);

function assertShimError(fn: () => unknown, status: number, code: string, message: string): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof TrtShimError && err instanceof ServerError);
    assert.equal(err.status, status);
    assert.equal(err.code, code);
    assert.equal(err.message, message);
    return true;
  });
}

Deno.test({ name: "libtrtshim reports ABI version 1 and the mock build", ignore }, () => {
  const s = shim();
  assert.equal(s.abiVersion(), 1);
  assert.equal(s.buildKind(), "mock");
  assert.equal(openTrtShim(path!), s);
});

Deno.test({ name: "the mock device has a name, memory, a compute capability and a UUID", ignore }, () => {
  const s = shim();
  assert.equal(s.deviceCount(), 1);
  const p = s.deviceProperties(0);
  assert.equal(p.name, "dinfer mock device");
  assert.equal(p.totalMemory, 16 * 2 ** 30);
  assert.match(p.computeCapability, /^\d+\.\d+$/);
  assert.equal(p.uuid, "GPU-64696e66-6572-2d6d-6f63-6b2d64657600");
  const before = s.memoryInfo(0);
  assert.equal(before.total, 16 * 2 ** 30);
  using buf = s.mallocDevice(0, 4096);
  assert.equal(s.memoryInfo(0).free, before.free - 4096);
  assert.equal(buf.size, 4096);
  assert.equal(s.utilization(0), 0);
});

Deno.test({ name: "a stream copies host to device and back in order, timed by events", ignore }, async () => {
  const s = shim();
  using stream = s.createStream(0);
  using host = s.mallocHost(256);
  using back = s.mallocHost(256);
  using dev = s.mallocDevice(0, 256);
  using start = s.createEvent(0);
  using end = s.createEvent(0);
  host.bytes.set(Array.from({ length: 256 }, (_, i) => i));
  start.record(stream);
  stream.copyToDevice(dev, host, 256);
  stream.copyToHost(back, dev, 256);
  end.record(stream);
  await end.synchronize();
  assert.equal(end.query(), true);
  assert.ok(end.elapsedSince(start) >= 0);
  await stream.synchronize();
  assert.deepEqual(back.bytes, host.bytes);
});

Deno.test({ name: "an IPC handle of a device allocation opens to the same memory", ignore }, async () => {
  const s = shim();
  using dev = s.mallocDevice(0, 16);
  const handle = s.ipcGetHandle(dev);
  assert.equal(handle.byteLength, 64);
  using mapping = s.ipcOpen(0, handle);
  assert.equal(Deno.UnsafePointer.value(mapping.pointer), Deno.UnsafePointer.value(dev.pointer));
  using stream = s.createStream(0);
  using host = s.mallocHost(16);
  host.bytes.fill(7);
  stream.copyToDevice(mapping.pointer, host, 16);
  using back = s.mallocHost(16);
  stream.copyToHost(back, dev, 16);
  await stream.synchronize();
  assert.deepEqual([...back.bytes], new Array(16).fill(7));
});

Deno.test({ name: "an engine describes its I/O tensors and optimisation profiles", ignore }, async () => {
  const s = shim();
  using engine = await s.deserialize(0, ADD_SUB);
  assert.deepEqual(engine.io(), [
    { name: "INPUT0", mode: "input", datatype: "INT32", dims: [-1, 4] },
    { name: "INPUT1", mode: "input", datatype: "INT32", dims: [-1, 4] },
    { name: "OUTPUT0", mode: "output", datatype: "INT32", dims: [-1, 4] },
    { name: "OUTPUT1", mode: "output", datatype: "INT32", dims: [-1, 4] },
  ]);
  assert.equal(engine.profileCount(), 1);
  assert.deepEqual(engine.profileShapes(0, "INPUT1"), { min: [1, 4], opt: [2, 4], max: [8, 4] });
});

Deno.test({ name: "a context runs add and sub on its stream with a dynamic batch", ignore }, async () => {
  const s = shim();
  using engine = await s.deserialize(0, ADD_SUB);
  using stream = s.createStream(0);
  using ctx = engine.createContext(0, stream);
  using host = s.mallocHost(4 * 12 * 4);
  using dev = s.mallocDevice(0, 4 * 12 * 4);
  const ints = new Int32Array(host.bytes.buffer, host.bytes.byteOffset, 48);
  for (let i = 0; i < 12; i++) {
    ints[i] = i;
    ints[12 + i] = 10;
  }
  const at = (k: number) => Deno.UnsafePointer.offset(dev.pointer!, k * 48);
  stream.copyToDevice(dev, host, 96);
  ctx.setInputShape("INPUT0", [3, 4]);
  ctx.setInputShape("INPUT1", [3, 4]);
  assert.deepEqual(ctx.tensorShape("OUTPUT1"), [3, 4]);
  ctx.setTensorAddress("INPUT0", at(0));
  ctx.setTensorAddress("INPUT1", at(1));
  ctx.setTensorAddress("OUTPUT0", at(2));
  ctx.setTensorAddress("OUTPUT1", at(3));
  await ctx.enqueue();
  stream.copyToHost(host, dev, 4 * 48);
  await stream.synchronize();
  assert.deepEqual([...ints.subarray(24, 36)], Array.from({ length: 12 }, (_, i) => i + 10));
  assert.deepEqual([...ints.subarray(36, 48)], Array.from({ length: 12 }, (_, i) => i - 10));
});

Deno.test({ name: "failures carry the shim's exact message and a core error code", ignore }, async () => {
  const s = shim();
  assertShimError(
    () => s.deviceProperties(3),
    Status.NOT_FOUND,
    "INVALID_ARG",
    "Device 3 does not exist (1 devices)",
  );
  assertShimError(
    () => s.createStream(-1),
    Status.NOT_FOUND,
    "INVALID_ARG",
    "Device -1 does not exist (1 devices)",
  );
  // A nonblocking call reports through its own error buffer (it ran on another thread).
  await assert.rejects(
    s.deserialize(0, enc.encode("trtshim-mock-engine 1\ninput A FP32 4\nop relu A B\n")),
    (err: unknown) => {
      assert.ok(err instanceof TrtShimError);
      assert.equal(err.code, "INVALID_ARG");
      assert.equal(
        err.message,
        "Cannot deserialize mock engine: line 3: unknown op 'relu' (expected identity, add, sub or matmul)",
      );
      return true;
    },
  );
  await assert.rejects(s.deserialize(0, new Uint8Array([0x7f, 0x45, 0x4c, 0x46])), {
    message: "Cannot deserialize mock engine: line 1: expected the header 'trtshim-mock-engine 1'",
  });
  using engine = await s.deserialize(0, ADD_SUB);
  using stream = s.createStream(0);
  using ctx = engine.createContext(0, stream);
  assertShimError(
    () => ctx.setInputShape("INPUT0", [9, 4]),
    Status.OUT_OF_RANGE,
    "INVALID_ARG",
    "Input 'INPUT0' shape [9,4] is outside optimisation profile 0: min [1,4], max [8,4]",
  );
  assertShimError(
    () => ctx.setInputShape("NOPE", [1, 4]),
    Status.NOT_FOUND,
    "INVALID_ARG",
    "Unknown tensor 'NOPE'",
  );
  assertShimError(
    () => engine.createContext(2, stream),
    Status.NOT_FOUND,
    "INVALID_ARG",
    "Optimisation profile 2 does not exist (1 profiles)",
  );
  await assert.rejects(ctx.enqueue(), { message: "Cannot enqueue: the shape of input 'INPUT0' is not set" });
  assertShimError(
    () => s.mallocDevice(0, 2 ** 40),
    Status.OUT_OF_MEMORY,
    "UNAVAILABLE",
    "Cannot allocate 1099511627776 bytes on device 0: out of device memory",
  );
  assertShimError(
    () => s.ipcOpen(0, new Uint8Array(64)),
    Status.INVALID_ARGUMENT,
    "INVALID_ARG",
    "Not a mock IPC handle",
  );
});

Deno.test({ name: "handles close once, deterministically, and refuse use afterwards", ignore }, async () => {
  const s = shim();
  const before = s.memoryInfo(0).free;
  const stream = s.createStream(0);
  {
    using dev = s.mallocDevice(0, 1000);
    assert.equal(s.memoryInfo(0).free, before - 1000);
    assert.equal(dev.closed, false);
  }
  assert.equal(s.memoryInfo(0).free, before);
  stream.close();
  stream.close();
  assert.equal(stream.closed, true);
  await assert.rejects(stream.synchronize(), { name: "ServerError", message: "Stream is already closed" });
  const host = s.mallocHost(8);
  host.close();
  assert.throws(() => host.bytes, { message: "HostBuffer is already closed" });
});
