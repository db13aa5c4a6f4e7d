/**
 * Logging routes: the log settings, read and changed at run time.
 * @module
 */

import { bodyLimit, json, readJsonObject } from "../middleware.ts";
import type { RouteDeps } from "../options.ts";
import type { Route } from "../router.ts";

/**
 * The logging routes; none when the server has no logger.
 * @param deps the pipeline and options
 */
export function loggingRoutes({ options }: RouteDeps): Route[] {
  const logger = options.logger;
  if (!logger) return [];
  return [
    { method: "GET", path: "/v2/logging", group: "logging", handler: () => json(logger.toJson()) },
    {
      method: "POST",
      path: "/v2/logging",
      group: "logging",
      handler: async (ctx) => json(logger.update(await readJsonObject(ctx, "the log settings"))),
      wrap: [bodyLimit(options.maxInputSize)],
    },
  ];
}
