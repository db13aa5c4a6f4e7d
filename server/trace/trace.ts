/**
 * The trace extension. Sampled requests record Triton's timestamps (and, at level TENSORS in `triton` mode,
 * their input and output tensors). In `triton` mode (the default) they are written to `trace_file` in
 * Triton's JSON trace format, every `log_frequency` traces to `<trace_file>.<n>` or, with 0, when the server
 * stops. In `opentelemetry` mode (`--trace-config=mode=opentelemetry`) each trace becomes OpenTelemetry spans
 * exported over OTLP/HTTP (./opentelemetry.ts). Settings are global with per-model overrides, changed through
 * `/v2[/models/{m}]/trace/setting` or gRPC TraceSetting.
 * @module
 */

import type { BytesTensor } from "../core/bytes_tensor.ts";
import { bf16ToNumber, type Datatype, halfToNumber, type TensorData, typedView } from "../core/dtypes.ts";
import { invalidArg, unsupported } from "../core/errors.ts";
import type { RequestTrace, Tensor } from "../core/types.ts";
import { nowNs } from "../core/clock.ts";
import type { OpenTelemetrySettings, TraceSink } from "./opentelemetry.ts";

/** Where traces go: a Triton JSON file or OpenTelemetry spans. */
export type TraceMode = "triton" | "opentelemetry";

/** One tensor recorded at level TENSORS, as Triton writes it: values and dims as comma-separated text. */
export interface TraceTensor {
  /** TENSOR_QUEUE_INPUT or TENSOR_BACKEND_OUTPUT. */
  activity: string;
  name: string;
  dtype: Datatype;
  shape: string;
  data: string;
}

/** A float as C++ streams write it by default (`%g`, six significant digits), as Triton's trace file has it. */
function formatFloat(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0" : "0";
  const [mantissa, exponent] = x.toExponential(5).split("e");
  const e = Number(exponent);
  const strip = (t: string) => (t.includes(".") ? t.replace(/\.?0+$/, "") : t);
  if (e < -4 || e >= 6) {
    return `${strip(mantissa!)}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }
  return strip(x.toFixed(5 - e));
}

/**
 * Tensor contents as the `data` text of a trace file: values separated by commas, BOOL as 1 and 0, floats
 * with six significant digits, each BYTES element in double quotes.
 * @param dt the datatype
 * @param data the contents
 */
export function traceDataText(dt: Datatype, data: TensorData): string {
  if (dt === "BYTES") return (data as BytesTensor).strings().map((s) => `"${s}"`).join(",");
  const bytes = data as Uint8Array;
  if (dt === "BOOL") return Array.from(bytes, (b) => (b !== 0 ? "1" : "0")).join(",");
  const view = typedView(dt, bytes);
  if (dt === "FP16") return Array.from(view as Uint16Array, (h) => formatFloat(halfToNumber(h))).join(",");
  if (dt === "BF16") return Array.from(view as Uint16Array, (h) => formatFloat(bf16ToNumber(h))).join(",");
  if (dt === "FP32" || dt === "FP64") return Array.from(view as Float64Array, formatFloat).join(",");
  if (dt === "INT64" || dt === "UINT64") return Array.from(view as BigInt64Array, String).join(",");
  return Array.from(view as Int32Array).join(",");
}

/** Trace settings as the extension shows them: every value a string, trace_level a list. */
export interface TraceSettingsJson {
  trace_level: string[];
  trace_rate: string;
  trace_count: string;
  log_frequency: string;
  trace_file: string;
  trace_mode: string;
}

interface Settings {
  level: Set<"TIMESTAMPS" | "TENSORS">;
  rate: number;
  count: number;
  logFrequency: number;
  file: string;
}

type Partial_ = { [K in keyof Settings]?: Settings[K] };

/** The most traces held for a file before they are written to an indexed file (`<trace_file>.<n>`). */
export const MAX_PENDING_TRACES = 10_000;
/** The most characters of traces held for a file before they are written (tensors can make them large). */
export const MAX_PENDING_CHARS = 64 * 2 ** 20;

/** One traced request. */
export class Trace implements RequestTrace {
  readonly id: number;
  readonly model: string;
  readonly version: string;
  readonly requestId: string;
  readonly tensors: boolean;
  readonly timestamps: { name: string; ns: number }[] = [];
  readonly activity: TraceTensor[] = [];
  #done: (t: Trace) => void;
  #ended = false;
  #endNs = 0;

  constructor(
    id: number,
    model: string,
    version: string,
    requestId: string,
    tensors: boolean,
    done: (t: Trace) => void,
  ) {
    this.id = id;
    this.model = model;
    this.version = version;
    this.requestId = requestId;
    this.tensors = tensors;
    this.#done = done;
  }

  /**
   * Records a timestamp.
   * @param name Triton's timestamp name (REQUEST_START, QUEUE_START, COMPUTE_START, ...)
   * @param ns when, from nowNs(); now when left out
   */
  mark(name: string, ns: number = nowNs()): void {
    this.timestamps.push({ name, ns });
  }

  /**
   * Records tensors at level TENSORS.
   * @param kind "TENSOR_QUEUE_INPUT" or "TENSOR_BACKEND_OUTPUT"
   * @param tensors the tensors
   */
  recordTensors(kind: string, tensors: Iterable<Tensor>): void {
    if (!this.tensors) return;
    for (const t of tensors) {
      this.activity.push({
        activity: kind,
        name: t.name,
        dtype: t.datatype,
        shape: t.shape.join(","),
        data: traceDataText(t.datatype, t.data),
      });
    }
  }

  /** When the trace ended (nowNs() at end()), 0 before. */
  get endNs(): number {
    return this.#endNs;
  }

  /** Ends the trace (once). */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#endNs = nowNs();
    this.#done(this);
  }

  /**
   * The trace as Triton's JSON trace format has it: one object naming the model, then one object per
   * timestamp (in time order), then one per tensor, each with the trace's `id`.
   */
  toTritonJson(): Record<string, unknown>[] {
    const head: Record<string, unknown> = {
      id: this.id,
      model_name: this.model,
      model_version: Number(this.version),
    };
    if (this.requestId !== "") head.request_id = this.requestId;
    const out: Record<string, unknown>[] = [head];
    const inOrder = [...this.timestamps].sort((a, b) => a.ns - b.ns);
    for (const t of inOrder) out.push({ id: this.id, timestamps: [{ name: t.name, ns: t.ns }] });
    for (const a of this.activity) {
      out.push({
        id: this.id,
        activity: a.activity,
        tensor: { name: a.name, data: a.data, shape: a.shape, dtype: a.dtype },
      });
    }
    return out;
  }
}

function parseSettings(
  update: Record<string, unknown>,
  forModel: boolean,
  mode: TraceMode,
  fromNetwork: boolean,
): Partial_ & { clear: Set<string> } {
  const out: Partial_ & { clear: Set<string> } = { clear: new Set() };
  for (const [k, raw] of Object.entries(update)) {
    if (raw === null) {
      if (!forModel) throw invalidArg(`Cannot update the trace settings: '${k}' cannot be cleared globally`);
      out.clear.add(k);
      continue;
    }
    const values = Array.isArray(raw) ? raw : [raw];
    const one = (): string => {
      if (values.length !== 1) throw invalidArg(`Cannot update the trace settings: '${k}' must be one value`);
      // As Triton: values are strings ("10", not 10).
      if (typeof values[0] !== "string") {
        throw invalidArg(
          `Cannot update the trace settings: '${k}' is ${JSON.stringify(values[0])}, expected a string`,
        );
      }
      return values[0];
    };
    const int = (min: number): number => {
      const v = one();
      // Safe integers only: a longer number would lose digits (1e+20) or read as Infinity.
      if (!/^-?[0-9]+$/.test(v) || !Number.isSafeInteger(Number(v)) || Number(v) < min) {
        throw invalidArg(
          `Cannot update the trace settings: '${k}' is '${v}', expected an integer of at least ${min}`,
        );
      }
      return Number(v);
    };
    const tritonOnly = () => {
      if (mode !== "triton") {
        throw invalidArg(`Cannot update the trace settings: '${k}' does not apply to trace_mode '${mode}'`);
      }
    };
    switch (k) {
      case "trace_level": {
        const level = new Set<"TIMESTAMPS" | "TENSORS">();
        // As Triton: values are strings, and a level it does not know is skipped.
        for (const v of values) {
          if (typeof v !== "string") {
            throw invalidArg("Cannot update the trace settings: 'trace_level' values must be strings");
          }
          if (v === "TIMESTAMPS" || v === "TENSORS") level.add(v);
        }
        out.level = level;
        break;
      }
      case "trace_rate":
        out.rate = int(1);
        break;
      case "trace_count":
        out.count = int(-1);
        break;
      case "log_frequency":
        tritonOnly();
        out.logFrequency = int(0);
        break;
      case "trace_file":
        tritonOnly();
        // As Triton: a network client does not choose a file to write (--trace-config triton,file= does).
        if (fromNetwork) {
          throw unsupported(
            "Cannot update the trace settings: trace file location can not be updated through network protocol",
          );
        }
        out.file = one();
        break;
      case "trace_mode":
        if (one() !== mode) {
          throw invalidArg(`Cannot update the trace settings: only trace_mode '${mode}' is supported`);
        }
        break;
      default:
        // As Triton: a setting it does not know is ignored.
        break;
    }
  }
  return out;
}

/** The `--trace-config` entries, sorted out. */
interface ParsedTraceConfig {
  mode: TraceMode;
  /** The global and triton-mode settings, by the extension's names. */
  settings: Record<string, unknown>;
  opentelemetry: OpenTelemetrySettings;
}

/** Triton's spellings of a trace level on the command line (case-insensitive). */
function cliLevel(entry: string, value: string): "OFF" | "TIMESTAMPS" | "TENSORS" {
  const v = value.toLowerCase();
  if (v === "off" || v === "false") return "OFF";
  if (["on", "true", "min", "max", "timestamps"].includes(v)) return "TIMESTAMPS";
  if (v === "tensors") return "TENSORS";
  throw invalidArg(`Bad --trace-config '${entry}': unknown level '${value}' (OFF, TIMESTAMPS, TENSORS)`);
}

/** An OTEL_BSP_* environment variable, when set (and readable). */
function bspEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name) || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Reads `--trace-config` entries as Triton does: global `level`, `rate`, `count` and `mode`;
 * `triton,file` and `triton,log-frequency` (also without the prefix); `opentelemetry,url`,
 * `opentelemetry,resource=<key>=<value>` and the batch span processor's `bsp_max_queue_size`,
 * `bsp_schedule_delay`, `bsp_max_export_batch_size`. Levels given more than once add up; `level=OFF` turns
 * tracing off.
 * @param entries the flag values
 * @throws ServerError INVALID_ARG naming a bad entry
 */
function parseTraceConfig(entries: readonly string[]): ParsedTraceConfig {
  let mode: TraceMode = "triton";
  const settings: Record<string, unknown> = {};
  const levels = new Set<"TIMESTAMPS" | "TENSORS">();
  let levelGiven = false;
  let off = false;
  const otel: Record<string, string> = {};
  const resource: Record<string, string> = {};
  for (const entry of entries) {
    const m = /^(?:([^,=]+),)?([^,=]+)=(.*)$/.exec(entry);
    if (!m || m[3] === "") {
      throw invalidArg(`Bad --trace-config '${entry}': expected [<mode>,]<setting>=<value>`);
    }
    const [, prefix, key, value] = m as unknown as [string, string | undefined, string, string];
    if (prefix !== undefined && prefix !== "triton" && prefix !== "opentelemetry") {
      throw invalidArg(`Bad --trace-config '${entry}': unknown mode '${prefix}' (triton, opentelemetry)`);
    }
    if (prefix === "opentelemetry") {
      if (key === "resource") {
        const i = value.indexOf("=");
        if (i <= 0) throw invalidArg(`Bad --trace-config '${entry}': expected resource=<key>=<value>`);
        resource[value.slice(0, i)] = value.slice(i + 1);
      } else if (
        ["url", "bsp_max_queue_size", "bsp_schedule_delay", "bsp_max_export_batch_size"].includes(key)
      ) {
        otel[key] = value;
      } else {
        throw invalidArg(`Bad --trace-config '${entry}': unknown opentelemetry setting '${key}'`);
      }
      continue;
    }
    if (prefix === undefined && key === "mode") {
      const v = value.toLowerCase();
      if (v !== "triton" && v !== "opentelemetry") {
        throw invalidArg(`Bad --trace-config '${entry}': unknown mode '${value}' (triton, opentelemetry)`);
      }
      mode = v;
      continue;
    }
    if (prefix === undefined && key === "level") {
      levelGiven = true;
      for (const part of value.split(/[,+]/)) {
        const level = cliLevel(entry, part);
        if (level === "OFF") off = true;
        else levels.add(level);
      }
      continue;
    }
    const name = prefix === undefined
      ? {
        rate: "trace_rate",
        count: "trace_count",
        file: "trace_file",
        "log-frequency": "log_frequency",
      }[key]
      : { file: "trace_file", "log-frequency": "log_frequency" }[key];
    if (!name) throw invalidArg(`Bad --trace-config '${entry}': unknown setting '${key}'`);
    settings[name] = value;
  }
  if (levelGiven) settings.trace_level = off ? [] : [...levels];
  const uint = (key: string, env: string, fallback: number): number => {
    const flag = otel[key];
    const text = flag ?? bspEnv(env) ?? String(fallback);
    if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(Number(text)) || Number(text) > 0xffffffff) {
      throw invalidArg(
        flag !== undefined
          ? `Bad --trace-config 'opentelemetry,${key}=${text}': expected an unsigned integer`
          : `Bad ${env} '${text}': expected an unsigned integer`,
      );
    }
    return Number(text);
  };
  const opentelemetry: OpenTelemetrySettings = {
    url: otel.url ?? "http://localhost:4318/v1/traces",
    resource,
    bspMaxQueueSize: uint("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", 2048),
    bspScheduleDelay: uint("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", 5000),
    bspMaxExportBatchSize: uint("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512),
  };
  if (mode === "opentelemetry") {
    try {
      const url = new URL(opentelemetry.url);
      if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http");
    } catch {
      throw invalidArg(
        `Bad --trace-config 'opentelemetry,url=${opentelemetry.url}': expected an http:// or https:// URL`,
      );
    }
    if (opentelemetry.bspMaxQueueSize === 0) {
      throw invalidArg("Bad --trace-config: bsp_max_queue_size must be at least 1");
    }
    if (opentelemetry.bspMaxExportBatchSize > opentelemetry.bspMaxQueueSize) {
      throw invalidArg(
        `Bad --trace-config: bsp_max_export_batch_size (${opentelemetry.bspMaxExportBatchSize}) must not exceed bsp_max_queue_size (${opentelemetry.bspMaxQueueSize})`,
      );
    }
  }
  return { mode, settings, opentelemetry };
}

/**
 * The trace settings and the traces being collected. As in Triton, a model with settings of its own samples
 * with its own request counter and trace_count; the models without share the global ones.
 */
export class TraceManager {
  #global: Settings;
  #models = new Map<string, Partial_>();
  /** By setting ("" global, else a model with its own settings): requests seen, traces left, traces open. */
  #counters = new Map<string, number>();
  #remaining = new Map<string, number>();
  #open = new Map<string, number>();
  #nextId = 1;
  /**
   * By trace file: each trace collected, as the JSON text of its entries (without the brackets, so that the
   * file is their join), and the characters they hold together.
   */
  #pending = new Map<string, { texts: string[]; chars: number }>();
  #fileIndex = new Map<string, number>();
  readonly #mode: TraceMode;
  readonly #opentelemetry: OpenTelemetrySettings;
  #sink: TraceSink | undefined;
  /**
   * Whether updates come from the network (the extension), not from the start-up settings: they may not set
   * trace_file, and in triton mode may not turn tracing on without one.
   */
  #started = false;
  /**
   * Whether a model is loaded; the settings of a model that is not are refused, as in Triton (the server sets
   * this to the registry's view).
   */
  modelKnown: ((name: string) => boolean) | undefined;

  /**
   * Creates the manager from `--trace-config` entries (see parseTraceConfig: `level`, `rate`, `count`,
   * `mode`, `triton,file`, `triton,log-frequency`, `opentelemetry,url`, `opentelemetry,resource`,
   * `opentelemetry,bsp_*`). In opentelemetry mode, start() sets up the exporter.
   * @param config the --trace-config values
   * @throws ServerError INVALID_ARG naming a bad entry
   */
  constructor(config: readonly string[] = []) {
    this.#global = { level: new Set(), rate: 1000, count: -1, logFrequency: 0, file: "" };
    const parsed = parseTraceConfig(config);
    this.#mode = parsed.mode;
    this.#opentelemetry = parsed.opentelemetry;
    // Triton ignores the triton-mode file settings in opentelemetry mode.
    const { trace_file: _file, log_frequency: _frequency, ...global } = parsed.settings;
    this.update(this.#mode === "triton" ? parsed.settings : global);
    this.#started = true;
  }

  #checkModel(model: string): void {
    if (model !== "" && this.modelKnown && !this.modelKnown(model)) {
      throw invalidArg(`Request for unknown model: '${model}' is not found`);
    }
  }

  /** The trace mode, fixed at start-up. */
  get mode(): TraceMode {
    return this.#mode;
  }

  /** The opentelemetry settings (used in opentelemetry mode). */
  get opentelemetry(): OpenTelemetrySettings {
    return this.#opentelemetry;
  }

  /**
   * Sets up where traces go: in opentelemetry mode, the OTLP/HTTP exporter (loaded only then); else nothing.
   * @param sink a sink to use instead of the OTLP/HTTP exporter
   */
  async start(sink?: TraceSink): Promise<void> {
    if (this.#mode !== "opentelemetry" || this.#sink) return;
    if (sink) {
      this.#sink = sink;
      return;
    }
    const { OpenTelemetrySink } = await import("./opentelemetry.ts");
    this.#sink = new OpenTelemetrySink(this.#opentelemetry);
  }

  #effective(model: string): Settings {
    const own = this.#models.get(model);
    return own ? { ...this.#global, ...own } : this.#global;
  }

  /** The setting a model samples under: its own when it has one, else the global one (""). */
  #key(model: string): string {
    return model !== "" && this.#models.has(model) ? model : "";
  }

  /**
   * The settings, global or as they apply to a model.
   * @param model the model name, "" for the global settings
   */
  settings(model = ""): TraceSettingsJson {
    this.#checkModel(model);
    const s = model ? this.#effective(model) : this.#global;
    return {
      trace_level: s.level.size === 0 ? ["OFF"] : [...s.level],
      trace_rate: String(s.rate),
      trace_count: String(this.#remaining.get(this.#key(model)) ?? s.count),
      log_frequency: String(s.logFrequency),
      trace_file: s.file,
      trace_mode: this.#mode,
    };
  }

  /**
   * Changes settings (all checked before any takes effect); for a model, `null` values remove its override.
   * In opentelemetry mode, trace_file and log_frequency do not apply and are refused; trace_file is set at
   * start-up only (UNSUPPORTED once the server runs).
   * @param update settings by the extension's names
   * @param model the model name, "" for the global settings
   * @returns the settings after the change
   */
  update(update: Record<string, unknown>, model = ""): TraceSettingsJson {
    this.#checkModel(model);
    const parsed = parseSettings(update, model !== "", this.#mode, this.#started);
    const { clear, ...values } = parsed;
    const keyOf: Record<string, keyof Settings> = {
      trace_level: "level",
      trace_rate: "rate",
      trace_count: "count",
      log_frequency: "logFrequency",
      trace_file: "file",
    };
    if (this.#started && this.#mode === "triton") {
      // As Triton: tracing on in triton mode needs a file to write the traces to.
      const own: Partial_ = model === "" ? {} : { ...(this.#models.get(model) ?? {}), ...values };
      for (const k of clear) delete own[keyOf[k]!];
      const after = model === "" ? { ...this.#global, ...values } : { ...this.#global, ...own };
      if (after.level.size > 0 && after.file === "") {
        throw invalidArg(
          `Cannot update the trace settings: trace file name is not given for trace_level '${
            [...after.level].join(",")
          }'`,
        );
      }
    }
    if (model === "") {
      const oldFile = this.#global.file;
      this.#global = { ...this.#global, ...values };
      if (values.count !== undefined) {
        // A new count restarts the global setting and the models whose count follows it.
        this.#remaining.delete("");
        for (const [m, o] of this.#models) if (o.count === undefined) this.#remaining.delete(m);
      }
      if (oldFile !== this.#global.file) {
        this.flush();
        // The file index restarts at 0 when trace_file is updated.
        this.#fileIndex.delete(this.#global.file);
      }
    } else {
      const o: Partial_ = { ...(this.#models.get(model) ?? {}), ...values };
      for (const k of clear) delete o[keyOf[k]!];
      if (Object.keys(o).length > 0) this.#models.set(model, o);
      else this.#models.delete(model);
      if (values.count !== undefined || clear.has("trace_count")) this.#remaining.delete(model);
    }
    this.afterUpdate?.();
    return this.settings(model);
  }

  /** Called after every `update` (the HTTP listener threads' copies of models follow the trace levels). */
  afterUpdate: (() => void) | undefined;

  /**
   * Whether requests to a model may be traced at all (its trace level is not OFF): where not, a frontend need
   * not read the clock for the marks of receiving a request.
   * @param model the model name
   */
  mayTrace(model: string): boolean {
    return ((this.#models.get(model)?.level) ?? this.#global.level).size > 0;
  }

  /**
   * Decides whether to trace a request: the `trace_rate`-th, 2 × `trace_rate`-th, ... request under a
   * setting while its `trace_count` lasts.
   * @param model the model name
   * @param version the version
   * @param requestId the request id
   * @returns the trace, or undefined
   */
  sample(model: string, version: string, requestId: string): Trace | undefined {
    const s = this.#effective(model);
    if (s.level.size === 0) return undefined;
    const key = this.#key(model);
    const left = this.#remaining.get(key) ?? s.count;
    if (left === 0) return undefined;
    const n = (this.#counters.get(key) ?? 0) + 1;
    this.#counters.set(key, n);
    if (n % s.rate !== 0) return undefined;
    if (left > 0) this.#remaining.set(key, left - 1);
    this.#open.set(key, (this.#open.get(key) ?? 0) + 1);
    const file = s.file;
    const frequency = s.logFrequency;
    return new Trace(
      this.#nextId++,
      model,
      version,
      requestId,
      // Tensors are traced in triton mode only (as in Triton).
      s.level.has("TENSORS") && this.#mode === "triton",
      (t) => this.#collect(t, key, file, frequency),
    );
  }

  #collect(t: Trace, key: string, file: string, frequency: number): void {
    const open = (this.#open.get(key) ?? 1) - 1;
    this.#open.set(key, open);
    if (this.#mode === "opentelemetry") {
      this.#sink?.export(t);
      return;
    }
    if (!file) return;
    let held = this.#pending.get(file);
    if (!held) this.#pending.set(file, held = { texts: [], chars: 0 });
    const text = JSON.stringify(t.toTritonJson()).slice(1, -1);
    held.texts.push(text);
    held.chars += text.length;
    const traces = held.texts.length, bytes = held.chars;
    // Written every log_frequency traces, and (whatever log_frequency says) once trace_count has run out, or
    // once the traces held would take too much memory (log_frequency 0 holds them to shutdown otherwise, and
    // a client that sets trace_rate 1 at level TENSORS could fill the memory with them).
    const exhausted = this.#remaining.get(key) === 0 && open === 0;
    const full = traces >= MAX_PENDING_TRACES || bytes >= MAX_PENDING_CHARS;
    if ((frequency > 0 && traces >= frequency) || exhausted || full) this.#write(file, true);
  }

  #write(file: string, indexed: boolean): void {
    const held = this.#pending.get(file);
    this.#pending.delete(file);
    const texts = held?.texts.filter((text) => text !== "") ?? [];
    if (texts.length === 0) return;
    let path = file;
    if (indexed) {
      const i = this.#fileIndex.get(file) ?? 0;
      this.#fileIndex.set(file, i + 1);
      path = `${file}.${i}`;
    }
    try {
      Deno.writeTextFileSync(path, `[${texts.join(",")}]`);
    } catch {
      // A trace file that cannot be written must not fail requests; the traces are dropped.
    }
  }

  /** Writes every collected trace (log_frequency 0 writes here, at setting changes and at shutdown). */
  flush(): void {
    for (const file of [...this.#pending.keys()]) {
      const frequency = this.#global.logFrequency;
      this.#write(file, frequency > 0);
    }
  }

  /** Writes the collected traces and, in opentelemetry mode, exports the queued spans and stops. */
  async close(): Promise<void> {
    this.flush();
    const sink = this.#sink;
    this.#sink = undefined;
    await sink?.shutdown();
  }
}
