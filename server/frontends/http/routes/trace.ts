/**
 * Trace routes: the server's trace settings and one model's (`--trace-config`'s runtime side).
 * @module
 */

import type { TraceManager } from "../../../trace/trace.ts";
import { bodyLimit, json, readJsonObject } from "../middleware.ts";
import type { RouteDeps } from "../options.ts";
import { modelPaths, type Route, type RouteContext } from "../router.ts";

/**
 * The trace routes; none when the server has no trace extension.
 * @param deps the pipeline and options
 */
export function traceRoutes({ options }: RouteDeps): Route[] {
  const traces = options.traces;
  if (!traces) return [];
  const wrap = [bodyLimit(options.maxInputSize)];
  const paths = ["/v2/trace/setting", ...modelPaths("/trace/setting")];
  return [
    {
      method: "GET",
      path: paths,
      group: "trace",
      handler: ({ params }) => json(traces.settings(params.model)),
    },
    { method: "POST", path: paths, group: "trace", handler: (ctx) => update(traces, ctx), wrap },
  ];
}

async function update(traces: TraceManager, ctx: RouteContext): Promise<Response> {
  return json(traces.update(await readJsonObject(ctx, "the trace settings"), ctx.params.model));
}
