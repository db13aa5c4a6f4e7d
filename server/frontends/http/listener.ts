/**
 * `Deno.serve` that survives a failed accept: when its accept loop ends with an error (for example "Too many open
 * files" when the process runs out of file descriptors), the error is logged and the same address is listened on
 * again after a short wait, instead of the error ending the process.
 * @module
 */

import type { Logger } from "../../logging.ts";

/** A listening HTTP server that listens again after a failed accept. */
export interface ResilientServer {
  /** The address bound (port 0 picks a free one, kept when listening again). */
  addr: Deno.NetAddr;
  /**
   * Stops: first waits until no request has arrived for a moment and every request in progress has its body
   * (at most {@linkcode DRAIN_MAX_MS}; answers then close their connections), then stops listening and
   * finishes the requests in progress.
   */
  shutdown(): Promise<void>;
  /** Resolves when the server has shut down. */
  finished: Promise<void>;
}

/** How long without a new request counts as quiet when shutting down, in ms. */
export const DRAIN_QUIET_MS = 150;
/** The longest wait for quiet when shutting down, in ms. */
export const DRAIN_MAX_MS = 2000;

const bodiesReceived = new WeakSet<Request>();

/**
 * Notes that a request's body has been read whole, so that a shutdown need not wait for it.
 * @param request the request
 */
export function bodyReceived(request: Request): void {
  bodiesReceived.add(request);
}

/** Options of {@linkcode serveResilient}. */
export interface ResilientServeOptions {
  /** Listen address. */
  hostname: string;
  /** Listen port; 0 picks a free one. */
  port: number;
  /** The service's name in log lines, e.g. `HTTPService`. */
  name: string;
  /** Where failed accepts are logged. */
  logger?: Logger;
  /** The first wait before listening again, in ms (doubles on each failure, up to 5 s). */
  retryMs?: number;
  /** Bind with SO_REUSEPORT, so that HTTP listener threads can join the port. */
  reusePort?: boolean;
}

/**
 * Serves a handler like `Deno.serve`, listening again whenever the accept loop fails.
 * @param options address, name and logger
 * @param handler the request handler
 * @returns the server
 * @throws Error when the first listen fails (address in use, for example)
 */
export function serveResilient(
  options: ResilientServeOptions,
  handler: (request: Request) => Response | Promise<Response>,
): ResilientServer {
  const first = options.retryMs ?? 250;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let delay = first / 2;
  let resolveFinished: () => void = () => {};
  const finished = new Promise<void>((r) => (resolveFinished = r));
  let closing = false;
  // Requests whose handler runs, and the number that ever arrived: a shutdown waits for quiet.
  const inflight = new Set<Request>();
  let arrivals = 0;
  const done = (request: Request, response: Response): Response => {
    inflight.delete(request);
    if (closing) {
      try {
        response.headers.set("connection", "close");
      } catch {
        // Immutable headers: the connection closes at shutdown anyway.
      }
    }
    return response;
  };
  const counted = (request: Request): Response | Promise<Response> => {
    inflight.add(request);
    arrivals++;
    let out;
    try {
      out = handler(request);
    } catch (err) {
      inflight.delete(request);
      throw err;
    }
    if (!(out instanceof Promise)) return done(request, out);
    return out.then((r) => done(request, r), (err) => {
      inflight.delete(request);
      throw err;
    });
  };
  /** Whether some request in progress is still receiving its body (a shutdown now would cut it off). */
  const receiving = () => {
    for (const r of inflight) if (r.body !== null && !bodiesReceived.has(r)) return true;
    return false;
  };
  const listen = (port: number) =>
    Deno.serve({
      port,
      hostname: options.hostname,
      ...(options.reusePort ? { reusePort: true } : {}),
      onListen: () => {},
    }, counted);
  let server = listen(options.port);
  let since = Date.now();
  const addr = server.addr;

  const retry = () => {
    timer = setTimeout(() => {
      timer = undefined;
      if (stopped) return;
      try {
        server = listen(addr.port);
        since = Date.now();
        watch(server);
        options.logger?.info(`${options.name} listening again at ${addr.hostname}:${addr.port}`);
      } catch (err) {
        options.logger?.error(
          `${options.name} cannot listen again at ${addr.hostname}:${addr.port}: ${(err as Error).message}`,
        );
        delay = Math.min(delay * 2, 5000);
        retry();
      }
    }, delay);
  };
  const watch = (s: Deno.HttpServer<Deno.NetAddr>) => {
    s.finished.then(() => {
      if (stopped) resolveFinished();
    }, (err: unknown) => {
      if (stopped) {
        resolveFinished();
        return;
      }
      // Failing again soon after listening again (still out of descriptors) waits longer each time.
      delay = Date.now() - since > 10_000 ? first : Math.min(delay * 2, 5000);
      options.logger?.error(
        `${options.name} stopped accepting connections: ${
          (err as Error).message
        }; listening again in ${delay} ms`,
      );
      retry();
    });
  };
  watch(server);

  return {
    addr,
    finished,
    shutdown: async () => {
      // Requests that arrived just before (a body still coming in, the next request on a keep-alive
      // connection) are answered before the connections close.
      closing = true;
      const start = Date.now();
      let seen = -1;
      let quietSince = Date.now();
      while (Date.now() - start < DRAIN_MAX_MS) {
        if (arrivals !== seen || receiving()) {
          seen = arrivals;
          quietSince = Date.now();
        } else if (Date.now() - quietSince >= DRAIN_QUIET_MS) {
          break;
        }
        await new Promise((r) => setTimeout(r, 10));
      }
      stopped = true;
      clearTimeout(timer);
      try {
        await server.shutdown();
      } catch {
        // It had stopped already (a failed accept).
      }
      resolveFinished();
    },
  };
}
