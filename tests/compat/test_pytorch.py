"""tritonclient (HTTP and gRPC) against one repository holding ONNX, Python and PyTorch models.

Run by tests/compat/pytorch_test.ts with DINFER_HTTP_URL and DINFER_GRPC_URL set to a server whose single
model repository holds digits (ONNX), add_sub_py (Python), digits_torch, add_sub_pt and checked_pt (PyTorch).
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = json.loads((ROOT / "examples" / "models" / "digits" / "samples.json").read_text())
MODELS = {
    "digits": "onnxruntime_onnx",
    "add_sub_py": "python",
    "digits_torch": "pytorch_libtorch",
    "add_sub_pt": "pytorch_libtorch",
    "checked_pt": "pytorch_libtorch",
}


@pytest.fixture(params=["http", "grpc"])
def proto(request):
    if request.param == "http":
        client = httpclient.InferenceServerClient(os.environ["DINFER_HTTP_URL"])
        yield httpclient, client
    else:
        client = grpcclient.InferenceServerClient(os.environ["DINFER_GRPC_URL"])
        yield grpcclient, client
    client.close()


def tensor(mod, name, arr):
    t = mod.InferInput(name, list(arr.shape), {np.float32: "FP32"}[arr.dtype.type])
    t.set_data_from_numpy(arr)
    return t


def test_every_model_is_ready_with_its_platform(proto):
    mod, client = proto
    assert client.is_server_ready()
    for name, platform in MODELS.items():
        assert client.is_model_ready(name), name
        meta = client.get_model_metadata(name)
        got = meta["platform"] if isinstance(meta, dict) else meta.platform
        assert got == platform, name


def test_onnx_and_torch_digits_agree_on_the_samples(proto):
    mod, client = proto
    x = np.array(SAMPLES["inputs"], dtype=np.float32)
    onnx = client.infer("digits", [tensor(mod, "input", x)]).as_numpy("probabilities")
    torch = client.infer("digits_torch", [tensor(mod, "INPUT__0", x)]).as_numpy("OUTPUT__0")
    assert onnx.shape == torch.shape == (8, 10)
    assert onnx.argmax(axis=1).tolist() == SAMPLES["labels"]
    assert torch.argmax(axis=1).tolist() == SAMPLES["labels"]
    np.testing.assert_allclose(torch.sum(axis=1), np.ones(8), rtol=1e-5)


def test_python_and_torch_add_sub_compute_the_same(proto):
    mod, client = proto
    a = np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.float32)
    b = np.array([[10, 20, 30, 40], [0.5, 0.5, 0.5, 0.5]], dtype=np.float32)
    py = client.infer("add_sub_py", [tensor(mod, "INPUT0", a), tensor(mod, "INPUT1", b)])
    pt = client.infer(
        "add_sub_pt",
        [tensor(mod, "a", a), tensor(mod, "b", b)],
        outputs=[mod.InferRequestedOutput("OUTPUT__0"), mod.InferRequestedOutput("OUTPUT__1")],
    )
    assert py.as_numpy("OUTPUT0").tolist() == pt.as_numpy("OUTPUT__0").tolist() == (a + b).tolist()
    assert py.as_numpy("OUTPUT1").tolist() == pt.as_numpy("OUTPUT__1").tolist() == (a - b).tolist()


def test_an_error_in_forward_is_internal_with_the_reason(proto):
    mod, client = proto
    with pytest.raises(InferenceServerException) as e:
        client.infer("checked_pt", [tensor(mod, "INPUT__0", np.array([[1, -1]], dtype=np.float32))])
    assert "Cannot run 'checked_pt': PyTorch execute failure: builtins.ValueError: negative input" in e.value.message()
    assert e.value.status() == ("500" if mod is httpclient else "StatusCode.INTERNAL")
    ok = client.infer("checked_pt", [tensor(mod, "INPUT__0", np.array([[16, 25]], dtype=np.float32))])
    assert ok.as_numpy("OUTPUT__0").tolist() == [[4, 5]]
