/**
 * The gRPC frontend's options.
 * @module
 */

import type { FrontendOptions } from "../frontend.ts";

/** What the gRPC frontend serves and how. */
export interface GrpcOptions extends FrontendOptions {
  /** Listen address. */
  address: string;
  /** Listen port; 0 picks a free one. */
  port: number;
  /** HTTP/2 keepalive: ping interval and acknowledgement timeout (ms), pings without calls or data. */
  keepalive: { timeMs: number; timeoutMs: number; permitWithoutCalls: boolean; maxPingsWithoutData: number };
  /** The most connections open at once (`--grpc-max-connections`); 0 for no limit. */
  maxConnections: number;
  /** Response compression for infer responses. */
  compressionLevel: "none" | "low" | "medium" | "high";
  /**
   * TLS: PEM file paths of the server's certificate and key, and of the root certificate client certificates
   * must chain to ("" for none); plain TCP without it.
   */
  tls?: { serverCert: string; serverKey: string; rootCert: string };
  /** Whether listener threads join the port (`reusePort`); false unless given. */
  reusePort?: boolean;
  /** The count of open connections, shared with the listener threads; the server's own unless given. */
  open?: Int32Array;
}
