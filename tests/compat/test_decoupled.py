"""Decoupled Python models through the official `tritonclient` packages, as users stream from them.

Run by tests/integration/python_backend_test.ts against a server that serves tests/fixtures/python_models and
examples/models; the addresses come from DINFER_GRPC_URL and DINFER_HTTP_URL (host:port).
"""

from __future__ import annotations

import os
import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

GRPC_URL = os.environ["DINFER_GRPC_URL"]
HTTP_URL = os.environ["DINFER_HTTP_URL"]


def repeat_inputs(values, delays=None, wait=0, module=grpcclient):
    values = np.array(values, dtype=np.int32)
    delays = np.zeros(len(values), dtype=np.uint32) if delays is None else np.array(delays, dtype=np.uint32)
    tensors = []
    for name, x, dt in (("IN", values, "INT32"), ("DELAY", delays, "UINT32"),
                        ("WAIT", np.array([wait], dtype=np.uint32), "UINT32")):
        t = module.InferInput(name, list(x.shape), dt)
        t.set_data_from_numpy(x)
        tensors.append(t)
    return tensors


def final_of(result):
    p = result.get_response().parameters
    return p["triton_final_response"].bool_param if "triton_final_response" in p else None


class Stream:
    def __init__(self):
        self.client = grpcclient.InferenceServerClient(GRPC_URL)
        self.got: queue.Queue = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.got.put((result, error)))

    def take(self, n):
        return [self.got.get(timeout=60) for _ in range(n)]

    def close(self):
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream():
    s = Stream()
    yield s
    s.close()


def test_one_request_streams_one_response_per_element_then_an_empty_final(stream):
    stream.client.async_stream_infer(
        "repeat_py", repeat_inputs([4, 5, 6], delays=[5, 5, 5], wait=20), request_id="r1",
        enable_empty_final_response=True,
    )
    results = stream.take(4)
    for i, (result, error) in enumerate(results[:3]):
        assert error is None
        assert result.get_response().id == "r1"
        assert result.get_response().model_name == "repeat_py"
        assert result.as_numpy("OUT").tolist() == [4 + i]
        assert result.as_numpy("IDX").tolist() == [i]
        assert final_of(result) is False
    result, error = results[3]
    assert error is None
    response = result.get_response()
    assert (response.id, response.model_name, len(response.outputs)) == ("r1", "repeat_py", 0)
    assert final_of(result) is True


def test_without_empty_final_response_only_the_data_responses_come(stream):
    stream.client.async_stream_infer("repeat_py", repeat_inputs([7, 8]), request_id="plain")
    results = stream.take(2)
    assert [r.as_numpy("OUT").tolist() for r, _ in results] == [[7], [8]]
    assert [final_of(r) for r, _ in results] == [False, False]
    # Nothing more: an ordinary model's answer on the same stream comes next, marked final.
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        t = grpcclient.InferInput(name, [1, 16], "INT32")
        t.set_data_from_numpy(a)
        inputs.append(t)
    stream.client.async_stream_infer("simple", inputs, request_id="simple")
    result, error = stream.take(1)[0]
    assert error is None and result.get_response().id == "simple"
    assert result.as_numpy("OUTPUT0").tolist() == [(2 * a).reshape(-1).tolist()]
    assert final_of(result) is True
    assert stream.got.empty()


def test_zero_responses_still_end_with_the_final_flag(stream):
    stream.client.async_stream_infer("repeat_py", repeat_inputs([]), request_id="none",
                                     enable_empty_final_response=True)
    (result, error), = stream.take(1)
    assert error is None
    assert result.get_response().id == "none" and len(result.get_response().outputs) == 0
    assert final_of(result) is True


def test_requests_interleave_and_each_keeps_its_order(stream):
    # "slow" sends every 40 ms, "fast" every 5 ms: fast finishes first although sent second.
    stream.client.async_stream_infer("repeat_py", repeat_inputs([1, 2, 3], delays=[40, 40, 40]),
                                     request_id="slow", enable_empty_final_response=True)
    stream.client.async_stream_infer("repeat_py", repeat_inputs([10, 20, 30], delays=[5, 5, 5]),
                                     request_id="fast", enable_empty_final_response=True)
    results = stream.take(8)
    assert all(error is None for _, error in results)
    by_id: dict[str, list] = {"slow": [], "fast": []}
    for result, _ in results:
        outs = result.get_response().outputs
        by_id[result.get_response().id].append(None if not outs else int(result.as_numpy("OUT")[0]))
    assert by_id == {"slow": [1, 2, 3, None], "fast": [10, 20, 30, None]}
    assert results[-1][0].get_response().id == "slow"


def test_an_error_response_mid_stream_does_not_end_the_request(stream):
    stream.client.async_stream_infer("repeat_py", repeat_inputs([1, -2, 3]), request_id="err",
                                     enable_empty_final_response=True)
    results = stream.take(4)
    assert results[0][1] is None and results[0][0].as_numpy("OUT").tolist() == [1]
    assert results[1][0] is None
    assert isinstance(results[1][1], InferenceServerException)
    assert results[1][1].message() == "element 1 is negative (-2)"
    assert results[2][1] is None and results[2][0].as_numpy("OUT").tolist() == [3]
    assert final_of(results[3][0]) is True


def test_a_stub_that_dies_mid_stream_ends_the_request_with_an_error_and_is_restarted(stream):
    stream.client.async_stream_infer("repeat_py", repeat_inputs([5, -99, 6], delays=[0, 50, 0]), request_id="crash",
                                     enable_empty_final_response=True)
    results = stream.take(3)
    assert results[0][1] is None and results[0][0].as_numpy("OUT").tolist() == [5]
    assert results[1][0] is None
    assert results[1][1].message() == (
        "Cannot run 'repeat_py' instance 'repeat_py_0_0': the Python stub exited with code 3"
    )
    # The request asked for an empty final response: it comes after the error, so the client knows it ended.
    assert results[2][1] is None and final_of(results[2][0]) is True
    assert results[2][0].get_response().id == "crash"
    # The stub is started again: the same stream goes on.
    stream.client.async_stream_infer("repeat_py", repeat_inputs([7]), request_id="after",
                                     enable_empty_final_response=True)
    results = stream.take(2)
    assert results[0][1] is None and results[0][0].as_numpy("OUT").tolist() == [7]
    assert final_of(results[1][0]) is True


def test_execute_that_raises_after_a_response_ends_the_request_with_the_error_and_the_final_flag(stream):
    stream.client.async_stream_infer("repeat_py", repeat_inputs([8], wait=999), request_id="raises",
                                     enable_empty_final_response=True)
    results = stream.take(3)
    assert results[0][1] is None and results[0][0].as_numpy("OUT").tolist() == [8]
    assert results[1][0] is None
    assert results[1][1].message() == (
        "Cannot run 'repeat_py' instance 'repeat_py_0_0': TritonModelException: execute failed on purpose"
    )
    assert results[2][1] is None and final_of(results[2][0]) is True
    assert results[2][0].get_response().id == "raises"
    stream.client.async_stream_infer("repeat_py", repeat_inputs([1]), request_id="next")
    (result, error), = stream.take(1)
    assert error is None and result.as_numpy("OUT").tolist() == [1]


def test_bad_input_is_an_error_on_the_stream_and_the_stream_goes_on(stream):
    t = grpcclient.InferInput("IN", [2], "INT32")
    t.set_data_from_numpy(np.array([1, 2], dtype=np.int32))
    stream.client.async_stream_infer("repeat_py", [t], request_id="missing")
    (result, error), = stream.take(1)
    assert result is None
    assert error.message() == (
        "Cannot infer 'repeat_py': expected 3 inputs but got 1 inputs for model 'repeat_py'. Got input(s) ['IN'], "
        "but missing required input(s) ['DELAY','WAIT']. Please provide all required input(s)."
    )
    stream.client.async_stream_infer("repeat_py", repeat_inputs([9]), request_id="ok",
                                     enable_empty_final_response=True)
    results = stream.take(2)
    assert results[0][0].as_numpy("OUT").tolist() == [9]
    assert final_of(results[1][0]) is True


def test_unary_grpc_and_http_refuse_decoupled_models():
    with grpcclient.InferenceServerClient(GRPC_URL) as c:
        with pytest.raises(InferenceServerException) as e:
            c.infer("repeat_py", repeat_inputs([1]))
        assert e.value.status() == "StatusCode.UNIMPLEMENTED"
        assert e.value.message() == "ModelInfer RPC doesn't support models with decoupled transaction policy"
    with httpclient.InferenceServerClient(HTTP_URL) as c:
        with pytest.raises(InferenceServerException) as e:
            c.infer("repeat_py", repeat_inputs([1], module=httpclient))
        assert e.value.status() == "501"
        assert e.value.message() == "HTTP end point doesn't support models with decoupled transaction policy"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_model_reads_a_decoupled_model_through_bls(mode):
    with httpclient.InferenceServerClient(HTTP_URL) as c:
        t = httpclient.InferInput("IN", [4], "INT32")
        t.set_data_from_numpy(np.array([1, 2, -3, 40], dtype=np.int32))
        r = c.infer("bls_decoupled_py", [t], parameters={"async": mode == "async"})
        assert r.as_numpy("SUM").tolist() == [43]
        assert r.as_numpy("RESPONSES").tolist() == [3]
        assert r.as_numpy("ERRORS").tolist() == [1]


def test_many_concurrent_streams_each_get_all_their_responses():
    streams = [Stream() for _ in range(4)]
    try:
        for k, s in enumerate(streams):
            for j in range(3):
                s.client.async_stream_infer("repeat_py", repeat_inputs([k * 10 + j] * 5), request_id=f"{k}-{j}",
                                            enable_empty_final_response=True)
        for k, s in enumerate(streams):
            results = s.take(18)
            assert all(error is None for _, error in results)
            for j in range(3):
                mine = [r for r, _ in results if r.get_response().id == f"{k}-{j}"]
                assert [int(r.as_numpy("OUT")[0]) for r in mine[:5]] == [k * 10 + j] * 5
                assert [final_of(r) for r in mine] == [False] * 5 + [True]
            assert s.got.empty()
    finally:
        for s in streams:
            s.close()
