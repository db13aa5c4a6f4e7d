/**
 * Proves that `protos/` matches Triton's protocol: our protobufjs reflection is compared, message by message,
 * with the descriptors compiled into the official `tritonclient` Python package, and messages cross between
 * the two implementations byte for byte.
 *
 * Needs a Python with `tritonclient[grpc]`: `$DINFER_PYTHON`, else `.venv/bin/python` (`./dinfer setup`).
 * @module
 */

import * as protobuf from "protobufjs";
import { lookupType, modelConfigType, PROTO_FILES, protoRoot, PROTOS_DIR } from "../../server/core/protos.ts";

const REPO_ROOT = new URL("../../", import.meta.url);
const SCRIPT = new URL("proto_descriptors.py", import.meta.url);

function pythonPath(): string {
  const fromEnv = Deno.env.get("DINFER_PYTHON");
  if (fromEnv) return fromEnv;
  return new URL(".venv/bin/python", REPO_ROOT).pathname;
}

/** Runs tests/unit/proto_descriptors.py and parses its JSON output. */
async function python(...args: string[]): Promise<unknown> {
  const python = pythonPath();
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command(python, { args: [new URL(SCRIPT).pathname, ...args] }).output();
  } catch (err) {
    throw new Error(
      `Cannot run '${python}': ${err instanceof Error ? err.message : String(err)} ` +
        `(set DINFER_PYTHON or run './dinfer setup')`,
    );
  }
  const stderr = new TextDecoder().decode(output.stderr);
  if (!output.success) throw new Error(`Cannot run 'proto_descriptors.py ${args.join(" ")}': ${stderr}`);
  return JSON.parse(new TextDecoder().decode(output.stdout));
}

// ---- Normalised facts (the same shape proto_descriptors.py writes) ----

interface FieldFacts {
  number: number;
  label: "optional" | "repeated" | "map";
  key_type?: string;
  type: string;
  type_name: string | null;
  packed: boolean;
  oneof: string | null;
}

interface MessageFacts {
  fields: Record<string, FieldFacts>;
  oneofs: Record<string, string[]>;
}

interface MethodFacts {
  input: string;
  output: string;
  client_streaming: boolean;
  server_streaming: boolean;
}

interface Facts {
  files: Record<string, { package: string; dependencies: string[] }>;
  messages: Record<string, MessageFacts>;
  enums: Record<string, Record<string, number>>;
  services: Record<string, Record<string, MethodFacts>>;
}

const PACKABLE = new Set([
  "double",
  "float",
  "int64",
  "uint64",
  "int32",
  "fixed64",
  "fixed32",
  "bool",
  "uint32",
  "sfixed32",
  "sfixed64",
  "sint32",
  "sint64",
  "enum",
]);

function fullName(object: protobuf.ReflectionObject): string {
  return object.fullName.replace(/^\./, "");
}

function fieldFacts(field: protobuf.Field): FieldFacts {
  const resolved = field.resolvedType;
  const type = resolved instanceof protobuf.Type
    ? "message"
    : resolved instanceof protobuf.Enum
    ? "enum"
    : field.type;
  const facts: FieldFacts = {
    number: field.id,
    label: field.map ? "map" : field.repeated ? "repeated" : "optional",
    type,
    type_name: resolved ? fullName(resolved) : null,
    packed: !field.map && field.repeated && field.packed && PACKABLE.has(type),
    oneof: field.partOf ? field.partOf.name : null,
  };
  if (field instanceof protobuf.MapField) facts.key_type = field.keyType;
  return facts;
}

/** Walks our reflection of the `inference` package into the normalised facts. */
function ourFacts(): Facts {
  const facts: Facts = { files: {}, messages: {}, enums: {}, services: {} };
  const walk = (namespace: protobuf.NamespaceBase): void => {
    for (const object of namespace.nestedArray) {
      if (object instanceof protobuf.Type) {
        facts.messages[fullName(object)] = {
          fields: Object.fromEntries(object.fieldsArray.map((f) => [f.name, fieldFacts(f)])),
          oneofs: Object.fromEntries(object.oneofsArray.map((o) => [o.name, [...o.oneof].sort()])),
        };
      } else if (object instanceof protobuf.Enum) {
        facts.enums[fullName(object)] = { ...object.values };
      } else if (object instanceof protobuf.Service) {
        facts.services[fullName(object)] = Object.fromEntries(object.methodsArray.map((m) => {
          const method: MethodFacts = {
            input: m.resolvedRequestType ? fullName(m.resolvedRequestType) : `unresolved ${m.requestType}`,
            output: m.resolvedResponseType
              ? fullName(m.resolvedResponseType)
              : `unresolved ${m.responseType}`,
            client_streaming: m.requestStream === true,
            server_streaming: m.responseStream === true,
          };
          return [m.name, method];
        }));
      }
      if (object instanceof protobuf.Namespace) walk(object);
    }
  };
  const inference = protoRoot().lookup("inference");
  if (!(inference instanceof protobuf.Namespace)) throw new Error("Cannot find package 'inference'");
  walk(inference);
  for (const file of ["model_config.proto", "grpc_service.proto"]) {
    const parsed = protobuf.parse(Deno.readTextFileSync(new URL(file, PROTOS_DIR)), { keepCase: true });
    facts.files[file] = { package: parsed.package ?? "", dependencies: parsed.imports ?? [] };
  }
  return facts;
}

/** Every difference between two JSON values, one line each, as `path: ours X, official Y`. */
function diff(ours: unknown, official: unknown, path: string, out: string[]): string[] {
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;
  if (isObject(ours) && isObject(official) && Array.isArray(ours) === Array.isArray(official)) {
    for (const key of new Set([...Object.keys(ours), ...Object.keys(official)])) {
      const sub = path ? `${path}.${key}` : key;
      if (!(key in ours)) out.push(`${sub}: missing here, official ${JSON.stringify(official[key])}`);
      else if (!(key in official)) out.push(`${sub}: here ${JSON.stringify(ours[key])}, not in official`);
      else diff(ours[key], official[key], sub, out);
    }
  } else if (JSON.stringify(ours) !== JSON.stringify(official)) {
    out.push(`${path}: here ${JSON.stringify(ours)}, official ${JSON.stringify(official)}`);
  }
  return out;
}

function assertNoDiff(ours: unknown, official: unknown, what: string): void {
  const lines = diff(ours, official, "", []);
  if (lines.length > 0) throw new Error(`${what} differs from tritonclient:\n  ${lines.join("\n  ")}`);
}

/** Deep equality, key order aside; the error lists every difference. */
function assertEquals(actual: unknown, expected: unknown, what: string): void {
  const lines = diff(actual, expected, "", []).map((line) => line.replace("official", "expected"));
  if (lines.length > 0) throw new Error(`${what}: got ${JSON.stringify(actual)}\n  ${lines.join("\n  ")}`);
}

function toHex(bytes: Uint8Array): string {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function fromHex(hex: string): Uint8Array {
  const bytes = new Uint8Array(hex.length / 2);
  for (let i = 0; i < bytes.length; i++) bytes[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return bytes;
}

const TO_OBJECT: protobuf.IConversionOptions = { longs: String, enums: Number, oneofs: true };

// ---- Schema equality ----

Deno.test("protos/ declares every message, enum and service of tritonclient with identical facts", async (t) => {
  const official = await python("dump") as Facts;
  const ours = ourFacts();

  await t.step("files: package and imports", () => assertNoDiff(ours.files, official.files, "files"));
  await t.step("the same message names", () => {
    assertEquals(Object.keys(ours.messages).sort(), Object.keys(official.messages).sort(), "message names");
  });
  for (const name of Object.keys(official.messages).sort()) {
    await t.step(`message ${name}`, () => assertNoDiff(ours.messages[name], official.messages[name], name));
  }
  await t.step(
    "the same enums with the same values",
    () => assertNoDiff(ours.enums, official.enums, "enums"),
  );
  await t.step("service methods, types and streaming flags", () => {
    assertNoDiff(ours.services, official.services, "services");
  });
});

Deno.test("health.proto declares grpc.health.v1.Health/Check with the standard numbers", () => {
  const request = lookupType("grpc.health.v1.HealthCheckRequest");
  const response = lookupType("grpc.health.v1.HealthCheckResponse");
  assertEquals(fieldFacts(request.fields["service"]!), {
    number: 1,
    label: "optional",
    type: "string",
    type_name: null,
    packed: false,
    oneof: null,
  }, "HealthCheckRequest.service");
  const status = response.fields["status"]!;
  assertEquals([status.id, fullName(status.resolvedType!)], [
    1,
    "grpc.health.v1.HealthCheckResponse.ServingStatus",
  ], "HealthCheckResponse.status");
  assertEquals(
    response.lookupEnum("ServingStatus").values,
    { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 },
    "ServingStatus",
  );
  const health = protoRoot().lookupService("grpc.health.v1.Health");
  const check = health.methods["Check"]!;
  assertEquals(
    [
      check.resolvedRequestType?.fullName,
      check.resolvedResponseType?.fullName,
      !!check.requestStream,
      !!check.responseStream,
    ],
    [".grpc.health.v1.HealthCheckRequest", ".grpc.health.v1.HealthCheckResponse", false, false],
    "Health/Check",
  );
});

Deno.test("protoRoot is cached and modelConfigType is inference.ModelConfig", () => {
  assertEquals(protoRoot() === protoRoot(), true, "cached root");
  assertEquals(modelConfigType().fullName, ".inference.ModelConfig", "modelConfigType");
  assertEquals(modelConfigType() === lookupType("ModelConfig"), true, "same type by short name");
  assertEquals(PROTO_FILES, ["model_config.proto", "grpc_service.proto", "health.proto"], "files");
  let message = "";
  try {
    lookupType("NoSuchMessage");
  } catch (err) {
    message = err instanceof Error ? err.message : String(err);
  }
  assertEquals(
    message,
    "Cannot find protobuf message type 'NoSuchMessage': no such type in 'protos/'",
    "error",
  );
});

// ---- Wire round trips ----

Deno.test("a ModelInferRequest encoded by tritonclient decodes here with exact values and re-encodes to the same bytes", async () => {
  const samples = await python("samples") as Record<string, string>;
  const type = lookupType("ModelInferRequest");
  const hex = samples["ModelInferRequest"]!;
  const message = type.decode(fromHex(hex));
  const object = type.toObject(message, TO_OBJECT);

  assertEquals([object.model_name, object.model_version, object.id], ["simple", "3", "req-7"], "header");
  assertEquals(object.parameters, {
    p_bool: { bool_param: true, parameter_choice: "bool_param" },
    p_double: { double_param: 0.1, parameter_choice: "double_param" },
    p_int64: { int64_param: "-9007199254740993", parameter_choice: "int64_param" },
    p_string: { string_param: "h\u00e9llo", parameter_choice: "string_param" },
    p_uint64: { uint64_param: "18446744073709551615", parameter_choice: "uint64_param" },
  }, "request parameters");

  const [input0, input1] = object.inputs as Record<string, unknown>[];
  assertEquals([input0?.name, input0?.datatype, input0?.shape], ["INPUT0", "INT32", ["1", "4"]], "INPUT0");
  assertEquals(input0?.parameters, {
    binary_data_size: { int64_param: "16", parameter_choice: "int64_param" },
  }, "INPUT0 parameters");
  assertEquals(input0?.contents, undefined, "INPUT0 has no typed contents");
  assertEquals([input1?.name, input1?.datatype, input1?.shape], ["INPUT1", "FP32", ["2"]], "INPUT1");
  assertEquals(input1?.contents, { fp32_contents: [1.5, -2.25] }, "INPUT1 contents");
  assertEquals(object.outputs, [{
    name: "OUTPUT0",
    parameters: { binary_data: { bool_param: true, parameter_choice: "bool_param" } },
  }], "outputs");

  const raw = (object.raw_input_contents as Uint8Array[])[0]!;
  const view = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  assertEquals(
    [raw.byteLength, ...[0, 4, 8, 12].map((o) => view.getInt32(o, true))],
    [16, 1, 2, 3, -4],
    "raw",
  );

  assertEquals(toHex(type.encode(message).finish()), hex, "re-encoded bytes");
});

Deno.test("a ModelInferRequest encoded here decodes in tritonclient with exact values and the same bytes", async () => {
  const type = lookupType("ModelInferRequest");
  // Map keys in sorted order: tritonclient's deterministic encoding sorts them.
  const message = type.fromObject({
    model_name: "simple",
    model_version: "1",
    id: "ts-1",
    parameters: {
      a_bool: { bool_param: false },
      b_int64: { int64_param: "-9223372036854775808" },
      c_string: { string_param: "\u00fc\u{1F600}" },
      d_double: { double_param: -1e-300 },
      e_uint64: { uint64_param: "18446744073709551615" },
    },
    inputs: [{
      name: "IN",
      datatype: "INT64",
      shape: [2, "9007199254740993"],
      parameters: { shared_memory_offset: { uint64_param: "9007199254740993" } },
      contents: { int64_contents: ["-1", "9007199254740993"], bool_contents: [true, false] },
    }],
    outputs: [{ name: "OUT", parameters: { classification: { int64_param: 3 } } }],
    raw_input_contents: [new Uint8Array([0, 1, 254, 255])],
  });
  const hex = toHex(type.encode(message).finish());
  const decoded = await python("decode", hex) as Record<string, unknown>;

  assertEquals(decoded, {
    id: "ts-1",
    inputs: [{
      bool_contents: [true, false],
      datatype: "INT64",
      has_contents: true,
      int64_contents: ["-1", "9007199254740993"],
      name: "IN",
      parameters: { shared_memory_offset: { uint64_param: "9007199254740993" } },
      shape: ["2", "9007199254740993"],
    }],
    model_name: "simple",
    model_version: "1",
    outputs: [{ name: "OUT", parameters: { classification: { int64_param: "3" } } }],
    parameters: {
      a_bool: { bool_param: false },
      b_int64: { int64_param: "-9223372036854775808" },
      c_string: { string_param: "\u00fc\u{1F600}" },
      d_double: { double_param: -1e-300 },
      e_uint64: { uint64_param: "18446744073709551615" },
    },
    raw_input_contents: ["0001feff"],
    reserialized: hex,
  }, "decoded by tritonclient");
});

Deno.test("a ModelConfig and a ModelStreamInferResponse from tritonclient round-trip byte for byte", async () => {
  const samples = await python("samples") as Record<string, string>;

  const configHex = samples["ModelConfig"]!;
  const config = modelConfigType().decode(fromHex(configHex));
  const c = modelConfigType().toObject(config, TO_OBJECT);
  assertEquals(c.scheduling_choice, "dynamic_batching", "scheduler oneof");
  assertEquals(c.dynamic_batching, {
    preferred_batch_size: [4, 8],
    max_queue_delay_microseconds: "100",
    priority_queue_policy: { "2": { timeout_action: 1, max_queue_size: 5 } },
  }, "dynamic_batching");
  assertEquals(c.input, [{ name: "IN", data_type: 11, format: 2, dims: ["-1", "16"] }], "input");
  assertEquals(c.output, [{ name: "OUT", data_type: 14, dims: ["3"] }], "output");
  assertEquals(c.version_policy, { latest: { num_versions: 2 }, policy_choice: "latest" }, "version_policy");
  assertEquals(c.instance_group, [{ kind: 2, count: 2 }], "instance_group");
  assertEquals([c.name, c.backend, c.max_batch_size, c.parameters], [
    "m",
    "onnxruntime",
    8,
    { k: { string_value: "v" } },
  ], "scalars");
  assertEquals(toHex(modelConfigType().encode(config).finish()), configHex, "ModelConfig bytes");

  const streamType = lookupType("ModelStreamInferResponse");
  const streamHex = samples["ModelStreamInferResponse"]!;
  const stream = streamType.decode(fromHex(streamHex));
  const s = streamType.toObject(stream, { ...TO_OBJECT, bytes: Array });
  assertEquals(s, {
    infer_response: {
      model_name: "simple",
      parameters: { triton_final_response: { bool_param: true, parameter_choice: "bool_param" } },
      outputs: [{ name: "OUT", datatype: "BYTES", shape: ["1"], contents: { bytes_contents: [[0, 255]] } }],
    },
  }, "stream response");
  assertEquals(toHex(streamType.encode(stream).finish()), streamHex, "ModelStreamInferResponse bytes");
});
