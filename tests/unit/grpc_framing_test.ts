/**
 * The gRPC frontend's framed responses: the response encoded in parts (a large output not copied), the frame
 * prefix, and the changes to grpc-js's server call that send a framed message without copying it and release
 * the chunks of a received one.
 * @module
 */

import { assert, assertEquals } from "../assert.ts";
import { Buffer } from "node:buffer";
import { EventEmitter } from "node:events";
import * as grpc from "@grpc/grpc-js";
import { BaseServerInterceptingCall } from "@grpc/grpc-js/build/src/server-interceptors.js";
import { StreamDecoder } from "@grpc/grpc-js/build/src/stream-decoder.js";
import { lookupType } from "../../server/core/protos.ts";
import type { InferResponse } from "../../server/core/types.ts";
import {
  BACKLOG_BYTES,
  FRAME_PREFIX,
  framedCodec,
  FramedMessage,
  grpcJsPatchable,
  installGrpcJsPatches,
  releaseHandle,
  streamHandle,
  WRITE_PIECE,
} from "../../server/frontends/grpc/framing.ts";
import { encodeModelInferResponseParts, OWN_PART_BYTES } from "../../server/frontends/grpc/infer_codec.ts";

function bytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (i * 7 + seed) % 251;
  return out;
}

function joined(parts: readonly Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}

/** A response with a small output, a large one (a part of its own) and another small one. */
function response(large: Uint8Array): InferResponse {
  return {
    model: "m",
    version: "2",
    id: "x",
    outputs: [
      { name: "A", datatype: "UINT8", shape: [3], data: new Uint8Array([1, 2, 3]) },
      { name: "B", datatype: "UINT8", shape: [large.byteLength], data: large },
      { name: "C", datatype: "UINT8", shape: [2], data: new Uint8Array([9, 8]) },
    ],
    parameters: { n: 1 },
  };
}

function decoded(type: string, message: Uint8Array): unknown {
  const t = lookupType(type);
  return t.toObject(t.decode(message), { longs: Number, oneofs: false });
}

Deno.test("a response encodes in parts: a large output is its own part, not a copy, the rest joined around it", () => {
  const large = bytes(OWN_PART_BYTES, 1);
  const parts = encodeModelInferResponseParts(response(large), undefined, { reserve: FRAME_PREFIX });
  assertEquals(parts.length, 3);
  assert(parts[1] === large, "not the same object");
  assertEquals([...parts[0]!.subarray(0, FRAME_PREFIX)], [0, 0, 0, 0, 0]);
  const message = joined(parts).subarray(FRAME_PREFIX);
  assertEquals(decoded("ModelInferResponse", message), {
    model_name: "m",
    model_version: "2",
    id: "x",
    parameters: { n: { int64_param: 1 } },
    outputs: [
      { name: "A", datatype: "UINT8", shape: [3] },
      { name: "B", datatype: "UINT8", shape: [OWN_PART_BYTES] },
      { name: "C", datatype: "UINT8", shape: [2] },
    ],
    raw_output_contents: [new Uint8Array([1, 2, 3]), large, new Uint8Array([9, 8])],
  });
  // The same bytes as protobufjs writes for the whole message.
  const type = lookupType("ModelInferResponse");
  const whole = type.encode(
    type.fromObject(decoded("ModelInferResponse", message) as Record<string, unknown>),
  )
    .finish();
  assertEquals(message, new Uint8Array(whole));
});

Deno.test("a response whose outputs are all small is one part; shared-memory outputs have empty contents", () => {
  const parts = encodeModelInferResponseParts(
    response(bytes(OWN_PART_BYTES - 1, 2)),
    new Map([["C", { shared_memory_region: "r" }]]),
  );
  assertEquals(parts.length, 1);
  const back = decoded("ModelInferResponse", parts[0]!) as { raw_output_contents: Uint8Array[] };
  assertEquals(back.raw_output_contents.map((r) => r.byteLength), [3, OWN_PART_BYTES - 1, 0]);
});

Deno.test("a stream's response is a ModelStreamInferResponse carrying the response and the added parameters", () => {
  const large = bytes(OWN_PART_BYTES + 5, 3);
  const parts = encodeModelInferResponseParts(response(large), undefined, {
    reserve: FRAME_PREFIX,
    stream: true,
    parameters: { triton_final_response: true },
  });
  assert(parts[1] === large, "not the same object");
  const back = decoded("ModelStreamInferResponse", joined(parts).subarray(FRAME_PREFIX)) as {
    infer_response: { parameters: unknown; raw_output_contents: Uint8Array[] };
  };
  assertEquals(back.infer_response.parameters, {
    n: { int64_param: 1 },
    triton_final_response: { bool_param: true },
  });
  assertEquals(back.infer_response.raw_output_contents[1], large);
});

Deno.test("outputs that are parts of their own may be last, or follow each other, with no empty part", () => {
  const a = bytes(OWN_PART_BYTES, 4), b = bytes(OWN_PART_BYTES + 1, 5);
  const plain = (outputs: Uint8Array[]): InferResponse => ({
    model: "m",
    version: "1",
    id: "",
    parameters: {},
    outputs: outputs.map((data, i) => ({ name: `O${i}`, datatype: "UINT8", shape: [data.byteLength], data })),
  });
  const parts = encodeModelInferResponseParts(plain([new Uint8Array([7]), a, b]), undefined);
  assertEquals(parts.length, 4);
  assert(parts[1] === a && parts[3] === b, "not the same objects");
  assertEquals(parts[2]!.byteLength, 1 + 3); // b's tag and length
  const back = decoded("ModelInferResponse", joined(parts)) as { raw_output_contents: Uint8Array[] };
  assertEquals(back.raw_output_contents, [new Uint8Array([7]), a, b]);
});

Deno.test("responses of the same form share their encoded fields; any difference is encoded anew", () => {
  const plain = (model: string, version: string, shape: number[], id = ""): InferResponse => ({
    model,
    version,
    id,
    parameters: {},
    outputs: [{ name: "OUT", datatype: "INT32", shape, data: new Uint8Array(4 * shape[0]!).fill(shape[0]!) }],
  });
  const cases: [InferResponse, Record<string, unknown>][] = [];
  for (
    const [model, version, n, id] of [["ab", "1", 1, ""], ["a", "b1", 1, ""], ["ab", "1", 2, ""], [
      "ab",
      "1",
      1,
      "q",
    ]] as const
  ) {
    cases.push([plain(model, version, [n], id), {
      model_name: model,
      model_version: version,
      ...(id ? { id } : {}),
      outputs: [{ name: "OUT", datatype: "INT32", shape: [n] }],
      raw_output_contents: [new Uint8Array(4 * n).fill(n)],
    }]);
  }
  // Twice each, in turn: the second time from the kept fields.
  for (const round of [0, 1]) {
    for (const [r, expected] of cases) {
      const parts = encodeModelInferResponseParts(r, undefined, { reserve: FRAME_PREFIX });
      assertEquals(parts.length, 1, `round ${round}`);
      assertEquals(
        decoded("ModelInferResponse", parts[0]!.subarray(FRAME_PREFIX)),
        expected,
        `round ${round}`,
      );
    }
  }
});

Deno.test("a framed message carries gRPC's prefix, and its codec serializes it without the prefix", () => {
  const framed = new FramedMessage([new Uint8Array([7, 7, 7, 7, 7, 1, 2]), new Uint8Array([3, 4, 5])]);
  assertEquals(framed.byteLength, 10);
  assertEquals([...framed.frame()], [0, 0, 0, 0, 5, 1, 2, 3, 4, 5]);
  assertEquals([...framed.message()], [1, 2, 3, 4, 5]);
  const one = new Uint8Array([9, 9, 9, 9, 9, 6]);
  const single = new FramedMessage([one]);
  assert(single.frame().buffer === one.buffer, "not the same object");
  const codec = framedCodec(lookupType("ServerLiveResponse"));
  assertEquals([...codec.serialize(framed as unknown as Record<string, unknown>)], [1, 2, 3, 4, 5]);
  assertEquals([...codec.serialize({ live: true })], [8, 1]);
});

Deno.test("the grpc-js changes apply to the pinned 1.14 only, and install", () => {
  assert(grpcJsPatchable("1.14.7"));
  assert(!grpcJsPatchable("1.15.0"));
  assert(!grpcJsPatchable("2.14.0"));
  assert(installGrpcJsPatches());
  assert(installGrpcJsPatches());
});

/** A stand-in for grpc-js's server call, with the members the changes use. */
class FakeCall {
  written: Uint8Array[] = [];
  statuses: { code: number; details: string }[] = [];
  sent = 0;
  cancelled = false;
  metadataSent = false;
  maxSendMessageSize = -1;
  connection = Object.assign(new EventEmitter(), { writableLength: 0, destroyed: false });
  stream = {
    write: (chunk: Uint8Array, callback: (error?: Error | null) => void) => {
      this.written.push(chunk);
      setTimeout(() => callback(this.failWrites ? new Error("gone") : null), 0);
      return true;
    },
    session: { socket: this.connection },
  };
  failWrites = false;
  handler = { serialize: (v: unknown) => Buffer.from(String(v)) };
  callEventTracker = { addMessageSent: () => this.sent++ };
  checkCancelled() {
    return this.cancelled;
  }
  maybeSendMetadata() {
    this.metadataSent = true;
  }
  sendStatus(s: { code: number; details: string }) {
    this.statuses.push({ code: s.code, details: s.details });
  }
}

type Patched = {
  start(this: unknown, listener: unknown): void;
  serializeMessage(this: unknown, value: unknown): Buffer;
  sendMessage(this: unknown, value: unknown, callback: () => void): void;
};
const patched = BaseServerInterceptingCall.prototype as unknown as Patched;

function send(call: FakeCall, message: unknown): Promise<void> {
  return new Promise((resolve) => patched.sendMessage.call(call, message, resolve));
}

Deno.test("a framed message is serialized as its frame, other values as grpc-js frames them", () => {
  installGrpcJsPatches();
  const call = new FakeCall();
  const part = new Uint8Array([0, 0, 0, 0, 0, 42]);
  const frame = patched.serializeMessage.call(call, new FramedMessage([part]));
  assert(frame.buffer === part.buffer, "not the same object");
  assertEquals([...frame], [0, 0, 0, 0, 1, 42]);
  assertEquals([...patched.serializeMessage.call(call, "ab")], [0, 0, 0, 0, 2, 97, 98]);
});

Deno.test("a large framed message is written from its parts in pieces, then the callback runs once", async () => {
  installGrpcJsPatches();
  const call = new FakeCall();
  const large = bytes(2 * WRITE_PIECE + 3, 4);
  const head = new Uint8Array(FRAME_PREFIX + 2).fill(6);
  const framed = new FramedMessage([head, large, new Uint8Array([1])]);
  await send(call, framed);
  assertEquals(call.written.map((w) => w.byteLength), [FRAME_PREFIX + 2, WRITE_PIECE, WRITE_PIECE, 3, 1]);
  assert(call.written[1]!.buffer === large.buffer, "not the same object");
  assertEquals(joined(call.written), joined(framed.parts));
  assertEquals([call.sent, call.metadataSent, call.statuses.length], [1, true, 0]);
});

Deno.test("a large framed message waits while the connection holds more than the backlog unsent", async () => {
  installGrpcJsPatches();
  const call = new FakeCall();
  call.connection.writableLength = BACKLOG_BYTES + 1;
  let done = false;
  const sending = send(call, new FramedMessage([bytes(WRITE_PIECE + FRAME_PREFIX + 1, 5)])).then(() => {
    done = true;
  });
  await new Promise((r) => setTimeout(r, 20));
  assertEquals([call.written.length, done], [0, false]);
  call.connection.writableLength = 0;
  call.connection.emit("drain");
  await sending;
  assertEquals(call.written.map((w) => w.byteLength), [WRITE_PIECE, FRAME_PREFIX + 1]);
  assertEquals([call.connection.listenerCount("drain"), call.connection.listenerCount("close")], [0, 0]);
});

Deno.test("a large framed message keeps grpc-js's outcomes: cancelled, over the limit, a failed write", async () => {
  installGrpcJsPatches();
  const message = new FramedMessage([bytes(WRITE_PIECE + 100, 6)]);
  const cancelled = new FakeCall();
  cancelled.cancelled = true;
  patched.sendMessage.call(cancelled, message, () => cancelled.sent++);
  assertEquals([cancelled.written.length, cancelled.sent, cancelled.statuses.length], [0, 0, 0]);

  const limited = new FakeCall();
  limited.maxSendMessageSize = WRITE_PIECE;
  patched.sendMessage.call(limited, message, () => limited.sent++);
  assertEquals(limited.statuses, [{
    code: grpc.status.RESOURCE_EXHAUSTED,
    details: `Sent message larger than max (${WRITE_PIECE + 100} vs. ${WRITE_PIECE})`,
  }]);
  assertEquals(limited.written.length, 0);

  const failing = new FakeCall();
  failing.failWrites = true;
  patched.sendMessage.call(failing, message, () => failing.sent++);
  await new Promise((r) => setTimeout(r, 20));
  assertEquals(failing.statuses, [{ code: grpc.status.INTERNAL, details: "Internal server error" }]);
  assertEquals([failing.written.length, failing.sent], [1, 0]);
});

Deno.test("the stream decoder lets go of a message's chunks once it is joined, and reads the next one", () => {
  installGrpcJsPatches();
  const decoder = new StreamDecoder(-1) as unknown as {
    write(data: Buffer): Buffer[];
    readPartialMessage: Buffer[];
  };
  const frame = Buffer.from([0, 0, 0, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0, 1, 7]);
  assertEquals(decoder.write(frame.subarray(0, 7)), []);
  assertEquals(decoder.readPartialMessage.length, 1);
  // The write that ends the message: grpc-js alone would keep its two chunks until the next message.
  const first = decoder.write(frame.subarray(7, 11));
  assertEquals(first.map((m) => [...m]), [[0, 0, 0, 0, 6, 1, 2, 3, 4, 5, 6]]);
  assertEquals(decoder.readPartialMessage.length, 0);
  assertEquals(decoder.write(frame.subarray(11, 16)), []);
  assertEquals(decoder.write(frame.subarray(16)).map((m) => [...m]), [[0, 0, 0, 0, 1, 7]]);
  assertEquals(decoder.readPartialMessage.length, 0);
});

Deno.test("a call's stream lets go of its listeners once closed, after grpc-js's own, and ignores a late error", () => {
  installGrpcJsPatches();
  const stream = new EventEmitter();
  const seen: string[] = [];
  stream.once(
    "close",
    () => seen.push(`grpc-js saw close with ${stream.listenerCount("data")} data listener`),
  );
  stream.on("data", () => seen.push("data"));
  stream.on("end", () => seen.push("end"));
  const call = {
    stream,
    handler: { path: "/inference.GRPCInferenceService/ModelInfer" },
    metadata: new grpc.Metadata(),
    checkCancelled: () => false,
    listener: undefined as unknown,
  };
  const listener = { onReceiveMetadata: () => seen.push("metadata") };
  patched.start.call(call, listener);
  assertEquals([call.listener === listener, seen], [true, ["metadata"]]);
  stream.emit("data", Buffer.from([1]));
  stream.emit("end");
  stream.emit("close");
  assertEquals(seen, ["metadata", "data", "end", "grpc-js saw close with 1 data listener"]);
  assertEquals(stream.eventNames(), ["error"]);
  assertEquals(stream.listenerCount("error"), 1);
  stream.emit("error", new Error("late"));
});

Deno.test("a real grpc-js call's stream holds no listener of the call once the call is over", async () => {
  installGrpcJsPatches();
  const identity = { serialize: (b: Buffer) => b, deserialize: (b: Buffer) => b };
  const definition = {
    path: "/test.Echo/Echo",
    requestStream: false,
    responseStream: false,
    requestSerialize: identity.serialize,
    requestDeserialize: identity.deserialize,
    responseSerialize: identity.serialize,
    responseDeserialize: identity.deserialize,
  };
  const streams: EventEmitter[] = [];
  const handles: (Record<PropertyKey, unknown> | undefined)[] = [];
  const server = new grpc.Server();
  server.addService({ Echo: definition }, {
    Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
      const stream = (call as unknown as { call: { stream: EventEmitter } }).call.stream;
      streams.push(stream);
      handles.push(streamHandle(stream));
      callback(null, call.request);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(
      "127.0.0.1:0",
      grpc.ServerCredentials.createInsecure(),
      (e, p) => e ? reject(e) : resolve(p),
    )
  );
  const Client = grpc.makeGenericClientConstructor({ Echo: definition }, "Echo");
  const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  try {
    const answer = await new Promise<Buffer>((resolve, reject) =>
      (client as unknown as {
        Echo(m: Buffer, cb: (e: Error | null, r: Buffer) => void): void;
      }).Echo(Buffer.from([7, 8]), (e, r) => e ? reject(e) : resolve(r))
    );
    assertEquals([...answer], [7, 8]);
    assertEquals(streams.length, 1);
    const stream = streams[0]!;
    for (let i = 0; i < 100 && stream.listenerCount("data") > 0; i++) {
      await new Promise((r) => setTimeout(r, 10));
    }
    assertEquals([stream.listenerCount("data"), stream.listenerCount("end"), stream.listenerCount("close")], [
      0,
      0,
      0,
    ]);
    assertEquals(stream.listenerCount("error"), 1);
    // Deno's node:http2: the native handle pointed back at the stream while it was open, and no longer does.
    const handle = handles[0];
    assert(handle !== undefined, "the open stream has a native handle");
    assertEquals(handle.owner, undefined);
    assertEquals(Object.getOwnPropertySymbols(handle).filter((k) => handle[k] === stream), []);
  } finally {
    client.close();
    await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
  }
});

Deno.test("a closed stream's handle lets go of the stream, and of nothing else", () => {
  installGrpcJsPatches();
  const stream = new EventEmitter() as EventEmitter & Record<symbol, unknown>;
  const owner = Symbol("ownerSymbol");
  const other = { name: "session" };
  const handle: Record<PropertyKey, unknown> = {
    owner: stream,
    [owner]: stream,
    session: other,
    [Symbol("x")]: other,
  };
  const kHandle = Symbol("kHandle");
  stream[kHandle] = handle;
  assertEquals(streamHandle(stream), handle);
  const call = {
    stream,
    handler: { path: "/inference.GRPCInferenceService/ModelInfer" },
    metadata: new grpc.Metadata(),
    checkCancelled: () => false,
  };
  patched.start.call(call, { onReceiveMetadata: () => {} });
  // Gone from the stream before close, as node:http2 does when it destroys a stream.
  stream[kHandle] = undefined;
  assertEquals([handle.owner, handle[owner]], [stream, stream]);
  stream.emit("close");
  assertEquals([handle.owner, handle[owner], handle.session], [undefined, undefined, other]);
  assertEquals(Object.getOwnPropertySymbols(handle).map((k) => handle[k]), [undefined, other]);
});

Deno.test("a stream without a native handle has none to let go", () => {
  assertEquals(streamHandle(new EventEmitter()), undefined);
  const s = { [Symbol("kHandle")]: undefined };
  assertEquals(streamHandle(s), undefined);
  const handle = { owner: 1 };
  releaseHandle(handle, {});
  assertEquals(handle.owner, 1);
});

Deno.test("a stream that keeps its listeners some other way has them let go by removeAllListeners", () => {
  installGrpcJsPatches();
  const calls: string[] = [];
  let onClose: (() => void) | undefined;
  const stream = {
    once: (event: string, f: () => void) => {
      calls.push(`once ${event}`);
      onClose = f;
    },
    on: (event: string) => calls.push(`on ${event}`),
    removeAllListeners: () => calls.push("removeAllListeners"),
  };
  const call = {
    stream,
    handler: { path: "/inference.GRPCInferenceService/ServerLive" },
    metadata: new grpc.Metadata(),
    checkCancelled: () => true,
  };
  patched.start.call(call, {});
  onClose!();
  assertEquals(calls, ["once close", "removeAllListeners", "on error"]);
});
