/**
 * Inference routes: `POST /v2/models/{m}[/versions/{v}]/infer` (JSON, the binary extension, or the raw binary
 * form), and the generate extension's two routes.
 * @module
 */

import { elementSize, fromConfigType } from "../../../core/dtypes.ts";
import { invalidArg } from "../../../core/errors.ts";
import { nowNs } from "../../../core/clock.ts";
import type { InferResponse } from "../../../core/types.ts";
import type { ModelVersion } from "../../../models/model_version.ts";
import { ENDPOINTS } from "../../../pipeline/pipeline.ts";
import type { ShmWritten } from "../../../shm/session.ts";
import { createGenerateHandler } from "../generate.ts";
import {
  type DecodedRequest,
  decodeInferRequest,
  encodeInferResponse,
  HEADER_LENGTH,
  inferResponse,
} from "../infer_codec.ts";
import { bodyLimit, compression, readBody } from "../middleware.ts";
import type { RouteDeps } from "../options.ts";
import { modelPaths, type Route, type RouteContext } from "../router.ts";

/** The one input of the raw binary form (no JSON header): its name, datatype and shape from the model. */
function rawInput(mv: ModelVersion, bytes: number) {
  const inputs = mv.config.input;
  if (inputs.length !== 1) {
    throw invalidArg(
      `Cannot read the inference request for '${mv.name}': the raw binary form needs a model with exactly one input, it has ${inputs.length}`,
    );
  }
  const spec = inputs[0]!;
  const datatype = fromConfigType(spec.data_type)!;
  const batch = mv.config.max_batch_size > 0 ? [1] : [];
  const dims = [...spec.dims];
  const wild = dims.filter((d) => d === -1).length;
  if (wild > 0) {
    const size = datatype === "BYTES"
      ? 0
      : (dims.filter((d) => d > 0).reduce((a, b) => a * b, 1) * elementSize(datatype));
    if (wild > 1 || datatype === "BYTES" || size === 0 || bytes % size !== 0) {
      throw invalidArg(
        `Cannot read the inference request for '${mv.name}': the shape of input '${spec.name}' [${
          dims.join(",")
        }] cannot be derived from ${bytes} bytes of raw data`,
      );
    }
    dims[dims.indexOf(-1)] = bytes / size;
  }
  return { name: spec.name, datatype, shape: [...batch, ...dims] };
}

/**
 * Encodes an inference response as the HTTP answer (the `compression` wrapper compresses it).
 * @param decoded the decoded request (the outputs' binary_data flags, binary_data_output)
 * @param response the inference response
 * @param written the outputs written to shared memory
 */
function answer(decoded: DecodedRequest, response: InferResponse, written: ShmWritten | undefined): Response {
  return inferResponse(encodeInferResponse(response, decoded.request.outputs, decoded.binaryOutput, written));
}

/**
 * The inference routes: infer first (the hot path), then generate and generate_stream.
 * @param deps the pipeline and options
 */
export function inferRoutes({ pipeline, options }: RouteDeps): Route[] {
  /** The infer route: a plain promise chain (reading the body is its only wait). */
  function infer(ctx: RouteContext): Promise<Response> {
    const { request, params } = ctx;
    const model = params.model!;
    const version = params.version ?? "";
    let mv: ModelVersion;
    let headerLength: number | undefined;
    let recvStart: number | undefined;
    let body: Promise<Uint8Array | string>;
    try {
      // The times of reading the body only go into a trace.
      recvStart = pipeline.mayTrace(model) ? nowNs() : undefined;
      // As Triton: an unknown or unavailable model is NOT_FOUND / UNAVAILABLE whatever the body holds.
      mv = pipeline.accept(model, version, ENDPOINTS.httpInfer);
      const hl = request.headers.get(HEADER_LENGTH);
      if (hl !== null) {
        headerLength = Number(hl);
        if (!/^\s*[0-9]+\s*$/.test(hl)) {
          throw invalidArg(
            `Cannot read the inference request for '${model}': Inference-Header-Content-Length '${hl}' is not a number`,
          );
        }
      }
      // A body that is JSON alone (no binary part) is read as text.
      body = headerLength === undefined ? readBody(ctx, true) : readBody(ctx, false, headerLength);
    } catch (err) {
      return Promise.reject(err);
    }
    return body.then((b) => {
      // A reload that finished while the body arrived replaced the version: the request goes to the new one (the
      // old one refuses requests once it unloads). A model gone meanwhile answers as it would have before.
      if (mv.state !== "READY") mv = pipeline.accept(model, version, ENDPOINTS.httpInfer, true);
      return run(mv, b, headerLength, { model, version }, recvStart);
    });
  }

  /** Decodes a read body and runs it through the pipeline. */
  function run(
    mv: ModelVersion,
    body: Uint8Array | string,
    headerLength: number | undefined,
    target: { model: string; version: string },
    recvStart: number | undefined,
  ): Promise<Response> {
    const recvEnd = recvStart === undefined ? undefined : nowNs();
    const shm = pipeline.shmSession();
    const decoded = decodeInferRequest(
      body,
      headerLength,
      target,
      headerLength === 0 ? (bytes) => rawInput(mv, bytes) : undefined,
      shm?.reader,
    );
    return pipeline.infer(
      mv,
      decoded.request,
      { endpoint: ENDPOINTS.httpInfer, shm, recvStart, recvEnd },
      (response, written) => answer(decoded, response, written),
    );
  }

  const generate = createGenerateHandler(pipeline, { maxInputSize: options.maxInputSize });
  return [
    {
      method: "POST",
      path: modelPaths("/infer"),
      group: "inference",
      handler: infer,
      wrap: [compression, bodyLimit(options.maxInputSize)],
    },
    {
      method: "POST",
      path: modelPaths("/generate"),
      group: "inference",
      handler: ({ request, params }) => generate(request, params.model!, params.version ?? "", false),
    },
    {
      method: "POST",
      path: modelPaths("/generate_stream"),
      group: "inference",
      handler: ({ request, params }) => generate(request, params.model!, params.version ?? "", true),
    },
  ];
}
