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
