/**
 * Shared-memory routes: system and CUDA regions' status, registration and unregistration, for every region or
 * one (`.../region/{name}/...`).
 * @module
 */

import { invalidArg } from "../../../core/errors.ts";
import { bodyLimit, json, ok, readJsonObject } from "../middleware.ts";
import type { RouteDeps } from "../options.ts";
import type { Route, RouteHandler, Wrapper } from "../router.ts";

/** The status and unregister routes of one kind of region, for every region or the one named in the path. */
function regionRoutes(
  base: string,
  status: (region: string) => unknown,
  unregister: (region: string) => void,
  register: RouteHandler,
  wrap: readonly Wrapper[],
): Route[] {
  const both = (action: string) => [`${base}/${action}`, `${base}/region/:region/${action}`];
  return [
    {
      method: "GET",
      path: both("status"),
      group: "shared-memory",
      handler: ({ params }) => json(status(params.region ?? "")),
    },
    {
      method: "POST",
      path: `${base}/region/:region/register`,
      group: "shared-memory",
      handler: register,
      wrap,
    },
    {
      method: "POST",
      path: both("unregister"),
      group: "shared-memory",
      handler: ({ params }) => {
        unregister(params.region ?? "");
        return ok();
      },
    },
  ];
}

/**
 * The system and CUDA shared-memory routes; none for a kind the server does not offer.
 * @param deps the pipeline and options
 */
export function sharedMemoryRoutes({ options }: RouteDeps): Route[] {
  const wrap = [bodyLimit(options.maxInputSize)];
  const routes: Route[] = [];
  const shm = options.shm;
  if (shm) {
    routes.push(...regionRoutes(
      "/v2/systemsharedmemory",
      (region) => shm.status(region),
      (region) => shm.unregister(region),
      async (ctx) => {
        const region = ctx.params.region!;
        const body = await readJsonObject(ctx, `the register request for '${region}'`);
        const { key, offset = 0, byte_size } = body as {
          key?: unknown;
          offset?: unknown;
          byte_size?: unknown;
        };
        if (typeof key !== "string" || typeof offset !== "number" || typeof byte_size !== "number") {
          throw invalidArg(
            `Cannot register shared memory region '${region}': the body needs 'key' (string), 'offset' and 'byte_size' (numbers)`,
          );
        }
        await shm.register(region, key, offset, byte_size);
        return ok();
      },
      wrap,
    ));
  }
  const cuda = options.cudaShm;
  if (cuda) {
    routes.push(...regionRoutes(
      "/v2/cudasharedmemory",
      (region) => cuda.status(region),
      (region) => cuda.unregister(region),
      async (ctx) => {
        const region = ctx.params.region!;
        cuda.checkAllowed();
        const body = await readJsonObject(ctx, `the CUDA register request for '${region}'`) as {
          raw_handle?: { b64?: unknown };
          device_id?: unknown;
          byte_size?: unknown;
        };
        const handle = body.raw_handle?.b64;
        const { device_id, byte_size } = body;
        if (typeof handle !== "string" || typeof device_id !== "number" || typeof byte_size !== "number") {
          throw invalidArg(
            `Cannot register CUDA shared memory region '${region}': the body needs 'raw_handle' ({"b64": string}), 'device_id' and 'byte_size' (numbers)`,
          );
        }
        let raw: Uint8Array;
        try {
          raw = Uint8Array.from(atob(handle), (c) => c.charCodeAt(0));
        } catch {
          throw invalidArg(
            `Cannot register CUDA shared memory region '${region}': raw_handle.b64 is not base64`,
          );
        }
        cuda.register(region, raw, device_id, byte_size);
        return ok();
      },
      wrap,
    ));
  }
  return routes;
}
