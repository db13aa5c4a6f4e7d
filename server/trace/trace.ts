/**
 * The trace extension (Triton's `triton` trace mode): sampled requests record Triton's timestamps (and, at
 * level TENSORS, their input and output tensors) and are written as a JSON array to `trace_file`, every
 * `log_frequency` traces to `<trace_file>.<n>` or, with 0, when the server stops. Settings are global with
 * per-model overrides, changed through `/v2[/models/{m}]/trace/setting` or gRPC TraceSetting.
 * @module
 */

import { type Datatype, toJsonValues } from "../core/dtypes.ts";
import { invalidArg } from "../core/errors.ts";
import type { Tensor } from "../core/types.ts";
import { nowNs } from "../metrics/stats.ts";

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

/** One traced request. */
export class Trace {
  readonly id: number;
  readonly model: string;
  readonly version: string;
  readonly requestId: string;
  readonly tensors: boolean;
  readonly timestamps: { name: string; ns: number }[] = [];
  readonly activity: { name: string; datatype: Datatype; shape: number[]; data: unknown[] }[] = [];
  #done: (t: Trace) => void;
  #ended = false;

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
   * @param kind e.g. "TENSOR_QUEUE_INPUT" or "TENSOR_BACKEND_OUTPUT"
   * @param tensors the tensors
   */
  recordTensors(kind: string, tensors: Iterable<Tensor>): void {
    if (!this.tensors) return;
    for (const t of tensors) {
      this.activity.push({
        name: `${kind}:${t.name}`,
        datatype: t.datatype,
        shape: t.shape,
        data: toJsonValues(t.datatype, t.data),
      });
    }
  }

  /** Ends the trace (once). */
  end(): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#done(this);
  }

  /** The trace as written to the trace file. */
  toJson(): Record<string, unknown> {
    const out: Record<string, unknown> = {
      id: this.id,
      model_name: this.model,
      model_version: Number(this.version),
      request_id: this.requestId,
      timestamps: this.timestamps,
    };
    if (this.tensors) out.activity = this.activity;
    return out;
  }
}

function parseSettings(
  update: Record<string, unknown>,
  forModel: boolean,
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
      if (values.length !== 1 || (typeof values[0] !== "string" && typeof values[0] !== "number")) {
        throw invalidArg(`Cannot update the trace settings: '${k}' must be one value`);
      }
      return String(values[0]);
    };
    const int = (min: number): number => {
      const v = one();
      if (!/^-?[0-9]+$/.test(v) || Number(v) < min) {
        throw invalidArg(
          `Cannot update the trace settings: '${k}' is '${v}', expected an integer of at least ${min}`,
        );
      }
      return Number(v);
    };
    switch (k) {
      case "trace_level": {
        const level = new Set<"TIMESTAMPS" | "TENSORS">();
        for (const v of values) {
          if (v === "OFF") continue;
          if (v !== "TIMESTAMPS" && v !== "TENSORS") {
            throw invalidArg(
              `Cannot update the trace settings: unknown trace_level '${v}' (OFF, TIMESTAMPS, TENSORS)`,
            );
          }
          level.add(v);
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
        out.logFrequency = int(0);
        break;
      case "trace_file":
        out.file = one();
        break;
      case "trace_mode":
        if (one() !== "triton") {
          throw invalidArg("Cannot update the trace settings: only trace_mode 'triton' is supported");
        }
        break;
      default:
        throw invalidArg(`Cannot update the trace settings: unknown setting '${k}'`);
    }
  }
  return out;
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
  #pending = new Map<string, Record<string, unknown>[]>();
  #fileIndex = new Map<string, number>();

  /**
   * Creates the manager from `--trace-config` entries (`[triton,]key=value`: level, rate, count,
   * log-frequency, file, mode).
   * @param config the --trace-config values
   */
  constructor(config: readonly string[] = []) {
    this.#global = { level: new Set(), rate: 1000, count: -1, logFrequency: 0, file: "" };
    const update: Record<string, unknown> = {};
    for (const entry of config) {
      const m = /^(?:([^,=]+),)?([^,=]+)=(.*)$/.exec(entry);
      if (!m) throw invalidArg(`Bad --trace-config '${entry}': expected [mode,]key=value`);
      const [, mode, key, value] = m;
      if (mode === "opentelemetry" || (key === "mode" && value === "opentelemetry")) {
        throw invalidArg("Bad --trace-config: trace mode 'opentelemetry' is not supported yet, use 'triton'");
      }
      if (mode !== undefined && mode !== "triton") {
        throw invalidArg(`Bad --trace-config '${entry}': unknown mode '${mode}'`);
      }
      const name = {
        level: "trace_level",
        rate: "trace_rate",
        count: "trace_count",
        "log-frequency": "log_frequency",
        file: "trace_file",
        mode: "trace_mode",
      }[key!];
      if (!name) throw invalidArg(`Bad --trace-config '${entry}': unknown key '${key}'`);
      update[name] = name === "trace_level" ? value!.split(/[,+]/) : value;
    }
    this.update(update);
  }

  #effective(model: string): Settings {
    return { ...this.#global, ...(this.#models.get(model) ?? {}) };
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
    const s = model ? this.#effective(model) : this.#global;
    return {
      trace_level: s.level.size === 0 ? ["OFF"] : [...s.level],
      trace_rate: String(s.rate),
      trace_count: String(this.#remaining.get(this.#key(model)) ?? s.count),
      log_frequency: String(s.logFrequency),
      trace_file: s.file,
      trace_mode: "triton",
    };
  }

  /**
   * Changes settings (all checked before any takes effect); for a model, `null` values remove its override.
   * @param update settings by the extension's names
   * @param model the model name, "" for the global settings
   * @returns the settings after the change
   */
  update(update: Record<string, unknown>, model = ""): TraceSettingsJson {
    const parsed = parseSettings(update, model !== "");
    const { clear, ...values } = parsed;
    const keyOf: Record<string, keyof Settings> = {
      trace_level: "level",
      trace_rate: "rate",
      trace_count: "count",
      log_frequency: "logFrequency",
      trace_file: "file",
    };
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
    return this.settings(model);
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
      s.level.has("TENSORS"),
      (t) => this.#collect(t, key, file, frequency),
    );
  }

  #collect(t: Trace, key: string, file: string, frequency: number): void {
    const open = (this.#open.get(key) ?? 1) - 1;
    this.#open.set(key, open);
    if (!file) return;
    const list = this.#pending.get(file) ?? [];
    list.push(t.toJson());
    this.#pending.set(file, list);
    // Written every log_frequency traces, and (whatever log_frequency says) once trace_count has run out.
    const exhausted = this.#remaining.get(key) === 0 && open === 0;
    if ((frequency > 0 && list.length >= frequency) || exhausted) this.#write(file, true);
  }

  #write(file: string, indexed: boolean): void {
    const list = this.#pending.get(file);
    if (!list || list.length === 0) return;
    this.#pending.delete(file);
    let path = file;
    if (indexed) {
      const i = this.#fileIndex.get(file) ?? 0;
      this.#fileIndex.set(file, i + 1);
      path = `${file}.${i}`;
    }
    try {
      Deno.writeTextFileSync(path, JSON.stringify(list));
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
}
