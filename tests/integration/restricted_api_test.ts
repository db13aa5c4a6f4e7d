/**
 * Restricted APIs: `--http-restricted-api` answers 403 and `--grpc-restricted-protocol` PERMISSION_DENIED to a call
 * of a restricted group without the expected header, and explicit mode warns when the repository API is open.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as grpc from "@grpc/grpc-js";
import { lookupType } from "../../server/core/protos.ts";
import { EXAMPLES, fileLogger, startTestServer } from "../helpers.ts";
import { call, get } from "./_http.ts";

const SIMPLE_INPUTS = {
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(2) },
  ],
};

function post(base: string, path: string, body: unknown, headers: Record<string, string> = {}) {
  return call(base + path, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

/** A unary gRPC call to `inference.GRPCInferenceService`, resolving to the status code and details. */
function grpcUnary(
  client: grpc.Client,
  method: string,
  request: Record<string, unknown>,
  metadata: Record<string, string> = {},
): Promise<{ code: number; details: string; response?: Record<string, unknown> }> {
  const req = lookupType(`${method}Request`);
  const res = lookupType(`${method}Response`);
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  return new Promise((resolve) => {
    client.makeUnaryRequest(
      `/inference.GRPCInferenceService/${method}`,
      (v: Record<string, unknown>) => Buffer.from(req.encode(req.fromObject(v)).finish()),
      (b: Buffer) => res.toObject(res.decode(b)) as Record<string, unknown>,
      request,
      md,
      (err, response) => {
        if (err) resolve({ code: err.code, details: err.details });
        else resolve({ code: 0, details: "", response: response as Record<string, unknown> });
      },
    );
  });
}

Deno.test("HTTP: a restricted API needs its header; other APIs stay open", async () => {
  await using s = await startTestServer([
    `--model-repository=${EXAMPLES}`,
    "--model-control-mode=explicit",
    "--load-model=simple",
    "--http-restricted-api=model-repository,shared-memory:admin-key=s3cret",
    "--http-restricted-api=trace,logging,statistics,model-config:ops-key=other",
  ]);
  const expected = { error: "This API is restricted, expecting header 'admin-key'" };
  for (
    const [path, headers] of [
      ["/v2/repository/models/simple/load", {}],
      ["/v2/repository/models/simple/unload", { "admin-key": "wrong" }],
      ["/v2/repository/index", { "admin-key": "s3cre" }],
      ["/v2/repository/index", { "admin-key": "s3cret2" }],
      // The group is found after percent-decoding, as the router finds the endpoint.
      ["/v2/%72epository/index", {}],
      ["/v2/systemsharedmemory/region/r/register", {}],
    ] as const
  ) {
    const r = await post(s.url, path, {}, headers);
    assert.equal(r.status, 403, path);
    assert.deepEqual(r.json, expected, path);
  }
  assert.equal((await get(s.url, "/v2/systemsharedmemory/status")).status, 403);
  assert.deepEqual((await get(s.url, "/v2/models/simple/config")).json, {
    error: "This API is restricted, expecting header 'ops-key'",
  });
  for (const path of ["/v2/models/stats", "/v2/models/simple/stats", "/v2/trace/setting", "/v2/logging"]) {
    assert.equal((await get(s.url, path)).status, 403, path);
  }

  // The right header opens the group; header names are case-insensitive.
  const index = await post(s.url, "/v2/repository/index", {}, { "Admin-Key": "s3cret" });
  assert.equal(index.status, 200);
  assert.equal(
    (await post(s.url, "/v2/repository/models/simple/unload", {}, { "admin-key": "s3cret" })).status,
    200,
  );
  assert.equal(
    (await post(s.url, "/v2/repository/models/simple/load", {}, { "admin-key": "s3cret" })).status,
    200,
  );
  const config = await call(`${s.url}/v2/models/simple/config`, { headers: { "ops-key": "other" } });
  assert.equal(config.status, 200);

  // Unrestricted groups need nothing.
  assert.equal((await get(s.url, "/v2/health/ready")).status, 200);
  assert.equal((await get(s.url, "/v2/models/simple")).status, 200);
  assert.equal((await post(s.url, "/v2/models/simple/infer", SIMPLE_INPUTS)).status, 200);
});

Deno.test("HTTP: a restricted inference group covers the fast infer path and the versioned one", async () => {
  await using s = await startTestServer([
    `--model-repository=${EXAMPLES}`,
    "--http-restricted-api=inference,health,metadata:infer-key=k",
  ]);
  for (
    const path of [
      "/v2/models/simple/infer",
      "/v2/models/simple/versions/1/infer",
      "/v2/models/sim%70le/infer",
    ]
  ) {
    const r = await post(s.url, path, SIMPLE_INPUTS);
    assert.equal(r.status, 403, path);
    assert.deepEqual(r.json, { error: "This API is restricted, expecting header 'infer-key'" });
  }
  for (const path of ["/v2/health/live", "/v2/models/simple/ready", "/v2/models/simple", "/v2"]) {
    assert.equal((await get(s.url, path)).status, 403, path);
  }
  assert.equal(
    (await post(s.url, "/v2/models/simple/infer", SIMPLE_INPUTS, { "infer-key": "k" })).status,
    200,
  );
});

Deno.test("gRPC: a restricted protocol answers PERMISSION_DENIED without its metadata key", async () => {
  await using s = await startTestServer([
    `--model-repository=${EXAMPLES}`,
    "--model-control-mode=explicit",
    "--load-model=simple",
    "--allow-grpc=true",
    "--grpc-restricted-protocol=model-repository,inference,health:admin-key=s3cret",
  ]);
  const client = new grpc.Client(`127.0.0.1:${s.server.grpcPort}`, grpc.credentials.createInsecure());
  try {
    const details = "This protocol is restricted, expecting header 'triton-grpc-protocol-admin-key'";
    for (
      const [method, request] of [
        ["RepositoryIndex", {}],
        ["RepositoryModelLoad", { model_name: "simple" }],
        ["RepositoryModelUnload", { model_name: "simple" }],
        ["ServerLive", {}],
        ["ModelInfer", { model_name: "simple" }],
      ] as const
    ) {
      assert.deepEqual(await grpcUnary(client, method, request), {
        code: grpc.status.PERMISSION_DENIED,
        details,
      });
      assert.deepEqual(
        await grpcUnary(client, method, request, { "triton-grpc-protocol-admin-key": "nope" }),
        { code: grpc.status.PERMISSION_DENIED, details },
      );
    }
    // The server's state did not change: simple is still loaded.
    const ok = await grpcUnary(client, "RepositoryIndex", { ready: true }, {
      "triton-grpc-protocol-admin-key": "s3cret",
    });
    assert.equal(ok.code, 0);
    assert.deepEqual((ok.response!.models as { name: string }[]).map((m) => m.name), ["simple"]);
    // Unrestricted groups need nothing.
    assert.equal((await grpcUnary(client, "ServerMetadata", {})).code, 0);

    // The streaming inference endpoint and the gRPC health check are restricted too.
    const stream = client.makeBidiStreamRequest(
      "/inference.GRPCInferenceService/ModelStreamInfer",
      (v: unknown) => Buffer.from(v as Uint8Array),
      (b: Buffer) => b,
    );
    const status = await new Promise<grpc.StatusObject>((resolve) => {
      stream.on("status", resolve);
      stream.on("error", () => {});
      stream.on("data", () => {});
    });
    assert.equal(status.code, grpc.status.PERMISSION_DENIED);
    assert.equal(status.details, details);
    const check = lookupType(".grpc.health.v1.HealthCheckRequest");
    const health = await new Promise<number>((resolve) => {
      client.makeUnaryRequest(
        "/grpc.health.v1.Health/Check",
        (v: Record<string, unknown>) => Buffer.from(check.encode(check.fromObject(v)).finish()),
        (b: Buffer) => b,
        {},
        (err) => resolve(err?.code ?? 0),
      );
    });
    assert.equal(health, grpc.status.PERMISSION_DENIED);
  } finally {
    client.close();
  }
});

async function startupWarnings(flags: string[]): Promise<string[]> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-restricted-" });
  const file = `${dir}/server.log`;
  const logger = fileLogger(file, { info: false, error: false });
  try {
    const s = await startTestServer([`--model-repository=${EXAMPLES}`, ...flags], logger);
    await s.close();
    return (await Deno.readTextFile(file)).split("\n").filter((l) => l.includes("model repository API"))
      .map((l) => l.replace(/^W\S+ \S+ \d+ /, ""));
  } finally {
    logger.close();
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("explicit mode warns at start-up for each endpoint whose repository API is unrestricted", async () => {
  const open = await startupWarnings(["--model-control-mode=explicit", "--allow-grpc=true"]);
  assert.equal(open.length, 2);
  assert.match(
    open[0]!,
    /^The model repository API is open to every client on HTTP at 127\.0\.0\.1:\d+ \(--http-restricted-api\): any client that reaches it can load models with uploaded files, and an uploaded Python model runs as this server's user; restrict the 'model-repository' API \(see docs\/security\.md\)$/,
  );
  assert.match(
    open[1]!,
    /^The model repository API is open to every client on gRPC at 127\.0\.0\.1:\d+ \(--grpc-restricted-protocol\)/,
  );
  const http = await startupWarnings([
    "--model-control-mode=explicit",
    "--allow-grpc=true",
    "--http-restricted-api=model-repository:k=v",
  ]);
  assert.equal(http.length, 1);
  assert.match(http[0]!, /on gRPC at/);
  assert.deepEqual(
    await startupWarnings([
      "--model-control-mode=explicit",
      "--allow-grpc=true",
      "--http-restricted-api=model-repository:k=v",
      "--grpc-restricted-protocol=model-repository:k=v",
    ]),
    [],
  );
  assert.deepEqual(await startupWarnings(["--model-control-mode=none"]), []);
});
