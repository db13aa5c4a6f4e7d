/**
 * gRPC listener threads (`--grpc-thread-count`): a server with several threads on its gRPC port answers every
 * kind of call exactly as a server with one thread does: ModelInfer decoded on the thread, calls the thread hands
 * to the main thread whole (metadata, health, errors, shared memory, restricted groups), and streams. Each call
 * goes on a fresh connection, so that the kernel spreads them over the threads (SO_REUSEPORT); with 24
 * connections per case, the chance that none reaches a listener thread is 2^-24.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../../server/core/protos.ts";
import { startTestServer, type TestServer } from "../helpers.ts";

const ROUNDS = 24;
const SERVICE = "/inference.GRPCInferenceService";

/** A unary call: its path, request type and message, metadata. */
interface Case {
  name: string;
  method: string;
  requestType: string;
  responseType: string;
  request: Record<string, unknown> | Uint8Array;
  metadata?: Record<string, string>;
}

function int32Bytes(values: number[]): Uint8Array {
  return new Uint8Array(Int32Array.from(values).buffer);
}

const IOTA = Array.from({ length: 16 }, (_, i) => i);
const ONES = Array(16).fill(1);

const simpleRaw = (id: string) => ({
  model_name: "simple",
  id,
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 16] },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16] },
  ],
  raw_input_contents: [int32Bytes(IOTA), int32Bytes(ONES)],
});

/** A ModelInfer case. */
function inferCase(name: string, request: Record<string, unknown> | Uint8Array): Case {
  return {
    name,
    method: "ModelInfer",
    requestType: "ModelInferRequest",
    responseType: "ModelInferResponse",
    request,
  };
}

const CASES: Case[] = [
  inferCase(
    "ModelInfer with raw contents",
    simpleRaw("7"),
  ),
  inferCase(
    "ModelInfer with typed contents and one output asked for",
    {
      model_name: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], contents: { int_contents: IOTA } },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], contents: { int_contents: ONES } },
      ],
      outputs: [{ name: "OUTPUT1" }],
    },
  ),
  inferCase(
    "ModelInfer of an unknown model",
    { ...simpleRaw("8"), model_name: "nope" },
  ),
  inferCase(
    "ModelInfer with a wrong shape",
    {
      model_name: "simple",
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 15] },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16] },
      ],
      raw_input_contents: [int32Bytes(IOTA.slice(1)), int32Bytes(ONES)],
    },
  ),
  inferCase(
    "a ModelInfer message that does not decode",
    new Uint8Array([0x0a, 0xff, 0xff, 0xff, 0x0f]),
  ),
  inferCase(
    "ModelInfer naming an unregistered shared-memory region",
    {
      model_name: "simple",
      inputs: [
        {
          name: "INPUT0",
          datatype: "INT32",
          shape: [1, 16],
          parameters: {
            shared_memory_region: { string_param: "nowhere" },
            shared_memory_byte_size: { int64_param: 64 },
          },
        },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16] },
      ],
      raw_input_contents: [int32Bytes(ONES)],
    },
  ),
  {
    name: "ServerLive",
    method: "ServerLive",
    requestType: "ServerLiveRequest",
    responseType: "ServerLiveResponse",
    request: {},
  },
  {
    name: "ModelMetadata",
    method: "ModelMetadata",
    requestType: "ModelMetadataRequest",
    responseType: "ModelMetadataResponse",
    request: { name: "simple" },
  },
  {
    name: "ModelConfig of an unknown model",
    method: "ModelConfig",
    requestType: "ModelConfigRequest",
    responseType: "ModelConfigResponse",
    request: { name: "nope" },
  },
];

/** The outcome of a call, as text to compare: the status, its details, the response message. */
type Outcome = string;

function client(s: TestServer): grpc.Client {
  // A channel of its own for every call: a fresh connection, which the kernel gives to any of the threads.
  return new grpc.Client(`127.0.0.1:${s.server.grpcPort}`, grpc.credentials.createInsecure(), {
    "grpc.use_local_subchannel_pool": 1,
  });
}

function encode(type: string, message: Record<string, unknown> | Uint8Array): Buffer {
  if (message instanceof Uint8Array) return Buffer.from(message);
  const t = lookupType(type);
  return Buffer.from(t.encode(t.fromObject(message)).finish());
}

function decode(type: string, bytes: Buffer): unknown {
  const t = lookupType(type);
  return t.toObject(t.decode(bytes), { longs: String, bytes: Array, defaults: false });
}

async function unary(s: TestServer, c: Case): Promise<Outcome> {
  const cl = client(s);
  try {
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(c.metadata ?? {})) metadata.set(k, v);
    return await new Promise<Outcome>((resolve) => {
      cl.makeUnaryRequest(
        `${SERVICE}/${c.method}`,
        (m: Record<string, unknown> | Uint8Array) => encode(c.requestType, m),
        (b: Buffer) => b,
        c.request,
        metadata,
        (err, value) =>
          resolve(JSON.stringify(
            err
              ? { code: err.code, details: err.details }
              : { code: 0, message: decode(c.responseType, value!) },
          )),
      );
    });
  } finally {
    cl.close();
  }
}

/** Three requests on one stream (the second to an unknown model); the messages that come back, then the status. */
async function stream(s: TestServer): Promise<Outcome> {
  const cl = client(s);
  try {
    const call = cl.makeBidiStreamRequest(
      `${SERVICE}/ModelStreamInfer`,
      (m: Record<string, unknown>) => encode("ModelInferRequest", m),
      (b: Buffer) => decode("ModelStreamInferResponse", b),
    );
    const messages: unknown[] = [];
    const ended = new Promise<unknown>((resolve) => {
      call.on("data", (m) => messages.push(m));
      call.on("status", (st: grpc.StatusObject) => resolve({ code: st.code, details: st.details }));
      // A failed stream also emits its status as an error; the status is what is compared.
      call.on("error", () => {});
    });
    call.write(simpleRaw("a"));
    call.write({ ...simpleRaw("b"), model_name: "nope" });
    call.write(simpleRaw("c"));
    call.end();
    const status = await ended;
    return JSON.stringify({ messages, status });
  } finally {
    cl.close();
  }
}

Deno.test("a server with two gRPC threads answers every call as a server with one thread does", async () => {
  const flags = ["--allow-grpc=true", "--http-thread-count=1"];
  await using one = await startTestServer([...flags, "--grpc-thread-count=1"]);
  await using two = await startTestServer([...flags, "--grpc-thread-count=2"]);
  for (const c of CASES) {
    const expected = await unary(one, c);
    for (let i = 0; i < ROUNDS; i++) assert.equal(await unary(two, c), expected, c.name);
  }
  const first = JSON.parse(await unary(one, CASES[0]!)) as { code: number; message: { outputs: unknown[] } };
  assert.equal(first.code, 0);
  assert.equal(first.message.outputs.length, 2);
  const expected = await stream(one);
  assert.match(expected, /"error_message":"Request for unknown model: 'nope' is not found"/);
  for (let i = 0; i < ROUNDS; i++) assert.equal(await stream(two), expected, "ModelStreamInfer");
});

Deno.test("gRPC threads: a restricted inference group is refused without its key on every thread", async () => {
  const flags = ["--allow-grpc=true", "--grpc-restricted-protocol=inference:infer-key=k1"];
  await using one = await startTestServer([...flags, "--grpc-thread-count=1"]);
  await using two = await startTestServer([...flags, "--grpc-thread-count=2"]);
  const base = CASES[0]!;
  for (
    const c of [base, { ...base, name: "with the key", metadata: { "triton-grpc-protocol-infer-key": "k1" } }]
  ) {
    const expected = await unary(one, c);
    for (let i = 0; i < ROUNDS; i++) assert.equal(await unary(two, c), expected, c.name);
  }
  assert.match(await unary(one, base), /"code":7,"details":"This protocol is restricted, expecting header/);
  // A stream is refused as a whole.
  const refused = await stream(one);
  assert.match(refused, /"status":\{"code":7,"details":"This protocol is restricted, expecting header/);
  for (let i = 0; i < ROUNDS; i++) assert.equal(await stream(two), refused, "ModelStreamInfer");
});

Deno.test("gRPC threads: calls answered on any thread are counted in the model's statistics", async () => {
  await using two = await startTestServer(["--allow-grpc=true", "--grpc-thread-count=2"]);
  const n = 2 * ROUNDS;
  for (let i = 0; i < n; i++) assert.match(await unary(two, CASES[0]!), /^\{"code":0,/);
  const stats = await (await fetch(`${two.url}/v2/models/simple/stats`)).json() as {
    model_stats: { inference_count: number; inference_stats: { success: { count: number } } }[];
  };
  assert.equal(stats.model_stats[0]!.inference_count, n);
  assert.equal(stats.model_stats[0]!.inference_stats.success.count, n);
});

Deno.test("a server with gRPC listener threads finishes calls in flight when it shuts down", async () => {
  const two = await startTestServer(["--allow-grpc=true", "--grpc-thread-count=2"]);
  const inFlight = Array.from({ length: 16 }, () => unary(two, CASES[0]!));
  await new Promise((r) => setTimeout(r, 20));
  const closing = two.close();
  const outcomes = await Promise.all(inFlight);
  await closing;
  // Every call is answered, or was refused before it connected (UNAVAILABLE); none fails otherwise.
  const expected = JSON.parse(outcomes.find((o) => o.startsWith('{"code":0')) ?? "null");
  for (const o of outcomes) {
    const v = JSON.parse(o) as { code: number };
    if (v.code === 0) assert.deepEqual(v, expected);
    else assert.equal(v.code, grpc.status.UNAVAILABLE, o);
  }
});

Deno.test("gRPC threads: --grpc-max-connections counts the connections of every thread together", async () => {
  await using two = await startTestServer([
    "--allow-grpc=true",
    "--grpc-thread-count=2",
    "--grpc-max-connections=2",
  ]);
  const port = two.server.grpcPort!;
  // Two connections are kept open (wherever they landed); every further one is closed at once.
  const held = [
    await Deno.connect({ hostname: "127.0.0.1", port }),
    await Deno.connect({ hostname: "127.0.0.1", port }),
  ];
  try {
    await new Promise((r) => setTimeout(r, 200));
    for (let i = 0; i < 8; i++) {
      const c = await Deno.connect({ hostname: "127.0.0.1", port });
      const n = await c.read(new Uint8Array(16)).catch(() => null);
      assert.equal(n, null, `connection ${i + 3} was not closed`);
      c.close();
    }
  } finally {
    for (const c of held) c.close();
  }
});
