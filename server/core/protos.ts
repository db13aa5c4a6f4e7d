/**
 * The protobuf schemas of dinfer's gRPC API and model configuration (`protos/`), loaded once at run time
 * with protobufjs. Field names keep their snake_case spelling (`keepCase`), as in Triton's JSON and text
 * formats.
 * @module
 */

import * as protobuf from "protobufjs";
import { internal } from "./errors.ts";

/** The folder holding the `.proto` files, resolved relative to this module. */
export const PROTOS_DIR: URL = new URL("../../protos/", import.meta.url);

/** The schema files, in dependency order (each file's imports come before it). */
export const PROTO_FILES: readonly string[] = ["model_config.proto", "grpc_service.proto", "health.proto"];

let cachedRoot: protobuf.Root | undefined;

/**
 * Returns the root holding every type of `protos/` (packages `inference` and `grpc.health.v1`), parsing
 * the files on the first call and caching the result.
 * @returns the resolved protobufjs root
 */
export function protoRoot(): protobuf.Root {
  if (cachedRoot) return cachedRoot;
  const root = new protobuf.Root();
  for (const file of PROTO_FILES) {
    const url = new URL(file, PROTOS_DIR);
    let source: string;
    try {
      source = Deno.readTextFileSync(url);
    } catch (err) {
      throw internal(`Cannot read '${url.href}': ${err instanceof Error ? err.message : String(err)}`);
    }
    try {
      // Imports are not followed: every file is parsed into the same root, in dependency order.
      protobuf.parse(source, root, { keepCase: true });
    } catch (err) {
      throw internal(`Cannot parse '${file}': ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  root.resolveAll();
  cachedRoot = root;
  return root;
}

/**
 * Finds a message type by name. A name without a leading dot is looked up in the `inference` package
 * first, then from the root; a leading dot makes it absolute.
 * @param name e.g. `"ModelInferRequest"`, `"ModelInferRequest.InferInputTensor"`,
 *   `"grpc.health.v1.HealthCheckRequest"` or `".inference.ModelConfig"`
 * @returns the message type
 * @example
 * ```ts
 * const bytes = lookupType("ServerLiveResponse").encode({ live: true }).finish();
 * ```
 */
export function lookupType(name: string): protobuf.Type {
  const root = protoRoot();
  const candidates = name.startsWith(".") ? [name] : [`.inference.${name}`, `.${name}`];
  for (const candidate of candidates) {
    const found = root.lookup(candidate, [protobuf.Type]);
    if (found instanceof protobuf.Type) return found;
  }
  throw internal(`Cannot find protobuf message type '${name}': no such type in 'protos/'`);
}

/**
 * Returns the `inference.ModelConfig` message type (the schema of `config.pbtxt`).
 * @returns the message type
 */
export function modelConfigType(): protobuf.Type {
  return lookupType(".inference.ModelConfig");
}
