"""dinfer's system shared-memory extension through the official clients (`tritonclient.http`, `tritonclient.grpc`)
and their shared-memory utilities (`tritonclient.utils.shared_memory`).

Run by tests/compat/shm_test.ts against a server started with `--allow-client-shm=true` that serves
examples/models and tests/fixtures/models; the addresses come from DINFER_HTTP_URL and DINFER_GRPC_URL
(host:port). Every test runs over both protocols; every region a test creates is unregistered and destroyed
by the `regions` fixture, even when the test fails.
"""

from __future__ import annotations

import base64
import itertools
import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor, serialized_byte_size

HTTP_URL = os.environ.get("DINFER_HTTP_URL", "127.0.0.1:8000")
GRPC_URL = os.environ.get("DINFER_GRPC_URL", "127.0.0.1:8001")

# Triton's error codes as each client reports them.
CODES = {
    "http": {"INVALID_ARG": "400", "NOT_FOUND": "404", "ALREADY_EXISTS": "409", "UNAVAILABLE": "503"},
    "grpc": {
        "INVALID_ARG": "StatusCode.INVALID_ARGUMENT",
        "NOT_FOUND": "StatusCode.NOT_FOUND",
        "ALREADY_EXISTS": "StatusCode.ALREADY_EXISTS",
        "UNAVAILABLE": "StatusCode.UNAVAILABLE",
    },
}

SENTINEL = 0xAB
_keys = itertools.count()

A = np.arange(32, dtype=np.int32).reshape(2, 16)
B = np.full((2, 16), 3, dtype=np.int32)
A1 = np.arange(16, dtype=np.int32).reshape(1, 16) - 5
B1 = np.full((1, 16), 7, dtype=np.int32)


class Proto:
    """One protocol's client with the few calls whose shapes differ between HTTP and gRPC."""

    def __init__(self, name: str, client, mod) -> None:
        self.name = name
        self.client = client
        self.mod = mod

    def code(self, code: str) -> str:
        return CODES[self.name][code]

    def input(self, name: str, shape: list[int], datatype: str):
        return self.mod.InferInput(name, shape, datatype)

    def output(self, name: str):
        return self.mod.InferRequestedOutput(name)

    def status(self, region: str = "") -> list[dict]:
        s = self.client.get_system_shared_memory_status(region)
        if self.name == "http":
            rows = s
        else:
            rows = [
                {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
                for r in s.regions.values()
            ]
        return sorted(rows, key=lambda r: r["name"])

    def cuda_status(self, region: str = "") -> list:
        s = self.client.get_cuda_shared_memory_status(region)
        return s if self.name == "http" else list(s.regions.values())

    def output_meta(self, result, name: str) -> dict:
        """The output's name, datatype, shape and parameters as a plain dict."""
        o = result.get_output(name)
        if self.name == "http":
            return o
        meta = {"name": o.name, "datatype": o.datatype, "shape": list(o.shape)}
        if o.parameters:
            meta["parameters"] = {
                k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in o.parameters.items()
            }
        return meta


@pytest.fixture(scope="module")
def http_client():
    c = httpclient.InferenceServerClient(HTTP_URL)
    yield c
    c.close()


@pytest.fixture(scope="module")
def grpc_client():
    c = grpcclient.InferenceServerClient(GRPC_URL)
    yield c
    c.close()


@pytest.fixture(params=["http", "grpc"])
def proto(request, http_client, grpc_client) -> Proto:
    if request.param == "http":
        return Proto("http", http_client, httpclient)
    return Proto("grpc", grpc_client, grpcclient)


class Regions:
    """Creates shared-memory objects with unique keys and registers them; cleans everything up."""

    def __init__(self, proto: Proto) -> None:
        self.proto = proto
        self.handles = []
        self.keys = {}

    def create(self, name: str, size: int):
        """A new object of `size` bytes, every byte SENTINEL (the region name is the handle's)."""
        key = f"/dinfer_shm_test_{os.getpid()}_{next(_keys)}"
        h = shm.create_shared_memory_region(name, key, size, create_only=True)
        self.handles.append(h)
        self.keys[id(h)] = key
        shm.set_shared_memory_region(h, [np.full(size, SENTINEL, dtype=np.uint8)])
        return h

    def key(self, h) -> str:
        return self.keys[id(h)]

    def new(self, name: str, size: int, offset: int = 0, byte_size: int | None = None):
        """Creates an object and registers it as region `name` (byte_size defaults to the rest of it)."""
        h = self.create(name, size)
        self.proto.client.register_system_shared_memory(
            name, self.key(h), size - offset if byte_size is None else byte_size, offset
        )
        return h

    def cleanup(self) -> None:
        try:
            self.proto.client.unregister_system_shared_memory()
        finally:
            for h in self.handles:
                try:
                    shm.destroy_shared_memory_region(h)
                except Exception as e:  # keep destroying the others
                    print(f"cannot destroy {self.key(h)}: {e}")


@pytest.fixture
def regions(proto):
    r = Regions(proto)
    try:
        yield r
    finally:
        r.cleanup()
    assert proto.status() == []


def infer_simple(proto: Proto, a: np.ndarray, b: np.ndarray):
    inputs = [proto.input("INPUT0", list(a.shape), "INT32"), proto.input("INPUT1", list(b.shape), "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return proto.client.infer("simple", inputs)


def assert_still_serving(proto: Proto) -> None:
    r = infer_simple(proto, A1, B1)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT0"), A1 + B1)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT1"), A1 - B1)


def expect_error(proto: Proto, fn, code: str, message: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        fn()
    assert info.value.status() == proto.code(code)
    assert info.value.message() == message
    assert_still_serving(proto)


def raw_bytes(h, size: int) -> bytes:
    return shm.get_contents_as_numpy(h, np.uint8, [size]).tobytes()


def shm_params(region: str, byte_size: int, offset: int = 0) -> dict:
    p = {"shared_memory_region": region, "shared_memory_byte_size": byte_size}
    if offset:
        p["shared_memory_offset"] = offset
    return p


# ---------------------------------------------------------------------------------------------------- numeric


def test_simple_inputs_and_outputs_in_regions_at_offsets(proto, regions):
    # One region holds both inputs (INPUT1 at offset 128), another both outputs (OUTPUT1 at offset 160).
    ih = regions.new("in", 256)
    oh = regions.new("out", 512)
    shm.set_shared_memory_region(ih, [A])
    shm.set_shared_memory_region(ih, [B], offset=128)
    inputs = [proto.input("INPUT0", [2, 16], "INT32"), proto.input("INPUT1", [2, 16], "INT32")]
    inputs[0].set_shared_memory("in", 128)
    inputs[1].set_shared_memory("in", 128, offset=128)
    outputs = [proto.output("OUTPUT0"), proto.output("OUTPUT1")]
    outputs[0].set_shared_memory("out", 128)
    outputs[1].set_shared_memory("out", 200, offset=160)
    r = proto.client.infer("simple", inputs, outputs=outputs)
    assert proto.output_meta(r, "OUTPUT0") == {
        "name": "OUTPUT0", "datatype": "INT32", "shape": [2, 16], "parameters": shm_params("out", 128),
    }
    assert proto.output_meta(r, "OUTPUT1") == {
        "name": "OUTPUT1", "datatype": "INT32", "shape": [2, 16], "parameters": shm_params("out", 128, 160),
    }
    np.testing.assert_array_equal(shm.get_contents_as_numpy(oh, np.int32, [2, 16]), A + B)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(oh, np.int32, [2, 16], offset=160), A - B)
    # Nothing else in the output region was touched.
    raw = raw_bytes(oh, 512)
    assert raw[128:160] == bytes([SENTINEL]) * 32
    assert raw[288:] == bytes([SENTINEL]) * 224
    # The inputs were only read.
    np.testing.assert_array_equal(shm.get_contents_as_numpy(ih, np.int32, [2, 16]), A)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(ih, np.int32, [2, 16], offset=128), B)


def test_regions_registered_at_an_offset_into_their_object(proto, regions):
    # Region "in" is bytes [100, 228) of its object, "out" bytes [1000, 1064) of another.
    ih = regions.new("in", 300, offset=100, byte_size=128)
    oh = regions.new("out", 1100, offset=1000, byte_size=64)
    shm.set_shared_memory_region(ih, [A1], offset=100)
    shm.set_shared_memory_region(ih, [B1], offset=164)
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("in", 64)
    inputs[1].set_shared_memory("in", 64, offset=64)
    outputs = [proto.output("OUTPUT1")]
    outputs[0].set_shared_memory("out", 64)
    r = proto.client.infer("simple", inputs, outputs=outputs)
    assert proto.output_meta(r, "OUTPUT1")["parameters"] == shm_params("out", 64)
    assert r.get_output("OUTPUT0") is None  # only the requested output comes back
    np.testing.assert_array_equal(shm.get_contents_as_numpy(oh, np.int32, [1, 16], offset=1000), A1 - B1)
    assert raw_bytes(oh, 1100)[:1000] == bytes([SENTINEL]) * 1000
    assert proto.status() == [
        {"name": "in", "key": regions.key(ih), "offset": 100, "byte_size": 128},
        {"name": "out", "key": regions.key(oh), "offset": 1000, "byte_size": 64},
    ]


@pytest.mark.parametrize("shm_output", ["OUTPUT0", "OUTPUT1"])
def test_mixing_shared_memory_and_normal_tensors(proto, regions, shm_output):
    ih = regions.new("in", 64)
    oh = regions.new("out", 64)
    shm.set_shared_memory_region(ih, [A1])
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("in", 64)
    inputs[1].set_data_from_numpy(B1)
    normal = "OUTPUT1" if shm_output == "OUTPUT0" else "OUTPUT0"
    outputs = [proto.output("OUTPUT0"), proto.output("OUTPUT1")]
    outputs[0 if shm_output == "OUTPUT0" else 1].set_shared_memory("out", 64)
    r = proto.client.infer("simple", inputs, outputs=outputs)
    want = {"OUTPUT0": A1 + B1, "OUTPUT1": A1 - B1}
    assert proto.output_meta(r, shm_output)["parameters"] == shm_params("out", 64)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(oh, np.int32, [1, 16]), want[shm_output])
    np.testing.assert_array_equal(r.as_numpy(normal), want[normal])
    assert "shared_memory_region" not in proto.output_meta(r, normal).get("parameters", {})


def test_an_input_region_read_twice_and_the_same_region_for_input_and_output(proto, regions):
    # INPUT0 and INPUT1 read the same bytes; the outputs go to the same region, after the input.
    h = regions.new("io", 192)
    shm.set_shared_memory_region(h, [A1])
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("io", 64)
    inputs[1].set_shared_memory("io", 64)
    outputs = [proto.output("OUTPUT0"), proto.output("OUTPUT1")]
    outputs[0].set_shared_memory("io", 64, offset=64)
    outputs[1].set_shared_memory("io", 64, offset=128)
    proto.client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(h, np.int32, [1, 16]), A1)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(h, np.int32, [1, 16], offset=64), A1 * 2)
    np.testing.assert_array_equal(
        shm.get_contents_as_numpy(h, np.int32, [1, 16], offset=128), np.zeros((1, 16), np.int32)
    )


def test_identity_fp64_round_trips_exact_bits(proto, regions):
    x = np.array([[-1.7e308, 0.1, 1.7e308], [np.inf, 5e-324, -2.5]], dtype=np.float64)
    ih = regions.new("in", 48)
    oh = regions.new("out", 48)
    shm.set_shared_memory_region(ih, [x])
    inp = proto.input("INPUT0", [2, 3], "FP64")
    inp.set_shared_memory("in", 48)
    out = proto.output("OUTPUT0")
    out.set_shared_memory("out", 48)
    proto.client.infer("identity_fp64", [inp], outputs=[out])
    assert raw_bytes(oh, 48) == x.tobytes()


# ---------------------------------------------------------------------------------------------------- BYTES


def test_simple_string_inputs_and_outputs_in_shared_memory(proto, regions):
    a = np.array([[str(i * 1000 - 7).encode() for i in range(16)]], dtype=np.object_)
    b = np.array([[str(3 - i).encode() for i in range(16)]], dtype=np.object_)
    sa, sb = serialize_byte_tensor(a), serialize_byte_tensor(b)
    na, nb = serialized_byte_size(sa), serialized_byte_size(sb)
    ih = regions.new("in", na + nb)
    oh = regions.new("out", 1024)
    shm.set_shared_memory_region(ih, [sa])
    shm.set_shared_memory_region(ih, [sb], offset=na)
    inputs = [proto.input("INPUT0", [1, 16], "BYTES"), proto.input("INPUT1", [1, 16], "BYTES")]
    inputs[0].set_shared_memory("in", na)
    inputs[1].set_shared_memory("in", nb, offset=na)
    outputs = [proto.output("OUTPUT0"), proto.output("OUTPUT1")]
    outputs[0].set_shared_memory("out", 512)
    outputs[1].set_shared_memory("out", 512, offset=512)
    r = proto.client.infer("simple_string", inputs, outputs=outputs)
    ai = np.array([int(v) for v in a.flatten()], dtype=np.int32)
    bi = np.array([int(v) for v in b.flatten()], dtype=np.int32)
    want_sum = np.array([[str(v).encode() for v in ai + bi]], dtype=np.object_)
    want_diff = np.array([[str(v).encode() for v in ai - bi]], dtype=np.object_)
    n0 = serialized_byte_size(serialize_byte_tensor(want_sum))
    n1 = serialized_byte_size(serialize_byte_tensor(want_diff))
    assert proto.output_meta(r, "OUTPUT0") == {
        "name": "OUTPUT0", "datatype": "BYTES", "shape": [1, 16], "parameters": shm_params("out", n0),
    }
    assert proto.output_meta(r, "OUTPUT1")["parameters"] == shm_params("out", n1, 512)
    got0 = shm.get_contents_as_numpy(oh, np.object_, [1, 16])
    got1 = shm.get_contents_as_numpy(oh, np.object_, [1, 16], offset=512)
    assert got0.tolist() == want_sum.tolist()
    assert got1.tolist() == want_diff.tolist()
    # The serialized output is exactly n0 bytes; what follows is untouched.
    assert raw_bytes(oh, 1024)[n0:512] == bytes([SENTINEL]) * (512 - n0)
    assert raw_bytes(oh, 1024)[:n0] == serialize_byte_tensor(want_sum).item()


def test_identity_string_round_trips_arbitrary_bytes(proto, regions):
    x = np.array(
        [[b"", b"abc", "h\u00e9llo \u2603".encode()], [b"tab\tnew\nline", b"x" * 300, "\u00ff".encode()]],
        dtype=np.object_,
    )
    s = serialize_byte_tensor(x)
    n = serialized_byte_size(s)
    ih = regions.new("in", n + 8)
    oh = regions.new("out", n)
    shm.set_shared_memory_region(ih, [s], offset=8)
    inp = proto.input("INPUT0", [2, 3], "BYTES")
    inp.set_shared_memory("in", n, offset=8)
    out = proto.output("OUTPUT0")
    out.set_shared_memory("out", n)
    r = proto.client.infer("identity_string", [inp], outputs=[out])
    assert proto.output_meta(r, "OUTPUT0")["parameters"] == shm_params("out", n)
    assert raw_bytes(oh, n) == s.item()
    assert shm.get_contents_as_numpy(oh, np.object_, [2, 3]).tolist() == x.tolist()


def test_bytes_input_with_a_wrong_byte_size(proto, regions):
    x = np.array([[b"ab", b"cde"]], dtype=np.object_)
    s = serialize_byte_tensor(x)  # 4 + 2 + 4 + 3 = 13 bytes
    ih = regions.new("in", 32)
    shm.set_shared_memory_region(ih, [s])
    inp = proto.input("INPUT0", [1, 2], "BYTES")
    inp.set_shared_memory("in", 14)
    expect_error(
        proto,
        lambda: proto.client.infer("identity_string", [inp]),
        "INVALID_ARG",
        "Cannot read the inference request for 'identity_string', input 'INPUT0': BYTES data has 1 bytes after "
        "the 2 expected elements",
    )
    inp.set_shared_memory("in", 12)
    expect_error(
        proto,
        lambda: proto.client.infer("identity_string", [inp]),
        "INVALID_ARG",
        "Cannot read the inference request for 'identity_string', input 'INPUT0': BYTES element 1 claims 3 bytes "
        "but only 2 remain",
    )


# ---------------------------------------------------------------------------------------------------- status


def test_status_of_all_regions_and_of_one(proto, regions):
    assert proto.status() == []
    h1 = regions.new("first", 64)
    h2 = regions.new("second", 4096, offset=1024, byte_size=2048)
    assert proto.status() == [
        {"name": "first", "key": regions.key(h1), "offset": 0, "byte_size": 64},
        {"name": "second", "key": regions.key(h2), "offset": 1024, "byte_size": 2048},
    ]
    assert proto.status("second") == [
        {"name": "second", "key": regions.key(h2), "offset": 1024, "byte_size": 2048},
    ]
    expect_error(proto, lambda: proto.status("nope"), "NOT_FOUND", "Unable to find system shared memory region: 'nope'")


def test_unregister_one_then_all(proto, regions):
    hs = {name: regions.new(name, 64) for name in ("r1", "r2", "r3")}
    proto.client.unregister_system_shared_memory("r2")
    assert [r["name"] for r in proto.status()] == ["r1", "r3"]
    expect_error(proto, lambda: proto.status("r2"), "NOT_FOUND", "Unable to find system shared memory region: 'r2'")
    # Unregistering an unknown region is not an error (as Triton).
    proto.client.unregister_system_shared_memory("r2")
    proto.client.unregister_system_shared_memory("never_registered")
    assert [r["name"] for r in proto.status()] == ["r1", "r3"]
    # An unregistered region can no longer be used.
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("r2", 64)
    inputs[1].set_data_from_numpy(B1)
    expect_error(
        proto,
        lambda: proto.client.infer("simple", inputs),
        "INVALID_ARG",
        "Cannot read the inference request for 'simple', input 'INPUT0': unknown shared memory region 'r2'",
    )
    proto.client.unregister_system_shared_memory()
    assert proto.status() == []
    # The name and the object can be registered again.
    proto.client.register_system_shared_memory("r2", regions.key(hs["r2"]), 64)
    assert proto.status() == [{"name": "r2", "key": regions.key(hs["r2"]), "offset": 0, "byte_size": 64}]


def test_the_key_may_omit_the_leading_slash(proto, regions):
    h = regions.create("plain", 64)
    key = regions.key(h)
    proto.client.register_system_shared_memory("plain", key[1:], 64)
    assert proto.status("plain") == [{"name": "plain", "key": key[1:], "offset": 0, "byte_size": 64}]


# ---------------------------------------------------------------------------------------------------- errors


def test_registering_beyond_the_end_of_the_object(proto, regions):
    h = regions.create("big", 64)
    key = regions.key(h)
    expect_error(
        proto,
        lambda: proto.client.register_system_shared_memory("big", key, 64, 32),
        "INVALID_ARG",
        f"Cannot register shared memory region 'big': offset 32 + byte_size 64 is beyond the end of '{key}' "
        "(64 bytes)",
    )
    expect_error(
        proto,
        lambda: proto.client.register_system_shared_memory("big", key, 65),
        "INVALID_ARG",
        f"Cannot register shared memory region 'big': offset 0 + byte_size 65 is beyond the end of '{key}' "
        "(64 bytes)",
    )
    assert proto.status() == []
    # Exactly to the end is fine.
    proto.client.register_system_shared_memory("big", key, 32, 32)
    assert proto.status() == [{"name": "big", "key": key, "offset": 32, "byte_size": 32}]


def test_registering_a_key_that_does_not_exist(proto, regions):
    expect_error(
        proto,
        lambda: proto.client.register_system_shared_memory("ghost", "/dinfer_no_such_object", 64),
        "INVALID_ARG",
        "Cannot register shared memory region 'ghost': cannot open shared-memory object "
        "'/dinfer_no_such_object': no such object",
    )
    expect_error(
        proto,
        lambda: proto.client.register_system_shared_memory("ghost", "/../etc/passwd", 64),
        "INVALID_ARG",
        "Cannot register shared memory region 'ghost': key '/../etc/passwd' is not a shared-memory object name",
    )
    assert proto.status() == []


def test_registering_a_name_twice(proto, regions):
    h = regions.new("twice", 64)
    other = regions.create("other", 128)
    expect_error(
        proto,
        lambda: proto.client.register_system_shared_memory("twice", regions.key(other), 128),
        "ALREADY_EXISTS",
        "Cannot register shared memory region 'twice': a region of that name is already registered",
    )
    # The first registration is unchanged.
    assert proto.status() == [{"name": "twice", "key": regions.key(h), "offset": 0, "byte_size": 64}]
    # Another name may register the same object.
    proto.client.register_system_shared_memory("again", regions.key(h), 64)
    assert [r["name"] for r in proto.status()] == ["again", "twice"]


def test_input_beyond_its_region(proto, regions):
    regions.new("in", 64)
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("in", 64, offset=32)
    inputs[1].set_data_from_numpy(B1)
    expect_error(
        proto,
        lambda: proto.client.infer("simple", inputs),
        "INVALID_ARG",
        "Cannot read the inference request for 'simple', input 'INPUT0': offset 32 + 64 bytes is beyond region "
        "'in' of 64 bytes",
    )
    inputs[0] = proto.input("INPUT0", [1, 16], "INT32")  # set_shared_memory keeps an earlier offset
    inputs[0].set_shared_memory("in", 128)
    expect_error(
        proto,
        lambda: proto.client.infer("simple", inputs),
        "INVALID_ARG",
        "Cannot read the inference request for 'simple', input 'INPUT0': offset 0 + 128 bytes is beyond region "
        "'in' of 64 bytes",
    )


def test_input_byte_size_not_matching_its_shape(proto, regions):
    regions.new("in", 128)
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory("in", 60)
    inputs[1].set_data_from_numpy(B1)
    expect_error(
        proto,
        lambda: proto.client.infer("simple", inputs),
        "INVALID_ARG",
        "Cannot infer 'simple': input byte size mismatch for input 'INPUT0' for model 'simple'. "
        "Expected 64, got 60",
    )
    inputs[0].set_shared_memory("in", 128)
    expect_error(
        proto,
        lambda: proto.client.infer("simple", inputs),
        "INVALID_ARG",
        "Cannot infer 'simple': input byte size mismatch for input 'INPUT0' for model 'simple'. "
        "Expected 64, got 128",
    )


def test_input_in_an_unknown_region(proto, regions):
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(A1)
    inputs[1].set_shared_memory("nope", 64)
    expect_error(
        proto,
        lambda: proto.client.infer("simple", inputs),
        "INVALID_ARG",
        "Cannot read the inference request for 'simple', input 'INPUT1': unknown shared memory region 'nope'",
    )


def test_output_larger_than_its_region(proto, regions):
    oh = regions.new("out", 64)
    ok = regions.new("ok", 64)

    def run(byte_size: int, offset: int = 0, region: str = "out"):
        outputs = [proto.output("OUTPUT0"), proto.output("OUTPUT1")]
        outputs[0].set_shared_memory(region, byte_size, offset=offset)
        outputs[1].set_shared_memory("ok", 64)
        inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(A1)
        inputs[1].set_data_from_numpy(B1)
        return proto.client.infer("simple", inputs, outputs=outputs)

    # The declared size is too small for the 64-byte output.
    expect_error(
        proto,
        lambda: run(32),
        "INVALID_ARG",
        "Cannot write output 'OUTPUT0': it has 64 bytes, more than shared_memory_byte_size 32",
    )
    # The declared size fits the output but not the region.
    expect_error(
        proto,
        lambda: run(64, offset=32),
        "INVALID_ARG",
        "Cannot write output 'OUTPUT0': offset 32 + 64 bytes is beyond region 'out' of 64 bytes",
    )
    expect_error(
        proto,
        lambda: run(64, region="nope"),
        "INVALID_ARG",
        "Cannot write output 'OUTPUT0': unknown shared memory region 'nope'",
    )
    # Nothing was written to the too-small region.
    assert raw_bytes(oh, 64) == bytes([SENTINEL]) * 64
    # The regions are not left in use: they still serve, and unregister.
    run(64)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(oh, np.int32, [1, 16]), A1 + B1)
    np.testing.assert_array_equal(shm.get_contents_as_numpy(ok, np.int32, [1, 16]), A1 - B1)
    proto.client.unregister_system_shared_memory("out")
    proto.client.unregister_system_shared_memory("ok")
    assert proto.status() == []


def test_bytes_output_larger_than_its_region(proto, regions):
    x = np.array([[b"hello", b"world"]], dtype=np.object_)  # 18 bytes serialized
    regions.new("out", 17)
    inp = proto.input("INPUT0", [1, 2], "BYTES")
    inp.set_data_from_numpy(x)
    out = proto.output("OUTPUT0")
    out.set_shared_memory("out", 17)
    expect_error(
        proto,
        lambda: proto.client.infer("identity_string", [inp], outputs=[out]),
        "INVALID_ARG",
        "Cannot write output 'OUTPUT0': it has 18 bytes, more than shared_memory_byte_size 17",
    )


def test_failed_requests_leave_no_region_in_use(proto, regions):
    regions.new("in", 64)
    inputs = [proto.input("INPUT0", [1, 16], "INT32"), proto.input("INPUT1", [1, 15], "INT32")]
    inputs[0].set_shared_memory("in", 64)
    inputs[1].set_data_from_numpy(B1[:, :15])
    with pytest.raises(InferenceServerException):
        proto.client.infer("simple", inputs)
    proto.client.unregister_system_shared_memory("in")
    assert proto.status() == []


# ---------------------------------------------------------------------------------------------------- CUDA


def test_cuda_shared_memory_is_unavailable_without_a_gpu(proto):
    # The server's libtrtshim here is the mock build (or none): a handle from a real GPU cannot be opened.
    with pytest.raises(InferenceServerException) as e:
        # As tritonclient.utils.cuda_shared_memory.get_raw_handle gives it: the 64-byte handle in base64.
        proto.client.register_cuda_shared_memory("gpu", base64.b64encode(b"\0" * 64), 0, 64)
    assert e.value.status() == proto.code("UNAVAILABLE")
    assert e.value.message().startswith(
        "Cannot register CUDA shared memory region 'gpu': CUDA is not available in this server: "
    )
    assert proto.cuda_status() == []
    expect_error(
        proto, lambda: proto.cuda_status("gpu"), "NOT_FOUND", "Unable to find cuda shared memory region: 'gpu'"
    )
    proto.client.unregister_cuda_shared_memory("gpu")
    proto.client.unregister_cuda_shared_memory()
