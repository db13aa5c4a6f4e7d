/**
 * Server logging with Triton's levels (error, warning, info, verbose) and formats (default, ISO8601).
 * @module
 */

/** Where and what to log. */
export interface LogSettings {
  /** Log info messages. */
  info: boolean;
  /** Log warnings. */
  warning: boolean;
  /** Log errors. */
  error: boolean;
  /** Verbose level; 0 logs no verbose message. */
  verbose: number;
  /** The line format. */
  format: "default" | "ISO8601";
  /** A file to append to; "" for standard error. */
  file: string;
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

  #write(level: "I" | "W" | "E" | "V", message: string): void {
    const now = new Date();
    const stamp = this.#settings.format === "ISO8601"
      ? `${now.toISOString().replace(/\.\d+Z$/, "Z")} ${level}`
      : `${level}${String(now.getUTCMonth() + 1).padStart(2, "0")}${
        String(now.getUTCDate()).padStart(2, "0")
      } ${now.toISOString().slice(11, 23)}`;
    const line = this.#encoder.encode(`${stamp} ${Deno.pid} ${message}\n`);
    if (this.#file) this.#file.writeSync(line);
    else Deno.stderr.writeSync(line);
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
