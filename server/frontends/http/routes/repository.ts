/**
 * Model repository routes: the index, loading and unloading models.
 * @module
 */

import { invalidArg } from "../../../core/errors.ts";
import { loadOptions } from "../../load_parameters.ts";
import { bodyLimit, json, ok, readJsonObject } from "../middleware.ts";
import type { RouteDeps } from "../options.ts";
import type { Route, RouteContext } from "../router.ts";

/**
 * The model repository routes.
 * @param deps the pipeline and options
 */
export function repositoryRoutes({ pipeline, options }: RouteDeps): Route[] {
  const registry = pipeline.registry;
  const wrap = [bodyLimit(options.maxInputSize)];

  /** The body of a load or unload request, with its `parameters` object. */
  async function readParameters(ctx: RouteContext, action: string): Promise<Record<string, unknown>> {
    const model = ctx.params.model!;
    const body = await readJsonObject(ctx, `the ${action} request for '${model}'`);
    const params = body.parameters ?? {};
    if (typeof params !== "object" || Array.isArray(params) || params === null) {
      throw invalidArg(`Cannot read the ${action} request for '${model}': 'parameters' must be an object`);
    }
    return params as Record<string, unknown>;
  }

  return [
    {
      method: "POST",
      path: "/v2/repository/index",
      group: "model-repository",
      wrap,
      handler: async (ctx) => {
        const body = await readJsonObject(ctx, "the repository index request");
        const ready = body.ready ?? false;
        if (typeof ready !== "boolean") {
          throw invalidArg("Cannot read the repository index request: 'ready' must be a boolean");
        }
        const rows = await registry.index(ready);
        return json(rows.map((r) => (r.state === "" ? { name: r.name } : r)));
      },
    },
    {
      method: "POST",
      path: "/v2/repository/models/:model/load",
      group: "model-repository",
      wrap,
      handler: async (ctx) => {
        const model = ctx.params.model!;
        await registry.loadModel(model, loadOptions(model, await readParameters(ctx, "load"), true));
        return ok();
      },
    },
    {
      method: "POST",
      path: "/v2/repository/models/:model/unload",
      group: "model-repository",
      wrap,
      handler: async (ctx) => {
        const model = ctx.params.model!;
        const dependents = (await readParameters(ctx, "unload")).unload_dependents ?? false;
        if (typeof dependents !== "boolean") {
          throw invalidArg(`Cannot unload '${model}': parameter 'unload_dependents' must be a boolean`);
        }
        await registry.unloadModel(model, { unloadDependents: dependents });
        return ok();
      },
    },
  ];
}
