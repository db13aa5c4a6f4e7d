/**
 * The gRPC frontend's server: `inference.GRPCInferenceService` and `grpc.health.v1.Health` on `@grpc/grpc-js`
 * (protobufjs doing the (de)serialization) over the inference pipeline; the listener, TLS, the GOAWAY filter,
 * the restricted protocols and shutdown. The methods live in unary.ts, infer.ts and stream.ts.
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import net from "node:net";
import tls from "node:tls";
import { GoawayFilter } from "./goaway_filter.ts";
import type { InferencePipeline } from "../../pipeline/pipeline.ts";
import { type ApiGroup, GRPC_RESTRICTED_PREFIX, matchesRestriction } from "../restricted.ts";
import { CallCounter, type GrpcDeps, SERVICE } from "./_calls.ts";
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
}

/** How long a new connection may stay silent before it is closed, in ms. */
export const HANDSHAKE_TIMEOUT_MS = 10_000;

/** The largest message accepted or sent: 2 GiB - 1, so that 2 GB tensors fit. */
const MAX_MESSAGE = 2 ** 31 - 1;

/** The API group of every method, as the method tables declare it. */
export const GRPC_METHOD_GROUPS: Readonly<Record<string, ApiGroup>> = {
  ...Object.fromEntries(UNARY_METHODS.map((m) => [m.name, m.group])),
  ModelInfer: INFER_GROUP,
  ModelStreamInfer: STREAM_GROUP,
};

/**
 * The PERMISSION_DENIED check of a restricted group: undefined when the group is open, otherwise a function that
 * answers the status for call metadata without the key `triton-grpc-protocol-<key>` holding the expected value.
 */
function restriction(
  group: ApiGroup,
  options: GrpcOptions,
): ((metadata: grpc.Metadata) => Partial<grpc.StatusObject> | undefined) | undefined {
  const rule = options.restrictions?.[group];
  if (!rule) return undefined;
  const key = `${GRPC_RESTRICTED_PREFIX}${rule.key}`.toLowerCase();
  return (metadata) => {
    const given = metadata.get(key)[0];
    if (matchesRestriction(typeof given === "string" ? given : undefined, rule.value)) return undefined;
    return {
      code: grpc.status.PERMISSION_DENIED,
      details: `This protocol is restricted, expecting header '${key}'`,
    };
  };
}

/** A unary handler behind its group's restriction. */
function restrictUnary<Req, Res>(
  handler: grpc.handleUnaryCall<Req, Res>,
  group: ApiGroup,
  options: GrpcOptions,
): grpc.handleUnaryCall<Req, Res> {
  const denied = restriction(group, options);
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
  const streamDenied = restriction(STREAM_GROUP, options);
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

  const level = { none: 0, low: 1, medium: 2, high: 2 }[options.compressionLevel];
  const server = new grpc.Server({
    "grpc.max_receive_message_length": MAX_MESSAGE,
    "grpc.enable_channelz": 0,
    "grpc.max_send_message_length": MAX_MESSAGE,
    "grpc.keepalive_time_ms": options.keepalive.timeMs,
    "grpc.keepalive_timeout_ms": options.keepalive.timeoutMs,
    "grpc.keepalive_permit_without_calls": options.keepalive.permitWithoutCalls ? 1 : 0,
    "grpc.http2.max_pings_without_data": options.keepalive.maxPingsWithoutData,
    ...(level > 0
      ? { "grpc.default_compression_algorithm": 2, "grpc.default_compression_level": level }
      : {}),
  });
  for (const s of services.values()) server.addService(s.definitions, s.handlers);

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
  const certs = options.tls;
  if (certs) {
    const read = (p: string) => Buffer.from(Deno.readFileSync(p));
    // Client certificates are checked when a root certificate is given (as Triton's --grpc-root-cert).
    listener = tls.createServer({
      key: read(certs.serverKey),
      cert: read(certs.serverCert),
      ...(certs.rootCert ? { ca: read(certs.rootCert), requestCert: true, rejectUnauthorized: true } : {}),
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
      await calls.idle();
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
