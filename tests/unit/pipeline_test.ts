/**
 * The inference pipeline over a registry of in-process models (a backend of this test): the model is resolved
 * once per request, decoupled models answer only on streaming endpoints, the shared-memory session reads
 * inputs from and writes outputs into regions, and the trace records its marks in order.
 */

import { assertEquals, assertRejects, assertThrows } from "../assert.ts";
import { join } from "node:path";
import { bytesOf } from "../../server/core/dtypes.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { InferRequest, RequestTrace, Tensor } from "../../server/core/types.ts";
import type {
  Backend,
  BackendInstance,
  BackendRequest,
  InstanceContext,
  ServerAccess,
} from "../../server/backends/backend.ts";
import type { ModelConfig } from "../../server/core/model_config.ts";
import { ModelRegistry } from "../../server/models/registry.ts";
import type { ArrivalCounter } from "../../server/core/arrivals.ts";
import { type Endpoint, ENDPOINTS, InferencePipeline } from "../../server/pipeline/pipeline.ts";
import { SystemSharedMemory } from "../../server/shm/system_shm.ts";
import type { TraceManager } from "../../server/trace/trace.ts";
import { createHttpHandler } from "../../server/frontends/http/handler.ts";

const IO = `input [{ name: "A", data_type: TYPE_INT32, dims: [2] }]
output [{ name: "SUM", data_type: TYPE_INT32, dims: [2] }]
instance_group [{ kind: KIND_CPU, count: 1 }]`;

/** `add` answers A + 1; `dec` (decoupled) answers A, then A + 1 with the final flag; both fail where A starts with -1. */
const MODELS: Record<string, string> = {
  add: `name: "add"\nbackend: "python"\nmax_batch_size: 0\n${IO}`,
  dec:
    `name: "dec"\nbackend: "python"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n${IO}`,
};

const i32 = (...v: number[]) => bytesOf(new Int32Array(v));

function plusOne(a: Tensor, n: number): Map<string, Tensor> {
  const values = Array.from(new Int32Array(new Uint8Array(a.data as Uint8Array).buffer), (x) => x + n);
  return new Map([["SUM", { name: "SUM", datatype: "INT32", shape: a.shape, data: i32(...values) }]]);
}

/** A backend named "python" whose instances compute in the test's process. */
class TestBackend implements Backend {
  readonly name = "python";
  readonly defaultModelFilename = "model.py";
  server: ServerAccess | undefined;
  /** The context of every instance made. */
  readonly contexts: InstanceContext[] = [];
  /** The requests inside the models (the arrival counter's count) as each batch ran. */
  readonly inside: number[] = [];
  autoComplete(): Promise<void> {
    return Promise.resolve();
  }
  bind(server: ServerAccess): void {
    this.server = server;
  }
  createInstance(_config: ModelConfig, ctx: InstanceContext): Promise<BackendInstance> {
    this.contexts.push(ctx);
    return Promise.resolve({
      execute: () => Promise.reject(new Error("not used")),
      executeRequests: (requests: readonly BackendRequest[]) => {
        this.inside.push((ctx.arrivals as ArrivalCounter | undefined)?.inside ?? NaN);
        const a0 = new Int32Array(new Uint8Array(requests[0]!.inputs.get("A")!.data as Uint8Array).buffer)[0];
        if (a0 === -1) return Promise.reject(new Error("A is -1"));
        return Promise.resolve(requests.map((r) => {
          const a = r.inputs.get("A")!;
          if (!r.send) return plusOne(a, 1);
          r.send(plusOne(a, 0), false);
          r.send(plusOne(a, 1), true);
          return new Map();
        }));
      },
      close: () => Promise.resolve(),
    });
  }
}

/** Records the marks of every trace it samples, `end` included. */
class TestTraces {
  readonly marks: string[][] = [];
  readonly sampled: string[][] = [];
  sample(model: string, version: string, requestId: string): RequestTrace {
    const marks: string[] = [];
    this.marks.push(marks);
    this.sampled.push([model, version, requestId]);
    return {
      id: this.marks.length,
      model,
      version,
      requestId,
      timestamps: [],
      endNs: 0,
      mark: (name) => marks.push(name),
      recordTensors: () => {},
      end: () => marks.push("end"),
    };
  }
}

interface Setup {
  registry: ModelRegistry;
  backend: TestBackend;
  dir: string;
  [Symbol.asyncDispose](): Promise<void>;
}

async function setup(): Promise<Setup> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-pipeline-test-" });
  for (const [name, config] of Object.entries(MODELS)) {
    await Deno.mkdir(join(dir, "models", name, "1"), { recursive: true });
    await Deno.writeTextFile(join(dir, "models", name, "config.pbtxt"), config);
    await Deno.writeTextFile(join(dir, "models", name, "1", "model.py"), "");
  }
  const backend = new TestBackend();
  const registry = new ModelRegistry({
    repositories: [join(dir, "models")],
    autoComplete: false,
    backendConfig: {},
    backends: new Map([["python", backend]]),
  });
  assertEquals(await registry.loadModels(), new Map());
  return {
    registry,
    backend,
    dir,
    async [Symbol.asyncDispose]() {
      await registry.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function request(model: string, outputs: InferRequest["outputs"] = []): InferRequest {
  return {
    model,
    version: "",
    id: "r1",
    inputs: [{ name: "A", datatype: "INT32", shape: [2], data: i32(1, 2) }],
    outputs,
    parameters: {},
  };
}

Deno.test("an HTTP inference request resolves its model once and is counted as one arrival", async () => {
  await using s = await setup();
  const pipeline = new InferencePipeline(s.registry);
  const resolved: string[] = [];
  const resolve = s.registry.resolve.bind(s.registry);
  s.registry.resolve = (name, version) => {
    resolved.push(name);
    return resolve(name, version);
  };
  let arrivals = 0;
  const arrived = pipeline.arrivals.arrived.bind(pipeline.arrivals);
  pipeline.arrivals.arrived = () => {
    arrivals++;
    arrived();
  };
  const handle = createHttpHandler(pipeline, {
    serverName: "t",
    serverVersion: "0",
    extensions: [],
    strictReadiness: false,
    maxInputSize: 1 << 20,
  });
  const response = await handle(
    new Request("http://x/v2/models/add/infer", {
      method: "POST",
      body: JSON.stringify({ inputs: [{ name: "A", datatype: "INT32", shape: [2], data: [1, 2] }] }),
    }),
  );
  assertEquals(await response.json(), {
    model_name: "add",
    model_version: "1",
    outputs: [{ name: "SUM", datatype: "INT32", shape: [2], data: [2, 3] }],
  });
  assertEquals([resolved, arrivals], [["add"], 1]);
});

Deno.test("every instance gets the registry's arrival counter, which the pipeline counts", async () => {
  await using s = await setup();
  assertEquals(s.backend.contexts.map((c) => c.instanceName).sort(), ["add_0_0", "dec_0_0"]);
  for (const ctx of s.backend.contexts) assertEquals(ctx.arrivals === s.registry.arrivals, true);
  assertEquals(new InferencePipeline(s.registry).arrivals === s.registry.arrivals, true);
});

Deno.test("a request counts as inside the models from its run to its answer, failed or streamed too", async () => {
  await using s = await setup();
  const pipeline = new InferencePipeline(s.registry);
  const arrivals = pipeline.arrivals;
  const exchange = { endpoint: ENDPOINTS.httpInfer };
  let insideWhileEncoding = NaN;
  await pipeline.infer(pipeline.accept("add", "", ENDPOINTS.httpInfer), request("add"), exchange, () => {
    insideWhileEncoding = arrivals.inside;
  });
  assertEquals([s.backend.inside, insideWhileEncoding, arrivals.inside], [[1], 0, 0]);
  // Two at once: the second finds the first inside (the first ran before the second came).
  const mv = pipeline.accept("add", "", ENDPOINTS.httpInfer);
  await Promise.all([pipeline.run(mv, request("add"), exchange), pipeline.run(mv, request("add"), exchange)]);
  assertEquals([s.backend.inside.slice(1), arrivals.inside, arrivals.alone()], [[1, 2], 0, false]);
  // A failure is counted out too.
  const failing = request("add");
  failing.inputs[0]!.data = i32(-1, 0);
  await assertRejects(() => pipeline.run(mv, failing, exchange), ServerError, { message: "A is -1" });
  assertEquals(arrivals.inside, 0);
  // A stream is inside until its final response.
  const stream = pipeline.accept("dec", "", ENDPOINTS.grpcStream);
  const finals: [boolean, number][] = [];
  await pipeline.stream(stream, request("dec"), { endpoint: ENDPOINTS.grpcStream }, (_r, _w, final) => {
    finals.push([final, arrivals.inside]);
  });
  assertEquals([finals, arrivals.inside], [[[false, 1], [true, 1]], 0]);
});

Deno.test("decoupled models are refused on endpoints that do not stream, in each endpoint's words", async () => {
  await using s = await setup();
  const pipeline = new InferencePipeline(s.registry);
  const refused = (endpoint: Endpoint, code: string, message: string) =>
    assertThrows(() => pipeline.accept("dec", "", endpoint), ServerError, { code, message });
  refused(
    ENDPOINTS.httpInfer,
    "UNSUPPORTED",
    "HTTP end point doesn't support models with decoupled transaction policy",
  );
  refused(
    ENDPOINTS.grpcInfer,
    "UNSUPPORTED",
    "ModelInfer RPC doesn't support models with decoupled transaction policy",
  );
  const asModel =
    "Cannot infer 'dec': the model is decoupled (model_transaction_policy); its responses stream over gRPC ModelStreamInfer or HTTP generate_stream";
  refused(ENDPOINTS.model, "INVALID_ARG", asModel);
  refused(ENDPOINTS.openAiEmbedding, "INVALID_ARG", asModel);
  // A model's own request (BLS) goes through the same rule.
  await assertRejects(() => s.backend.server!.infer(request("dec")), ServerError, {
    code: "INVALID_ARG",
    message: asModel,
  });
  // A streaming endpoint takes every response, in order, the last one final.
  const mv = pipeline.accept("dec", "", ENDPOINTS.grpcStream);
  const got: [number[], boolean][] = [];
  await pipeline.stream(
    mv,
    request("dec"),
    { endpoint: ENDPOINTS.grpcStream },
    (response, written, final) => {
      if (response === undefined || response instanceof Error || written !== undefined) {
        throw new Error(
          "unexpected",
        );
      }
      got.push([[...new Int32Array((response.outputs[0]!.data as Uint8Array).slice().buffer)], final]);
    },
  );
  assertEquals(got, [[[1, 2], false], [[2, 3], true]]);
});

Deno.test("the shared-memory session reads inputs from a region, writes outputs into one, and holds both while it runs", async () => {
  await using s = await setup();
  const shmDir = join(s.dir, "shm");
  await Deno.mkdir(shmDir);
  await Deno.writeFile(join(shmDir, "in"), i32(5, 6));
  await Deno.writeFile(join(shmDir, "out"), new Uint8Array(12));
  const shm = new SystemSharedMemory(true, shmDir);
  await shm.register("in", "in", 0, 8);
  await shm.register("out", "out", 0, 12);
  const pipeline = new InferencePipeline(s.registry, { shm });
  const mv = pipeline.accept("add", "", ENDPOINTS.httpInfer);
  const session = pipeline.shmSession()!;
  const req = request("add", [{
    name: "SUM",
    classification: 0,
    parameters: { shared_memory_region: "out", shared_memory_byte_size: 8, shared_memory_offset: 4 },
  }]);
  req.inputs[0]!.data = session.reader({ region: "in", offset: 0, byteSize: 8 }, "INT32", [2], "input 'A'");
  let whileRunning = "";
  const written = await pipeline.infer(mv, req, { endpoint: ENDPOINTS.httpInfer, shm: session }, (_r, w) => {
    whileRunning = assertThrows(() => shm.unregister("in"), ServerError, {
      code: "UNAVAILABLE",
      message: "Cannot unregister shared memory region 'in': 1 running requests use it",
    }).message;
    return w;
  });
  assertEquals(
    written,
    new Map([["SUM", { shared_memory_region: "out", shared_memory_byte_size: 8, shared_memory_offset: 4 }]]),
  );
  assertEquals(whileRunning, "Cannot unregister shared memory region 'in': 1 running requests use it");
  assertEquals(await Deno.readFile(join(shmDir, "out")), new Uint8Array([0, 0, 0, 0, ...i32(6, 7)]));
  // Released once answered.
  shm.unregister("");
  assertEquals(shm.status(""), []);
  shm.close();
});

Deno.test("without shared memory, a request whose output names a region is refused", async () => {
  await using s = await setup();
  const pipeline = new InferencePipeline(s.registry);
  const mv = pipeline.accept("add", "", ENDPOINTS.grpcInfer);
  const req = request("add", [{
    name: "SUM",
    classification: 0,
    parameters: { shared_memory_region: "out", shared_memory_byte_size: 8 },
  }]);
  await assertRejects(() => pipeline.run(mv, req, { endpoint: ENDPOINTS.grpcInfer }), ServerError, {
    code: "INVALID_ARG",
    message: "Cannot write output 'SUM': shared memory is not available",
  });
});

Deno.test("the trace records the frontend's receive marks, the request's, then the send marks once the answer exists", async () => {
  await using s = await setup();
  const traces = new TestTraces();
  const pipeline = new InferencePipeline(s.registry, { traces: traces as unknown as TraceManager });
  const mv = pipeline.accept("add", "", ENDPOINTS.httpInfer);
  let marksWhileEncoding: string[] = [];
  await pipeline.infer(
    mv,
    request("add"),
    { endpoint: ENDPOINTS.httpInfer, recvStart: 1, recvEnd: 2 },
    () => {
      marksWhileEncoding = [...traces.marks[0]!];
    },
  );
  const request_ = [
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
  ];
  const http = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    ...request_,
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
  ];
  assertEquals(marksWhileEncoding, http);
  assertEquals(traces.marks[0], [...http, "HTTP_SEND_END", "end"]);
  assertEquals(traces.sampled, [["add", "1", "r1"]]);
  // A failed request's trace ends too, without send marks.
  const failing = request("add");
  failing.inputs[0]!.shape = [3];
  await assertRejects(
    () => pipeline.run(mv, failing, { endpoint: ENDPOINTS.grpcInfer, recvEnd: 5 }),
    ServerError,
    {
      code: "INVALID_ARG",
      message: "Cannot infer 'add': unexpected shape for input 'A' for model 'add'. Expected [2], got [3]",
    },
  );
  assertEquals(traces.marks[1], ["GRPC_WAITREAD_END", "REQUEST_START", "REQUEST_END", "end"]);
});
