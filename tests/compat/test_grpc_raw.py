"""dinfer's gRPC endpoint through raw `grpcio` stubs: malformed ModelInferRequests, typed and raw contents, and
grpc.health.v1 by hand.

The stubs are tritonclient's generated modules (`tritonclient.grpc.service_pb2` and `service_pb2_grpc`), so the
requests can be built field by field, including the ones tritonclient itself would never send. Run by
tests/compat/grpc_test.ts; the address comes from DINFER_GRPC_URL (host:port).
"""

from __future__ import annotations

import os

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor, triton_to_np_dtype

URL = os.environ.get("DINFER_GRPC_URL", "127.0.0.1:8001")
MAX = 2**31 - 1


@pytest.fixture(scope="module")
def channel():
    ch = grpc.insecure_channel(URL, options=[("grpc.max_send_message_length", MAX),
                                             ("grpc.max_receive_message_length", MAX)])
    yield ch
    ch.close()


@pytest.fixture(scope="module")
def stub(channel):
    return service_pb2_grpc.GRPCInferenceServiceStub(channel)


Request = service_pb2.ModelInferRequest
Input = service_pb2.ModelInferRequest.InferInputTensor
Output = service_pb2.ModelInferRequest.InferRequestedOutputTensor
Contents = service_pb2.InferTensorContents

V16 = list(range(16))
RAW16 = np.arange(16, dtype=np.int32).tobytes()


def simple_typed(**over) -> Request:
    """A valid request for 'simple' with typed contents."""
    req = Request(model_name="simple", id="t")
    req.inputs.extend([
        Input(name="INPUT0", datatype="INT32", shape=[1, 16], contents=Contents(int_contents=V16)),
        Input(name="INPUT1", datatype="INT32", shape=[1, 16], contents=Contents(int_contents=[1] * 16)),
    ])
    for k, v in over.items():
        setattr(req, k, v)
    return req


def simple_raw(raw: list[bytes] | None = None) -> Request:
    """A request for 'simple' with raw contents."""
    req = Request(model_name="simple")
    req.inputs.extend([Input(name="INPUT0", datatype="INT32", shape=[1, 16]),
                       Input(name="INPUT1", datatype="INT32", shape=[1, 16])])
    req.raw_input_contents.extend([RAW16, RAW16] if raw is None else raw)
    return req


def expect(stub, req: Request, code: grpc.StatusCode, message: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(req, timeout=30)
    assert info.value.code() == code
    assert info.value.details() == message


WHERE = "Cannot read the inference request for 'simple'"


def output(resp, name: str) -> np.ndarray:
    for i, o in enumerate(resp.outputs):
        if o.name == name:
            raw = resp.raw_output_contents[i]
            if o.datatype == "BYTES":
                return deserialize_bytes_tensor(raw).reshape(list(o.shape))
            return np.frombuffer(raw, dtype=triton_to_np_dtype(o.datatype)).reshape(list(o.shape))
    raise KeyError(name)


# ------------------------------------------------------------------------------------------------
# valid requests
# ------------------------------------------------------------------------------------------------

def test_typed_contents_request(stub):
    resp = stub.ModelInfer(simple_typed(), timeout=30)
    assert resp.model_name == "simple" and resp.model_version == "1" and resp.id == "t"
    assert len(resp.raw_output_contents) == 2
    np.testing.assert_array_equal(output(resp, "OUTPUT0"), np.arange(16).reshape(1, 16) + 1)
    np.testing.assert_array_equal(output(resp, "OUTPUT1"), np.arange(16).reshape(1, 16) - 1)


def test_raw_contents_request_with_requested_output(stub):
    req = simple_raw()
    req.outputs.extend([Output(name="OUTPUT0")])
    resp = stub.ModelInfer(req, timeout=30)
    assert [o.name for o in resp.outputs] == ["OUTPUT0"]
    assert [list(o.shape) for o in resp.outputs] == [[1, 16]]
    np.testing.assert_array_equal(output(resp, "OUTPUT0"), 2 * np.arange(16).reshape(1, 16))


def test_parameters_of_every_kind(stub):
    req = simple_typed()
    req.parameters["b"].bool_param = True
    req.parameters["i"].int64_param = -(2**62)
    req.parameters["u"].uint64_param = 2**64 - 1
    req.parameters["s"].string_param = "text"
    req.parameters["d"].double_param = 2.5
    resp = stub.ModelInfer(req, timeout=30)
    np.testing.assert_array_equal(output(resp, "OUTPUT0"), np.arange(16).reshape(1, 16) + 1)


# datatype -> (typed field, values); every datatype with a typed contents field (all but FP16, BF16)
TYPED = {
    "BOOL": ("bool_contents", [True, False, True, True]),
    "UINT8": ("uint_contents", [0, 1, 200, 255]),
    "UINT16": ("uint_contents", [0, 1, 40000, 65535]),
    "UINT32": ("uint_contents", [0, 1, 2**31, 2**32 - 1]),
    "UINT64": ("uint64_contents", [0, 1, 2**53 + 1, 2**64 - 1]),
    "INT8": ("int_contents", [-128, -1, 0, 127]),
    "INT16": ("int_contents", [-32768, -1, 0, 32767]),
    "INT32": ("int_contents", [-(2**31), -1, 0, 2**31 - 1]),
    "INT64": ("int64_contents", [-(2**63), -(2**53) - 1, 0, 2**63 - 1]),
    "FP32": ("fp32_contents", [-1.5, 0.0, 3.25, 2.0**100]),
    "FP64": ("fp64_contents", [-1.5, 0.1, 1e300, -5e-324]),
    "BYTES": ("bytes_contents", [b"", b"one", "\u00e9t\u00e9".encode(), b"x" * 100]),
}
FIXTURE = {"BYTES": "identity_string"}


def identity(dt: str) -> str:
    return FIXTURE.get(dt, f"identity_{dt.lower()}")


@pytest.mark.parametrize("dt", sorted(TYPED))
def test_typed_contents_round_trip(stub, dt):
    field, values = TYPED[dt]
    req = Request(model_name=identity(dt))
    inp = Input(name="INPUT0", datatype=dt, shape=[2, 2])
    getattr(inp.contents, field).extend(values)
    req.inputs.append(inp)
    resp = stub.ModelInfer(req, timeout=30)
    assert resp.outputs[0].datatype == dt
    assert list(resp.outputs[0].shape) == [2, 2]
    got = output(resp, "OUTPUT0").reshape(-1).tolist()
    assert got == values


RAW = {
    "BOOL": np.array([True, False, False, True]),
    "UINT8": np.array([0, 1, 200, 255], dtype=np.uint8),
    "UINT16": np.array([0, 1, 40000, 65535], dtype=np.uint16),
    "UINT32": np.array([0, 1, 2**31, 2**32 - 1], dtype=np.uint32),
    "UINT64": np.array([0, 1, 2**53 + 1, 2**64 - 1], dtype=np.uint64),
    "INT8": np.array([-128, -1, 0, 127], dtype=np.int8),
    "INT16": np.array([-32768, -1, 0, 32767], dtype=np.int16),
    "INT32": np.array([-(2**31), -1, 0, 2**31 - 1], dtype=np.int32),
    "INT64": np.array([-(2**63), -(2**53) - 1, 0, 2**63 - 1], dtype=np.int64),
    "FP16": np.array([-65504.0, 0.5, np.inf, 6e-8], dtype=np.float16),
    "FP32": np.array([-1.5, 0.0, np.inf, 1e-40], dtype=np.float32),
    "FP64": np.array([-1.5, 0.1, 1e300, np.nan], dtype=np.float64),
    "BYTES": np.array([b"", b"one", "\u00e9t\u00e9".encode(), b"x" * 100], dtype=np.object_),
}


@pytest.mark.parametrize("dt", sorted(RAW))
def test_raw_contents_round_trip(stub, dt):
    x = RAW[dt].reshape(2, 2)
    req = Request(model_name=identity(dt))
    req.inputs.append(Input(name="INPUT0", datatype=dt, shape=[2, 2]))
    req.raw_input_contents.append(serialize_byte_tensor(x).item() if dt == "BYTES" else x.tobytes())
    resp = stub.ModelInfer(req, timeout=30)
    assert resp.outputs[0].datatype == dt
    got = output(resp, "OUTPUT0")
    if dt == "BYTES":
        assert got.tolist() == x.tolist()
    else:
        assert got.tobytes() == x.tobytes()


# ------------------------------------------------------------------------------------------------
# malformed requests
# ------------------------------------------------------------------------------------------------

def test_input_with_neither_contents_nor_raw(stub):
    req = simple_typed()
    req.inputs[0].ClearField("contents")
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           f"{WHERE}: input 'INPUT0' has no contents and there are no raw_input_contents")


def test_raw_contents_count_differs_from_inputs(stub):
    expect(stub, simple_raw([RAW16]), grpc.StatusCode.INVALID_ARGUMENT,
           f"{WHERE}: raw_input_contents has 1 entries for 2 inputs; "
           "when raw contents are used every input must have one")
    expect(stub, simple_raw([RAW16] * 3), grpc.StatusCode.INVALID_ARGUMENT,
           f"{WHERE}: raw_input_contents has 3 entries for 2 inputs; "
           "when raw contents are used every input must have one")


def test_raw_size_mismatch(stub):
    expect(stub, simple_raw([RAW16, RAW16[:60]]), grpc.StatusCode.INVALID_ARGUMENT,
           "Cannot infer 'simple': input byte size mismatch for input 'INPUT1' for model 'simple'. Expected 64, got 60")
    expect(stub, simple_raw([RAW16 + b"\0\0\0\0", RAW16]), grpc.StatusCode.INVALID_ARGUMENT,
           "Cannot infer 'simple': input byte size mismatch for input 'INPUT0' for model 'simple'. Expected 64, got 68")


def test_malformed_raw_bytes_tensor(stub):
    req = Request(model_name="identity_string")
    req.inputs.append(Input(name="INPUT0", datatype="BYTES", shape=[1, 2]))
    req.raw_input_contents.append(b"\x03\x00\x00\x00abc\x09\x00\x00\x00xy")
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           "Cannot read the inference request for 'identity_string', input 'INPUT0': "
           "BYTES element 1 claims 9 bytes but only 2 remain")


def test_both_typed_and_raw_contents(stub):
    req = simple_raw()
    req.inputs[1].contents.int_contents.extend(V16)
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           f"{WHERE}: input 'INPUT1' has both typed contents and raw_input_contents")


def test_typed_contents_of_the_wrong_field(stub):
    req = simple_typed()
    req.inputs[0].contents.ClearField("int_contents")
    req.inputs[0].contents.fp32_contents.extend([float(v) for v in V16])
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           f"{WHERE}, input 'INPUT0': datatype INT32 takes 'int_contents', but 'fp32_contents' is set")


def test_typed_contents_with_the_wrong_count(stub):
    req = simple_typed()
    del req.inputs[1].contents.int_contents[-1]
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           f"{WHERE}, input 'INPUT1': 'int_contents' has 15 elements, expected 16")


def test_typed_contents_out_of_range(stub):
    req = Request(model_name="identity_int8")
    req.inputs.append(Input(name="INPUT0", datatype="INT8", shape=[1, 2], contents=Contents(int_contents=[1, 200])))
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           "Cannot read the inference request for 'identity_int8', input 'INPUT0': "
           "element 1 is 200, expected an integer in [-128, 127] for INT8")


@pytest.mark.parametrize("dt", ["FP16", "BF16"])
def test_half_precision_in_typed_contents(stub, dt):
    req = Request(model_name="identity_fp16")
    req.inputs.append(Input(name="INPUT0", datatype=dt, shape=[1, 2], contents=Contents(fp32_contents=[1, 2])))
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           f"Cannot read the inference request for 'identity_fp16', input 'INPUT0': datatype {dt} has no typed "
           "contents field, send it in raw_input_contents")


def test_unknown_datatype(stub):
    req = simple_typed()
    req.inputs[0].datatype = "FP8"
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT, f"{WHERE}: input 'INPUT0' has unknown datatype 'FP8'")


def test_negative_dims(stub):
    req = simple_raw()
    req.inputs[0].shape[0] = -1
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           f"{WHERE}: input 'INPUT0' has shape [-1,16], dims must be non-negative")


def test_negative_classification(stub):
    req = simple_typed()
    req.outputs.append(Output(name="OUTPUT0"))
    req.outputs[0].parameters["classification"].int64_param = -2
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT,
           "Cannot infer 'simple': output 'OUTPUT0' asks for classification -2, expected a non-negative integer")


def test_unknown_model(stub):
    expect(stub, simple_typed(model_name="no_such_model"), grpc.StatusCode.NOT_FOUND,
           "Request for unknown model: 'no_such_model' is not found")
    expect(stub, simple_typed(model_version="7"), grpc.StatusCode.NOT_FOUND,
           "Request for unknown model: 'simple' version 7 is not found")


def test_missing_and_unexpected_inputs(stub):
    req = simple_typed()
    del req.inputs[1]
    expect(stub, req, grpc.StatusCode.INVALID_ARGUMENT, "Cannot infer 'simple': expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).")


def test_undecodable_message(channel):
    call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    with pytest.raises(grpc.RpcError) as info:
        call(b"\x0a\xff\xff\xff\xff\x0f", timeout=30)
    assert info.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT)


def test_unknown_method(channel):
    call = channel.unary_unary("/inference.GRPCInferenceService/NoSuchMethod")
    with pytest.raises(grpc.RpcError) as info:
        call(b"", timeout=30)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_bad_trace_setting_has_a_message(stub):
    request = service_pb2.TraceSettingRequest(model_name="simple")
    request.settings["trace_rate"].value.append("zero")
    with pytest.raises(grpc.RpcError) as info:
        stub.TraceSetting(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert info.value.details() == (
        "Cannot update the trace settings: 'trace_rate' is 'zero', expected an integer of at least 1"
    )


# ------------------------------------------------------------------------------------------------
# grpc.health.v1 by hand
# ------------------------------------------------------------------------------------------------

def health_request(service: str) -> bytes:
    """HealthCheckRequest { string service = 1; }"""
    data = service.encode()
    assert len(data) < 128
    return (b"\x0a" + bytes([len(data)]) + data) if data else b""


def health_status(response: bytes) -> int:
    """HealthCheckResponse { ServingStatus status = 1; }: 0 UNKNOWN (absent), 1 SERVING, 2 NOT_SERVING."""
    if response == b"":
        return 0
    assert response[0] == 0x08 and len(response) == 2, response
    return response[1]


@pytest.mark.parametrize("service, status", [("", 1), ("simple", 1), ("digits", 1), ("bad_model", 2)])
def test_health_check(channel, service, status):
    check = channel.unary_unary("/grpc.health.v1.Health/Check")
    assert health_status(check(health_request(service), timeout=30)) == status


def test_server_still_answers(stub):
    assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=30).live
    assert stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=30).ready
    resp = stub.ModelInfer(simple_raw(), timeout=30)
    np.testing.assert_array_equal(output(resp, "OUTPUT1"), np.zeros((1, 16)))
