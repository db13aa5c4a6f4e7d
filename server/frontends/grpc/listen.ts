/**
 * What the main thread's gRPC server and the listener threads' share: grpc-js's server options, and the listener
 * that accepts connections (TLS terminated here when `--grpc-use-ssl`), bounds them (`--grpc-max-connections`,
 * counted across threads), and hands each to grpc-js through the filter that drops clients' GOAWAY frames.
 * @module
 */

import { Buffer } from "node:buffer";
import type * as grpc from "@grpc/grpc-js";
import { ServerCredentials } from "@grpc/grpc-js";
import net from "node:net";
import tls from "node:tls";
import { setImmediate } from "node:timers";
import { GoawayFilter } from "./goaway_filter.ts";
import type { GrpcOptions } from "./options.ts";
import { settleWithin } from "../../core/clock.ts";

/** How long a new connection may stay silent before it is closed, in ms. */
export const HANDSHAKE_TIMEOUT_MS = 10_000;

/** The largest message accepted or sent: 2 GiB - 1, so that 2 GB tensors fit. */
const MAX_MESSAGE = 2 ** 31 - 1;

/** The options of a gRPC listener, which the listener threads receive by message. */
export type GrpcListenOptions = Pick<
  GrpcOptions,
  "address" | "port" | "keepalive" | "maxConnections" | "compressionLevel" | "tls"
>;

/** grpc-js's server options for a listener's options. */
export function grpcServerOptions(options: GrpcListenOptions): grpc.ServerOptions {
  const level = { none: 0, low: 1, medium: 2, high: 2 }[options.compressionLevel];
  return {
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
  };
}

/** A listening gRPC port. */
export interface GrpcListener {
  /** The bound port. */
  port: number;
  /** Stops accepting connections. */
  close(): void;
  /**
   * Closes every open connection, each once what its session wrote has left.
   * @returns when every connection's socket has closed (at most END_GRACE_MS on, see goaway_filter.ts)
   */
  closeConnections(): Promise<void>;
  /** Closes the connections and grpc-js's hold on them at once. */
  destroy(): void;
}

/**
 * Listens for gRPC connections and hands them to a grpc-js server.
 * @param server the grpc-js server, its services added
 * @param options address, port, limits, TLS
 * @param open the count of open gRPC connections, shared by every thread that listens on the port
 * @param reusePort whether other threads listen on the same port (the kernel spreads connections over them)
 * @param onError reports a failed accept (e.g. out of file descriptors), which does not stop the listener
 */
export async function listenGrpc(
  server: grpc.Server,
  options: GrpcListenOptions,
  open: Int32Array,
  reusePort: boolean,
  onError: (message: string) => void,
): Promise<GrpcListener> {
  // The listener accepts the connections itself and hands grpc-js each one through a filter that drops the
  // clients' GOAWAY frames, which can crash Deno's node:http2 (see goaway_filter.ts).
  const injector = server.createConnectionInjector(ServerCredentials.createInsecure());
  const connections = new Set<GoawayFilter>();
  /** The accepted sockets not yet closed, which a shutdown waits for. */
  const sockets = new Set<net.Socket>();
  const accept = (socket: net.Socket) => {
    // Past --grpc-max-connections (all threads together) a new connection is closed at once; one that sends
    // nothing for HANDSHAKE_TIMEOUT_MS after connecting (no HTTP/2 preface) is closed then.
    if (Atomics.add(open, 0, 1) >= options.maxConnections && options.maxConnections > 0) {
      Atomics.sub(open, 0, 1);
      socket.destroy();
      return;
    }
    let counted = true;
    const uncount = () => {
      if (counted) Atomics.sub(open, 0, 1);
      counted = false;
    };
    const silent = setTimeout(() => socket.destroy(), HANDSHAKE_TIMEOUT_MS);
    sockets.add(socket);
    socket.once("data", () => clearTimeout(silent));
    socket.once("close", () => {
      clearTimeout(silent);
      sockets.delete(socket);
      uncount();
    });
    socket.setNoDelay(true);
    const connection = new GoawayFilter(socket);
    connections.add(connection);
    connection.on("close", () => {
      connections.delete(connection);
      uncount();
    });
    injector.injectConnection(connection);
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
    listener.listen({ port: options.port, host: options.address, reusePort }, () => {
      listener.off("error", reject);
      resolve((listener.address() as net.AddressInfo).port);
    });
  });
  listener.on("error", (err) => onError(`gRPC listener: ${err.message}`));
  const closeConnections = async () => {
    for (const c of connections) c.destroy();
    connections.clear();
    // Each socket ends after its last bytes (a session that closed itself ended its socket the same way), and is
    // destroyed once closed or after the filter's grace; a thread must not end before, or those bytes are lost.
    await settleWithin(
      Promise.all([...sockets].map((s) => new Promise<void>((resolve) => s.once("close", () => resolve())))),
      2 * CLOSE_GRACE_MS,
    );
    for (const s of sockets) s.destroy();
  };
  return {
    port,
    close: () => listener.close(),
    closeConnections,
    destroy: () => {
      for (const c of connections) c.destroy(new Error("the server stopped"));
      connections.clear();
      for (const s of sockets) s.destroy();
      injector.destroy();
    },
  };
}

/** Event-loop turns a shutdown lets pass after the last call ended, before it closes the sessions. */
const SETTLE_TURNS = 4;

/** How long a shutdown waits for the HTTP/2 sessions to close themselves before it cuts the connections. */
const CLOSE_GRACE_MS = 1000;

/**
 * Closes a server's connections once the answers of its last calls have left: a call counts as ended when its
 * handler answers, but grpc-js writes the call's status only after its message is written, and the connection
 * wrapper holds writes for a few event-loop turns (goaway_filter.ts), so connections cut at once lost the last
 * answers. grpc-js's `tryShutdown` closes each session when its streams have ended (a GOAWAY, then the end of
 * the connection); what is still open after CLOSE_GRACE_MS is cut.
 * @param server the grpc-js server
 * @param listener its connections
 */
export async function closeGracefully(server: grpc.Server, listener: GrpcListener): Promise<void> {
  // The last calls' statuses are still inside node:http2, which sends a stream's trailers two turns after the
  // call's answer (see FLUSH_TURNS in goaway_filter.ts); a session closed before then lost them.
  for (let turn = 0; turn < SETTLE_TURNS; turn++) await new Promise<void>((resolve) => setImmediate(resolve));
  await settleWithin(new Promise<void>((resolve) => server.tryShutdown(() => resolve())), CLOSE_GRACE_MS);
  await listener.closeConnections();
}

/** A count of open connections that threads can share. */
export function connectionCount(): Int32Array {
  return new Int32Array(new SharedArrayBuffer(Int32Array.BYTES_PER_ELEMENT));
}
