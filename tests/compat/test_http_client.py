"""Compatibility tests: the official `tritonclient.http` package drives a running dinfer server, as users do.

The server must serve the repositories examples/models and tests/fixtures/models (with
--strict-readiness=false, since the fixtures hold a deliberately broken model). tests/compat/compat_test.ts
starts one and runs this file; to run it by hand against a server of your own:

    DINFER_HTTP_URL=127.0.0.1:8000 .venv/bin/python -m pytest -q tests/compat/test_http_client.py

DINFER_SERVER_METADATA (JSON: name, version, extensions) is what `GET /v2` must answer; the Deno test sets it
from the server's own constants.
"""

import gzip
import http.client
import json
import os
import pathlib
import re
import zlib

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

ROOT = pathlib.Path(__file__).resolve().parents[2]
URL = os.environ.get("DINFER_HTTP_URL", "127.0.0.1:8000")
SERVER_METADATA = json.loads(os.environ.get("DINFER_SERVER_METADATA", "null"))

BINARY = [True, False]


@pytest.fixture(scope="module")
def client():
    c = httpclient.InferenceServerClient(URL, concurrency=8, network_timeout=60.0)
    yield c
    c.close()


def make_input(name, array, binary=True):
    inp = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    inp.set_data_from_numpy(array, binary_data=binary)
    return inp


def simple_inputs(a, b, binary=True):
    return [make_input("INPUT0", a, binary), make_input("INPUT1", b, binary)]


def simple_data(batch=1, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
    return a, b


def check_simple(result, a, b):
    out0 = result.as_numpy("OUTPUT0")
    out1 = result.as_numpy("OUTPUT1")
    assert out0.dtype == np.int32 and out1.dtype == np.int32
    assert out0.shape == a.shape and out1.shape == a.shape
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


def assert_still_serving(client):
    assert client.is_server_live()
    a, b = simple_data(seed=99)
    check_simple(client.infer("simple", simple_inputs(a, b)), a, b)


# --- health and metadata ---------------------------------------------------------------------------


def test_health(client):
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    assert client.is_model_ready("simple") is True
    assert client.is_model_ready("simple", "1") is True
    assert client.is_model_ready("simple", "2") is False
    assert client.is_model_ready("digits") is True
    assert client.is_model_ready("identity_string") is True
    assert client.is_model_ready("no_such_model") is False
    assert client.is_model_ready("bad_model") is False


def test_server_metadata(client):
    metadata = client.get_server_metadata()
    if SERVER_METADATA is not None:
        assert metadata == SERVER_METADATA
    else:
        assert sorted(metadata) == ["extensions", "name", "version"]
        assert {"binary_tensor_data", "classification"} <= set(metadata["extensions"])


def test_model_metadata_simple(client):
    tensor = lambda name: {"name": name, "datatype": "INT32", "shape": [-1, 16]}  # noqa: E731
    expected = {
        "name": "simple",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [tensor("INPUT0"), tensor("INPUT1")],
        "outputs": [tensor("OUTPUT0"), tensor("OUTPUT1")],
    }
    assert client.get_model_metadata("simple") == expected
    assert client.get_model_metadata("simple", "1") == expected


def test_model_metadata_digits(client):
    assert client.get_model_metadata("digits") == {
        "name": "digits",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}],
    }


def test_model_config_simple(client):
    config = client.get_model_config("simple")
    assert config["name"] == "simple"
    assert config["platform"] == "onnxruntime_onnx"
    assert config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 8
    assert config["version_policy"] == {"latest": {"num_versions": 1}}
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]
    assert [(o["name"], o["data_type"], o["dims"]) for o in config["output"]] == [
        ("OUTPUT0", "TYPE_INT32", [16]),
        ("OUTPUT1", "TYPE_INT32", [16]),
    ]
    assert [(g["kind"], g["count"]) for g in config["instance_group"]] == [("KIND_CPU", 2)]
    assert config["default_model_filename"] == "model.onnx"
    assert client.get_model_config("simple", "1") == config


def test_model_config_digits_labels(client):
    config = client.get_model_config("digits")
    assert config["max_batch_size"] == 64
    assert config["output"][0]["label_filename"] == "labels.txt"


# --- inference on `simple` -------------------------------------------------------------------------


@pytest.mark.parametrize("in_binary", BINARY, ids=["in-binary", "in-json"])
@pytest.mark.parametrize("out_binary", BINARY, ids=["out-binary", "out-json"])
def test_simple_infer_binary_and_json(client, in_binary, out_binary):
    a, b = simple_data(seed=1)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=out_binary),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=out_binary),
    ]
    result = client.infer("simple", simple_inputs(a, b, in_binary), outputs=outputs)
    check_simple(result, a, b)
    response = result.get_response()
    assert response["model_name"] == "simple"
    assert response["model_version"] == "1"
    assert "id" not in response
    assert [o["name"] for o in response["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    for o in response["outputs"]:
        assert o["datatype"] == "INT32"
        assert o["shape"] == [1, 16]
        if out_binary:
            assert o["parameters"] == {"binary_data_size": 64}
            assert "data" not in o
        else:
            assert "parameters" not in o
            assert o["data"] == (a + b if o["name"] == "OUTPUT0" else a - b).flatten().tolist()


def test_simple_mixed_input_encodings(client):
    a, b = simple_data(seed=2)
    inputs = [make_input("INPUT0", a, True), make_input("INPUT1", b, False)]
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
    ]
    result = client.infer("simple", inputs, outputs=outputs)
    check_simple(result, a, b)
    o0, o1 = result.get_response()["outputs"]
    assert "data" in o0 and "parameters" not in o0
    assert o1["parameters"] == {"binary_data_size": 64}


def test_simple_default_outputs(client):
    # No outputs named: all of them, in binary (tritonclient sets binary_data_output).
    a, b = simple_data(seed=3)
    result = client.infer("simple", simple_inputs(a, b))
    check_simple(result, a, b)
    assert [o["parameters"] for o in result.get_response()["outputs"]] == [{"binary_data_size": 64}] * 2


def test_request_id_echo(client):
    a, b = simple_data(seed=4)
    result = client.infer("simple", simple_inputs(a, b), request_id="my-request-42")
    assert result.get_response()["id"] == "my-request-42"
    check_simple(result, a, b)


def test_explicit_version(client):
    a, b = simple_data(seed=5)
    result = client.infer("simple", simple_inputs(a, b), model_version="1")
    assert result.get_response()["model_version"] == "1"
    check_simple(result, a, b)


@pytest.mark.parametrize("out_binary", BINARY, ids=["out-binary", "out-json"])
def test_outputs_subset(client, out_binary):
    a, b = simple_data(seed=6)
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=out_binary)]
    result = client.infer("simple", simple_inputs(a, b), outputs=outputs)
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_batch_8(client, binary):
    a, b = simple_data(batch=8, seed=7)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("simple", simple_inputs(a, b, binary), outputs=outputs)
    assert [o["shape"] for o in result.get_response()["outputs"]] == [[8, 16], [8, 16]]
    check_simple(result, a, b)


def test_int32_overflow_wraps(client):
    # INT32 arithmetic in the model wraps around, as in Triton.
    a = np.full((1, 16), np.iinfo(np.int32).max, dtype=np.int32)
    b = np.ones((1, 16), dtype=np.int32)
    result = client.infer("simple", simple_inputs(a, b))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), np.iinfo(np.int32).min))


# --- every datatype through the identity fixtures --------------------------------------------------


def int_values(dtype):
    info = np.iinfo(dtype)
    values = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
    if info.min < 0:
        values[2] = -1
    return np.array(values, dtype=dtype).reshape(2, 3)


def float_values(dtype, binary):
    info = np.finfo(dtype)
    values = [info.min, info.max, info.tiny, -0.0, 0.1, -2.5]
    if binary:
        values[4:] = [np.inf, -np.inf]
    return np.array(values, dtype=dtype).reshape(2, 3)


IDENTITY = [
    ("identity_bool", np.bool_, "BOOL"),
    ("identity_uint8", np.uint8, "UINT8"),
    ("identity_uint16", np.uint16, "UINT16"),
    ("identity_uint32", np.uint32, "UINT32"),
    ("identity_uint64", np.uint64, "UINT64"),
    ("identity_int8", np.int8, "INT8"),
    ("identity_int16", np.int16, "INT16"),
    ("identity_int32", np.int32, "INT32"),
    ("identity_int64", np.int64, "INT64"),
    ("identity_fp16", np.float16, "FP16"),
    ("identity_fp32", np.float32, "FP32"),
    ("identity_fp64", np.float64, "FP64"),
]

# onnxruntime-common (1.30) turns a float16 tensor's Uint16Array into a Float16Array when the runtime has
# one (Deno does), and onnxruntime-node's binding then sees 0 bytes: every FP16 inference fails with
# "not enough space: expected N, got 0" (server/backends/onnxruntime.ts). Strict: passes => remove the mark.


def identity_params():
    for model, dtype, triton in IDENTITY:
        marks = []
        for in_binary in BINARY:
            for out_binary in BINARY:
                yield pytest.param(
                    model,
                    dtype,
                    triton,
                    in_binary,
                    out_binary,
                    marks=marks,
                    id=f"{triton}-in{'bin' if in_binary else 'json'}-out{'bin' if out_binary else 'json'}",
                )


@pytest.mark.parametrize("model,dtype,triton,in_binary,out_binary", list(identity_params()))
def test_identity_datatypes(client, model, dtype, triton, in_binary, out_binary):
    if dtype == np.bool_:
        data = np.array([[True, False, True], [False, False, True]], dtype=np.bool_)
    elif np.issubdtype(dtype, np.integer):
        data = int_values(dtype)
    else:
        # JSON has no NaN or infinities: those go in binary only.
        data = float_values(dtype, in_binary and out_binary)
    assert np_to_triton_dtype(data.dtype) == triton
    inp = make_input("INPUT0", data, in_binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=out_binary)
    result = client.infer(model, [inp], outputs=[out])
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == data.dtype
    assert got.shape == data.shape
    np.testing.assert_array_equal(got, data)
    if np.issubdtype(dtype, np.floating):
        np.testing.assert_array_equal(np.signbit(got), np.signbit(data))  # -0.0 stays -0.0
    (o,) = result.get_response()["outputs"]
    assert o["datatype"] == triton and o["shape"] == [2, 3]
    if out_binary:
        assert o["parameters"] == {"binary_data_size": data.nbytes}
    elif dtype == np.bool_ or np.issubdtype(dtype, np.integer):
        # Exact JSON values, 64-bit extremes included.
        assert o["data"] == data.flatten().tolist()


def test_identity_nan_binary(client):
    for dtype in (np.float32, np.float64):
        data = np.array([[np.nan, 1.0]], dtype=dtype)
        result = client.infer(f"identity_fp{np.dtype(dtype).itemsize * 8}", [make_input("INPUT0", data)])
        got = result.as_numpy("OUTPUT0")
        assert np.isnan(got[0, 0]) and got[0, 1] == 1.0


BYTES_DATA = [
    [b"", "h\u00e9llo w\u00f6rld \u2713".encode(), "\u65e5\u672c\u8a9e".encode()],
    [b"a", b"  spaced  ", "\U0001f642 emoji".encode()],
]


@pytest.mark.parametrize("in_binary", BINARY, ids=["in-binary", "in-json"])
@pytest.mark.parametrize("out_binary", BINARY, ids=["out-binary", "out-json"])
def test_identity_bytes(client, in_binary, out_binary):
    data = np.array(BYTES_DATA, dtype=np.object_)
    assert np_to_triton_dtype(data.dtype) == "BYTES"
    inp = make_input("INPUT0", data, in_binary)
    out = httpclient.InferRequestedOutput("OUTPUT0", binary_data=out_binary)
    result = client.infer("identity_string", [inp], outputs=[out])
    got = result.as_numpy("OUTPUT0")
    assert got.dtype == np.object_
    assert got.shape == (2, 3)
    (o,) = result.get_response()["outputs"]
    assert o["datatype"] == "BYTES" and o["shape"] == [2, 3]
    if out_binary:
        # tritonclient gives bytes for binary outputs ...
        assert got.tolist() == BYTES_DATA
        assert o["parameters"] == {"binary_data_size": sum(4 + len(s) for row in BYTES_DATA for s in row)}
    else:
        # ... and str for JSON ones.
        assert got.tolist() == [[s.decode("utf-8") for s in row] for row in BYTES_DATA]


@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_simple_string(client, binary):
    a, b = simple_data(batch=2, seed=8)
    to_bytes = np.vectorize(lambda v: str(v).encode(), otypes=[np.object_])
    sa, sb = to_bytes(a), to_bytes(b)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer("simple_string", simple_inputs(sa, sb, binary), outputs=outputs)
    out0, out1 = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert out0.shape == (2, 16) and out1.shape == (2, 16)
    decode = (lambda v: v) if binary else (lambda v: v.encode())
    assert [[decode(v) for v in row] for row in out0.tolist()] == to_bytes(a + b).tolist()
    assert [[decode(v) for v in row] for row in out1.tolist()] == to_bytes(a - b).tolist()
    assert [o["datatype"] for o in result.get_response()["outputs"]] == ["BYTES", "BYTES"]


# --- classification --------------------------------------------------------------------------------


def digits_samples():
    samples = json.loads((ROOT / "examples/models/digits/samples.json").read_text())
    labels = (ROOT / "examples/models/digits/labels.txt").read_text().split("\n")
    return np.array(samples["inputs"], dtype=np.float32), samples["labels"], labels


@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_digits_classification(client, binary):
    x, truth, names = digits_samples()
    assert x.shape == (8, 64)
    outputs = [httpclient.InferRequestedOutput("probabilities", binary_data=binary, class_count=3)]
    result = client.infer("digits", [make_input("input", x, binary)], outputs=outputs)
    top = result.as_numpy("probabilities")
    assert top.shape == (8, 3)
    (o,) = result.get_response()["outputs"]
    assert o["datatype"] == "BYTES" and o["shape"] == [8, 3]

    # The same request without classification: the raw probabilities, to recompute the expected strings.
    raw = client.infer(
        "digits", [make_input("input", x)], outputs=[httpclient.InferRequestedOutput("probabilities")]
    ).as_numpy("probabilities")
    assert raw.shape == (8, 10) and raw.dtype == np.float32
    np.testing.assert_allclose(raw.sum(axis=1), 1.0, rtol=1e-5)

    for i, label in enumerate(truth):
        row = [v if isinstance(v, bytes) else v.encode() for v in top[i]]
        order = sorted(range(10), key=lambda k: (-raw[i, k], k))[:3]
        expected = [f"{float(raw[i, k]):.6f}:{k}:{names[k]}".encode() for k in order]
        assert row == expected
        value, index, name = row[0].decode().split(":")
        assert int(index) == label and name == names[label]
        assert 0.5 < float(value) <= 1.0
        values = [float(r.decode().split(":")[0]) for r in row]
        assert values == sorted(values, reverse=True)


def test_digits_classification_format(client):
    x, truth, names = digits_samples()
    outputs = [httpclient.InferRequestedOutput("probabilities", class_count=3)]
    top = client.infer("digits", [make_input("input", x[:1])], outputs=outputs).as_numpy("probabilities")
    assert top.shape == (1, 3)
    first = top[0, 0]
    assert isinstance(first, bytes)  # like b"0.999823:2:two"
    value, index, name = first.split(b":")
    assert re.fullmatch(rb"[01]\.[0-9]{6}", value)
    assert int(index) == truth[0]
    assert name == names[truth[0]].encode()


# --- compression -----------------------------------------------------------------------------------


@pytest.mark.parametrize("request_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("response_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_compression(client, request_alg, response_alg, binary):
    a, b = simple_data(batch=4, seed=9)
    outputs = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer(
        "simple",
        simple_inputs(a, b, binary),
        outputs=outputs,
        request_compression_algorithm=request_alg,
        response_compression_algorithm=response_alg,
    )
    check_simple(result, a, b)


@pytest.mark.parametrize("alg", ["gzip", "deflate"])
def test_response_is_compressed(alg):
    # tritonclient hides the headers: check on the wire that the server compresses as asked.
    body = json.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                for n in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    host, port = URL.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            "POST",
            "/v2/models/simple/infer",
            body=gzip.compress(body) if alg == "gzip" else zlib.compress(body),
            headers={"Content-Encoding": alg, "Accept-Encoding": alg, "Content-Type": "application/json"},
        )
        response = conn.getresponse()
        raw = response.read()
        assert response.status == 200
        assert response.getheader("Content-Encoding") == alg
        plain = gzip.decompress(raw) if alg == "gzip" else zlib.decompress(raw)
        outputs = json.loads(plain)["outputs"]
        assert outputs[0]["data"] == [2 * i for i in range(16)]
        assert outputs[1]["data"] == [0] * 16
    finally:
        conn.close()


# --- async_infer -----------------------------------------------------------------------------------


def test_async_infer_many_in_flight(client):
    pending = []
    for i in range(24):
        a, b = simple_data(batch=1 + i % 8, seed=100 + i)
        request = client.async_infer("simple", simple_inputs(a, b, i % 2 == 0), request_id=f"req-{i}")
        pending.append((request, a, b, f"req-{i}"))
    for request, a, b, rid in pending:
        result = request.get_result()
        assert result.get_response()["id"] == rid
        check_simple(result, a, b)


def test_async_infer_mixed_models(client):
    x, truth, _ = digits_samples()
    pending = []
    for i in range(8):
        out = [httpclient.InferRequestedOutput("probabilities", class_count=1)]
        pending.append(("digits", i, client.async_infer("digits", [make_input("input", x[i : i + 1])], outputs=out)))
        data = int_values(np.int64)
        pending.append(("int64", data, client.async_infer("identity_int64", [make_input("INPUT0", data)])))
    for kind, arg, request in pending:
        result = request.get_result()
        if kind == "digits":
            (label,) = result.as_numpy("probabilities")[0]
            assert int(label.split(b":")[1]) == truth[arg]
        else:
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), arg)


def test_async_infer_error(client):
    a, b = simple_data()
    request = client.async_infer("no_such_model", simple_inputs(a, b))
    with pytest.raises(InferenceServerException) as info:
        request.get_result()
    assert info.value.status() == "404"
    assert info.value.message() == "Request for unknown model: 'no_such_model' is not found"
    assert_still_serving(client)


# --- errors ----------------------------------------------------------------------------------------


def expect_error(client, status, message, model, inputs, **kwargs):
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, inputs, **kwargs)
    e = info.value
    assert e.status() == status
    assert e.message() == message
    assert str(e) == f"[{status}] {message}"
    assert_still_serving(client)


def test_error_unknown_model(client):
    a, b = simple_data()
    expect_error(
        client, "404", "Request for unknown model: 'no_such_model' is not found", "no_such_model",
        simple_inputs(a, b),
    )


def test_error_unknown_version(client):
    a, b = simple_data()
    expect_error(
        client, "404", "Request for unknown model: 'simple' version 7 is not found", "simple",
        simple_inputs(a, b), model_version="7",
    )


def test_error_metadata_unknown_model(client):
    for call in (client.get_model_metadata, client.get_model_config):
        with pytest.raises(InferenceServerException) as info:
            call("no_such_model")
        assert info.value.status() == "404"
        assert info.value.message() == "Request for unknown model: 'no_such_model' is not found"


# A model with no READY version answers NOT_FOUND (HTTP 404) "... has no available versions", as Triton does.
def test_error_model_that_failed_to_load(client):
    with pytest.raises(InferenceServerException) as info:
        client.infer("bad_model", [make_input("INPUT0", np.zeros(4, dtype=np.float32))])
    assert info.value.message().startswith("Request for unknown model: 'bad_model' has no available versions")
    assert info.value.status() == "404"


def test_error_model_that_failed_to_load_message(client):
    with pytest.raises(InferenceServerException) as info:
        client.infer("bad_model", [make_input("INPUT0", np.zeros(4, dtype=np.float32))])
    message = info.value.message()
    assert message.startswith("Request for unknown model: 'bad_model' has no available versions: ")
    assert "bad_model" in message and "model.onnx" in message
    assert info.value.status() == "404"
    assert_still_serving(client)


@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_error_wrong_shape(client, binary):
    a = np.zeros((1, 15), dtype=np.int32)
    expect_error(
        client, "400", "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [1,15]", "simple",
        simple_inputs(a, a, binary),
    )


def test_error_wrong_rank(client):
    a = np.zeros(16, dtype=np.int32)
    expect_error(
        client, "400", "Cannot infer 'simple': unexpected shape for input 'INPUT0' for model 'simple'. Expected [-1,16], got [16]", "simple",
        simple_inputs(a, a),
    )


@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_error_wrong_datatype(client, binary):
    a = np.zeros((1, 16), dtype=np.float32)
    expect_error(
        client, "400", "Cannot infer 'simple': inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'", "simple",
        simple_inputs(a, a, binary),
    )


@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_error_missing_input(client, binary):
    a = np.zeros((1, 16), dtype=np.int32)
    expect_error(
        client, "400", "Cannot infer 'simple': expected 2 inputs but got 1 inputs for model 'simple'. Got input(s) ['INPUT0'], but missing required input(s) ['INPUT1']. Please provide all required input(s).", "simple",
        [make_input("INPUT0", a, binary)],
    )


def test_error_unknown_input(client):
    a = np.zeros((1, 16), dtype=np.int32)
    expect_error(
        client, "400", "Cannot infer 'simple': unexpected inference input 'INPUT2' for model 'simple', the model's inputs are 'INPUT0', 'INPUT1'",
        "simple", simple_inputs(a, a) + [make_input("INPUT2", a)],
    )


def test_error_unknown_output(client):
    a, b = simple_data()
    expect_error(
        client, "400",
        "Cannot infer 'simple': unexpected inference output 'OUTPUT9' for model 'simple', the model's outputs are 'OUTPUT0', 'OUTPUT1'",
        "simple", simple_inputs(a, b), outputs=[httpclient.InferRequestedOutput("OUTPUT9")],
    )


@pytest.mark.parametrize("binary", BINARY, ids=["binary", "json"])
def test_error_batch_above_max(client, binary):
    a = np.zeros((9, 16), dtype=np.int32)
    expect_error(
        client, "400",
        "Cannot infer 'simple': inference request batch-size must be <= 8 for 'simple', input 'INPUT0' has 9",
        "simple", simple_inputs(a, a, binary),
    )


def test_error_mismatched_batch(client):
    a = np.zeros((2, 16), dtype=np.int32)
    b = np.zeros((3, 16), dtype=np.int32)
    expect_error(
        client, "400", "Cannot infer 'simple': input 'INPUT1' batch size does not match other inputs for 'simple' (3, the others 2)", "simple",
        simple_inputs(a, b),
    )


def test_error_json_value_out_of_range(client):
    # A UINT8 array cannot hold 256, so fill the JSON data list that set_data_from_numpy(..., binary_data=False)
    # would have filled.
    inp = httpclient.InferInput("INPUT0", [1, 1], "UINT8")
    inp._data = [256]
    expect_error(
        client, "400", "Cannot read input 'INPUT0': element 0 is 256, expected an integer in [0, 255] for UINT8",
        "identity_uint8", [inp],
    )


def test_serving_after_errors(client):
    assert client.is_server_ready()
    assert client.is_model_ready("simple")
    for i in range(4):
        a, b = simple_data(batch=8, seed=200 + i)
        check_simple(client.infer("simple", simple_inputs(a, b)), a, b)
