/**
 * The gRPC frontend's ModelInfer, and the run of one request to a model that is not decoupled that the stream
 * shares.
 * @module
 */

import type * as grpc from "@grpc/grpc-js";
import { nowNs } from "../../core/clock.ts";
import { lookupType } from "../../core/protos.ts";
import type { ModelVersion } from "../../models/model_version.ts";
import { type Endpoint, ENDPOINTS, type InferencePipeline } from "../../pipeline/pipeline.ts";
import type { ApiGroup } from "../restricted.ts";
import { codec, type GrpcDeps, grpcError, method, SERVICE, undecodable } from "./_calls.ts";
import type { InferRequest, InferResponse } from "../../core/types.ts";
import type { ShmWritten } from "../../shm/session.ts";
import { FRAME_PREFIX, framedCodec, FramedMessage } from "./framing.ts";
import {
  decodeModelInferRequest,
  encodeModelInferResponseParts,
  type ModelInferRequestMessage,
} from "./infer_codec.ts";

type Message = Record<string, unknown>;

/** ModelInfer's API group. */
export const INFER_GROUP: ApiGroup = "inference";

/** The codec of ModelInfer's request, which ModelStreamInfer's requests share. */
export const inferRequestCodec = codec(lookupType("ModelInferRequest"), false);

/**
 * Runs a request to a model that is not decoupled (ModelInfer, or one of a stream's requests).
 * @param pipeline the inference pipeline
 * @param msg the request message
 * @param mv the model version the pipeline accepted
 * @param endpoint the endpoint, for statistics and traces
 * @param stream whether the answer is a stream's message (`ModelStreamInferResponse`, the response marked final)
 *   rather than a `ModelInferResponse`
 * @returns the answer, serialized and framed (a large output its own part, not copied)
 */
export async function runInfer(
  pipeline: InferencePipeline,
  msg: Message,
  mv: ModelVersion,
  endpoint: Endpoint,
  stream = false,
): Promise<FramedMessage> {
  const received = nowNs();
  const session = pipeline.shmSession();
  const request = decodeModelInferRequest(msg as unknown as ModelInferRequestMessage, session?.reader);
  const options = stream
    ? { reserve: FRAME_PREFIX, stream, parameters: { triton_final_response: true } }
    : { reserve: FRAME_PREFIX };
  const respond = (response: InferResponse, written: ShmWritten | undefined) =>
    new FramedMessage(encodeModelInferResponseParts(response, written, options));
  return await pipeline.infer(mv, request, { endpoint, shm: session, recvEnd: received }, respond);
}

/**
 * Runs the ModelInfer requests that listener threads decode (see thread.ts): accepted and run as ModelInfer's
 * own, the thread encoding the answer.
 * @param pipeline the inference pipeline
 */
export function grpcInferDecoded(
  pipeline: InferencePipeline,
): (request: InferRequest, recvStart: number, recvEnd: number) => Promise<InferResponse> {
  return (request, _recvStart, recvEnd) => {
    let mv: ModelVersion;
    try {
      mv = pipeline.accept(request.model, request.version, ENDPOINTS.grpcInfer);
    } catch (err) {
      return Promise.reject(err);
    }
    return pipeline.run(mv, request, { endpoint: ENDPOINTS.grpcInfer, recvEnd });
  };
}

/**
 * ModelInfer's method definition and handler.
 * @param deps the pipeline, options and call counter
 */
export function modelInfer({ pipeline, calls }: GrpcDeps): {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: grpc.handleUnaryCall<Message, Message | FramedMessage>;
} {
  const definition = method(
    `/${SERVICE}/ModelInfer`,
    inferRequestCodec,
    framedCodec(lookupType("ModelInferResponse")),
  );
  const handler = (
    call: grpc.ServerUnaryCall<Message, Message | FramedMessage>,
    callback: grpc.sendUnaryData<Message | FramedMessage>,
  ) => {
    const bad = undecodable(call.request, "ModelInfer");
    if (bad) {
      callback(grpcError(bad));
      return;
    }
    let mv: ModelVersion;
    try {
      mv = pipeline.accept(
        String(call.request.model_name ?? ""),
        String(call.request.model_version ?? ""),
        ENDPOINTS.grpcInfer,
      );
    } catch (err) {
      callback(grpcError(err));
      return;
    }
    calls.begin();
    runInfer(pipeline, call.request, mv, ENDPOINTS.grpcInfer).then(
      (r) => callback(null, r),
      (err) => callback(grpcError(err)),
    )
      .finally(() => calls.end());
  };
  return { definition, handler };
}
