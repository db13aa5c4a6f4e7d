/**
 * The dinfer command line: `deno run -A main.ts [serve] [--flag=value ...]`.
 * @module
 */

import { CliError, helpText, parseCommandLine } from "./server/cli.ts";
import { removeOwnFiles } from "./server/cleanup.ts";
import { printError } from "./server/logging.ts";
import { startServer, StartupError } from "./server/server.ts";

/** Aborted by SIGTERM, SIGINT or an uncaught error: the server's one cleanup path runs, then the process ends. */
const stop = new AbortController();
let failed = false;

async function main(args: string[]): Promise<number> {
  if (args[0] === "serve") args = args.slice(1);
  let config;
  try {
    config = parseCommandLine(args);
  } catch (err) {
    if (err instanceof CliError) {
      printError(`dinfer: ${err.message}`);
      return 2;
    }
    throw err;
  }
  if (config === "help") {
    console.log(helpText());
    return 0;
  }
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGTERM", onSignal);
  Deno.addSignalListener("SIGINT", onSignal);
  let server;
  try {
    server = await startServer(config, { signal: stop.signal });
  } catch (err) {
    if (err instanceof StartupError || (err instanceof Error && err.name === "ServerError")) {
      printError(`dinfer: ${err.message}`);
      return 1;
    }
    throw err;
  }
  await server.finished;
  return failed ? 1 : 0;
}

/** An uncaught error stops the server through the same path as a signal; the process then exits with 1. */
function uncaught(event: Event, error: unknown): void {
  event.preventDefault();
  failed = true;
  stop.abort();
  printError(
    `dinfer: uncaught error: ${error instanceof Error ? error.stack ?? error.message : String(error)}`,
  );
}

if (import.meta.main) {
  globalThis.addEventListener("error", (e) => uncaught(e, e.error));
  globalThis.addEventListener("unhandledrejection", (e) => uncaught(e, e.reason));
  let code = 1;
  try {
    code = await main(Deno.args);
  } finally {
    // Whatever the way out (a clean stop, a timed-out one, a failed start, an error), this process's
    // shared-memory objects and temporary folders go with it.
    removeOwnFiles();
  }
  Deno.exit(code);
}
