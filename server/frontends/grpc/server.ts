/**
 * The gRPC frontend's server: `inference.GRPCInferenceService` and `grpc.health.v1.Health` on `@grpc/grpc-js`
 * (protobufjs doing the (de)serialization) over the inference pipeline; the listener, TLS, the GOAWAY filter,
 * the restricted protocols and shutdown. The methods live in unary.ts, infer.ts and stream.ts.
 * @module
 */

import * as grpc from "@grpc/grpc-js";
import { closeGracefully, connectionCount, grpcServerOptions, listenGrpc } from "./listen.ts";
import type { RemoteMethod } from "./remote.ts";
import type { InferencePipeline } from "../../pipeline/pipeline.ts";
import type { ApiGroup } from "../restricted.ts";
import { CallCounter, type GrpcDeps, restriction, SERVICE } from "./_calls.ts";
import { installGrpcJsPatches } from "./framing.ts";
import type { GrpcOptions } from "./options.ts";
import { UNARY_METHODS, unaryMethod } from "./unary.ts";
import { INFER_GROUP, modelInfer } from "./infer.ts";
import { modelStreamInfer, STREAM_GROUP } from "./stream.ts";

export type { GrpcOptions } from "./options.ts";

/** A running gRPC server. */
export interface GrpcServer {
  /** The bound port. */
  port: number;
  /** Stops accepting calls and waits for the running ones. */
  shutdown(): Promise<void>;
  /** Cancels every call and stops at once. */
  forceShutdown(): void;
  /** The methods served, by name: what the listener threads forward runs through them (see remote.ts). */
  methods: ReadonlyMap<string, RemoteMethod>;
}

export { HANDSHAKE_TIMEOUT_MS } from "./listen.ts";

/** The API group of every method, as the method tables declare it. */
export const GRPC_METHOD_GROUPS: Readonly<Record<string, ApiGroup>> = {
  ...Object.fromEntries(UNARY_METHODS.map((m) => [m.name, m.group])),
  ModelInfer: INFER_GROUP,
  ModelStreamInfer: STREAM_GROUP,
};

/** A unary handler behind its group's restriction. */
function restrictUnary<Req, Res>(
  handler: grpc.handleUnaryCall<Req, Res>,
  group: ApiGroup,
  options: GrpcOptions,
): grpc.handleUnaryCall<Req, Res> {
  const denied = restriction(options.restrictions?.[group]);
  if (!denied) return handler;
  return (call, callback) => {
    const status = denied(call.metadata);
    if (status) callback(status);
    else handler(call, callback);
  };
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
  if (!installGrpcJsPatches()) {
    options.logger?.warning(
      "gRPC: @grpc/grpc-js is not a version whose message framing dinfer adapts (server/frontends/grpc/framing.ts); large messages take a copy more",
    );
  }
  const calls = new CallCounter();
  const deps: GrpcDeps = { pipeline, options, calls };
  const services = new Map<string, {
    definitions: Record<string, grpc.MethodDefinition<unknown, unknown>>;
    handlers: grpc.UntypedServiceImplementation;
  }>();
  const add = (
    service: string,
    name: string,
    definition: grpc.MethodDefinition<unknown, unknown>,
    handler: grpc.UntypedHandleCall,
  ) => {
    let s = services.get(service);
    if (!s) services.set(service, s = { definitions: {}, handlers: {} });
    s.definitions[name] = definition;
    s.handlers[name] = handler;
  };
  for (const m of UNARY_METHODS) {
    const { definition, handler } = unaryMethod(m, deps);
    add(m.service ?? SERVICE, m.name, definition, restrictUnary(handler, m.group, options));
  }
  const infer = modelInfer(deps);
  add(SERVICE, "ModelInfer", infer.definition, restrictUnary(infer.handler, INFER_GROUP, options));
  const stream = modelStreamInfer(deps);
  const streamDenied = restriction(options.restrictions?.[STREAM_GROUP]);
  add(
    SERVICE,
    "ModelStreamInfer",
    stream.definition,
    streamDenied
      ? (call: grpc.ServerDuplexStream<Record<string, unknown>, Record<string, unknown>>) => {
        const status = streamDenied(call.metadata);
        if (status) call.emit("error", status);
        else stream.handler(call);
      }
      : stream.handler,
  );

  const server = new grpc.Server(grpcServerOptions(options));
  for (const s of services.values()) server.addService(s.definitions, s.handlers);
  const open = options.open ?? connectionCount();
  const listener = await listenGrpc(
    server,
    options,
    open,
    options.reusePort ?? false,
    (message) => options.logger?.error(message),
  );
  const methods = new Map<string, RemoteMethod>();
  for (const s of services.values()) {
    for (const [name, definition] of Object.entries(s.definitions)) {
      methods.set(name, { definition, handler: s.handlers[name]! });
    }
  }
  return {
    port: listener.port,
    methods,
    // No new connections; the calls in progress finish (the caller bounds the wait with --exit-timeout-secs),
    // then the connections close once their answers have left (see closeGracefully).
    shutdown: async () => {
      listener.close();
      await calls.idle();
      await closeGracefully(server, listener);
    },
    forceShutdown: () => {
      listener.close();
      listener.destroy();
      server.forceShutdown();
    },
  };
}
