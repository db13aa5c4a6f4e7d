import { assertEquals, assertThrows } from "../assert.ts";
import { createRouter, modelPaths, type Route } from "../../server/frontends/http/router.ts";
import { type HttpOptions, httpRoutes } from "../../server/frontends/http/handler.ts";
import type { InferencePipeline } from "../../server/pipeline/pipeline.ts";

const answer = (text: string) => () => new Response(text);

function matched(routes: Route[], method: string, path: string) {
  const found = createRouter(routes).match(method, path.split("/").filter((p) => p !== ""));
  return found && { group: found.route.group, params: found.params };
}

Deno.test("the router takes parameters, checks their regex, and tries routes in order", () => {
  const routes: Route[] = [
    { method: "GET", path: "/v2/models/stats", group: "statistics", handler: answer("all") },
    { method: "GET", path: modelPaths("/ready"), group: "health", handler: answer("ready") },
    { method: "GET", path: modelPaths(""), group: "metadata", handler: answer("model") },
    { method: "*", path: "/v1/models/*", group: "metadata", handler: answer("list") },
  ];
  assertEquals(matched(routes, "GET", "/v2/models/stats"), { group: "statistics", params: {} });
  assertEquals(matched(routes, "GET", "/v2/models/m"), { group: "metadata", params: { model: "m" } });
  assertEquals(matched(routes, "GET", "/v2/models/m/versions/12/ready"), {
    group: "health",
    params: { model: "m", version: "12" },
  });
  assertEquals(matched(routes, "GET", "/v2/models/m/versions/x/ready"), undefined);
  assertEquals(matched(routes, "POST", "/v2/models/m"), undefined);
  assertEquals(matched(routes, "POST", "/v1/models"), { group: "metadata", params: {} });
  assertEquals(matched(routes, "DELETE", "/v1/models/a/b"), { group: "metadata", params: {} });
  assertEquals(matched(routes, "GET", "/v1"), undefined);
});

Deno.test("a route pattern that does not compile is refused", () => {
  const route = (path: string): Route[] => [{ method: "GET", path, group: "health", handler: answer("") }];
  assertThrows(
    () => createRouter(route("/v2/*/x")),
    Error,
    { message: "Cannot compile the route '/v2/*/x': '*' must be its last segment" },
  );
  assertThrows(
    () => createRouter(route("/v2/:v{[0-9]+")),
    Error,
    { message: "Cannot compile the route '/v2/:v{[0-9]+': ':v{[0-9]+' lacks its closing '}'" },
  );
});

Deno.test("every HTTP endpoint belongs to Triton's API group, declared in the route table", () => {
  const pipeline = { registry: {} } as unknown as InferencePipeline;
  const options = {
    serverName: "t",
    serverVersion: "0",
    extensions: [],
    strictReadiness: false,
    maxInputSize: 1,
    traces: {},
    logger: {},
    shm: {},
    cudaShm: {},
  } as unknown as HttpOptions;
  const routes = httpRoutes(pipeline, options);
  const group = (call: string) => {
    const [method, path] = call.split(" ");
    return matched(routes, method!, path!)?.group;
  };
  assertEquals(
    [
      "GET /v2",
      "GET /v2/health/live",
      "GET /v2/health/ready",
      "GET /v2/models/m",
      "GET /v2/models/m/versions/2",
      "GET /v2/models/m/ready",
      "GET /v2/models/m/versions/2/ready",
      "GET /v2/models/m/config",
      "POST /v2/models/m/infer",
      "POST /v2/models/m/versions/2/infer",
      "POST /v2/models/m/generate",
      "POST /v2/models/m/generate_stream",
      "GET /v2/models/stats",
      "GET /v2/models/m/stats",
      "GET /v2/models/m/trace/setting",
      "POST /v2/trace/setting",
      "GET /v2/logging",
      "POST /v2/repository/index",
      "POST /v2/repository/models/m/load",
      "GET /v2/systemsharedmemory/status",
      "POST /v2/cudasharedmemory/region/r/register",
      "GET /v1/models",
      "POST /v1/chat/completions",
      "GET /metrics",
      "GET /v2/models/m/infer",
    ].map(group),
    [
      "metadata",
      "health",
      "health",
      "metadata",
      "metadata",
      "health",
      "health",
      "model-config",
      "inference",
      "inference",
      "inference",
      "inference",
      "statistics",
      "statistics",
      "trace",
      "trace",
      "logging",
      "model-repository",
      "model-repository",
      "shared-memory",
      "shared-memory",
      "metadata",
      "inference",
      undefined,
      undefined,
    ],
  );
});
