/**
 * The gRPC frontend: `inference.GRPCInferenceService` and `grpc.health.v1.Health` on `@grpc/grpc-js`,
 * with protobufjs doing the (de)serialization, over the same registry as HTTP.
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import net from "node:net";
import tls from "node:tls";
import { GoawayFilter } from "./goaway_filter.ts";
import { loadOptions } from "../load_parameters.ts";
import type * as protobuf from "protobufjs";
import { grpcStatus, invalidArg, type ServerError, toServerError, unsupported } from "../../core/errors.ts";
import { lookupType } from "../../core/protos.ts";
import type { ModelVersion } from "../../models/model_version.ts";
import { type Endpoint, ENDPOINTS, type InferencePipeline } from "../../pipeline/pipeline.ts";
import { nowNs } from "../../core/clock.ts";
import { type FrontendOptions, serverReady } from "../frontend.ts";
import { GRPC_METHOD_GROUPS, GRPC_RESTRICTED_PREFIX, matchesRestriction } from "../restricted.ts";
import {
  decodeModelInferRequest,
  encodeModelInferResponse,
  longToNumber,
  type ModelInferRequestMessage,
} from "./infer_codec.ts";

/** What the gRPC frontend serves and how. */
export interface GrpcOptions extends FrontendOptions {
  /** Listen address. */
  address: string;
  /** Listen port; 0 picks a free one. */
  port: number;
  /** Keepalive and message settings. */
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  keepalivePermitWithoutCalls: boolean;
  http2MaxPingsWithoutData: number;
  /** The most connections open at once (`--grpc-max-connections`); 0 for no limit. */
  maxConnections: number;
  /** Response compression for infer responses. */
  compressionLevel: "none" | "low" | "medium" | "high";
  /** TLS: PEM file paths; no TLS when `useSsl` is false. */
  useSsl: boolean;
  serverCert: string;
  serverKey: string;
  rootCert: string;
}

/** A running gRPC server. */
export interface GrpcServer {
  /** The bound port. */
  port: number;
  /** Stops accepting calls and waits for the running ones. */
  shutdown(): Promise<void>;
  /** Cancels every call and stops at once. */
  forceShutdown(): void;
}

/** How long a new connection may stay silent before it is closed, in ms. */
export const HANDSHAKE_TIMEOUT_MS = 10_000;

/** The largest message accepted or sent: 2 GiB - 1, so that 2 GB tensors fit. */
const MAX_MESSAGE = 2 ** 31 - 1;

const SERVICE = "inference.GRPCInferenceService";

type Unary = (request: Record<string, unknown>) => Record<string, unknown> | Promise<Record<string, unknown>>;

function codec(type: protobuf.Type, plainEncode: boolean) {
  return {
    serialize: (value: Record<string, unknown>): Buffer => {
      const bytes = type.encode(plainEncode ? value : type.fromObject(value)).finish();
      return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    },
    deserialize: (buf: Buffer): Record<string, unknown> => {
      // A message that does not decode is the client's error: the handler answers INVALID_ARGUMENT (grpc-js
      // would answer INTERNAL for a deserializer that throws).
      try {
        return type.decode(buf) as unknown as Record<string, unknown>;
      } catch (err) {
        return { [UNDECODABLE]: (err as Error).message };
      }
    },
  };
}

/** Marks a request message that did not decode; the value is the protobuf error. */
const UNDECODABLE = Symbol("undecodable");

/** The INVALID_ARGUMENT error for a message that did not decode, or undefined for a decoded one. */
function undecodable(msg: Record<string | symbol, unknown>, method: string): ServerError | undefined {
  const why = msg[UNDECODABLE];
  return why === undefined ? undefined : invalidArg(`Cannot read the ${method} request: ${String(why)}`);
}

type Codec = ReturnType<typeof codec>;

/** A method definition of a service: its path, streaming flags and (de)serializers. */
function method(
  path: string,
  request: Codec,
  response: Codec,
  streaming = false,
): grpc.MethodDefinition<unknown, unknown> {
  return {
    path,
    requestStream: streaming,
    responseStream: streaming,
    requestSerialize: request.serialize,
    requestDeserialize: request.deserialize,
    responseSerialize: response.serialize,
    responseDeserialize: response.deserialize,
    originalName: path.slice(path.lastIndexOf("/") + 1),
  } as grpc.MethodDefinition<unknown, unknown>;
}

function grpcError(err: unknown): Partial<grpc.StatusObject> {
  const e = toServerError(err);
  return { code: grpcStatus(e.code), details: e.message };
}

/**
 * Puts the restricted groups' check in front of their handlers: a call without the metadata key
 * `triton-grpc-protocol-<key>` holding the expected value ends with PERMISSION_DENIED before its handler runs.
 * @param handlers the service's handlers by method name, changed in place
 * @param options the frontend options with the restrictions
 */
function restrict(handlers: grpc.UntypedServiceImplementation, options: GrpcOptions): void {
  const restrictions = options.restrictions ?? {};
  for (const [name, handler] of Object.entries(handlers)) {
    const group = GRPC_METHOD_GROUPS[name];
    if (group === undefined) throw new Error(`gRPC method '${name}' belongs to no API group`);
    const rule = restrictions[group];
    if (!rule) continue;
    const key = `${GRPC_RESTRICTED_PREFIX}${rule.key}`.toLowerCase();
    const denied = (metadata: grpc.Metadata): Partial<grpc.StatusObject> | undefined => {
      const given = metadata.get(key)[0];
      if (matchesRestriction(typeof given === "string" ? given : undefined, rule.value)) return undefined;
      return {
        code: grpc.status.PERMISSION_DENIED,
        details: `This protocol is restricted, expecting header '${key}'`,
      };
    };
    const h = handler as (...args: unknown[]) => void;
    if (name === "ModelStreamInfer") {
      handlers[name] = (call: grpc.ServerDuplexStream<unknown, unknown>) => {
        const status = denied(call.metadata);
        if (status) call.emit("error", status);
        else h(call);
      };
    } else {
      handlers[name] = (
        call: grpc.ServerUnaryCall<unknown, unknown>,
        callback: grpc.sendUnaryData<unknown>,
      ) => {
        const status = denied(call.metadata);
        if (status) callback(status);
        else h(call, callback);
      };
    }
  }
}

/**
 * Starts the gRPC server.
 * @param pipeline the inference pipeline (and, through it, the models)
 * @param options address, limits, TLS
 */
export async function startGrpcServer(
  pipeline: InferencePipeline,
  options: GrpcOptions,
): Promise<GrpcServer> {
  const registry = pipeline.registry;
  const ready = () => serverReady(registry, options);
  const service: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  const handlers: grpc.UntypedServiceImplementation = {};

  // Calls in progress, so that a graceful shutdown waits for them (grpc-js cannot see the calls of injected
  // connections finish: Deno's node:http2 reports their sessions closed at once).
  let active = 0;
  let idle: (() => void) | undefined;
  const begin = () => {
    active++;
  };
  const end = () => {
    active--;
    if (active === 0) idle?.();
  };
  const unary = (name: string, impl: Unary, plainResponse = false) => {
    const req = codec(lookupType(`${name}Request`), false);
    const res = codec(lookupType(`${name}Response`), plainResponse);
    service[name] = method(`/${SERVICE}/${name}`, req, res);
    handlers[name] = (
      call: grpc.ServerUnaryCall<Record<string, unknown>, Record<string, unknown>>,
      callback: grpc.sendUnaryData<Record<string, unknown>>,
    ) => {
      const bad = undecodable(call.request, name);
      if (bad) {
        callback(grpcError(bad));
        return;
      }
      begin();
      let result;
      try {
        result = impl(call.request);
      } catch (err) {
        end();
        callback(grpcError(err));
        return;
      }
      Promise.resolve(result).then((r) => callback(null, r), (err) => callback(grpcError(err))).finally(end);
    };
  };

  unary("ServerLive", () => ({ live: true }));
  unary("ServerReady", () => ({ ready: ready() }));
  unary("ModelReady", (r) => ({ ready: registry.isReady(String(r.name), String(r.version ?? "")) }));
  unary("ServerMetadata", () => ({
    name: options.serverName,
    version: options.serverVersion,
    extensions: options.extensions,
  }));
  unary("ModelMetadata", (r) => ({ ...registry.metadata(String(r.name), String(r.version ?? "")) }));
  unary("RepositoryIndex", async (r) => ({ models: await registry.index(r.ready === true) }));
  unary("RepositoryModelLoad", async (r) => {
    const name = String(r.model_name ?? "");
    const params: Record<string, unknown> = {};
    for (const [k, p] of Object.entries((r.parameters ?? {}) as Record<string, Record<string, unknown>>)) {
      const choice = p.parameter_choice as string | undefined;
      params[k] = choice === undefined ? undefined : p[choice];
    }
    await registry.loadModel(name, loadOptions(name, params, false));
    return {};
  });
  unary("RepositoryModelUnload", async (r) => {
    const params = (r.parameters ?? {}) as Record<string, Record<string, unknown>>;
    const dependents = params.unload_dependents;
    await registry.unloadModel(String(r.model_name ?? ""), {
      unloadDependents: dependents?.parameter_choice === "bool_param" && dependents.bool_param === true,
    });
    return {};
  });
  unary("LogSettings", (r) => {
    if (!options.logger) throw unsupported("The logging extension is not available");
    const update: Record<string, unknown> = {};
    for (const [k, v] of Object.entries((r.settings ?? {}) as Record<string, Record<string, unknown>>)) {
      const choice = v.parameter_choice as string | undefined;
      if (choice) update[k] = v[choice];
    }
    const json = options.logger.update(update);
    const settings: Record<string, Record<string, unknown>> = {};
    for (const [k, v] of Object.entries(json)) {
      settings[k] = typeof v === "boolean"
        ? { bool_param: v }
        : typeof v === "number"
        ? { uint32_param: v }
        : { string_param: v };
    }
    return { settings };
  });
  const requireShm = () => {
    if (!shm || !options.cudaShm) throw unsupported("The shared-memory extensions are not available");
    return { system: shm, cuda: options.cudaShm };
  };
  unary("SystemSharedMemoryStatus", (r) => ({
    regions: Object.fromEntries(requireShm().system.status(String(r.name ?? "")).map((x) => [x.name, x])),
  }));
  unary("SystemSharedMemoryRegister", async (r) => {
    await requireShm().system.register(
      String(r.name ?? ""),
      String(r.key ?? ""),
      longToNumber((r.offset ?? 0) as number),
      longToNumber((r.byte_size ?? 0) as number),
    );
    return {};
  });
  unary("SystemSharedMemoryUnregister", (r) => {
    requireShm().system.unregister(String(r.name ?? ""));
    return {};
  });
  unary("CudaSharedMemoryStatus", (r) => ({
    regions: Object.fromEntries(requireShm().cuda.status(String(r.name ?? "")).map((x) => [x.name, x])),
  }));
  unary("CudaSharedMemoryRegister", (r) => {
    const handle = r.raw_handle instanceof Uint8Array ? r.raw_handle : new Uint8Array(0);
    requireShm().cuda.register(
      String(r.name ?? ""),
      handle,
      longToNumber((r.device_id ?? 0) as number),
      longToNumber((r.byte_size ?? 0) as number),
    );
    return {};
  });
  unary("CudaSharedMemoryUnregister", (r) => {
    requireShm().cuda.unregister(String(r.name ?? ""));
    return {};
  });
  unary("TraceSetting", (r) => {
    if (!options.traces) throw unsupported("The trace extension is not available");
    const model = String(r.model_name ?? "");
    const update: Record<string, unknown> = {};
    for (const [k, v] of Object.entries((r.settings ?? {}) as Record<string, { value?: string[] }>)) {
      const values = v.value ?? [];
      update[k] = values.length === 0 ? null : values;
    }
    const json = Object.keys(update).length > 0
      ? options.traces.update(update, model)
      : options.traces.settings(model);
    const settings: Record<string, { value: string[] }> = {};
    for (const [k, v] of Object.entries(json)) settings[k] = { value: Array.isArray(v) ? v : [v] };
    return { settings };
  });
  unary("ModelStatistics", (r) => ({
    model_stats: registry.statistics(String(r.name ?? ""), String(r.version ?? "")),
  }));
  unary("ModelConfig", (r) => ({ config: registry.resolve(String(r.name), String(r.version ?? "")).config }));

  const inferReq = lookupType("ModelInferRequest");
  const inferRes = lookupType("ModelInferResponse");
  const inferReqCodec = codec(inferReq, false);
  const inferResCodec = codec(inferRes, true);
  const shm = options.shm;
  /** Runs a request to a model that is not decoupled (ModelInfer, or one of a stream's requests). */
  const infer = async (msg: Record<string, unknown>, mv: ModelVersion, endpoint: Endpoint) => {
    const received = nowNs();
    const session = pipeline.shmSession();
    const request = decodeModelInferRequest(msg as unknown as ModelInferRequestMessage, session?.reader);
    return await pipeline.infer(
      mv,
      request,
      { endpoint, shm: session, recvEnd: received },
      encodeModelInferResponse,
    );
  };
  service.ModelInfer = method(`/${SERVICE}/ModelInfer`, inferReqCodec, inferResCodec);
  handlers.ModelInfer = (
    call: grpc.ServerUnaryCall<Record<string, unknown>, Record<string, unknown>>,
    callback: grpc.sendUnaryData<Record<string, unknown>>,
  ) => {
    const bad = undecodable(call.request, "ModelInfer");
    if (bad) {
      callback(grpcError(bad));
      return;
    }
    let mv: ModelVersion;
    try {
      mv = pipeline.accept(
        String(call.request.model_name ?? ""),
        String(call.request.model_version ?? ""),
        ENDPOINTS.grpcInfer,
      );
    } catch (err) {
      callback(grpcError(err));
      return;
    }
    begin();
    infer(call.request, mv, ENDPOINTS.grpcInfer).then(
      (r) => callback(null, r),
      (err) => callback(grpcError(err)),
    )
      .finally(end);
  };

  /** A stream message carrying an error for the request `msg`. */
  const streamError = (msg: Record<string, unknown>, err: unknown) => ({
    error_message: toServerError(err).message,
    infer_response: {
      model_name: msg.model_name ?? "",
      model_version: msg.model_version ?? "",
      id: typeof msg.id === "string" ? msg.id : "",
    },
  });
  /**
   * Runs a request to a decoupled model, writing each response as the model sends it. Every response carries
   * `triton_final_response`; a final flag sent alone becomes an empty response only when the request asks
   * for it with `triton_enable_empty_final_response`.
   */
  const inferDecoupled = async (
    msg: Record<string, unknown>,
    mv: ModelVersion,
    write: (out: Record<string, unknown>) => void,
    signal: AbortSignal,
  ) => {
    const received = nowNs();
    const session = pipeline.shmSession();
    const params = (msg.parameters ?? {}) as Record<string, { bool_param?: boolean }>;
    const wantsEmptyFinal = params.triton_enable_empty_final_response?.bool_param === true;
    let ended = false;
    try {
      const request = decodeModelInferRequest(msg as unknown as ModelInferRequestMessage, session?.reader);
      request.signal = signal;
      const exchange = { endpoint: ENDPOINTS.grpcStream, shm: session, recvEnd: received };
      await pipeline.stream(mv, request, exchange, (response, written, final) => {
        if (ended) return;
        ended = final;
        if (response instanceof Error) write(streamError(msg, response));
        else if (response !== undefined) {
          response.parameters.triton_final_response = final;
          write({ error_message: "", infer_response: encodeModelInferResponse(response, written) });
          return;
        }
        if (final && wantsEmptyFinal) write(emptyFinal(msg));
      });
    } catch (err) {
      // The request failed before its final response: the error, then the final flag when it was asked for.
      if (!ended) {
        ended = true;
        write(streamError(msg, err));
        if (wantsEmptyFinal) write(emptyFinal(msg));
      }
    }
  };
  /** The empty response that carries only the final flag (`triton_enable_empty_final_response`). */
  const emptyFinal = (msg: Record<string, unknown>) => ({
    error_message: "",
    infer_response: {
      model_name: msg.model_name ?? "",
      model_version: msg.model_version ?? "",
      id: typeof msg.id === "string" ? msg.id : "",
      parameters: { triton_final_response: { bool_param: true } },
    },
  });

  const streamRes = codec(lookupType("ModelStreamInferResponse"), true);
  service.ModelStreamInfer = method(`/${SERVICE}/ModelStreamInfer`, inferReqCodec, streamRes, true);
  handlers.ModelStreamInfer = (
    call: grpc.ServerDuplexStream<Record<string, unknown>, Record<string, unknown>>,
  ) => {
    // Requests of one stream run concurrently. Responses of ordinary models are written in request order;
    // those of decoupled models as the model sends them.
    begin();
    let open = true;
    const finish = () => {
      if (!open) return;
      open = false;
      end();
    };
    // A cancelled stream is told to the models of its requests that still run (request.is_cancelled()).
    const running = new Set<AbortController>();
    call.on("close", finish);
    call.on("cancelled", () => {
      for (const c of running) c.abort();
      finish();
    });
    let last: Promise<void> = Promise.resolve();
    const streaming = new Set<Promise<void>>();
    const write = (out: Record<string, unknown>) => {
      if (!call.cancelled && !call.writableEnded) call.write(out);
    };
    call.on("data", (msg: Record<string, unknown>) => {
      const bad = undecodable(msg, "ModelStreamInfer");
      if (bad) {
        const answer = streamError({}, bad);
        last = last.then(() => write(answer));
        return;
      }
      let mv: ModelVersion;
      try {
        mv = pipeline.accept(
          String(msg.model_name ?? ""),
          String(msg.model_version ?? ""),
          ENDPOINTS.grpcStream,
        );
      } catch (err) {
        const answer = streamError(msg, err);
        last = last.then(() => write(answer));
        return;
      }
      if (mv.decoupled) {
        const controller = new AbortController();
        if (call.cancelled) controller.abort();
        running.add(controller);
        const task = inferDecoupled(msg, mv, write, controller.signal);
        streaming.add(task);
        task.finally(() => {
          streaming.delete(task);
          running.delete(controller);
        });
        return;
      }
      const answer = infer(msg, mv, ENDPOINTS.grpcStream).then((infer_response) => {
        infer_response.parameters = {
          ...(infer_response.parameters as Record<string, unknown>),
          triton_final_response: { bool_param: true },
        };
        return { error_message: "", infer_response };
      }, (err) => streamError(msg, err));
      last = last.then(async () => write(await answer));
    });
    call.on("end", async () => {
      await last;
      while (streaming.size > 0) await Promise.all([...streaming]);
      if (!call.writableEnded) call.end();
      finish();
    });
    call.on("error", finish);
  };

  restrict(handlers, options);

  const level = { none: 0, low: 1, medium: 2, high: 2 }[options.compressionLevel];
  const server = new grpc.Server({
    "grpc.max_receive_message_length": MAX_MESSAGE,
    "grpc.enable_channelz": 0,
    "grpc.max_send_message_length": MAX_MESSAGE,
    "grpc.keepalive_time_ms": options.keepaliveTimeMs,
    "grpc.keepalive_timeout_ms": options.keepaliveTimeoutMs,
    "grpc.keepalive_permit_without_calls": options.keepalivePermitWithoutCalls ? 1 : 0,
    "grpc.http2.max_pings_without_data": options.http2MaxPingsWithoutData,
    ...(level > 0
      ? { "grpc.default_compression_algorithm": 2, "grpc.default_compression_level": level }
      : {}),
  });
  server.addService(service, handlers);

  // grpc.health.v1.Health/Check: SERVING when the server is ready (service "" or a model name).
  const healthReq = codec(lookupType(".grpc.health.v1.HealthCheckRequest"), false);
  const healthRes = codec(lookupType(".grpc.health.v1.HealthCheckResponse"), false);
  const health: grpc.UntypedServiceImplementation = {
    Check: (
      call: grpc.ServerUnaryCall<Record<string, unknown>, Record<string, unknown>>,
      callback: grpc.sendUnaryData<Record<string, unknown>>,
    ) => {
      const bad = undecodable(call.request, "Check");
      if (bad) {
        callback(grpcError(bad));
        return;
      }
      const svc = String(call.request.service ?? "");
      const ok = svc === "" ? ready() : registry.isReady(svc, "");
      callback(null, { status: ok ? "SERVING" : "NOT_SERVING" });
    },
  };
  restrict(health, options);
  server.addService({ Check: method("/grpc.health.v1.Health/Check", healthReq, healthRes) }, health);

  // The server accepts the connections itself (TLS terminated here when --grpc-use-ssl) and hands grpc-js each
  // one through a filter that drops the clients' GOAWAY frames, which can crash Deno's node:http2 (see
  // goaway_filter.ts).
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const connections = new Set<GoawayFilter>();
  const accept = (socket: net.Socket) => {
    // Past --grpc-max-connections a new connection is closed at once; one that sends nothing for
    // HANDSHAKE_TIMEOUT_MS after connecting (no HTTP/2 preface) is closed then.
    if (options.maxConnections > 0 && connections.size >= options.maxConnections) {
      socket.destroy();
      return;
    }
    const silent = setTimeout(() => socket.destroy(), HANDSHAKE_TIMEOUT_MS);
    socket.once("data", () => clearTimeout(silent));
    socket.once("close", () => clearTimeout(silent));
    socket.setNoDelay(true);
    const connection = new GoawayFilter(socket);
    connections.add(connection);
    connection.on("close", () => connections.delete(connection));
    injector.injectConnection(connection);
  };
  const closeConnections = () => {
    for (const c of connections) c.destroy();
    connections.clear();
  };
  let listener: net.Server;
  if (options.useSsl) {
    const read = (p: string) => Buffer.from(Deno.readFileSync(p));
    // Client certificates are checked when a root certificate is given (as Triton's --grpc-root-cert).
    listener = tls.createServer({
      key: read(options.serverKey),
      cert: read(options.serverCert),
      ...(options.rootCert
        ? { ca: read(options.rootCert), requestCert: true, rejectUnauthorized: true }
        : {}),
      ALPNProtocols: ["h2"],
    }, (socket) => accept(socket));
  } else {
    listener = net.createServer(accept);
  }
  const port = await new Promise<number>((resolve, reject) => {
    listener.once("error", reject);
    listener.listen(options.port, options.address, () => {
      listener.off("error", reject);
      resolve((listener.address() as net.AddressInfo).port);
    });
  });
  // A failed accept (e.g. out of file descriptors) must not take the server down.
  listener.on("error", (err) => options.logger?.error(`gRPC listener: ${err.message}`));
  return {
    port,
    // No new connections; the calls in progress finish (the caller bounds the wait with --exit-timeout-secs),
    // then the connections close.
    shutdown: async () => {
      listener.close();
      if (active > 0) await new Promise<void>((resolve) => (idle = resolve));
      closeConnections();
      server.tryShutdown(() => {});
    },
    forceShutdown: () => {
      listener.close();
      closeConnections();
      injector.destroy();
      server.forceShutdown();
    },
  };
}
