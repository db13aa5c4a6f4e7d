/**
 * The main thread's side of the gRPC calls a listener thread forwards (server/frontends/grpc/remote.ts): the
 * handlers see the call's message and metadata, and their answers, statuses and stream messages go back
 * serialized; streams are let go of once they end, whichever side ends them.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import {
  type GrpcToThread,
  metadataEntries,
  metadataOf,
  RemoteCalls,
  type RemoteMethod,
} from "../../server/frontends/grpc/remote.ts";
import { turns } from "../turns.ts";

const text = {
  serialize: (v: unknown) => Buffer.from(JSON.stringify(v)),
  deserialize: (b: Buffer) => JSON.parse(b.toString()),
};

function definition(path: string, streaming: boolean): grpc.MethodDefinition<unknown, unknown> {
  return {
    path,
    requestStream: streaming,
    responseStream: streaming,
    requestSerialize: text.serialize,
    requestDeserialize: text.deserialize,
    responseSerialize: text.serialize,
    responseDeserialize: text.deserialize,
  };
}

const encode = (v: unknown) => new Uint8Array(Buffer.from(JSON.stringify(v)));
const decode = (b: Uint8Array | undefined) => JSON.parse(new TextDecoder().decode(b));

/** RemoteCalls over two methods: Echo (unary) and Chat (a stream that answers each message, ends on "bye"). */
function setup() {
  const sent: GrpcToThread[] = [];
  const methods = new Map<string, RemoteMethod>([
    ["Echo", {
      definition: definition("/t.S/Echo", false),
      handler: ((call: grpc.ServerUnaryCall<{ say: string }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
        const key = call.metadata.get("key")[0];
        if (call.request.say === "fail") cb({ code: grpc.status.NOT_FOUND, details: "no such thing" });
        else cb(null, { said: call.request.say, key });
      }) as grpc.UntypedHandleCall,
    }],
    ["Chat", {
      definition: definition("/t.S/Chat", true),
      handler: ((call: grpc.ServerDuplexStream<{ say: string }, unknown>) => {
        call.on("data", (m: { say: string }) => {
          if (m.say === "bad") {
            call.emit("error", { code: grpc.status.INVALID_ARGUMENT, details: "bad word" });
          } else call.write({ heard: m.say });
        });
        call.on("end", () => call.end());
      }) as grpc.UntypedHandleCall,
    }],
  ]);
  const remote = new RemoteCalls(methods, (reply) => sent.push(reply));
  return { remote, sent };
}

Deno.test("a forwarded unary call reaches its handler with its message and metadata", async () => {
  const { remote, sent } = setup();
  const md = new grpc.Metadata();
  md.set("key", "v1");
  md.set("blob-bin", Buffer.from([1, 2, 3]));
  const entries = metadataEntries(md);
  assert.deepEqual(metadataOf(entries).get("blob-bin"), [Buffer.from([1, 2, 3])]);
  remote.handle({
    op: "grpc-call",
    id: 4,
    method: "Echo",
    metadata: entries,
    message: encode({ say: "hi" }),
  });
  remote.handle({ op: "grpc-call", id: 5, method: "Echo", metadata: [], message: encode({ say: "fail" }) });
  remote.handle({ op: "grpc-call", id: 6, method: "Chat", metadata: [], message: encode({}) });
  await turns();
  assert.equal(sent.length, 3);
  assert.deepEqual({ ...sent[0], message: decode((sent[0] as { message: Uint8Array }).message) }, {
    op: "grpc-reply",
    id: 4,
    message: { said: "hi", key: "v1" },
  });
  assert.deepEqual(sent[1], {
    op: "grpc-reply",
    id: 5,
    status: { code: grpc.status.NOT_FOUND, details: "no such thing" },
  });
  assert.deepEqual(sent[2], {
    op: "grpc-reply",
    id: 6,
    status: { code: grpc.status.UNIMPLEMENTED, details: "Method 'Chat' is not a unary method" },
  });
});

Deno.test("a forwarded stream answers each message and ends OK when the client has ended", async () => {
  const { remote, sent } = setup();
  remote.handle({ op: "grpc-open", id: 9, method: "Chat", metadata: [] });
  remote.handle({ op: "grpc-data", id: 9, message: encode({ say: "a" }) });
  remote.handle({ op: "grpc-data", id: 9, message: encode({ say: "b" }) });
  remote.handle({ op: "grpc-end", id: 9 });
  await turns(5);
  assert.deepEqual(
    sent.map((m) => m.op === "grpc-write" ? { ...m, message: decode(m.message) } : m),
    [
      { op: "grpc-write", id: 9, message: { heard: "a" } },
      { op: "grpc-write", id: 9, message: { heard: "b" } },
      { op: "grpc-close", id: 9 },
    ],
  );
  assert.equal(remote.openStreams, 0);
});

Deno.test("a stream its handler ends with a status is closed with it and let go of; later messages are dropped", async () => {
  const { remote, sent } = setup();
  remote.handle({ op: "grpc-open", id: 2, method: "Chat", metadata: [] });
  remote.handle({ op: "grpc-data", id: 2, message: encode({ say: "bad" }) });
  await turns(3);
  remote.handle({ op: "grpc-data", id: 2, message: encode({ say: "more" }) });
  await turns(3);
  assert.deepEqual(sent, [{
    op: "grpc-close",
    id: 2,
    status: { code: grpc.status.INVALID_ARGUMENT, details: "bad word" },
  }]);
  assert.equal(remote.openStreams, 0);
});

Deno.test("a cancelled stream is told to its handler; cancelAll cancels every open stream", () => {
  const { remote } = setup();
  let cancelled = 0;
  const methods = new Map<string, RemoteMethod>([["Wait", {
    definition: definition("/t.S/Wait", true),
    handler: ((call: grpc.ServerDuplexStream<unknown, unknown>) => {
      call.on("cancelled", () => cancelled++);
    }) as grpc.UntypedHandleCall,
  }]]);
  const waiting = new RemoteCalls(methods, () => {});
  waiting.handle({ op: "grpc-open", id: 1, method: "Wait", metadata: [] });
  waiting.handle({ op: "grpc-open", id: 2, method: "Wait", metadata: [] });
  waiting.handle({ op: "grpc-open", id: 3, method: "Wait", metadata: [] });
  assert.equal(waiting.openStreams, 3);
  waiting.handle({ op: "grpc-cancel", id: 1 });
  assert.equal(cancelled, 1);
  waiting.cancelAll();
  assert.equal(cancelled, 3);
  assert.equal(waiting.openStreams, 0);
  assert.equal(remote.openStreams, 0);
});

Deno.test("a forwarded message that does not decode, or a stream handler that throws, ends only its own call", async () => {
  const { remote, sent } = setup();
  const junk = new TextEncoder().encode("{not json");
  // Each would have thrown out of handle(), the main thread's message handler for the thread.
  remote.handle({ op: "grpc-call", id: 1, method: "Echo", metadata: [], message: junk });
  remote.handle({ op: "grpc-open", id: 2, method: "Chat", metadata: [] });
  remote.handle({ op: "grpc-data", id: 2, message: junk });
  await turns(3);
  assert.deepEqual(sent.map((m) => [m.op, m.id, (m as { status?: { code: number } }).status?.code]), [
    ["grpc-reply", 1, grpc.status.INTERNAL],
    ["grpc-close", 2, grpc.status.INTERNAL],
  ]);
  assert.equal(remote.openStreams, 0);
  // A stream handler that throws at once.
  const throwing = new RemoteCalls(
    new Map<string, RemoteMethod>([["Boom", {
      definition: definition("/t.S/Boom", true),
      handler: (() => {
        throw new Error("boom");
      }) as grpc.UntypedHandleCall,
    }]]),
    (reply) => sent.push(reply),
  );
  throwing.handle({ op: "grpc-open", id: 3, method: "Boom", metadata: [] });
  await turns(3);
  assert.deepEqual(sent.at(-1), {
    op: "grpc-close",
    id: 3,
    status: { code: grpc.status.INTERNAL, details: "boom" },
  });
  assert.equal(throwing.openStreams, 0);
});

Deno.test("a forwarded stream whose message does not decode is cancelled, so that its running requests stop", async () => {
  const sent: GrpcToThread[] = [];
  let cancelled = false;
  const remote = new RemoteCalls(
    new Map<string, RemoteMethod>([["Watch", {
      definition: definition("/t.S/Watch", true),
      handler: ((call: grpc.ServerDuplexStream<unknown, unknown>) => {
        call.on("cancelled", () => (cancelled = true));
      }) as grpc.UntypedHandleCall,
    }]]),
    (reply) => sent.push(reply),
  );
  remote.handle({ op: "grpc-open", id: 4, method: "Watch", metadata: [] });
  remote.handle({ op: "grpc-data", id: 4, message: new TextEncoder().encode("{not json") });
  await turns(3);
  assert.equal(cancelled, true);
  assert.deepEqual(sent.map((m) => [m.op, m.id]), [["grpc-close", 4]]);
});
