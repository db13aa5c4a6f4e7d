"""Facts from the official tritonclient protobuf descriptors, for tests/unit/protos_test.ts.

Usage:
  proto_descriptors.py dump         JSON: every message, enum and service of grpc_service.proto and
                                    model_config.proto, normalised so that protobufjs reflection can be
                                    compared with it.
  proto_descriptors.py samples      JSON: {name: hex} of messages encoded here (deterministic).
  proto_descriptors.py decode HEX   JSON: a ModelInferRequest decoded here, with exact values.
"""

import json
import sys

from google.protobuf.descriptor import FieldDescriptor as F
from tritonclient.grpc import model_config_pb2, service_pb2

SCALARS = {
    F.TYPE_DOUBLE: "double",
    F.TYPE_FLOAT: "float",
    F.TYPE_INT64: "int64",
    F.TYPE_UINT64: "uint64",
    F.TYPE_INT32: "int32",
    F.TYPE_FIXED64: "fixed64",
    F.TYPE_FIXED32: "fixed32",
    F.TYPE_BOOL: "bool",
    F.TYPE_STRING: "string",
    F.TYPE_BYTES: "bytes",
    F.TYPE_UINT32: "uint32",
    F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64",
    F.TYPE_SINT32: "sint32",
    F.TYPE_SINT64: "sint64",
    F.TYPE_MESSAGE: "message",
    F.TYPE_ENUM: "enum",
}


def type_of(field):
    """(type, type_name) of a field; type_name is the full name of a message or enum, else None."""
    if field.type == F.TYPE_MESSAGE:
        return "message", field.message_type.full_name
    if field.type == F.TYPE_ENUM:
        return "enum", field.enum_type.full_name
    return SCALARS[field.type], None


def is_map(field):
    return field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def field_facts(field):
    facts = {"number": field.number}
    if is_map(field):
        key = field.message_type.fields_by_name["key"]
        value = field.message_type.fields_by_name["value"]
        facts["label"] = "map"
        facts["key_type"] = type_of(key)[0]
        facts["type"], facts["type_name"] = type_of(value)
        facts["packed"] = False
    else:
        facts["label"] = "repeated" if field.is_repeated else "optional"
        facts["type"], facts["type_name"] = type_of(field)
        facts["packed"] = bool(field.is_repeated and field.is_packed)
    facts["oneof"] = field.containing_oneof.name if field.containing_oneof else None
    return facts


def walk_message(desc, messages, enums):
    if desc.GetOptions().map_entry:
        return  # protobufjs has no entry types; map fields carry the facts instead
    messages[desc.full_name] = {
        "fields": {f.name: field_facts(f) for f in desc.fields},
        "oneofs": {o.name: sorted(f.name for f in o.fields) for o in desc.oneofs},
    }
    for e in desc.enum_types:
        walk_enum(e, enums)
    for n in desc.nested_types:
        walk_message(n, messages, enums)


def walk_enum(desc, enums):
    enums[desc.full_name] = {v.name: v.number for v in desc.values}


def dump():
    messages, enums, services = {}, {}, {}
    for module in (model_config_pb2, service_pb2):
        file = module.DESCRIPTOR
        for e in file.enum_types_by_name.values():
            walk_enum(e, enums)
        for m in file.message_types_by_name.values():
            walk_message(m, messages, enums)
        for s in file.services_by_name.values():
            services[s.full_name] = {
                m.name: {
                    "input": m.input_type.full_name,
                    "output": m.output_type.full_name,
                    "client_streaming": m.client_streaming,
                    "server_streaming": m.server_streaming,
                }
                for m in s.methods
            }
    files = {
        m.DESCRIPTOR.name: {"package": m.DESCRIPTOR.package, "dependencies": [d.name for d in m.DESCRIPTOR.dependencies]}
        for m in (model_config_pb2, service_pb2)
    }
    return {"files": files, "messages": messages, "enums": enums, "services": services}


def infer_request():
    """A ModelInferRequest with raw contents, typed contents and one parameter of each kind."""
    r = service_pb2.ModelInferRequest(model_name="simple", model_version="3", id="req-7")
    r.parameters["p_bool"].bool_param = True
    r.parameters["p_double"].double_param = 0.1
    r.parameters["p_int64"].int64_param = -9007199254740993  # -(2**53 + 1): not exact as a JS number
    r.parameters["p_string"].string_param = "h\u00e9llo"
    r.parameters["p_uint64"].uint64_param = 18446744073709551615  # 2**64 - 1
    a = r.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 4])
    a.parameters["binary_data_size"].int64_param = 16
    b = r.inputs.add(name="INPUT1", datatype="FP32", shape=[2])
    b.contents.fp32_contents.extend([1.5, -2.25])
    r.outputs.add(name="OUTPUT0").parameters["binary_data"].bool_param = True
    r.raw_input_contents.append(b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\xfc\xff\xff\xff")
    return r


def model_config():
    """A ModelConfig touching oneofs, maps with integer keys, nested enums and packed fields."""
    c = model_config_pb2.ModelConfig(name="m", backend="onnxruntime", max_batch_size=8)
    c.input.add(name="IN", data_type=model_config_pb2.TYPE_FP32, dims=[-1, 16], format=model_config_pb2.ModelInput.FORMAT_NCHW)
    c.output.add(name="OUT", data_type=model_config_pb2.TYPE_BF16, dims=[3])
    c.dynamic_batching.preferred_batch_size.extend([4, 8])
    c.dynamic_batching.max_queue_delay_microseconds = 100
    c.dynamic_batching.priority_queue_policy[2].max_queue_size = 5
    c.dynamic_batching.priority_queue_policy[2].timeout_action = model_config_pb2.ModelQueuePolicy.DELAY
    c.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=2)
    c.version_policy.latest.num_versions = 2
    c.parameters["k"].string_value = "v"
    return c


def stream_response():
    s = service_pb2.ModelStreamInferResponse(error_message="")
    s.infer_response.model_name = "simple"
    out = s.infer_response.outputs.add(name="OUT", datatype="BYTES", shape=[1])
    out.contents.bytes_contents.append(b"\x00\xff")
    s.infer_response.parameters["triton_final_response"].bool_param = True
    return s


def samples():
    def hx(m):
        return m.SerializeToString(deterministic=True).hex()

    return {
        "ModelInferRequest": hx(infer_request()),
        "ModelConfig": hx(model_config()),
        "ModelStreamInferResponse": hx(stream_response()),
    }


def param(p):
    kind = p.WhichOneof("parameter_choice")
    return {kind: getattr(p, kind)} if kind else {}


def decode(hex_text):
    r = service_pb2.ModelInferRequest.FromString(bytes.fromhex(hex_text))
    # int64/uint64 as strings: JSON numbers would lose precision on the TypeScript side.
    def plain(p):
        v = param(p)
        return {k: str(x) if isinstance(x, int) and not isinstance(x, bool) else x for k, x in v.items()}

    return {
        "model_name": r.model_name,
        "model_version": r.model_version,
        "id": r.id,
        "parameters": {k: plain(v) for k, v in sorted(r.parameters.items())},
        "inputs": [
            {
                "name": i.name,
                "datatype": i.datatype,
                "shape": [str(d) for d in i.shape],
                "parameters": {k: plain(v) for k, v in sorted(i.parameters.items())},
                "has_contents": i.HasField("contents"),
                "int64_contents": [str(x) for x in i.contents.int64_contents],
                "bool_contents": list(i.contents.bool_contents),
            }
            for i in r.inputs
        ],
        "outputs": [{"name": o.name, "parameters": {k: plain(v) for k, v in sorted(o.parameters.items())}} for o in r.outputs],
        "raw_input_contents": [c.hex() for c in r.raw_input_contents],
        "reserialized": r.SerializeToString(deterministic=True).hex(),
    }


def main():
    command = sys.argv[1] if len(sys.argv) > 1 else "dump"
    if command == "dump":
        result = dump()
    elif command == "samples":
        result = samples()
    elif command == "decode":
        result = decode(sys.argv[2])
    else:
        raise SystemExit(f"unknown command '{command}'")
    json.dump(result, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
