/**
 * The inference pipeline: the one path every inference request takes, whatever frontend it came through
 * (HTTP infer, gRPC ModelInfer and ModelStreamInfer, generate, the OpenAI endpoints) and whatever model asks
 * (ensemble steps, BLS calls of Python models).
 *
 * 1. `accept` counts the arrival, resolves the model version once and applies the decoupled rule.
 * 2. The frontend decodes the wire format, reading inputs in shared memory through the request's `ShmSession`.
 * 3. `infer` / `stream` sample the trace, begin the shared-memory session, run the request on the resolved
 *    version (validation, scheduler, backend), write the outputs asked for in shared memory and hand the
 *    response to the frontend's encoder; the trace ends when the answer exists.
 * @module
 */

import { type ErrorCode, invalidArg, ServerError, toServerError } from "../core/errors.ts";
import { nowNs } from "../core/clock.ts";
import type { ArrivalCounter } from "../core/arrivals.ts";
import type { InferRequest, InferResponse, RequestTrace, ResponseSink } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import type { ModelRegistry } from "../models/registry.ts";
import type { ModelVersion } from "../models/model_version.ts";
import type { SystemSharedMemory } from "../shm/system_shm.ts";
import type { CudaSharedMemory } from "../shm/cuda_shm.ts";
import { ShmSession, type ShmWritten } from "../shm/session.ts";
import type { TraceManager } from "../trace/trace.ts";

/** Where a request comes in: whether it streams, how it refuses decoupled models, the trace marks it hands. */
export interface Endpoint {
  /** Whether the endpoint streams responses: decoupled models answer only on those. */
  readonly streaming: boolean;
  /** The error code of the refusal of a decoupled model on an endpoint that does not stream. */
  readonly refusalCode: ErrorCode;
  /** The refusal's message; `{model}` stands for the model name. */
  readonly refusal: string;
  /** Whether its requests count as arrivals for the dynamic batcher (those from clients, not from models). */
  readonly counted: boolean;
  /** The trace timestamp names of reading the request (start, end) and sending the answer (start, end). */
  readonly marks: readonly [string?, string?, string?, string?];
}

const STREAMING = { streaming: true, refusalCode: "INVALID_ARG", refusal: "", counted: true } as const;

/** Triton's wording where a model asks: clients (and Python models) match on it. */
const INTERNAL_REFUSAL =
  "Cannot infer '{model}': the model is decoupled (model_transaction_policy); its responses stream over gRPC ModelStreamInfer or HTTP generate_stream";

/** The endpoints of the frontends, and the one models call through. */
export const ENDPOINTS = {
  /** HTTP `POST .../infer`. */
  httpInfer: {
    streaming: false,
    refusalCode: "UNSUPPORTED",
    refusal: "HTTP end point doesn't support models with decoupled transaction policy",
    counted: true,
    marks: ["HTTP_RECV_START", "HTTP_RECV_END", "HTTP_SEND_START", "HTTP_SEND_END"],
  },
  /** gRPC `ModelInfer`. */
  grpcInfer: {
    streaming: false,
    refusalCode: "UNSUPPORTED",
    refusal: "ModelInfer RPC doesn't support models with decoupled transaction policy",
    counted: true,
    marks: [undefined, "GRPC_WAITREAD_END", "GRPC_SEND_START", undefined],
  },
  /** gRPC `ModelStreamInfer`. */
  grpcStream: { ...STREAMING, marks: [undefined, "GRPC_WAITREAD_END", "GRPC_SEND_START", undefined] },
  /** HTTP `generate` and `generate_stream` (both take a decoupled model's responses). */
  generate: { ...STREAMING, marks: [] },
  /** The OpenAI completions (streamed or not, they read the model's responses as they come). */
  openAiCompletion: { ...STREAMING, marks: [] },
  /** The OpenAI embeddings. */
  openAiEmbedding: {
    streaming: false,
    refusalCode: "INVALID_ARG",
    refusal: INTERNAL_REFUSAL,
    counted: true,
    marks: [],
  },
  /** A model's own requests (ensemble steps, BLS): not counted as arrivals. */
  model: {
    streaming: false,
    refusalCode: "INVALID_ARG",
    refusal: INTERNAL_REFUSAL,
    counted: false,
    marks: [],
  },
  /** A model's streamed requests (BLS `exec(decoupled=True)`). */
  modelStream: { ...STREAMING, counted: false, marks: [] },
} as const satisfies Record<string, Endpoint>;

/** What a frontend knows of one request besides the request itself. */
export interface Exchange {
  /** Where it came in. */
  endpoint: Endpoint;
  /** Its shared-memory session (from `InferencePipeline.shmSession`), if the frontend read inputs with it. */
  shm?: ShmSession | undefined;
  /** When reading the request began (nowNs), for the trace. */
  recvStart?: number | undefined;
  /** When reading the request ended (nowNs), for the trace. */
  recvEnd?: number | undefined;
  /**
   * The request as validateRequest returned it, when the frontend had to validate it before it could answer
   * (generate answers a bad request with a JSON error, not an event): it is not validated twice. Only for
   * requests without shared memory, whose inputs do not change after decoding.
   */
  validated?: ValidatedRequest;
}

/**
 * Receives the responses of a streamed request: each response (outputs asked for in shared memory already
 * written, their parameters in `written`) or error as the model sends it; `undefined` for a final flag
 * without a response.
 */
export type StreamSink = (
  response: InferResponse | ServerError | undefined,
  written: ShmWritten | undefined,
  final: boolean,
) => void;

/** What the pipeline needs besides the models. */
export interface PipelineOptions {
  /** System shared-memory regions; without them no request may name shared memory. */
  shm?: SystemSharedMemory | undefined;
  /** CUDA shared-memory regions. */
  cudaShm?: CudaSharedMemory | undefined;
  /** The trace extension. */
  traces?: TraceManager | undefined;
}

/** The one inference path of the server. */
export class InferencePipeline {
  /** The models. */
  readonly registry: ModelRegistry;
  /** The count of requests arriving from clients: the registry's, which its dynamic batchers read. */
  readonly arrivals: ArrivalCounter;
  readonly #shm: SystemSharedMemory | undefined;
  readonly #cuda: CudaSharedMemory | undefined;
  readonly #traces: TraceManager | undefined;

  /**
   * Creates the pipeline over a registry and connects the registry's models to it (their ensemble steps and
   * BLS calls run through it).
   * @param registry the models
   * @param options shared memory and traces
   */
  constructor(registry: ModelRegistry, options: PipelineOptions = {}) {
    this.registry = registry;
    this.arrivals = registry.arrivals;
    this.#shm = options.shm;
    this.#cuda = options.cudaShm;
    this.#traces = options.traces;
    registry.connect({
      infer: (request) => this.#modelInfer(request),
      inferStream: (request, sink) => this.#modelStream(request, sink),
    });
  }

  /**
   * Takes a request in: counts its arrival (for client endpoints), resolves the model version it names (the
   * one every later step uses) and applies the decoupled rule.
   * @param model the model name
   * @param version the version ("" for the policy's choice)
   * @param endpoint where it came in
   * @param again whether the request was taken in before (its version was replaced meanwhile): not counted twice
   * @returns the version that serves it
   * @throws ServerError NOT_FOUND / UNAVAILABLE for a model that cannot serve, the endpoint's refusal for a
   *   decoupled model on an endpoint that does not stream
   */
  accept(model: string, version: string, endpoint: Endpoint, again = false): ModelVersion {
    if (endpoint.counted && !again) this.arrivals.arrived();
    const mv = this.registry.resolve(model, version);
    if (mv.decoupled && !endpoint.streaming) {
      throw new ServerError(endpoint.refusalCode, endpoint.refusal.replace("{model}", mv.name));
    }
    return mv;
  }

  /**
   * Whether requests to a model may be traced (see TraceManager.mayTrace): where not, the frontend need not
   * take the times of reading a request (Exchange.recvStart, recvEnd).
   * @param model the model name
   */
  mayTrace(model: string): boolean {
    return this.#traces !== undefined && this.#traces.mayTrace(model);
  }

  /**
   * A shared-memory session for one request, whose reader the frontend's decoder uses; undefined when the
   * server has no shared memory.
   */
  shmSession(): ShmSession | undefined {
    return this.#shm ? new ShmSession(this.#shm, this.#cuda) : undefined;
  }

  /**
   * Runs a request on the version `accept` resolved and hands the response to the frontend's encoder.
   * @param mv the version from `accept`
   * @param request the decoded request
   * @param exchange where it came in, its shared-memory session and when it was read
   * @param respond encodes the response (with the parameters of the outputs written to shared memory); the
   *   trace's send marks are taken around it
   * @returns what `respond` returns
   */
  infer<T>(
    mv: ModelVersion,
    request: InferRequest,
    exchange: Exchange,
    respond: (response: InferResponse, written: ShmWritten | undefined) => T | Promise<T>,
  ): Promise<T> {
    const session = exchange.shm;
    let trace: RequestTrace | undefined;
    let shared: boolean;
    try {
      trace = this.#startTrace(mv, request, exchange);
      shared = session === undefined ? refuseShmOutputs(request) : session.begin(request);
    } catch (err) {
      trace?.end();
      return Promise.reject(err);
    }
    // The common request (not traced, no output in shared memory) goes straight through.
    if (trace === undefined && !shared) {
      const arrivals = this.arrivals;
      arrivals.started();
      return mv.infer(request, exchange.validated).then((response) => {
        arrivals.finished();
        return respond(response, undefined);
      }, (err) => {
        arrivals.finished();
        throw err;
      });
    }
    return this.#inferWith(mv, request, exchange, respond, trace, shared);
  }

  /** infer for a request that is traced or uses shared memory (its session has begun when `shared`). */
  async #inferWith<T>(
    mv: ModelVersion,
    request: InferRequest,
    exchange: Exchange,
    respond: (response: InferResponse, written: ShmWritten | undefined) => T | Promise<T>,
    trace: RequestTrace | undefined,
    shared: boolean,
  ): Promise<T> {
    const session = exchange.shm;
    const marks = exchange.endpoint.marks;
    try {
      if (shared) await session!.copyIn(request);
      let response: InferResponse;
      this.arrivals.started();
      try {
        response = await mv.infer(request, exchange.validated);
      } finally {
        this.arrivals.finished();
        trace?.mark("REQUEST_END");
      }
      const written = shared ? await session!.write(response) : undefined;
      if (trace === undefined) return await respond(response, written);
      if (marks[2] !== undefined) trace.mark(marks[2]);
      const out = await respond(response, written);
      if (marks[3] !== undefined) trace.mark(marks[3]);
      return out;
    } finally {
      if (shared) session!.end();
      trace?.end();
    }
  }

  /**
   * Runs a request on the version `accept` resolved, for callers that use the response itself (no encoder
   * of their own, or one that runs elsewhere: the trace's send marks are taken as it is handed back).
   * @param mv the version from `accept`
   * @param request the decoded request
   * @param exchange where it came in, its shared-memory session and when it was read
   */
  run(mv: ModelVersion, request: InferRequest, exchange: Exchange): Promise<InferResponse> {
    return this.infer(mv, request, exchange, identity);
  }

  /**
   * Runs a request on the version `accept` resolved and hands its responses to `sink` as they come: the one
   * response of an ordinary model, or any number of responses of a decoupled model, the last call with
   * `final` set. The outputs asked for in shared memory are written before each response goes to the sink,
   * one response after the other.
   * @param mv the version from `accept`
   * @param request the decoded request
   * @param exchange where it came in, its shared-memory session and when it was read
   * @param sink receives the responses
   * @returns resolves after the final response; rejects when the request fails as a whole before it (then
   *   only the responses the model sent before the failure reached the sink)
   */
  async stream(mv: ModelVersion, request: InferRequest, exchange: Exchange, sink: StreamSink): Promise<void> {
    const trace = this.#startTrace(mv, request, exchange);
    const session = exchange.shm;
    const [, , sendStart, sendEnd] = exchange.endpoint.marks;
    let shared = false;
    let sent = false;
    const deliver = (
      response: InferResponse | ServerError | undefined,
      written: ShmWritten | undefined,
      final: boolean,
    ) => {
      if (trace && !sent && sendStart !== undefined) trace.mark(sendStart);
      sent = true;
      sink(response, written, final);
    };
    let delivered: Promise<void> = Promise.resolve();
    this.arrivals.started();
    try {
      shared = session === undefined ? refuseShmOutputs(request) : session.begin(request);
      if (shared) await session!.copyIn(request);
      if (!mv.decoupled) {
        let response: InferResponse;
        try {
          response = await mv.infer(request, exchange.validated);
        } finally {
          trace?.mark("REQUEST_END");
        }
        deliver(response, shared ? await session!.write(response) : undefined, true);
        return;
      }
      let open = true;
      let finish!: () => void;
      const done = new Promise<void>((resolve) => (finish = resolve));
      const received = nowNs();
      let previous: number | undefined;
      request.stream = (response, final) => {
        if (!open) return;
        if (response !== undefined) {
          const now = nowNs();
          mv.stats.recordResponse(now - received, previous === undefined ? undefined : now - previous);
          previous = now;
        }
        if (final) open = false;
        if (!shared || response === undefined || response instanceof Error) {
          // In order behind the responses still being written to shared memory.
          if (shared) delivered = delivered.then(() => deliver(response, undefined, final));
          else deliver(response, undefined, final);
        } else {
          delivered = delivered.then(async () => {
            let written: ShmWritten | undefined;
            try {
              written = await session!.write(response);
            } catch (err) {
              return deliver(toServerError(err), undefined, final);
            }
            deliver(response, written, final);
          });
        }
        // A failing sink must not leave a rejection behind.
        if (shared) delivered = delivered.catch(() => {});
        if (final) delivered.then(finish);
      };
      try {
        await mv.infer(request, exchange.validated);
      } catch (err) {
        // After the final response the request is over for the client: a late failure is not reported twice.
        if (!open) return;
        open = false;
        throw err;
      } finally {
        trace?.mark("REQUEST_END");
      }
      await done;
    } finally {
      // Responses still being written to their regions finish before the regions are released.
      if (shared) {
        await delivered;
        session!.end();
      }
      if (trace) {
        if (sent && sendEnd !== undefined) trace.mark(sendEnd);
        trace.end();
      }
      this.arrivals.finished();
    }
  }

  /** Samples the trace of a request and records what happened before the pipeline ran it. */
  #startTrace(mv: ModelVersion, request: InferRequest, exchange: Exchange): RequestTrace | undefined {
    const trace = this.#traces?.sample(mv.name, String(mv.version), request.id);
    if (trace === undefined) return undefined;
    request.trace = trace;
    const [recvStart, recvEnd] = exchange.endpoint.marks;
    if (recvStart !== undefined && exchange.recvStart !== undefined) {
      trace.mark(recvStart, exchange.recvStart);
    }
    if (recvEnd !== undefined && exchange.recvEnd !== undefined) trace.mark(recvEnd, exchange.recvEnd);
    trace.mark("REQUEST_START");
    trace.recordTensors("TENSOR_QUEUE_INPUT", request.inputs);
    return trace;
  }

  /** A request a model makes (an ensemble step, a BLS call). */
  #modelInfer(request: InferRequest): Promise<InferResponse> {
    let mv: ModelVersion;
    try {
      mv = this.accept(request.model, request.version, ENDPOINTS.model);
    } catch (err) {
      return Promise.reject(err);
    }
    return this.run(mv, request, { endpoint: ENDPOINTS.model });
  }

  /** A streamed request a model makes (BLS `exec(decoupled=True)`). */
  async #modelStream(request: InferRequest, sink: ResponseSink): Promise<void> {
    const mv = this.accept(request.model, request.version, ENDPOINTS.modelStream);
    await this.stream(mv, request, { endpoint: ENDPOINTS.modelStream }, (response, _written, final) => {
      sink(response, final);
    });
  }
}

function identity(response: InferResponse): InferResponse {
  return response;
}

/**
 * Refuses a request whose outputs name shared memory where the server has none.
 * @returns false: the request uses no shared memory
 */
function refuseShmOutputs(request: InferRequest): false {
  for (const o of request.outputs) {
    if (o.parameters.shared_memory_region !== undefined) {
      throw invalidArg(`Cannot write output '${o.name}': shared memory is not available`);
    }
  }
  return false;
}
