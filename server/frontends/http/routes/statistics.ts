/**
 * Statistics routes: every model's, or one model's (and version's).
 * @module
 */

import { json } from "../middleware.ts";
import type { RouteDeps } from "../options.ts";
import { modelPaths, type Route } from "../router.ts";

/**
 * The statistics routes.
 * @param deps the pipeline and options
 */
export function statisticsRoutes({ pipeline }: RouteDeps): Route[] {
  const registry = pipeline.registry;
  return [
    {
      method: "GET",
      path: "/v2/models/stats",
      group: "statistics",
      handler: () => json({ model_stats: registry.statistics("", "") }),
    },
    {
      method: "GET",
      path: modelPaths("/stats"),
      group: "statistics",
      handler: ({ params }) =>
        json({ model_stats: registry.statistics(params.model!, params.version ?? "") }),
    },
  ];
}
