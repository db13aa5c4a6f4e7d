/**
 * The gRPC frontend's unary methods other than inference (health, metadata, configuration, repository, shared
 * memory, statistics, trace, logging) as a table, each with its API group for `--grpc-restricted-protocol`.
 * @module
 */

import type * as grpc from "@grpc/grpc-js";
import { unsupported } from "../../core/errors.ts";
import { lookupType } from "../../core/protos.ts";
import { serverReady } from "../frontend.ts";
import { loadOptions } from "../load_parameters.ts";
import type { ApiGroup } from "../restricted.ts";
import { codec, type GrpcDeps, grpcError, method, SERVICE, undecodable } from "./_calls.ts";
import { longToNumber } from "./infer_codec.ts";

type Message = Record<string, unknown>;

/** One unary method of the table. */
export interface UnaryMethod {
  /** The method's name. */
  name: string;
  /** Its API group. */
  group: ApiGroup;
  /** Its service; `inference.GRPCInferenceService` when left out. */
  service?: string;
  /** Its request and response types; `<name>Request` and `<name>Response` when left out. */
  types?: readonly [string, string];
  /** Answers a request. */
  run(request: Message, deps: GrpcDeps): Message | Promise<Message>;
}

function requireShm({ options }: GrpcDeps) {
  if (!options.shm || !options.cudaShm) throw unsupported("The shared-memory extensions are not available");
  return { system: options.shm, cuda: options.cudaShm };
}

/** The unary methods, inference left out (`ModelInfer` has its own file). */
export const UNARY_METHODS: readonly UnaryMethod[] = [
  { name: "ServerLive", group: "health", run: () => ({ live: true }) },
  {
    name: "ServerReady",
    group: "health",
    run: (_, d) => ({ ready: serverReady(d.pipeline.registry, d.options) }),
  },
  {
    name: "ModelReady",
    group: "health",
    run: (r, d) => ({ ready: d.pipeline.registry.isReady(String(r.name), String(r.version ?? "")) }),
  },
  {
    name: "Check",
    group: "health",
    service: "grpc.health.v1.Health",
    types: [".grpc.health.v1.HealthCheckRequest", ".grpc.health.v1.HealthCheckResponse"],
    // SERVING when the server is ready (service "") or the model is (service: a model name).
    run: (r, d) => {
      const svc = String(r.service ?? "");
      const ok = svc === ""
        ? serverReady(d.pipeline.registry, d.options)
        : d.pipeline.registry.isReady(svc, "");
      return { status: ok ? "SERVING" : "NOT_SERVING" };
    },
  },
  {
    name: "ServerMetadata",
    group: "metadata",
    run: (_, { options }) => ({
      name: options.serverName,
      version: options.serverVersion,
      extensions: options.extensions,
    }),
  },
  {
    name: "ModelMetadata",
    group: "metadata",
    run: (r, d) => ({ ...d.pipeline.registry.metadata(String(r.name), String(r.version ?? "")) }),
  },
  {
    name: "ModelConfig",
    group: "model-config",
    run: (r, d) => ({ config: d.pipeline.registry.resolve(String(r.name), String(r.version ?? "")).config }),
  },
  {
    name: "RepositoryIndex",
    group: "model-repository",
    run: async (r, d) => ({ models: await d.pipeline.registry.index(r.ready === true) }),
  },
  {
    name: "RepositoryModelLoad",
    group: "model-repository",
    run: async (r, d) => {
      const name = String(r.model_name ?? "");
      const params: Record<string, unknown> = {};
      for (const [k, p] of Object.entries((r.parameters ?? {}) as Record<string, Message>)) {
        const choice = p.parameter_choice as string | undefined;
        params[k] = choice === undefined ? undefined : p[choice];
      }
      await d.pipeline.registry.loadModel(name, loadOptions(name, params, false));
      return {};
    },
  },
  {
    name: "RepositoryModelUnload",
    group: "model-repository",
    run: async (r, d) => {
      const params = (r.parameters ?? {}) as Record<string, Message>;
      const dependents = params.unload_dependents;
      await d.pipeline.registry.unloadModel(String(r.model_name ?? ""), {
        unloadDependents: dependents?.parameter_choice === "bool_param" && dependents.bool_param === true,
      });
      return {};
    },
  },
  {
    name: "SystemSharedMemoryStatus",
    group: "shared-memory",
    run: (r, d) => ({
      regions: Object.fromEntries(requireShm(d).system.status(String(r.name ?? "")).map((x) => [x.name, x])),
    }),
  },
  {
    name: "SystemSharedMemoryRegister",
    group: "shared-memory",
    run: async (r, d) => {
      await requireShm(d).system.register(
        String(r.name ?? ""),
        String(r.key ?? ""),
        longToNumber((r.offset ?? 0) as number),
        longToNumber((r.byte_size ?? 0) as number),
      );
      return {};
    },
  },
  {
    name: "SystemSharedMemoryUnregister",
    group: "shared-memory",
    run: (r, d) => {
      requireShm(d).system.unregister(String(r.name ?? ""));
      return {};
    },
  },
  {
    name: "CudaSharedMemoryStatus",
    group: "shared-memory",
    run: (r, d) => ({
      regions: Object.fromEntries(requireShm(d).cuda.status(String(r.name ?? "")).map((x) => [x.name, x])),
    }),
  },
  {
    name: "CudaSharedMemoryRegister",
    group: "shared-memory",
    run: (r, d) => {
      const handle = r.raw_handle instanceof Uint8Array ? r.raw_handle : new Uint8Array(0);
      requireShm(d).cuda.register(
        String(r.name ?? ""),
        handle,
        longToNumber((r.device_id ?? 0) as number),
        longToNumber((r.byte_size ?? 0) as number),
      );
      return {};
    },
  },
  {
    name: "CudaSharedMemoryUnregister",
    group: "shared-memory",
    run: (r, d) => {
      requireShm(d).cuda.unregister(String(r.name ?? ""));
      return {};
    },
  },
  {
    name: "ModelStatistics",
    group: "statistics",
    run: (r, d) => ({
      model_stats: d.pipeline.registry.statistics(String(r.name ?? ""), String(r.version ?? "")),
    }),
  },
  {
    name: "TraceSetting",
    group: "trace",
    run: (r, { options }) => {
      if (!options.traces) throw unsupported("The trace extension is not available");
      const model = String(r.model_name ?? "");
      const update: Record<string, unknown> = {};
      for (const [k, v] of Object.entries((r.settings ?? {}) as Record<string, { value?: string[] }>)) {
        const values = v.value ?? [];
        update[k] = values.length === 0 ? null : values;
      }
      const json = Object.keys(update).length > 0
        ? options.traces.update(update, model)
        : options.traces.settings(model);
      const settings: Record<string, { value: string[] }> = {};
      for (const [k, v] of Object.entries(json)) settings[k] = { value: Array.isArray(v) ? v : [v] };
      return { settings };
    },
  },
  {
    name: "LogSettings",
    group: "logging",
    run: (r, { options }) => {
      if (!options.logger) throw unsupported("The logging extension is not available");
      const update: Record<string, unknown> = {};
      for (const [k, v] of Object.entries((r.settings ?? {}) as Record<string, Message>)) {
        const choice = v.parameter_choice as string | undefined;
        if (choice) update[k] = v[choice];
      }
      const json = options.logger.update(update);
      const settings: Record<string, Message> = {};
      for (const [k, v] of Object.entries(json)) {
        settings[k] = typeof v === "boolean"
          ? { bool_param: v }
          : typeof v === "number"
          ? { uint32_param: v }
          : { string_param: v };
      }
      return { settings };
    },
  },
];

/**
 * The method definition and handler of one unary method: an undecodable request is INVALID_ARGUMENT, a thrown
 * error the status of its code.
 * @param m the method
 * @param deps the pipeline, options and call counter
 */
export function unaryMethod(m: UnaryMethod, deps: GrpcDeps): {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: grpc.handleUnaryCall<Message, Message>;
} {
  const [reqType, resType] = m.types ?? [`${m.name}Request`, `${m.name}Response`];
  const definition = method(
    `/${m.service ?? SERVICE}/${m.name}`,
    codec(lookupType(reqType), false),
    codec(lookupType(resType), false),
  );
  const { calls } = deps;
  const handler = (call: grpc.ServerUnaryCall<Message, Message>, callback: grpc.sendUnaryData<Message>) => {
    const bad = undecodable(call.request, m.name);
    if (bad) {
      callback(grpcError(bad));
      return;
    }
    calls.begin();
    let result;
    try {
      result = m.run(call.request, deps);
    } catch (err) {
      calls.end();
      callback(grpcError(err));
      return;
    }
    Promise.resolve(result).then((r) => callback(null, r), (err) => callback(grpcError(err))).finally(() =>
      calls.end()
    );
  };
  return { definition, handler };
}
