/**
 * Server logging with Triton's levels (error, warning, info, verbose) and formats (default, ISO8601).
 * @module
 */

import { invalidArg, unsupported } from "./core/errors.ts";

/** Where and what to log (the `logging` section of the server's configuration). */
export interface LogSettings {
  /** Log info messages (`--log-info`). @default true */
  info: boolean;
  /** Log warnings (`--log-warning`). @default true */
  warning: boolean;
  /** Log errors (`--log-error`). @default true */
  error: boolean;
  /** The verbose level; 0 logs no verbose message (`--log-verbose`). @default 0 */
  verbose: number;
  /** The line format (`--log-format`). @default "default" */
  format: "default" | "ISO8601";
  /** A file to append to; "" for standard error (`--log-file`). @default "" */
  file: string;
}

/** The logging extension's settings, as `GET /v2/logging` shows them. */
export interface LogSettingsJson {
  log_file: string;
  log_info: boolean;
  log_warning: boolean;
  log_error: boolean;
  log_verbose_level: number;
  log_format: string;
}

/**
 * Prints a line on stderr where no Logger is at hand; a stderr that cannot be written (its reader has gone) loses
 * the line, as the Logger's own lines are lost then, rather than throwing into what reports it.
 * @param text the line
 */
export function printError(text: string): void {
  try {
    console.error(text);
  } catch {
    // Nothing is left to tell.
  }
}

/** A logger. */
export class Logger {
  #settings: LogSettings;
  #encoder = new TextEncoder();
  #file: Deno.FsFile | undefined;

  /**
   * Creates a logger.
   * @param settings levels, format and destination
   */
  constructor(settings: LogSettings) {
    this.#settings = { ...settings };
    if (settings.file) this.#file = Deno.openSync(settings.file, { append: true, create: true });
  }

  /** The current settings. */
  get settings(): LogSettings {
    return { ...this.#settings };
  }

  /** Called after every `update` (the HTTP listener threads' copies of models follow the verbose level). */
  afterUpdate: (() => void) | undefined;

  /** The verbose level (cheap to read on every request). */
  get verboseLevel(): number {
    return this.#settings.verbose;
  }

  /** The settings in the logging extension's shape. */
  toJson(): LogSettingsJson {
    const s = this.#settings;
    return {
      log_file: s.file,
      log_info: s.info,
      log_warning: s.warning,
      log_error: s.error,
      log_verbose_level: s.verbose,
      log_format: s.format,
    };
  }

  /**
   * Changes settings (the logging extension's update); every value is checked before any takes effect.
   * @param update settings by the extension's names
   * @returns the settings after the change
   * @throws ServerError INVALID_ARG naming the bad setting, UNSUPPORTED for `log_file`
   */
  update(update: Record<string, unknown>): LogSettingsJson {
    const next = { ...this.#settings };
    for (const [k, v] of Object.entries(update)) {
      const bad = (expected: string) =>
        invalidArg(`Cannot update the log settings: '${k}' is ${JSON.stringify(v)}, expected ${expected}`);
      switch (k) {
        case "log_info":
        case "log_warning":
        case "log_error":
          if (typeof v !== "boolean") throw bad("a boolean");
          next[k.slice(4) as "info" | "warning" | "error"] = v;
          break;
        case "log_verbose_level":
          if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw bad("a non-negative integer");
          next.verbose = v;
          break;
        case "log_format":
          if (v !== "default" && v !== "ISO8601") throw bad("'default' or 'ISO8601'");
          next.format = v;
          break;
        case "log_file":
          // As Triton: a network client does not choose a file to write (--log-file does).
          throw unsupported(
            "Cannot update the log settings: log file location can not be updated through network protocol",
          );
        default:
          // As Triton: a setting it does not know is ignored.
          break;
      }
    }
    this.#settings = next;
    this.afterUpdate?.();
    return this.toJson();
  }

  #write(level: "I" | "W" | "E" | "V", message: string): void {
    const now = new Date();
    const stamp = this.#settings.format === "ISO8601"
      ? `${now.toISOString().replace(/\.\d+Z$/, "Z")} ${level}`
      : `${level}${String(now.getUTCMonth() + 1).padStart(2, "0")}${
        String(now.getUTCDate()).padStart(2, "0")
      } ${now.toISOString().slice(11, 23)}`;
    const line = this.#encoder.encode(`${stamp} ${Deno.pid} ${message}\n`);
    try {
      const out = this.#file ?? Deno.stderr;
      for (let at = 0; at < line.byteLength;) at += out.writeSync(line.subarray(at));
    } catch {
      // A log that cannot be written (the reader of stderr has gone, the disk is full) loses the line; it must
      // not stop what logs it: a shutdown that logs as it goes would stop halfway and leave the process running.
    }
  }

  /** Logs an info message. */
  info(message: string): void {
    if (this.#settings.info) this.#write("I", message);
  }

  /** Logs a warning. */
  warning(message: string): void {
    if (this.#settings.warning) this.#write("W", message);
  }

  /** Logs an error. */
  error(message: string): void {
    if (this.#settings.error) this.#write("E", message);
  }

  /** Logs a verbose message at a level. */
  verbose(level: number, message: string): void {
    if (this.#settings.verbose >= level) this.#write("V", message);
  }

  /** Closes the log file, if any. */
  close(): void {
    this.#file?.close();
    this.#file = undefined;
  }
}
