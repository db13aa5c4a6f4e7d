/**
 * Health routes: server liveness and readiness, model readiness.
 * @module
 */

import { serverReady } from "../../frontend.ts";
import type { RouteDeps } from "../options.ts";
import { modelPaths, type Route } from "../router.ts";

/**
 * The health routes.
 * @param deps the pipeline and options
 */
export function healthRoutes({ pipeline, options }: RouteDeps): Route[] {
  const registry = pipeline.registry;
  return [
    {
      method: "GET",
      path: "/v2/health/live",
      group: "health",
      handler: () => new Response(null, { status: 200 }),
    },
    {
      method: "GET",
      path: "/v2/health/ready",
      group: "health",
      handler: () => new Response(null, { status: serverReady(registry, options) ? 200 : 400 }),
    },
    {
      method: "GET",
      path: modelPaths("/ready"),
      group: "health",
      handler: ({ params }) =>
        new Response(null, { status: registry.isReady(params.model!, params.version ?? "") ? 200 : 400 }),
    },
  ];
}
