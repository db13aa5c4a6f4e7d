/**
 * The HTTP frontend's router: a table of routes (method, path pattern, API group, handler, wrappers) matched
 * against a request's percent-decoded path segments, first match wins.
 * @module
 */

import type { ApiGroup } from "../restricted.ts";

/** What a route's handler gets: the request, the parameters its pattern took from the path, the raw path. */
export interface RouteContext {
  /** The HTTP request. */
  readonly request: Request;
  /** The path parameters by name (`:model` gives `params.model`), percent-decoded. */
  readonly params: Readonly<Record<string, string>>;
  /** The request's path as sent (not decoded). */
  readonly path: string;
  /** The largest body the route reads, in bytes; set by the `bodyLimit` wrapper, 0 without it. */
  bodyLimit: number;
}

/** Answers one request that matched a route. */
export type RouteHandler = (ctx: RouteContext) => Response | Promise<Response>;

/** Wraps a handler with something every request of a route goes through (a body limit, compression). */
export type Wrapper = (handler: RouteHandler) => RouteHandler;

/** One entry of the route table. */
export interface Route {
  /** The method it answers, or `*` for every method. */
  method: "GET" | "POST" | "*";
  /**
   * The path patterns, segment by segment: a literal, `:name` (any one segment), `:name{regex}` (one segment the
   * regex matches whole), or a final `*` (any number of segments, none included).
   */
  path: string | readonly string[];
  /** The API group it belongs to, for `--http-restricted-api`. */
  group: ApiGroup;
  /** The handler. */
  handler: RouteHandler;
  /** Wrappers, outermost first. */
  wrap?: readonly Wrapper[];
}

/** A route the router has compiled: the handler with its wrappers applied. */
export interface CompiledRoute {
  /** The API group. */
  readonly group: ApiGroup;
  /** The wrapped handler. */
  readonly run: RouteHandler;
}

/** A route that matched, with the parameters its pattern took. */
export interface RouteMatch {
  route: CompiledRoute;
  params: Record<string, string>;
}

type Segment =
  | { kind: "literal"; value: string }
  | { kind: "param"; name: string; test?: RegExp }
  | { kind: "rest" };

interface Pattern {
  method: Route["method"];
  segments: Segment[];
  route: CompiledRoute;
}

/** The routes of a table, matched in order. */
export interface Router {
  /**
   * The first route that answers this method and path.
   * @param method the request's method
   * @param parts the path's segments, percent-decoded, empty ones left out
   * @returns the route and its parameters, or undefined when none matches
   */
  match(method: string, parts: readonly string[]): RouteMatch | undefined;
}

function compileSegment(text: string, pattern: string): Segment {
  if (text === "*") return { kind: "rest" };
  if (!text.startsWith(":")) return { kind: "literal", value: text };
  const brace = text.indexOf("{");
  if (brace < 0) return { kind: "param", name: text.slice(1) };
  if (!text.endsWith("}")) {
    throw new Error(`Cannot compile the route '${pattern}': '${text}' lacks its closing '}'`);
  }
  return {
    kind: "param",
    name: text.slice(1, brace),
    test: new RegExp(`^(?:${text.slice(brace + 1, -1)})$`),
  };
}

function compilePattern(pattern: string): Segment[] {
  const segments = pattern.split("/").filter((s) => s !== "").map((s) => compileSegment(s, pattern));
  if (segments.slice(0, -1).some((s) => s.kind === "rest")) {
    throw new Error(`Cannot compile the route '${pattern}': '*' must be its last segment`);
  }
  return segments;
}

function matchSegments(
  segments: readonly Segment[],
  parts: readonly string[],
): Record<string, string> | undefined {
  const rest = segments.length > 0 && segments[segments.length - 1]!.kind === "rest";
  const fixed = rest ? segments.length - 1 : segments.length;
  if (rest ? parts.length < fixed : parts.length !== fixed) return undefined;
  let params: Record<string, string> | undefined;
  for (let i = 0; i < fixed; i++) {
    const s = segments[i]!;
    const part = parts[i]!;
    if (s.kind === "literal") {
      if (s.value !== part) return undefined;
    } else if (s.kind === "param") {
      if (s.test && !s.test.test(part)) return undefined;
      (params ??= {})[s.name] = part;
    }
  }
  return params ?? {};
}

/** Applies a route's wrappers to its handler, the first wrapper outermost. */
function compileRoute(route: Route): CompiledRoute {
  let run = route.handler;
  for (const w of [...(route.wrap ?? [])].reverse()) run = w(run);
  return { group: route.group, run };
}

/**
 * Compiles a route table.
 * @param routes the routes, in the order they are tried
 * @returns the router
 * @throws Error naming a pattern that does not compile
 */
export function createRouter(routes: readonly Route[]): Router {
  const patterns: Pattern[] = [];
  for (const route of routes) {
    const compiled = compileRoute(route);
    for (const path of typeof route.path === "string" ? [route.path] : route.path) {
      patterns.push({ method: route.method, segments: compilePattern(path), route: compiled });
    }
  }
  return {
    match(method, parts) {
      for (const p of patterns) {
        if (p.method !== "*" && p.method !== method) continue;
        const params = matchSegments(p.segments, parts);
        if (params) return { route: p.route, params };
      }
      return undefined;
    },
  };
}

/**
 * The two patterns of a model endpoint: `/v2/models/:model<suffix>` and its versioned form, whose version is
 * digits.
 * @param suffix what follows the model (and version), e.g. `/ready`, or "" for the model itself
 */
export function modelPaths(suffix: string): readonly string[] {
  return [`/v2/models/:model${suffix}`, `/v2/models/:model/versions/:version{[0-9]+}${suffix}`];
}
