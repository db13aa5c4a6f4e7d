/**
 * What the gRPC frontend's handlers share: message (de)serializers, method definitions, the error status of a
 * failure, and the count of calls in progress that a graceful shutdown waits for.
 * @module
 */

import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import type * as protobuf from "protobufjs";
import { grpcStatus, invalidArg, type ServerError, toServerError } from "../../core/errors.ts";
import type { InferencePipeline } from "../../pipeline/pipeline.ts";
import type { GrpcOptions } from "./options.ts";
import { GRPC_RESTRICTED_PREFIX, matchesRestriction, type Restriction } from "../restricted.ts";

/** The service every method but Health/Check belongs to. */
export const SERVICE = "inference.GRPCInferenceService";

/** Marks a request message that did not decode; the value is the protobuf error. */
const UNDECODABLE = Symbol("undecodable");

/**
 * The (de)serializers of one message type.
 * @param type the protobuf type
 * @param plainEncode whether values are encoded as they are (already in the type's shape) rather than through
 *   `fromObject`
 */
export function codec(type: protobuf.Type, plainEncode: boolean) {
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

/** The (de)serializers of one message type. */
export type Codec = ReturnType<typeof codec>;

/**
 * What grpc-js takes of a method's message (de)serializers: a `Codec`, or a listener thread's, which pass bytes
 * through or keep them beside the decoded message (server/frontends/grpc/thread.ts).
 */
export interface MessageCodec {
  serialize(value: unknown): Buffer;
  deserialize(buf: Buffer): unknown;
}

/**
 * The INVALID_ARGUMENT error for a message that did not decode, or undefined for a decoded one.
 * @param msg the request message
 * @param method the method's name, for the message
 */
export function undecodable(msg: Record<string | symbol, unknown>, method: string): ServerError | undefined {
  const why = msg[UNDECODABLE];
  return why === undefined ? undefined : invalidArg(`Cannot read the ${method} request: ${String(why)}`);
}

/**
 * A method definition of a service: its path, streaming flags and (de)serializers.
 * @param path `/<service>/<method>`
 * @param request the request's codec
 * @param response the response's codec
 * @param streaming whether both directions stream
 */
export function method(
  path: string,
  request: MessageCodec,
  response: MessageCodec,
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

/**
 * The PERMISSION_DENIED check of a restricted group (`--grpc-restricted-protocol`): undefined when the group is
 * open, otherwise a function that answers the status for call metadata without the key
 * `triton-grpc-protocol-<key>` holding the expected value.
 * @param rule the group's restriction, if any
 */
export function restriction(
  rule: Restriction | undefined,
): ((metadata: grpc.Metadata) => Partial<grpc.StatusObject> | undefined) | undefined {
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

/**
 * The status a failed call ends with.
 * @param err what was thrown
 */
export function grpcError(err: unknown): Partial<grpc.StatusObject> {
  const e = toServerError(err);
  return { code: grpcStatus(e.code), details: e.message };
}

/**
 * Calls in progress, so that a graceful shutdown waits for them (grpc-js cannot see the calls of injected
 * connections finish: Deno's node:http2 reports their sessions closed at once).
 */
export class CallCounter {
  #active = 0;
  #idle: (() => void) | undefined;

  /** A call began. */
  begin(): void {
    this.#active++;
  }

  /** A call ended. */
  end(): void {
    this.#active--;
    if (this.#active === 0) this.#idle?.();
  }

  /** Resolves when no call is in progress. */
  async idle(): Promise<void> {
    if (this.#active > 0) await new Promise<void>((resolve) => (this.#idle = resolve));
  }
}

/** What the gRPC handlers are built from. */
export interface GrpcDeps {
  /** The inference pipeline (and, through it, the models). */
  pipeline: InferencePipeline;
  /** The frontend's options. */
  options: GrpcOptions;
  /** The calls in progress. */
  calls: CallCounter;
}
