/**
 * The HTTP listeners: `Deno.serve`'s request handling under connection limits and timeouts, on a listener whose
 * failed accepts (for example "Too many open files" when the process runs out of file descriptors) are logged
 * and retried instead of ending the process, and whose shutdown answers the requests that arrived before it.
 *
 * `Deno.serve` has no header-read timeout, no idle keep-alive timeout and no connection limit, and its accept
 * loop runs inside Deno where no connection can be counted or closed. So, when limits are set, the listener
 * accepts the connections itself (`Deno.listen`) and hands each one to Deno's HTTP server for a single
 * connection (`serveHttpOnConnection`, the function behind `Deno.serve`, reached through `Deno[Deno.internal]`
 * in the pinned Deno). Requests are parsed and answered natively as under `Deno.serve`; what this adds is a
 * few field updates per request (no difference measurable with wrk on kept-alive connections) and one
 * `Deno.serve`-like set-up per connection (about 15 µs: 16% fewer connections a second when every request
 * comes on a new connection). A proxy in front of `Deno.serve` would see the bytes of a header as they come,
 * but a TCP proxy in the same process cost about 85 µs a request (9.9k against 67k requests/s), so the one
 * thing this design cannot see, a slow header on a kept-alive connection, is bounded by the idle timeout
 * instead.
 *
 * Per connection:
 * - `maxConnections`: past it, a new connection is answered 503 and closed at once (the count is shared with
 *   the listener threads on the same port).
 * - `headerTimeoutMs`: a new connection whose first request has not arrived whole within it is closed (a
 *   client that connects and sends nothing, or sends its header slowly).
 * - `idleTimeoutMs`: a kept-alive connection with no request in progress for that long is closed; this also
 *   bounds a next request whose header arrives slowly. The close is graceful: a response still being sent
 *   (a stream) is finished first.
 * - `bodyTimeoutMs`: a request body not received whole within it after its header is answered 408 and its
 *   connection closed. Only the reading of a body counts: a request whose model takes longer is not cut. A
 *   body left unread (an error answered first), which Deno reads to its end before the connection goes on,
 *   gets as long before the connection is cut.
 *
 * Only header parsing happens where JavaScript cannot see it, so a first request's header is bounded by the
 * header timeout and a later one's by the idle timeout; the connection is what is measured, not its bytes.
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
/** How long a connection whose body timed out may take to send its 408 before it is cut, in ms. */
const EXPIRED_GRACE_MS = 500;

/** Connection limits and timeouts of a listener; 0 turns one off. */
export interface ConnectionLimits {
  /** The most connections open at once; more are answered 503 and closed. */
  maxConnections: number;
  /** The longest wait for a new connection's first request, in ms. */
  headerTimeoutMs: number;
  /** The longest a kept-alive connection may wait for its next request, in ms. */
  idleTimeoutMs: number;
  /** The longest a request body may take to arrive after its header, in ms. */
  bodyTimeoutMs: number;
  /**
   * The count of open connections, shared with the other listeners of the same port (element 0 of an
   * Int32Array over a SharedArrayBuffer); by default the listener counts its own.
   */
  openConnections?: Int32Array;
}

/** No limit and no timeout: plain `Deno.serve`. */
export const NO_LIMITS: ConnectionLimits = {
  maxConnections: 0,
  headerTimeoutMs: 0,
  idleTimeoutMs: 0,
  bodyTimeoutMs: 0,
};

/** Options of {@linkcode serveResilient}. */
export interface ResilientServeOptions {
  /** Listen address. */
  hostname: string;
  /** Listen port; 0 picks a free one. */
  port: number;
  /** The service's name in log lines, e.g. `HTTPService`. */
  name: string;
  /** Where failed accepts are logged. */
  logger?: Pick<Logger, "info" | "error">;
  /** The first wait before accepting or listening again, in ms (doubles on each failure, up to 5 s). */
  retryMs?: number;
  /** Bind with SO_REUSEPORT, so that HTTP listener threads can join the port. */
  reusePort?: boolean;
  /** Connection limits and timeouts ({@linkcode NO_LIMITS} by default). */
  limits?: ConnectionLimits;
  /** Answers a request whose handler threw (by default a 500 with the error's message, logged). */
  onError?: (error: unknown) => Response | Promise<Response>;
}

/** Set while a connection is being cut (see {@linkcode Connection.cut}). */
let cutting = false;
let guarded = false;

/** One accepted connection. */
class Connection {
  /** Requests whose handler runs. */
  active = 0;
  /** Whether a request has arrived on it. */
  served = false;
  /** When it last had no request in progress (accepted, or its last handler finished), in ms. */
  idleSince = Date.now();
  /** When a request whose body was left unread was answered (Deno then reads the body to its end), in ms. */
  unreadSince = 0;
  /** Asked to close (gracefully). */
  closing = false;
  /** Cut, or closed by itself. */
  done = false;
  /** The cut that follows a 408 (see {@linkcode EXPIRED_GRACE_MS}). */
  cutTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #abort = new AbortController();
  server: Deno.HttpServer<Deno.NetAddr> | undefined;

  /** The signal that cuts it. */
  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** Closes once the response in progress, if any, has been sent. */
  close(): void {
    if (this.closing || this.done) return;
    this.closing = true;
    this.server?.shutdown().catch(() => {});
  }

  /**
   * Closes at once, whatever it is doing. Not after {@linkcode close}: a graceful close hands the connection
   * over to Deno, which then can no longer cut it.
   */
  cut(): void {
    if (this.closing || this.done) return;
    this.done = true;
    // Deno's abort listener throws when the connection has just closed by itself; it reports the error
    // (an uncaught error ends the process) rather than throwing it here, so it is caught as an event.
    if (!guarded) {
      guarded = true;
      globalThis.addEventListener("error", (e) => {
        if (cutting) e.preventDefault();
      });
    }
    cutting = true;
    try {
      this.#abort.abort();
    } finally {
      cutting = false;
    }
  }
}

/** A request whose handler runs. */
interface Pending {
  /** The request. */
  request: Request;
  /** The server's state it belongs to. */
  owner: object;
  /** Its place in {@linkcode active}. */
  index: number;
  conn: Connection | undefined;
  /** Its body has been read whole. */
  received: boolean;
  /** When its body started to be read (0: not reading). */
  readingSince: number;
  /** Fails the read of its body. */
  fail: ((err: Error) => void) | undefined;
  /** Its body did not arrive within the body timeout. */
  expired: boolean;
}

/**
 * The requests whose handlers run, in no order, each knowing its index; a request finds its own through the
 * property below. Not a Map keyed by the request: a Map that empties and fills again with every request
 * allocates a new hash table each time, and those tables outlived the young generation's collections (about
 * 150 bytes a request promoted to the old generation, at one connection).
 */
const active: Pending[] = [];

/** The property of a Request that holds its Pending while its handler runs. */
const PENDING = Symbol("pending");

type Tracked = Request & { [PENDING]?: Pending | undefined };

function pendingOf(request: Request): Pending | undefined {
  return (request as Tracked)[PENDING];
}

function addPending(p: Pending): void {
  p.index = active.length;
  active.push(p);
  (p.request as Tracked)[PENDING] = p;
}

function removePending(p: Pending): void {
  const last = active.pop()!;
  if (last !== p) {
    active[p.index] = last;
    last.index = p.index;
  }
  (p.request as Tracked)[PENDING] = undefined;
}

/**
 * Reads a request's body under the listener's body timeout, and notes that it has been read (so that a
 * shutdown need not wait for it). Every read of a request body goes through here. A request that did not come
 * through a listener is read as it is.
 * @param request the request
 * @param read the read of its body, e.g. `request.bytes()`; one that returns null (a body over the size limit,
 *   left unread) counts as unread
 * @returns what the read returns
 * @throws Error when the body does not arrive within the body timeout (the request is then answered 408)
 */
export function receiveBody<T>(request: Request, read: Promise<T>): Promise<T> {
  const p = pendingOf(request);
  if (!p) return read;
  const timeout = (p.owner as State).limits.bodyTimeoutMs;
  if (timeout === 0) {
    return read.then((v) => {
      p.received = v !== null;
      return v;
    });
  }
  return new Promise<T>((resolve, reject) => {
    p.readingSince = Date.now();
    p.fail = reject;
    read.then((v) => {
      p.fail = undefined;
      p.received = v !== null;
      resolve(v);
    }, (err) => {
      p.fail = undefined;
      reject(err);
    });
  });
}

/** What a server keeps. */
interface State {
  limits: ConnectionLimits;
  /** Requests that ever arrived (a shutdown waits for quiet). */
  arrivals: number;
  /** Answers go out with `connection: close` (shutting down). */
  closing: boolean;
}

type Handler = (request: Request) => Response | Promise<Response>;

const JSON_HEADERS = { "content-type": "application/json" };

function timedOut(limits: ConnectionLimits): Response {
  return new Response(
    JSON.stringify({
      error: `Cannot read the request body: it did not arrive within --http-body-timeout-secs (${
        limits.bodyTimeoutMs / 1000
      } s)`,
    }),
    { status: 408, headers: JSON_HEADERS },
  );
}

/** Wraps a handler so that its requests are known while they run (for the drain and the body timeout). */
function tracked(state: State, handler: Handler) {
  const finish = (request: Request, p: Pending, response: Response | undefined, err?: unknown): Response => {
    removePending(p);
    const c = p.conn;
    if (c) {
      if (--c.active === 0) c.idleSince = Date.now();
      if (!p.received && request.body !== null) c.unreadSince = Date.now();
    }
    if (p.expired) {
      response?.body?.cancel().catch(() => {});
      if (c) c.cutTimer ??= setTimeout(() => c.cut(), EXPIRED_GRACE_MS);
      return timedOut(state.limits);
    }
    if (response === undefined) throw err;
    if (state.closing) {
      try {
        response.headers.set("connection", "close");
      } catch {
        // Immutable headers: the connection closes at shutdown anyway.
      }
    }
    return response;
  };
  return (request: Request, conn: Connection | undefined): Response | Promise<Response> => {
    const p: Pending = {
      request,
      owner: state,
      index: 0,
      conn,
      received: false,
      readingSince: 0,
      fail: undefined,
      expired: false,
    };
    addPending(p);
    state.arrivals++;
    let out;
    try {
      out = handler(request);
    } catch (err) {
      return finish(request, p, undefined, err);
    }
    if (!(out instanceof Promise)) return finish(request, p, out);
    return out.then((r) => finish(request, p, r), (err) => finish(request, p, undefined, err));
  };
}

/** `serveHttpOnConnection(connection, signal, handler, onError, onListen)` of Deno's HTTP extension. */
type ServeOnConnection = (
  conn: Deno.Conn,
  signal: AbortSignal | undefined,
  handler: (request: Request) => Response | Promise<Response>,
  onError: (error: unknown) => Response | Promise<Response>,
  onListen: () => void,
) => Deno.HttpServer<Deno.NetAddr>;

function serveOnConnection(): ServeOnConnection | undefined {
  const deno = Deno as unknown as Record<symbol, Record<string, unknown> | undefined> & { internal?: symbol };
  const internals = deno.internal === undefined ? undefined : deno[deno.internal];
  const f = internals?.serveHttpOnConnection;
  return typeof f === "function" ? f as ServeOnConnection : undefined;
}

/** Whether any limit or timeout is set. */
function limited(limits: ConnectionLimits): boolean {
  return limits.maxConnections > 0 || limits.headerTimeoutMs > 0 || limits.idleTimeoutMs > 0 ||
    limits.bodyTimeoutMs > 0;
}

/**
 * The 500 answer to a request whose handler threw.
 * @param err what it threw
 */
export function handlerFailed(err: unknown): Response {
  return new Response(
    JSON.stringify({ error: `Cannot answer the request: ${(err as Error)?.message ?? err}` }),
    { status: 500, headers: JSON_HEADERS },
  );
}

function defaultOnError(options: ResilientServeOptions) {
  return (err: unknown) => {
    options.logger?.error(`${options.name} cannot answer a request: ${(err as Error)?.message ?? err}`);
    return handlerFailed(err);
  };
}

/**
 * Serves a handler like `Deno.serve`, under connection limits and timeouts, accepting or listening again
 * whenever accepting fails.
 * @param options address, name, logger and limits
 * @param handler the request handler
 * @returns the server
 * @throws Error when the first listen fails (address in use, for example)
 */
export function serveResilient(options: ResilientServeOptions, handler: Handler): ResilientServer {
  const limits = options.limits ?? NO_LIMITS;
  const state: State = { limits, arrivals: 0, closing: false };
  const track = tracked(state, handler);
  const serve = limited(limits) ? serveLimited : servePlain;
  const server = serve(options, state, track);
  return {
    addr: server.addr,
    finished: server.finished,
    shutdown: async () => {
      // Requests that arrived just before (a body still coming in, the next request on a keep-alive
      // connection) are answered before the connections close.
      state.closing = true;
      const start = Date.now();
      let seen = -1;
      let quietSince = Date.now();
      while (Date.now() - start < DRAIN_MAX_MS) {
        if (state.arrivals !== seen || receiving(state)) {
          seen = state.arrivals;
          quietSince = Date.now();
        } else if (Date.now() - quietSince >= DRAIN_QUIET_MS) {
          break;
        }
        await new Promise((r) => setTimeout(r, 10));
      }
      await server.stop();
    },
  };
}

/** Whether some request in progress is still receiving its body (a shutdown now would cut it off). */
function receiving(state: State): boolean {
  for (const p of active) if (p.owner === state && p.request.body !== null && !p.received) return true;
  return false;
}

interface Served {
  addr: Deno.NetAddr;
  finished: Promise<void>;
  /** Stops listening and closes the connections once their requests are answered. */
  stop(): Promise<void>;
}

type Track = ReturnType<typeof tracked>;

/** Plain `Deno.serve`, listening again when its accept loop fails. */
function servePlain(options: ResilientServeOptions, _state: State, track: Track): Served {
  const first = options.retryMs ?? 250;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let delay = first / 2;
  let resolveFinished: () => void = () => {};
  const finished = new Promise<void>((r) => (resolveFinished = r));
  const handle = (request: Request) => track(request, undefined);
  const listen = (port: number) =>
    Deno.serve({
      port,
      hostname: options.hostname,
      ...(options.reusePort ? { reusePort: true } : {}),
      ...(options.onError ? { onError: options.onError } : {}),
      onListen: () => {},
    }, handle);
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
    stop: async () => {
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

/** The answer to a connection past the limit. */
function refusal(limit: number): Uint8Array {
  const body = JSON.stringify({
    error: `Cannot accept the connection: ${limit} connections are open (--http-max-connections)`,
  });
  return new TextEncoder().encode(
    `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n` +
      `content-length: ${body.length}\r\n\r\n${body}`,
  );
}

/** The listener's own accept loop, each connection served by Deno's HTTP server for one connection. */
function serveLimited(options: ResilientServeOptions, state: State, track: Track): Served {
  const serveOn = serveOnConnection();
  if (!serveOn) {
    throw new Error(
      `Deno ${Deno.version.deno} does not offer serveHttpOnConnection, which HTTP connection limits and ` +
        "timeouts need: use the pinned Deno, or turn them off (--http-max-connections=0 " +
        "--http-header-timeout-secs=0 --http-idle-timeout-secs=0 --http-body-timeout-secs=0)",
    );
  }
  const limits = state.limits;
  const first = options.retryMs ?? 250;
  const onError = options.onError ?? defaultOnError(options);
  const counter = limits.openConnections ?? new Int32Array(1);
  const refused = refusal(limits.maxConnections);
  const connections = new Set<Connection>();
  let stopped = false;
  let resolveFinished: () => void = () => {};
  const finished = new Promise<void>((r) => (resolveFinished = r));
  /** Ends the wait before accepting again. */
  let wake: () => void = () => {};
  let listener: Deno.TcpListener;
  const listen = (port: number) =>
    Deno.listen({
      hostname: options.hostname,
      port,
      transport: "tcp",
      ...(options.reusePort ? { reusePort: true } : {}),
    });
  listener = listen(options.port);
  const addr = listener.addr;

  const admit = (conn: Deno.TcpConn) => {
    const open = Atomics.add(counter, 0, 1) + 1;
    if (stopped || (limits.maxConnections > 0 && open > limits.maxConnections)) {
      Atomics.sub(counter, 0, 1);
      conn.write(refused).catch(() => 0).finally(() => {
        try {
          conn.close();
        } catch {
          // Closed by the client.
        }
      });
      return;
    }
    const c = new Connection();
    connections.add(c);
    const handle = (request: Request) => {
      c.active++;
      c.served = true;
      c.unreadSince = 0;
      return track(request, c);
    };
    const release = () => {
      c.done = true;
      clearTimeout(c.cutTimer);
      if (connections.delete(c)) Atomics.sub(counter, 0, 1);
    };
    try {
      c.server = serveOn(conn, c.signal, handle, onError, () => {});
    } catch (err) {
      release();
      options.logger?.error(`${options.name} cannot serve a connection: ${(err as Error).message}`);
      try {
        conn.close();
      } catch {
        // Closed.
      }
      return;
    }
    c.server.finished.then(release, release);
  };

  const accepting = (async () => {
    let wait = first;
    while (!stopped) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
      } catch (err) {
        if (stopped) break;
        const closed = err instanceof Deno.errors.BadResource || err instanceof Deno.errors.Interrupted;
        options.logger?.error(
          `${options.name} cannot accept a connection: ${(err as Error).message}; ${
            closed ? "listening" : "accepting"
          } again in ${wait} ms`,
        );
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, wait);
          wake = () => {
            clearTimeout(t);
            resolve();
          };
        });
        wait = Math.min(wait * 2, 5000);
        if (closed && !stopped) {
          try {
            listener = listen(addr.port);
            options.logger?.info(`${options.name} listening again at ${addr.hostname}:${addr.port}`);
          } catch (e) {
            options.logger?.error(
              `${options.name} cannot listen again at ${addr.hostname}:${addr.port}: ${(e as Error).message}`,
            );
          }
        }
        continue;
      }
      wait = first;
      admit(conn);
    }
  })();

  // Timeouts are checked a few times per the shortest of them (at most once a second).
  const timeouts = [limits.headerTimeoutMs, limits.idleTimeoutMs, limits.bodyTimeoutMs].filter((t) => t > 0);
  const sweep = timeouts.length === 0
    ? undefined
    : setInterval(() => check(state, connections), Math.min(1000, Math.max(50, Math.min(...timeouts) / 4)));

  return {
    addr,
    finished,
    stop: async () => {
      stopped = true;
      clearInterval(sweep);
      wake();
      try {
        listener.close();
      } catch {
        // Closed already.
      }
      await accepting;
      const closing = [...connections].map((c) => {
        c.closing = true;
        return c.server?.shutdown().catch(() => {});
      });
      await Promise.all(closing);
      resolveFinished();
    },
  };
}

/** Closes the connections past their header or idle timeout and fails the bodies past theirs. */
function check(state: State, connections: Set<Connection>): void {
  const { headerTimeoutMs, idleTimeoutMs, bodyTimeoutMs } = state.limits;
  const now = Date.now();
  for (const c of connections) {
    if (c.active > 0 || c.closing) continue;
    // A body left unread is read to its end by Deno before the connection is used again or closed: one that
    // does not arrive within the body timeout is cut.
    if (c.unreadSince > 0 && bodyTimeoutMs > 0) {
      if (now - c.unreadSince >= bodyTimeoutMs) c.cut();
      continue;
    }
    const timeout = c.served ? idleTimeoutMs : headerTimeoutMs;
    if (timeout > 0 && now - c.idleSince >= timeout) c.close();
  }
  if (bodyTimeoutMs === 0) return;
  for (const p of active) {
    if (p.owner !== state || !p.fail || now - p.readingSince < bodyTimeoutMs) continue;
    const fail = p.fail;
    p.fail = undefined;
    p.expired = true;
    fail(new Error(`The request body did not arrive within ${bodyTimeoutMs} ms`));
  }
}
