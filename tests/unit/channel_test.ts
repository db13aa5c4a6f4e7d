/**
 * The listener threads' shared-memory channel: frames written into a slot read back exactly, whatever the
 * tensors' sizes and the alignment of the bytes they come from.
 * @module
 */

import assert from "node:assert/strict";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import {
  Channel,
  decodeAnswer,
  decodeRequest,
  encodeAnswer,
  encodeRequest,
  SLOT_BYTES,
} from "../../server/frontends/http/_channel.ts";
import type { InferRequest } from "../../server/core/types.ts";

/** `n` bytes counting from `start`, at `offset` bytes into a buffer of their own (as a body's binary part lies). */
function bytesAt(n: number, start: number, offset: number): Uint8Array {
  const out = new Uint8Array(offset + n).subarray(offset);
  for (let i = 0; i < n; i++) out[i] = (start + i) & 255;
  return out;
}

function plain(bytes: Uint8Array): number[] {
  return [...bytes];
}

Deno.test("a request frame reads back exactly: odd sizes, unaligned sources, BYTES, parameters", () => {
  const channel = new Channel(Channel.allocate());
  const words = BytesTensor.fromStrings(["a", "bcd", ""]);
  const request: InferRequest = {
    model: "m",
    version: "2",
    id: "req-1",
    parameters: { sequence_id: 7, flag: true, note: "x" },
    outputs: [{ name: "OUT", classification: 0, parameters: { binary_data: true } }],
    inputs: [
      { name: "A", datatype: "UINT8", shape: [3], data: bytesAt(3, 1, 5) },
      { name: "B", datatype: "FP32", shape: [1, 5], data: bytesAt(20, 50, 3) },
      { name: "S", datatype: "BYTES", shape: [3], data: words },
      { name: "E", datatype: "INT32", shape: [0], data: new Uint8Array(0) },
      { name: "C", datatype: "INT64", shape: [33], data: bytesAt(264, 9, 1) },
    ],
  };
  for (const slot of [0, 5, 127]) {
    assert.equal(
      channel.write(slot, encodeRequest({ request, recvStart: 1.25, recvEnd: 2.5, grpc: true })!),
      true,
    );
    const { header, bytes } = channel.read(slot);
    const back = decodeRequest(header, bytes);
    assert.equal(back.recvStart, 1.25);
    assert.equal(back.recvEnd, 2.5);
    assert.equal(back.grpc, true);
    assert.deepEqual(
      { ...back.request, inputs: [] },
      { ...request, inputs: [] },
    );
    assert.deepEqual(back.request.inputs.map((t) => [t.name, t.datatype, t.shape]), [
      ["A", "UINT8", [3]],
      ["B", "FP32", [1, 5]],
      ["S", "BYTES", [3]],
      ["E", "INT32", [0]],
      ["C", "INT64", [33]],
    ]);
    const data = back.request.inputs.map((t) => t.data);
    assert.deepEqual(plain(data[0] as Uint8Array), plain(bytesAt(3, 1, 0)));
    assert.deepEqual(plain(data[1] as Uint8Array), plain(bytesAt(20, 50, 0)));
    assert.deepEqual((data[2] as BytesTensor).strings(), ["a", "bcd", ""]);
    assert.deepEqual(plain(data[3] as Uint8Array), []);
    assert.deepEqual(plain(data[4] as Uint8Array), plain(bytesAt(264, 9, 0)));
  }
});

Deno.test("an answer frame reads back exactly, and an error as its code and message", () => {
  const channel = new Channel(Channel.allocate());
  const batch = bytesAt(64 * 40, 3, 0);
  const answer = {
    response: {
      model: "m",
      version: "1",
      id: "",
      parameters: { n: 1 },
      outputs: [
        { name: "X", datatype: "BOOL" as const, shape: [1, 3], data: bytesAt(3, 200, 7) },
        {
          name: "Y",
          datatype: "FP32" as const,
          shape: [1, 10],
          data: batch.subarray(40 * 7 + 4, 40 * 8 + 4),
        },
      ],
    },
  };
  assert.equal(channel.write(3, encodeAnswer(answer)!), true);
  const { header, bytes } = channel.read(3);
  const back = decodeAnswer(header, bytes);
  assert.ok("response" in back);
  assert.deepEqual(back.response.outputs.map((t) => [t.name, plain(t.data as Uint8Array)]), [
    ["X", plain(bytesAt(3, 200, 0))],
    ["Y", plain(batch.subarray(284, 324))],
  ]);
  assert.equal(channel.write(3, encodeAnswer({ error: { code: "INVALID_ARG", message: "bad" } })!), true);
  const err = channel.read(3);
  assert.deepEqual(decodeAnswer(err.header, err.bytes), { error: { code: "INVALID_ARG", message: "bad" } });
});

Deno.test("a frame larger than a slot is refused, counting the alignment of its tensors", () => {
  const channel = new Channel(Channel.allocate());
  const frame = (sizes: number[]) => ({
    header: "{}",
    bodies: sizes.map((n) => new Uint8Array(n)),
  });
  // Header at 8, 2 bytes: the body starts at 16.
  assert.equal(channel.write(0, frame([SLOT_BYTES - 16])), true);
  assert.equal(channel.write(0, frame([SLOT_BYTES - 15])), false);
  // Two bodies: the second starts at the next multiple of 8 after the first.
  assert.equal(channel.write(0, frame([1, SLOT_BYTES - 24])), true);
  assert.equal(channel.write(0, frame([1, SLOT_BYTES - 23])), false);
});

Deno.test("a header larger than a slot is refused, and the slot then takes the next frame", () => {
  const channel = new Channel(Channel.allocate());
  const long = JSON.stringify({ e: { code: "INTERNAL", message: "é".repeat(SLOT_BYTES) } });
  assert.equal(channel.write(1, { header: long, bodies: [] }), false);
  assert.equal(channel.write(1, encodeAnswer({ error: { code: "INTERNAL", message: "é" } })!), true);
  const { header, bytes } = channel.read(1);
  assert.deepEqual(decodeAnswer(header, bytes), { error: { code: "INTERNAL", message: "é" } });
});
