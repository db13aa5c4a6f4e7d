/**
 * The `opentelemetry` trace mode: each finished trace becomes spans as Triton makes them, batched and
 * exported over OTLP/HTTP (JSON) with the OpenTelemetry SDK. Loaded only in that mode.
 *
 * Spans of one trace (one OpenTelemetry trace id, all of kind SERVER):
 * - `InferRequest`, the root: from the first to the last timestamp, with the frontend's timestamps
 *   (HTTP_RECV_START, ..., GRPC_SEND_START) as events.
 * - `<model name>`, its child: REQUEST_START to REQUEST_END with the events REQUEST_START, QUEUE_START,
 *   REQUEST_END and the attributes `triton.model_name`, `triton.model_version`, `triton.trace_id`,
 *   `triton.trace_parent_id` and, when the request has an id, `triton.request_id`.
 * - `compute`, the model span's child: COMPUTE_START to COMPUTE_END with the four compute events (absent when
 *   the request failed before it ran).
 * @module
 */

import {
  type Attributes,
  type HrTime,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  trace as otel,
  type Tracer,
} from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import {
  defaultResource,
  detectResources,
  envDetector,
  resourceFromAttributes,
} from "@opentelemetry/resources";
import { AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import type { RequestTrace } from "../core/types.ts";

/** The `--trace-config=opentelemetry,<key>=<value>` settings (Triton's names and defaults). */
export interface OpenTelemetrySettings {
  /** The OTLP/HTTP traces endpoint (`url`). */
  url: string;
  /** Resource attributes (`resource=<key>=<value>`, repeatable) over the defaults (`service.name` `dinfer`). */
  resource: Record<string, string>;
  /** Batch span processor queue size (`bsp_max_queue_size`; else OTEL_BSP_MAX_QUEUE_SIZE, 2048). */
  bspMaxQueueSize: number;
  /** Milliseconds between two exports (`bsp_schedule_delay`; else OTEL_BSP_SCHEDULE_DELAY, 5000). */
  bspScheduleDelay: number;
  /** Most spans per export (`bsp_max_export_batch_size`; else OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512). */
  bspMaxExportBatchSize: number;
}

/** Receives the finished traces in opentelemetry mode. */
export interface TraceSink {
  /** Turns a finished trace into spans and queues them for export. */
  export(trace: RequestTrace): void;
  /** Exports what is queued and stops. */
  shutdown(): Promise<void>;
}

/** The instrumentation scope of the spans. */
const TRACER_NAME = "dinfer";
/** The timestamps of the model span; the compute ones go to the compute span, the others to the root. */
const REQUEST_EVENTS = new Set(["REQUEST_START", "QUEUE_START", "REQUEST_END"]);
const COMPUTE_EVENTS = new Set(["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]);

/** nowNs() counts from performance.timeOrigin: the wall-clock time of its 0, split to keep nanoseconds. */
const ORIGIN_SECONDS = Math.floor(performance.timeOrigin / 1000);
const ORIGIN_NANOS = Math.round((performance.timeOrigin - ORIGIN_SECONDS * 1000) * 1e6);

/**
 * A nowNs() reading as wall-clock time.
 * @param ns nanoseconds since performance.timeOrigin
 */
export function toHrTime(ns: number): HrTime {
  const nanos = ORIGIN_NANOS + Math.round(ns);
  const carry = Math.floor(nanos / 1e9);
  return [ORIGIN_SECONDS + carry, nanos - carry * 1e9];
}

/** Exports traces as OpenTelemetry spans over OTLP/HTTP. */
export class OpenTelemetrySink implements TraceSink {
  readonly #provider: BasicTracerProvider;
  readonly #tracer: Tracer;

  /**
   * Sets up the exporter, the batch span processor and the resource (`service.name` `dinfer`, then
   * OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME, then the `resource` settings).
   * @param settings the opentelemetry settings
   */
  constructor(settings: OpenTelemetrySettings) {
    const resource = defaultResource()
      .merge(resourceFromAttributes({ "service.name": "dinfer" }))
      .merge(detectResources({ detectors: [envDetector] }))
      .merge(resourceFromAttributes(settings.resource));
    const exporter = new OTLPTraceExporter({ url: settings.url });
    this.#provider = new BasicTracerProvider({
      resource,
      // The trace extension decides which requests are traced; every trace it hands over is recorded.
      sampler: new AlwaysOnSampler(),
      spanProcessors: [
        new BatchSpanProcessor(exporter, {
          maxQueueSize: settings.bspMaxQueueSize,
          scheduledDelayMillis: settings.bspScheduleDelay,
          maxExportBatchSize: settings.bspMaxExportBatchSize,
        }),
      ],
    });
    this.#tracer = this.#provider.getTracer(TRACER_NAME);
  }

  /**
   * Turns a finished trace into its spans and queues them for export.
   * @param trace the trace
   */
  export(trace: RequestTrace): void {
    try {
      this.#spans(trace);
    } catch {
      // A trace that cannot be exported must not fail its request.
    }
  }

  #spans(t: RequestTrace): void {
    const events = [...t.timestamps].sort((a, b) => a.ns - b.ns);
    if (events.length === 0) return;
    const at = (name: string) => events.find((e) => e.name === name)?.ns;
    const start = events[0]!.ns;
    const end = Math.max(t.endNs, events[events.length - 1]!.ns);
    const open = (name: string, startNs: number, parent: Span | undefined, attributes?: Attributes) =>
      this.#tracer.startSpan(
        name,
        { kind: SpanKind.SERVER, startTime: toHrTime(startNs), ...(attributes ? { attributes } : {}) },
        parent ? otel.setSpan(ROOT_CONTEXT, parent) : ROOT_CONTEXT,
      );
    const root = open("InferRequest", start, undefined);
    const requestStart = at("REQUEST_START");
    const attributes: Attributes = {
      "triton.model_name": t.model,
      "triton.model_version": Number(t.version),
      "triton.trace_id": t.id,
      "triton.trace_parent_id": 0,
    };
    if (t.requestId !== "") attributes["triton.request_id"] = t.requestId;
    const request = requestStart === undefined ? undefined : open(t.model, requestStart, root, attributes);
    const computeStart = at("COMPUTE_START");
    const compute = request && computeStart !== undefined
      ? open("compute", computeStart, request)
      : undefined;
    for (const e of events) {
      const span = COMPUTE_EVENTS.has(e.name) ? compute : REQUEST_EVENTS.has(e.name) ? request : root;
      (span ?? root).addEvent(e.name, toHrTime(e.ns));
    }
    compute?.end(toHrTime(at("COMPUTE_END") ?? at("REQUEST_END") ?? end));
    request?.end(toHrTime(at("REQUEST_END") ?? end));
    root.end(toHrTime(end));
  }

  /** Exports the queued spans and shuts the provider down. */
  async shutdown(): Promise<void> {
    await this.#provider.shutdown();
  }
}
