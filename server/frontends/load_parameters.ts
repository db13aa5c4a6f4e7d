/**
 * The parameters of a repository-extension load request, read the same way for HTTP and gRPC: `config` (a
 * JSON model configuration that replaces config.pbtxt) and `file:<version>/<name>` entries (the model's
 * files). The frontends hand each parameter's value as their wire carries it: text (JSON strings, gRPC
 * `string_param`), bytes (gRPC `bytes_param`) or another value.
 * @module
 */

import { invalidArg } from "../core/errors.ts";
import type { LoadOptions } from "../models/registry.ts";

/**
 * Reads the load options of a load request; parameters other than `config` and `file:` entries are ignored.
 * @param model the model name (for messages)
 * @param params the parameters by name, each as its wire carries it
 * @param filesAsBase64 whether file contents come as base64 text (HTTP's JSON) rather than bytes (gRPC)
 * @returns the config override and the files
 * @throws ServerError INVALID_ARG naming the parameter that is wrong
 */
export function loadOptions(
  model: string,
  params: Record<string, unknown>,
  filesAsBase64: boolean,
): LoadOptions {
  const files = new Map<string, Uint8Array>();
  let config: string | undefined;
  for (const [k, v] of Object.entries(params)) {
    if (k === "config") {
      if (typeof v !== "string") {
        throw invalidArg(`Cannot load '${model}': parameter 'config' must be a string holding JSON`);
      }
      config = v;
    } else if (k.startsWith("file:")) {
      if (filesAsBase64 ? typeof v !== "string" : !(v instanceof Uint8Array)) {
        throw invalidArg(
          `Cannot load '${model}': parameter '${k}' must be ${filesAsBase64 ? "base64 text" : "bytes"}`,
        );
      }
      files.set(k.slice(5), typeof v === "string" ? decodeBase64(v, model, k) : v as Uint8Array);
    }
  }
  return config === undefined ? { files } : { config, files };
}

function decodeBase64(text: string, model: string, key: string): Uint8Array {
  try {
    return Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
  } catch {
    throw invalidArg(`Cannot load '${model}': parameter '${key}' is not valid base64`);
  }
}
