"""The sequence batcher through the official tritonclient, as Triton's simple_sequence examples use it.

Run by tests/compat/sequence_test.ts against a server that serves examples/models; the addresses come from
DINFER_HTTP_URL and DINFER_GRPC_URL (host:port).

simple_sequence (direct) and simple_dyna_sequence (oldest) are INT32 accumulators: the START request sets
the sum to INPUT, each later request adds INPUT, OUTPUT is the running sum; simple_dyna_sequence adds the
correlation id to OUTPUT on the END request. Triton's example clients send two interleaved sequences,
1000 with VALUES and 1001 with their negatives.
"""

from __future__ import annotations

import os
import queue
from functools import partial

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

HTTP_URL = os.environ.get("DINFER_HTTP_URL", "127.0.0.1:8000")
GRPC_URL = os.environ.get("DINFER_GRPC_URL", "127.0.0.1:8001")

VALUES = [11, 7, 5, 3, 2, 0, 1]
SUMS = [11, 18, 23, 26, 28, 28, 29]
NEG_SUMS = [-s for s in SUMS]
# simple_dyna_sequence: the END request adds the correlation id.
DYNA_SUMS = SUMS[:-1] + [29 + 1000]  # ..., 1029
DYNA_NEG_SUMS = NEG_SUMS[:-1] + [-29 + 1001]  # ..., 972

MODULES = {"http": httpclient, "grpc": grpcclient}


def not_active(model: str, seq: str) -> str:
    return f"Cannot infer '{model}': sequence {seq} is not active; its first request must set sequence_start"


@pytest.fixture(scope="module")
def http():
    c = httpclient.InferenceServerClient(HTTP_URL)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc():
    c = grpcclient.InferenceServerClient(GRPC_URL)
    yield c
    c.close()


@pytest.fixture(params=["http", "grpc"])
def proto(request, http, grpc):
    """(protocol name, client module, client)."""
    name = request.param
    return name, MODULES[name], http if name == "http" else grpc


def inputs_of(mod, value: int, batch: int = 1):
    inp = mod.InferInput("INPUT", [batch, 1], "INT32")
    inp.set_data_from_numpy(np.full((batch, 1), value, dtype=np.int32))
    return [inp]


def infer(mod, client, model: str, value: int, seq, start=False, end=False) -> int:
    out = [mod.InferRequestedOutput("OUTPUT")]
    r = client.infer(model, inputs_of(mod, value), outputs=out, sequence_id=seq, sequence_start=start,
                     sequence_end=end)
    o = r.as_numpy("OUTPUT")
    assert o.dtype == np.int32 and o.shape == (1, 1)
    return int(o[0, 0])


def run_pair(mod, client, model: str, id0, id1) -> tuple[list[int], list[int]]:
    """Two interleaved sequences, step by step: id0 with VALUES, id1 with their negatives."""
    got0, got1 = [], []
    n = len(VALUES)
    for i, v in enumerate(VALUES):
        got0.append(infer(mod, client, model, v, id0, start=i == 0, end=i == n - 1))
        got1.append(infer(mod, client, model, -v, id1, start=i == 0, end=i == n - 1))
    return got0, got1


def expect_error(proto_name: str, fn, message: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        fn()
    e = info.value
    assert e.message() == message
    if proto_name == "http":
        assert e.status() == "400"
    else:
        assert e.status() == "StatusCode.INVALID_ARGUMENT"


# ------------------------------------------------------------------------------------------------
# the documented example clients: sync (HTTP and gRPC)
# ------------------------------------------------------------------------------------------------


def test_simple_sequence_two_interleaved_sequences(proto):
    _, mod, client = proto
    got0, got1 = run_pair(mod, client, "simple_sequence", 1000, 1001)
    assert got0 == SUMS
    assert got1 == NEG_SUMS


def test_simple_dyna_sequence_end_adds_the_correlation_id(proto):
    _, mod, client = proto
    got0, got1 = run_pair(mod, client, "simple_dyna_sequence", 1000, 1001)
    assert got0 == DYNA_SUMS
    assert got1 == DYNA_NEG_SUMS
    assert got0[-1] == 1029 and got1[-1] == 972


def test_string_correlation_ids(proto):
    _, mod, client = proto
    got0, got1 = run_pair(mod, client, "simple_sequence", "seq-a", "seq-b")
    assert got0 == SUMS
    assert got1 == NEG_SUMS


def test_string_and_numeric_ids_are_different_sequences(proto):
    _, mod, client = proto
    m = "simple_sequence"
    assert infer(mod, client, m, 5, 4242, start=True) == 5
    assert infer(mod, client, m, 100, "4242", start=True) == 100
    assert infer(mod, client, m, 1, 4242) == 6
    assert infer(mod, client, m, 1, "4242") == 101
    assert infer(mod, client, m, 0, 4242, end=True) == 6
    assert infer(mod, client, m, 0, "4242", end=True) == 101


def test_large_correlation_id(proto):
    # Over HTTP and gRPC alike, ids beyond 2^53 stay exact: 2^63-5 and 2^63-6 are different sequences.
    name, mod, client = proto
    big = 2**63 - 5  # beyond 2^53: exact only as a 64-bit integer
    m = "simple_sequence"
    assert infer(mod, client, m, 3, big, start=True) == 3
    assert infer(mod, client, m, 4, big - 1, start=True) == 4
    assert infer(mod, client, m, 10, big) == 13
    assert infer(mod, client, m, 10, big - 1, end=True) == 14
    assert infer(mod, client, m, 1, big, end=True) == 14


def test_restarting_an_id_with_start_resets_the_sum(proto):
    _, mod, client = proto
    for m in ["simple_sequence", "simple_dyna_sequence"]:
        assert infer(mod, client, m, 100, 2001, start=True) == 100
        assert infer(mod, client, m, 5, 2001) == 105
        assert infer(mod, client, m, 7, 2001, start=True) == 7
        assert infer(mod, client, m, 1, 2001) == 8
        end = infer(mod, client, m, 1, 2001, end=True)
        assert end == (9 if m == "simple_sequence" else 9 + 2001)


def test_a_sequence_ends_with_end(proto):
    name, mod, client = proto
    m = "simple_sequence"
    assert infer(mod, client, m, 4, 2002, start=True, end=True) == 4
    expect_error(name, lambda: infer(mod, client, m, 1, 2002), not_active(m, "2002"))


def test_start_and_end_in_one_request_on_dyna(proto):
    _, mod, client = proto
    assert infer(mod, client, "simple_dyna_sequence", 4, 2003, start=True, end=True) == 4 + 2003


# ------------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_request_without_start_for_an_unknown_id(proto, model):
    name, mod, client = proto
    expect_error(name, lambda: infer(mod, client, model, 1, 3001), not_active(model, "3001"))
    expect_error(name, lambda: infer(mod, client, model, 1, 3001, end=True), not_active(model, "3001"))


def test_request_without_start_for_an_unknown_string_id(proto):
    name, mod, client = proto
    m = "simple_sequence"
    expect_error(name, lambda: infer(mod, client, m, 1, "nobody"), not_active(m, "'nobody'"))


@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_missing_sequence_id(proto, model):
    name, mod, client = proto
    expect_error(
        name,
        lambda: infer(mod, client, model, 1, 0, start=True),
        f"Cannot infer '{model}': inference request to model '{model}' must specify a non-zero or non-empty correlation ID (sequence_id)",
    )


@pytest.mark.parametrize("model", ["simple_sequence", "simple_dyna_sequence"])
def test_batch_size_2_is_refused(proto, model):
    name, mod, client = proto

    def send():
        client.infer(model, inputs_of(mod, 1, batch=2), sequence_id=3002, sequence_start=True)

    expect_error(name, send, f"Cannot infer '{model}': sequence requests must have batch size 1, got 2")
    # The refused START did not open the sequence.
    expect_error(name, lambda: infer(mod, client, model, 1, 3002), not_active(model, "3002"))


def test_string_id_on_a_numeric_corrid_model(proto):
    name, mod, client = proto
    m = "simple_dyna_sequence"
    expect_error(
        name,
        lambda: infer(mod, client, m, 1, "abc", start=True),
        f"Cannot infer '{m}': the model takes numeric correlation ids, got string 'abc'",
    )
    # The refused START did not open the sequence.
    expect_error(
        name,
        lambda: infer(mod, client, m, 1, "abc", end=True),
        f"Cannot infer '{m}': the model takes numeric correlation ids, got string 'abc'",
    )


def test_a_refused_string_id_does_not_hold_a_slot_or_fail_other_sequences(proto):
    """simple_dyna_sequence has 4 candidate slots; refused string ids must take none of them."""
    name, mod, client = proto
    m = "simple_dyna_sequence"
    for k in range(6):
        with pytest.raises(InferenceServerException):
            infer(mod, client, m, 1, f"bad{k}", start=True)
    ids = [3100 + k for k in range(4)]
    for k, i in enumerate(ids):
        assert infer(mod, client, m, k, i, start=True) == k
    for k, i in enumerate(ids):
        assert infer(mod, client, m, 10, i, end=True) == k + 10 + i


# ------------------------------------------------------------------------------------------------
# gRPC streaming: many sequences interleaved in one stream
# ------------------------------------------------------------------------------------------------


def stream_sequences(model: str, ids: list[int], signs: list[int]) -> dict[int, list[int]]:
    """Sends every sequence's requests over one stream, interleaved step by step; returns the outputs of
    each sequence in the order its responses arrived (request ids tell which step each one answers)."""
    results: queue.Queue = queue.Queue()

    def callback(q, result, error):
        q.put((result, error))

    client = grpcclient.InferenceServerClient(GRPC_URL)
    try:
        client.start_stream(callback=partial(callback, results))
        n = len(VALUES)
        for step, v in enumerate(VALUES):
            for seq, sign in zip(ids, signs):
                client.async_stream_infer(
                    model,
                    inputs_of(grpcclient, sign * v),
                    outputs=[grpcclient.InferRequestedOutput("OUTPUT")],
                    request_id=f"{seq}_{step}",
                    sequence_id=seq,
                    sequence_start=step == 0,
                    sequence_end=step == n - 1,
                )
        got: dict[int, list[int]] = {seq: [] for seq in ids}
        steps: dict[int, list[int]] = {seq: [] for seq in ids}
        for _ in range(n * len(ids)):
            result, error = results.get(timeout=10)
            assert error is None, str(error)
            seq, step = (int(x) for x in result.get_response().id.split("_"))
            steps[seq].append(step)
            got[seq].append(int(result.as_numpy("OUTPUT")[0, 0]))
        assert results.empty()
        for seq in ids:
            assert steps[seq] == list(range(n)), f"sequence {seq} answered out of order: {steps[seq]}"
        return got
    finally:
        client.stop_stream()
        client.close()


def test_stream_simple_sequence_two_sequences():
    got = stream_sequences("simple_sequence", [1000, 1001], [1, -1])
    assert got == {1000: SUMS, 1001: NEG_SUMS}


def test_stream_simple_dyna_sequence_two_sequences():
    got = stream_sequences("simple_dyna_sequence", [1000, 1001], [1, -1])
    assert got == {1000: DYNA_SUMS, 1001: DYNA_NEG_SUMS}


def test_stream_simple_sequence_many_sequences():
    # 12 sequences on 8 slots (max_batch_size 8, one instance): 4 wait in the backlog.
    ids = [5000 + k for k in range(12)]
    signs = [1 if k % 2 == 0 else -1 for k in range(12)]
    got = stream_sequences("simple_sequence", ids, signs)
    assert got == {seq: (SUMS if s > 0 else NEG_SUMS) for seq, s in zip(ids, signs)}


def test_stream_simple_dyna_sequence_many_sequences():
    # 10 sequences on 4 candidate slots: 6 wait in the backlog.
    ids = [6000 + k for k in range(10)]
    signs = [1 if k % 2 == 0 else -1 for k in range(10)]
    got = stream_sequences("simple_dyna_sequence", ids, signs)
    for seq, s in zip(ids, signs):
        sums = SUMS if s > 0 else NEG_SUMS
        assert got[seq] == sums[:-1] + [sums[-1] + seq], f"sequence {seq}"


def test_stream_error_for_an_unknown_sequence():
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(GRPC_URL)
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("simple_sequence", inputs_of(grpcclient, 1), sequence_id=7001)
        client.async_stream_infer("simple_sequence", inputs_of(grpcclient, 1), sequence_id=7002,
                                  sequence_start=True, sequence_end=True)
        first = results.get(timeout=10)
        second = results.get(timeout=10)
        errors = [e for _, e in (first, second) if e is not None]
        oks = [r for r, e in (first, second) if e is None]
        assert len(errors) == 1 and len(oks) == 1
        assert errors[0].message() == not_active("simple_sequence", "7001")
        assert int(oks[0].as_numpy("OUTPUT")[0, 0]) == 1
    finally:
        client.stop_stream()
        client.close()
