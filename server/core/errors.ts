/**
 * The one error type of dinfer: a Triton status code and a message, mapped once to HTTP and once to gRPC.
 * @module
 */

/** Triton's error codes. */
export type ErrorCode =
  | "INVALID_ARG"
  | "NOT_FOUND"
  | "UNAVAILABLE"
  | "UNSUPPORTED"
  | "INTERNAL"
  | "ALREADY_EXISTS"
  | "CANCELLED"
  | "UNKNOWN";

/** An error with a Triton status code; every failure that reaches a client is one of these. */
export class ServerError extends Error {
  /** The Triton status code. */
  readonly code: ErrorCode;

  /**
   * Creates an error.
   * @param code the Triton status code
   * @param message what failed and why
   */
  constructor(code: ErrorCode, message: string) {
    super(message);
    this.name = "ServerError";
    this.code = code;
  }
}

/** Shorthand for an INVALID_ARG error. */
export function invalidArg(message: string): ServerError {
  return new ServerError("INVALID_ARG", message);
}

/** Shorthand for a NOT_FOUND error. */
export function notFound(message: string): ServerError {
  return new ServerError("NOT_FOUND", message);
}

/** Shorthand for an UNAVAILABLE error. */
export function unavailable(message: string): ServerError {
  return new ServerError("UNAVAILABLE", message);
}

/** Shorthand for an UNSUPPORTED error. */
export function unsupported(message: string): ServerError {
  return new ServerError("UNSUPPORTED", message);
}

/** Shorthand for an INTERNAL error. */
export function internal(message: string): ServerError {
  return new ServerError("INTERNAL", message);
}

const HTTP_STATUS: Record<ErrorCode, number> = {
  INVALID_ARG: 400,
  NOT_FOUND: 404,
  UNAVAILABLE: 503,
  UNSUPPORTED: 501,
  INTERNAL: 500,
  ALREADY_EXISTS: 409,
  CANCELLED: 400,
  UNKNOWN: 400,
};

/** gRPC status numbers (grpc.status). */
const GRPC_STATUS: Record<ErrorCode, number> = {
  INVALID_ARG: 3,
  NOT_FOUND: 5,
  UNAVAILABLE: 14,
  UNSUPPORTED: 12,
  INTERNAL: 13,
  ALREADY_EXISTS: 6,
  CANCELLED: 1,
  UNKNOWN: 2,
};

/**
 * Turns anything thrown into a ServerError; unexpected errors become INTERNAL with their message.
 * @param err what was thrown
 * @returns a ServerError
 */
export function toServerError(err: unknown): ServerError {
  if (err instanceof ServerError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new ServerError("INTERNAL", message);
}

/** The HTTP status for an error code. */
export function httpStatus(code: ErrorCode): number {
  return HTTP_STATUS[code];
}

/** The gRPC status number for an error code. */
export function grpcStatus(code: ErrorCode): number {
  return GRPC_STATUS[code];
}
