/**
 * Test helpers: the MOCK libtrtshim of build/shim, built on first use when missing (cmake and g++ are
 * present wherever the tests run); undefined, with the reason printed once, when it cannot be built. And a
 * dinfer process for tests that describe the mock's devices through its environment.
 * @module
 */

import { ROOT, startServerProcess } from "./helpers.ts";

/** The mock library the tests use (built beside libtrtshim.so in every configuration). */
export const MOCK_SHIM: string = `${ROOT}build/shim/libtrtshim_mock.so`;

let found: Promise<string | undefined> | undefined;

async function run(cmd: string, args: string[]): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(cmd, { args, cwd: ROOT, stdout: "null", stderr: "piped" }).output();
    return out.success
      ? undefined
      : new TextDecoder().decode(out.stderr).trim().split("\n").slice(-3).join(" ");
  } catch (err) {
    return (err as Error).message;
  }
}

async function build(): Promise<string | undefined> {
  const exists = await Deno.stat(MOCK_SHIM).then(() => true, () => false);
  if (!exists) {
    const failed = await run("cmake", ["-S", "shim", "-B", "build/shim", "-DCMAKE_BUILD_TYPE=Release"]) ??
      await run("cmake", ["--build", "build/shim", "-j", "2"]);
    if (failed) {
      console.warn(`trtshim tests skipped: the mock shim could not be built: ${failed}`);
      return undefined;
    }
  }
  return MOCK_SHIM;
}

/** The path of the mock shim, or undefined (with a printed reason) when it cannot be built. */
export function mockShim(): Promise<string | undefined> {
  found ??= build();
  return found;
}

/** A dinfer process serving a repository with a shim, for tests that set the mock's devices. */
export interface ShimServer extends AsyncDisposable {
  /** `http://127.0.0.1:<port>` */
  url: string;
  /** The metrics endpoint, `http://127.0.0.1:<port>/metrics` */
  metricsUrl: string;
}

/**
 * Starts dinfer as a process (the mock reads `TRTSHIM_MOCK_*` from the environment, which an in-process server
 * would share with every test running beside it) and waits until it is live.
 * @param flags command-line flags besides the ports and addresses
 * @param env extra environment variables, e.g. `{ TRTSHIM_MOCK_DEVICE_COUNT: "2" }` (the mock's defaults,
 *   one device of compute capability 0.0, unless given)
 */
export async function startShimServer(flags: string[], env: Record<string, string>): Promise<ShimServer> {
  const p = await startServerProcess(
    ["--allow-grpc=false", "--exit-on-error=false", "--log-info=false", ...flags],
    {
      env: { TRTSHIM_MOCK_DEVICE_COUNT: "1", TRTSHIM_MOCK_COMPUTE_CAPABILITY: "0.0", ...env },
      readyPath: "/v2/health/live",
    },
  );
  return {
    url: p.url,
    metricsUrl: `http://127.0.0.1:${p.metrics}/metrics`,
    [Symbol.asyncDispose]: async () => {
      try {
        p.child.kill("SIGTERM");
      } catch {
        // Already gone.
      }
      await p.output;
    },
  };
}
