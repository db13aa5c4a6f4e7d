/**
 * Metadata routes: server metadata, model metadata and model configuration.
 * @module
 */

import { json } from "../middleware.ts";
import type { RouteDeps } from "../options.ts";
import { modelPaths, type Route } from "../router.ts";

/**
 * The metadata and model-configuration routes.
 * @param deps the pipeline and options
 */
export function metadataRoutes({ pipeline, options }: RouteDeps): Route[] {
  const registry = pipeline.registry;
  return [
    {
      method: "GET",
      path: "/v2",
      group: "metadata",
      handler: () =>
        json({ name: options.serverName, version: options.serverVersion, extensions: options.extensions }),
    },
    {
      method: "GET",
      path: modelPaths(""),
      group: "metadata",
      handler: ({ params }) => json(registry.metadata(params.model!, params.version ?? "")),
    },
    {
      method: "GET",
      path: modelPaths("/config"),
      group: "model-config",
      handler: ({ params }) => json(registry.resolve(params.model!, params.version ?? "").config),
    },
  ];
}
