"""The model repository extension through the official clients: `tritonclient.http` and `tritonclient.grpc`
load_model (with config overrides and uploaded files), unload_model and get_model_repository_index.

Run by tests/integration/model_management_test.ts against a server started with
--model-control-mode=explicit on tests/fixtures/models with nothing loaded; the addresses come from
DINFER_HTTP_URL and DINFER_GRPC_URL (host:port). Each test leaves the models it touched unloaded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

HTTP_URL = os.environ.get("DINFER_HTTP_URL", "127.0.0.1:8000")
GRPC_URL = os.environ.get("DINFER_GRPC_URL", "127.0.0.1:8001")
ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests/fixtures/models"
X = np.array([1, -2, 0.5, 4], dtype=np.float32)
IO = {
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [4]}],
}
PROTOCOLS = ["http", "grpc"]
# What each client reports as the status of an error (HTTP status code or gRPC status).
STATUS = {
    "http": {"INVALID_ARG": "400", "NOT_FOUND": "404"},
    "grpc": {"INVALID_ARG": "StatusCode.INVALID_ARGUMENT", "NOT_FOUND": "StatusCode.NOT_FOUND"},
}


def versioned_config(policy: dict) -> str:
    return json.dumps(
        {"name": "versioned", "platform": "onnxruntime_onnx", "max_batch_size": 0, "version_policy": policy, **IO}
    )


@pytest.fixture(scope="module")
def clients():
    h = httpclient.InferenceServerClient(HTTP_URL)
    g = grpcclient.InferenceServerClient(GRPC_URL)
    yield {"http": h, "grpc": g}
    h.close()
    g.close()


def lib(protocol: str):
    return httpclient if protocol == "http" else grpcclient


def index(client, protocol: str) -> list[dict]:
    """The index rows with every field (the gRPC JSON form leaves out empty strings)."""
    if protocol == "http":
        return client.get_model_repository_index()
    rows = client.get_model_repository_index(as_json=True).get("models", [])
    return rows


def rows_of(client, protocol: str, name: str) -> list[dict]:
    return [r for r in index(client, protocol) if r["name"] == name]


def row(protocol: str, name: str, version: str, state: str, reason: str = "") -> dict:
    r = {"name": name, "version": version, "state": state, "reason": reason}
    if protocol == "grpc" and reason == "":
        del r["reason"]
    return r


def versions(client, protocol: str, name: str) -> list[str]:
    if protocol == "http":
        return client.get_model_metadata(name)["versions"]
    return client.get_model_metadata(name, as_json=True)["versions"]


def multiply(client, protocol: str, version: str = "") -> tuple[str, np.ndarray]:
    inp = lib(protocol).InferInput("INPUT0", [4], "FP32")
    inp.set_data_from_numpy(X)
    result = client.infer("versioned", [inp], model_version=version)
    response = result.get_response() if protocol == "http" else result.get_response(as_json=True)
    return response["model_version"], result.as_numpy("OUTPUT0")


def expect_error(protocol: str, code: str, message: str, fn, *args, **kwargs) -> None:
    with pytest.raises(InferenceServerException) as info:
        fn(*args, **kwargs)
    assert info.value.message() == message
    assert info.value.status() == STATUS[protocol][code]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_index_lists_models_never_loaded_with_only_a_name(clients, protocol):
    rows = index(clients[protocol], protocol)
    names = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
    assert [r["name"] for r in rows] == names
    assert {"name": "identity_int8"} in rows


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_load_then_unload(clients, protocol):
    c = clients[protocol]
    c.load_model("versioned")
    assert c.is_model_ready("versioned")
    assert c.is_model_ready("versioned", "3")
    assert not c.is_model_ready("versioned", "2")
    assert rows_of(c, protocol, "versioned") == [row(protocol, "versioned", "3", "READY")]
    version, y = multiply(c, protocol)
    assert version == "3"
    np.testing.assert_array_equal(y, X * 3)
    c.unload_model("versioned", unload_dependents=True)
    assert not c.is_model_ready("versioned")
    assert rows_of(c, protocol, "versioned") == [row(protocol, "versioned", "3", "UNAVAILABLE", "unloaded")]
    expect_error(
        protocol,
        "NOT_FOUND",
        "Request for unknown model: 'versioned' has no available versions: unloaded",
        multiply,
        c,
        protocol,
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_config_override_chooses_the_versions(clients, protocol):
    c = clients[protocol]
    c.load_model("versioned", config=versioned_config({"all": {}}))
    assert versions(c, protocol, "versioned") == ["1", "2", "3"]
    for v in (1, 2, 3):
        version, y = multiply(c, protocol, str(v))
        assert version == str(v)
        np.testing.assert_array_equal(y, X * v)
    c.load_model("versioned", config=versioned_config({"specific": {"versions": [2]}}))
    assert versions(c, protocol, "versioned") == ["2"]
    version, y = multiply(c, protocol)
    assert version == "2"
    np.testing.assert_array_equal(y, X * 2)
    # The versions the new policy drops stay in the index as UNAVAILABLE "unloaded".
    assert rows_of(c, protocol, "versioned") == [
        row(protocol, "versioned", "1", "UNAVAILABLE", "unloaded"),
        row(protocol, "versioned", "2", "READY"),
        row(protocol, "versioned", "3", "UNAVAILABLE", "unloaded"),
    ]
    c.unload_model("versioned")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_failed_reload_keeps_the_old_version_serving(clients, protocol):
    c = clients[protocol]
    c.load_model("versioned")
    expect_error(
        protocol,
        "INVALID_ARG",
        "Cannot load 'versioned': failed to load 'versioned', the previous versions keep serving: "
        "Cannot load 'versioned': unknown platform 'nope'",
        c.load_model,
        "versioned",
        config=json.dumps({"platform": "nope"}),
    )
    assert c.is_model_ready("versioned")
    version, y = multiply(c, protocol)
    assert version == "3"
    np.testing.assert_array_equal(y, X * 3)
    c.unload_model("versioned")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_load_from_uploaded_files(clients, protocol):
    c = clients[protocol]
    name = f"uploaded_{protocol}"
    config = json.dumps(
        {
            "name": name,
            "platform": "onnxruntime_onnx",
            "max_batch_size": 8,
            "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
            "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
        }
    )
    onnx = (FIXTURES / "identity_fp32/1/model.onnx").read_bytes()
    c.load_model(name, config=config, files={"file:1/model.onnx": onnx})
    assert c.is_model_ready(name, "1")
    assert rows_of(c, protocol, name) == [row(protocol, name, "1", "READY")]
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    inp = lib(protocol).InferInput("INPUT0", [2, 3], "FP32")
    inp.set_data_from_numpy(data)
    np.testing.assert_array_equal(c.infer(name, [inp]).as_numpy("OUTPUT0"), data)
    c.unload_model(name)
    assert not c.is_model_ready(name)
    # As Triton: an uploaded model has no folder in the repositories, so it leaves the index.
    assert rows_of(c, protocol, name) == []
    expect_error(
        protocol,
        "INVALID_ARG",
        "Cannot load 'evil': failed to load 'evil': file path '../evil/model.onnx' must be relative, without '..'",
        c.load_model,
        "evil",
        config=config,
        files={"file:../evil/model.onnx": onnx},
    )
    # The model name is a folder name: it cannot climb out of the upload folder. (The HTTP client puts the name
    # in the URL unescaped, where '..' segments are normalized away before the server sees them.)
    for evil in ["../dinfer_mm_evil", ".."] if protocol == "grpc" else []:
        expect_error(
            protocol,
            "INVALID_ARG",
            f"Cannot load '{evil}': failed to load '{evil}': a model name must be a folder name, without '/' or '..'",
            c.load_model,
            evil,
            config=config,
            files={"file:1/model.onnx": onnx},
        )
    expect_error(
        protocol,
        "INVALID_ARG",
        f"Cannot load '{name}': failed to load '{name}': loading from files needs the 'config' parameter too",
        c.load_model,
        name,
        files={"file:1/model.onnx": onnx},
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unknown_models(clients, protocol):
    c = clients[protocol]
    expect_error(
        protocol,
        "INVALID_ARG",
        "Cannot load 'nope': failed to load 'nope': no model folder of that name in the model repositories",
        c.load_model,
        "nope",
    )
    # As Triton: unloading a model that is not known succeeds.
    c.unload_model("nope")
