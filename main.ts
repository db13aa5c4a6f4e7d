/**
 * The dinfer command line: `deno run -A main.ts [serve] [--flag=value ...]`.
 * @module
 */

import { CliError, helpText, parseCommandLine } from "./server/cli.ts";
import { removeOwnFiles } from "./server/cleanup.ts";
import { startServer, StartupError } from "./server/server.ts";

async function main(args: string[]): Promise<number> {
  if (args[0] === "serve") args = args.slice(1);
  let options;
  try {
    options = parseCommandLine(args);
  } catch (err) {
    if (err instanceof CliError) {
      console.error(`dinfer: ${err.message}`);
      return 2;
    }
    throw err;
  }
  if (options === "help") {
    console.log(helpText());
    return 0;
  }
  let server;
  try {
    server = await startServer(options);
  } catch (err) {
    if (err instanceof StartupError || (err instanceof Error && err.name === "ServerError")) {
      console.error(`dinfer: ${err.message}`);
      return 1;
    }
    if (err instanceof Deno.errors.AddrInUse) {
      console.error(`dinfer: ${err.message}`);
      return 1;
    }
    throw err;
  }
  const stop = () => void server.shutdown();
  Deno.addSignalListener("SIGTERM", stop);
  Deno.addSignalListener("SIGINT", stop);
  await server.finished;
  return 0;
}

if (import.meta.main) {
  // An uncaught error ends the process: its files go first.
  globalThis.addEventListener("error", () => removeOwnFiles());
  globalThis.addEventListener("unhandledrejection", () => removeOwnFiles());
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
