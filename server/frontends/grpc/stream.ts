/**
 * The gRPC frontend's ModelStreamInfer: requests of one stream run concurrently; responses of ordinary models are
 * written in request order, those of decoupled models as the model sends them.
 * @module
 */

import type * as grpc from "@grpc/grpc-js";
import { toServerError } from "../../core/errors.ts";
import { nowNs } from "../../core/clock.ts";
import { lookupType } from "../../core/protos.ts";
import type { ModelVersion } from "../../models/model_version.ts";
import { ENDPOINTS, type InferencePipeline } from "../../pipeline/pipeline.ts";
import type { ApiGroup } from "../restricted.ts";
import { type GrpcDeps, method, SERVICE, undecodable } from "./_calls.ts";
import { framedCodec, FramedMessage } from "./framing.ts";
import { HeldWrites } from "./held_writes.ts";
import { inferRequestCodec, runInfer } from "./infer.ts";
import {
  decodeModelInferRequest,
  encodeModelInferResponse,
  type ModelInferRequestMessage,
} from "./infer_codec.ts";

type Message = Record<string, unknown>;

/** ModelStreamInfer's API group. */
export const STREAM_GROUP: ApiGroup = "inference";

/** The identity of the request `msg` in a stream message that answers it. */
function answering(msg: Message) {
  return {
    model_name: msg.model_name ?? "",
    model_version: msg.model_version ?? "",
    id: typeof msg.id === "string" ? msg.id : "",
  };
}

/** A stream message carrying an error for the request `msg`. */
function streamError(msg: Message, err: unknown) {
  return { error_message: toServerError(err).message, infer_response: answering(msg) };
}

/** The empty response that carries only the final flag (`triton_enable_empty_final_response`). */
function emptyFinal(msg: Message) {
  return {
    error_message: "",
    infer_response: { ...answering(msg), parameters: { triton_final_response: { bool_param: true } } },
  };
}

/** A stream message's size on the wire, near enough: its tensors' bytes and a little for the rest. */
function wireSize(out: Message | FramedMessage): number {
  if (out instanceof FramedMessage) return out.byteLength;
  const raw = (out.infer_response as { raw_output_contents?: Uint8Array[] } | undefined)?.raw_output_contents;
  return (raw ?? []).reduce((n, r) => n + r.byteLength, 256);
}

/**
 * Runs a request to a decoupled model, writing each response as the model sends it. Every response carries
 * `triton_final_response`; a final flag sent alone becomes an empty response only when the request asks
 * for it with `triton_enable_empty_final_response`.
 */
async function inferDecoupled(
  pipeline: InferencePipeline,
  msg: Message,
  mv: ModelVersion,
  write: (out: Message) => void,
  signal: AbortSignal,
): Promise<void> {
  const received = nowNs();
  const session = pipeline.shmSession();
  const params = (msg.parameters ?? {}) as Record<string, { bool_param?: boolean }>;
  const wantsEmptyFinal = params.triton_enable_empty_final_response?.bool_param === true;
  let ended = false;
  try {
    const request = decodeModelInferRequest(msg as unknown as ModelInferRequestMessage, session?.reader);
    request.signal = signal;
    const exchange = { endpoint: ENDPOINTS.grpcStream, shm: session, recvEnd: received };
    await pipeline.stream(mv, request, exchange, (response, written, final) => {
      if (ended) return;
      ended = final;
      if (response instanceof Error) write(streamError(msg, response));
      else if (response !== undefined) {
        response.parameters.triton_final_response = final;
        write({ error_message: "", infer_response: encodeModelInferResponse(response, written) });
        return;
      }
      if (final && wantsEmptyFinal) write(emptyFinal(msg));
    });
  } catch (err) {
    // The request failed before its final response: the error, then the final flag when it was asked for.
    if (!ended) {
      ended = true;
      write(streamError(msg, err));
      if (wantsEmptyFinal) write(emptyFinal(msg));
    }
  }
}

/**
 * ModelStreamInfer's method definition and handler.
 * @param deps the pipeline, options and call counter
 */
export function modelStreamInfer({ pipeline, calls }: GrpcDeps): {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: grpc.handleBidiStreamingCall<Message, Message | FramedMessage>;
} {
  const definition = method(
    `/${SERVICE}/ModelStreamInfer`,
    inferRequestCodec,
    framedCodec(lookupType("ModelStreamInferResponse")),
    true,
  );
  const handler = (call: grpc.ServerDuplexStream<Message, Message | FramedMessage>) => {
    calls.begin();
    let open = true;
    const finish = () => {
      if (!open) return;
      open = false;
      calls.end();
    };
    // A cancelled stream is told to the models of its requests that still run (request.is_cancelled()).
    const running = new Set<AbortController>();
    call.on("close", finish);
    call.on("cancelled", () => {
      for (const c of running) c.abort();
      finish();
    });
    let last: Promise<void> = Promise.resolve();
    const streaming = new Set<Promise<void>>();
    // A client that stops reading has its requests cancelled once too many answers wait for it.
    const held = new HeldWrites(call, () => {
      for (const c of running) c.abort();
    });
    const write = (out: Message | FramedMessage) => held.write(out, wireSize(out));
    call.on("data", (msg: Message) => {
      if (held.cut) return;
      const bad = undecodable(msg, "ModelStreamInfer");
      if (bad) {
        const answer = streamError({}, bad);
        last = last.then(() => write(answer));
        return;
      }
      let mv: ModelVersion;
      try {
        mv = pipeline.accept(
          String(msg.model_name ?? ""),
          String(msg.model_version ?? ""),
          ENDPOINTS.grpcStream,
        );
      } catch (err) {
        const answer = streamError(msg, err);
        last = last.then(() => write(answer));
        return;
      }
      if (mv.decoupled) {
        const controller = new AbortController();
        if (call.cancelled) controller.abort();
        running.add(controller);
        const task = inferDecoupled(pipeline, msg, mv, write, controller.signal);
        streaming.add(task);
        task.finally(() => {
          streaming.delete(task);
          running.delete(controller);
        });
        return;
      }
      const answer = runInfer(pipeline, msg, mv, ENDPOINTS.grpcStream, true).catch((err) =>
        streamError(msg, err)
      );
      last = last.then(async () => write(await answer));
    });
    call.on("end", async () => {
      await last;
      while (streaming.size > 0) await Promise.all([...streaming]);
      if (!call.writableEnded) call.end();
      finish();
    });
    call.on("error", finish);
  };
  return { definition, handler };
}
