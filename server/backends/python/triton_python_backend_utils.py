"""The `triton_python_backend_utils` module of dinfer's Python backend.

Models import it as Triton's documentation shows (`import triton_python_backend_utils as pb_utils`). It is
written for dinfer from Triton's documented Python API; the stub process (stub.py) wires it to the server.
"""

import asyncio
import ctypes
import json
import struct
import sys
import threading
import time

import numpy as np

# Response flags (decoupled mode), request flags (sequence batching), release flags and the memory kinds of
# PreferredMemory, with Triton's values.
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_GPU = 0
TRITONSERVER_MEMORY_CPU = 1


class MemoryType:
    """The memory kinds of PreferredMemory, as Triton's enum names them."""

    TRITONSERVER_MEMORY_GPU = TRITONSERVER_MEMORY_GPU
    TRITONSERVER_MEMORY_CPU = TRITONSERVER_MEMORY_CPU


class MetricKind:
    """The kinds of a MetricFamily, as Triton's enum names them (the same values as MetricFamily.COUNTER, ...)."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


class InferenceTrace:
    """A request's trace as a model sees it: dinfer passes models no trace context, so `get_context()` is None."""

    def get_context(self):
        return None

# The largest files load_model sends in one call (the message's length is 32 bits).
_LOAD_FILES_MAX = 1 << 31

_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}

# The numpy dtype of each config data type.
TRITON_STRING_TO_NUMPY = {"TYPE_STRING" if name == "BYTES" else f"TYPE_{name}": t for name, t in _NUMPY.items()}

# The stub sets this to its connection to the server (BLS calls); None outside a stub.
_server = None
# The stub sets this to the model's version folder.
_model_dir = None


def triton_string_to_numpy(triton_type_string):
    """The numpy dtype of a config data type (`TYPE_FP32`) or a protocol datatype (`FP32`)."""
    found = _NUMPY.get(triton_type_string)
    if found is not None:
        return found
    name = triton_type_string
    if name.startswith("TYPE_"):
        name = name[5:]
    if name == "STRING":
        name = "BYTES"
    if name not in _NUMPY:
        raise TritonModelException(f"Cannot map datatype '{triton_type_string}' to numpy")
    return _NUMPY[name]


# TRITONSERVER_DataType numbers (Triton's C API), which triton_to_numpy_type takes.
_NUMPY_OF_CODE = {
    1: np.bool_,
    2: np.uint8,
    3: np.uint16,
    4: np.uint32,
    5: np.uint64,
    6: np.int8,
    7: np.int16,
    8: np.int32,
    9: np.int64,
    10: np.float16,
    11: np.float32,
    12: np.float64,
    13: np.object_,
}


def triton_to_numpy_type(data_type):
    """The numpy dtype of a TRITONSERVER_DataType number (11 -> np.float32); a datatype name is taken too."""
    if isinstance(data_type, str):
        return triton_string_to_numpy(data_type)
    found = _NUMPY_OF_CODE.get(data_type)
    if found is None:
        raise TritonModelException(f"Cannot map TRITONSERVER_DataType {data_type} to numpy")
    return found


def serialize_byte_tensor(input_tensor):
    """The elements of a BYTES tensor (object array of bytes or str, or a numpy bytes array), in C order, each as
    its 4-byte little-endian length and its bytes: one bytes value, in a 0-d object array (an empty array for no
    elements)."""
    array = np.asarray(input_tensor)
    if array.size == 0:
        return np.empty([0])
    if array.dtype != np.object_ and array.dtype.type != np.bytes_:
        raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
    parts = []
    for element in array.reshape(-1):
        data = element if isinstance(element, bytes) else str(element).encode("utf-8")
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor):
    """The elements of length-prefixed bytes (see serialize_byte_tensor), as a 1-d object array of bytes."""
    if isinstance(encoded_tensor, np.ndarray):
        if encoded_tensor.dtype == np.object_:
            data = b"".join(bytes(e) for e in encoded_tensor.reshape(-1))
        else:
            data = encoded_tensor.tobytes()
    else:
        data = bytes(encoded_tensor)
    elements = []
    at = 0
    while at < len(data):
        if at + 4 > len(data):
            raise TritonModelException("cannot deserialize bytes tensor: a length is cut short")
        (n,) = struct.unpack_from("<I", data, at)
        at += 4
        if at + n > len(data):
            raise TritonModelException("cannot deserialize bytes tensor: an element runs past the end")
        elements.append(data[at : at + n])
        at += n
    return np.array(elements, dtype=np.object_)


# Protocol datatypes by numpy dtype (native byte order), for the common case of _datatype_of.
_TRITON_OF = {np.dtype(t): name for name, t in _NUMPY.items() if name != "BYTES"}
# TRITONSERVER_DataType numbers by protocol datatype.
_CODE_OF_NAME = {name: code for code, t in _NUMPY_OF_CODE.items() for name, u in _NUMPY.items() if t is u}


def numpy_to_triton_type(dtype):
    """The TRITONSERVER_DataType number of a numpy dtype (`np.float32` -> 11), as Triton's: bytes and strings
    (object, `S`, `U`) are 13 (BYTES); a dtype without one gives None."""
    try:
        return _CODE_OF_NAME[_datatype_of(dtype)]
    except TritonModelException:
        return None


def _datatype_of(dtype):
    """The protocol datatype of a numpy dtype (`np.float32` -> `FP32`)."""
    try:
        found = _TRITON_OF.get(dtype)
    except TypeError:  # an unhashable dtype description
        found = None
    if found is not None:
        return found
    dtype = np.dtype(dtype)
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    for name, t in _NUMPY.items():
        if name != "BYTES" and np.dtype(t) == dtype:
            return name
    raise TritonModelException(f"Cannot map numpy dtype '{dtype}' to a Triton datatype")


class TritonError(Exception):
    """An error a model reports in an InferenceResponse, with an optional code."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    _NAMES = {
        0: "UNKNOWN",
        1: "INTERNAL",
        2: "NOT_FOUND",
        3: "INVALID_ARG",
        4: "UNAVAILABLE",
        5: "UNSUPPORTED",
        6: "ALREADY_EXISTS",
        7: "CANCELLED",
    }

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self._message = message
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code

    def code_name(self):
        return self._NAMES.get(self._code, "INTERNAL")

    def __str__(self):
        return self._message


class TritonModelException(Exception):
    """Raised by the utilities (and by BLS calls) when something fails; models may raise it too."""

    def __init__(self, message):
        super().__init__(message)
        self._message = message

    def message(self):
        return self._message


class Tensor:
    """A named tensor over a numpy array (a view over shared memory for inputs)."""

    def __init__(self, name, array, _datatype=None):
        if not isinstance(array, np.ndarray):
            array = np.asarray(array)
        if array.dtype.kind in ("S", "U"):
            array = np.array([_to_bytes(v) for v in array.reshape(-1)], dtype=np.object_).reshape(array.shape)
        self._name = name
        self._array = array
        self._datatype = _datatype or _datatype_of(array.dtype)

    @classmethod
    def _of(cls, name, array, datatype):
        """A tensor over an array of the given datatype, unchecked (the stub's inputs)."""
        t = cls.__new__(_BF16Tensor if datatype == "BF16" else cls)
        t._name = name
        t._array = array
        t._datatype = datatype
        return t

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)

    def triton_dtype(self):
        return self._datatype

    def is_cpu(self):
        return True

    def to_dlpack(self):
        return self.__dlpack__()

    def __dlpack__(self, stream=None, **kwargs):
        """The DLPack protocol, so that `torch.from_dlpack(tensor)` and `np.from_dlpack(tensor)` take the tensor's
        memory without a copy."""
        if self._array.dtype == np.object_:
            raise TritonModelException("DLPack does not have support for string tensors.")
        return self._array.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()

    @staticmethod
    def from_dlpack(name, capsule):
        """A tensor over the memory of `capsule`: an object of the DLPack protocol (a torch tensor, an array) or
        the capsule a `to_dlpack` function made (`torch.utils.dlpack.to_dlpack(t)`)."""
        if hasattr(capsule, "__dlpack__"):
            capsule = capsule.__dlpack__()
        # numpy has no bfloat16: such a tensor's elements come in as uint16, and the tensor is BF16.
        bf16 = _retag(capsule, _DL_BFLOAT, _DL_UINT)
        array = np.from_dlpack(_DLPackCapsule(capsule))
        if not array.flags.c_contiguous:
            raise TritonModelException(
                "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored in C-Order are supported."
            )
        return Tensor._of(name, array, "BF16") if bf16 else Tensor(name, array)

    def __repr__(self):
        return f"Tensor({self._name!r}, {self._datatype}, {list(self._array.shape)})"


class _BF16Tensor(Tensor):
    """A BF16 tensor: numpy has no bfloat16, so its elements are kept as uint16 and cross through DLPack only
    (`to_dlpack`, and `Tensor.from_dlpack` of a bfloat16 tensor), as Triton's Python backend has it."""

    def as_numpy(self):
        raise TritonModelException(
            "Tensor dtype is BF16 and cannot be converted to numpy. Use to_dlpack() and from_dlpack() instead."
        )

    def __dlpack__(self, stream=None, **kwargs):
        capsule = self._array.__dlpack__(stream=stream, **kwargs)
        _retag(capsule, _DL_UINT, _DL_BFLOAT)
        return capsule


# DLPack's type codes (DLDataTypeCode) that BF16 tensors cross between.
_DL_UINT = 1
_DL_BFLOAT = 4


# CPython's capsule accessors, typed once as functions of this module's own (a model's typing of
# ctypes.pythonapi's shared ones does not change them).
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def _dtype_at(capsule):
    """The address of the DLDataType (code, bits, lanes) of the tensor a DLPack capsule holds, unconsumed."""
    name = _capsule_name(capsule)
    if name not in (b"dltensor", b"dltensor_versioned"):
        raise TritonModelException(f"Cannot read a DLPack capsule named {name!r}")
    # DLManagedTensor starts with its DLTensor; DLManagedTensorVersioned has a version, a context, a deleter and
    # flags (32 bytes) before it. The dtype follows the data pointer, the device and ndim (20 bytes).
    return _capsule_pointer(capsule, name) + (20 if name == b"dltensor" else 52)


def _retag(capsule, code, new_code):
    """Gives a capsule's 16-bit elements of type `code` the type `new_code` (uint16 <-> bfloat16); True if it did."""
    at = _dtype_at(capsule)
    dtype = (ctypes.c_uint8 * 2).from_address(at)
    if dtype[0] == code and dtype[1] == 16:
        dtype[0] = new_code
        return True
    return False


class _DLPackCapsule:
    """A DLPack capsule as the protocol's object that numpy's from_dlpack takes; numpy reads the device from the
    capsule itself and refuses memory that is not the CPU's."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, **kwargs):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


def _text(v):
    """A str given as str, bytes or numpy bytes (UTF-8)."""
    return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else v


def _to_bytes(v):
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, np.bytes_):
        return bytes(v)
    return str(v).encode("utf-8")


def _response_parameters(parameters):
    """A response's parameters as a dict, from a dict or its JSON text: string keys, and values that are
    booleans, integers or strings, which is what a response parameter can hold."""
    if parameters is None:
        return {}
    if isinstance(parameters, str):
        parameters = json.loads(parameters) if parameters else {}
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect parameters to be a dict or its JSON text, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(key)}")
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)


class InferenceResponse:
    """A model's answer to one request: output tensors, or an error."""

    def __init__(self, output_tensors=None, error=None, parameters=None):
        self._outputs = list(output_tensors or [])
        if isinstance(error, str):
            error = TritonError(error)
        self._error = error
        self._parameters = _response_parameters(parameters)

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return json.dumps(self._parameters)


class ResponseSender:
    """Sends the responses of a decoupled model's request."""

    def __init__(self, request):
        self._request = request
        self._closed = False

    def send(self, response=None, flags=0):
        self._check(response, flags)
        if _server is None:
            raise TritonModelException("Cannot send a response outside a model stub")
        _server.send_response(self._request, response, flags)
        if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self._closed = True

    def is_cancelled(self):
        return self._request.is_cancelled()

    def _check(self, response, flags):
        """Refuses a send to a closed sender, and a send with neither a response nor the final flag."""
        if self._closed:
            # Triton's words (its QA matches them), as are the default mode's below.
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if response is None and not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Cannot send a response: give an InferenceResponse, or flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL"
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(f"Cannot send a {type(response).__name__}: expected an InferenceResponse")


class OneResponseSender(ResponseSender):
    """The response sender of a request to a model that is not decoupled: it takes the request's one response,
    which the request's answer carries (execute then returns None, or None in the request's place in its list).
    The final flag goes with the response or after it. As in Triton, the response may come after execute returns,
    from a thread or a task of the model's: the call's answer waits for it."""

    def __init__(self, request):
        super().__init__(request)
        self._response = None
        # Whether the request's answer has gone (its response taken, or the one execute returned for it).
        self._answered = False

    def send(self, response=None, flags=0):
        self._check(response, flags)
        with _one_sent:
            if response is not None and (self._response is not None or self._answered):
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model cannot send more than one response."
                )
            if response is None and self._response is None and not self._answered:
                raise TritonModelException(
                    "Unable to send response. Non-decoupled model cannot send complete final before sending a "
                    "response."
                )
            if response is not None:
                self._response = response
            if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True
            _one_sent.notify_all()


# Triton's name for the response sender's type (both kinds are instances of it).
InferenceResponseSender = ResponseSender

# The requests of the running execute call whose model took a OneResponseSender (read by the stub).
_one_senders = []
# Signalled when a OneResponseSender takes a response: the stub waits on it for responses sent from threads.
_one_sent = threading.Condition()


# The requests of the execute call going on that asked to be rescheduled (set_release_flags), read and cleared by
# the stub once execute returns.
_rescheduled = set()


class InferenceRequest:
    """A request: one the server hands to `execute`, or one a model builds to call another model (BLS)."""

    def __init__(
        self,
        model_name="",
        inputs=None,
        requested_output_names=None,
        model_version=-1,
        correlation_id=0,
        request_id="",
        flags=0,
        timeout=0,
        parameters=None,
        preferred_memory=None,
        trace=None,
    ):
        # Text may come as bytes, as Triton takes it (a model that reads a name from a BYTES input passes bytes).
        self._model_name = _text(model_name)
        self._inputs = list(inputs or [])
        self._outputs = [_text(n) for n in requested_output_names or []]
        self._model_version = model_version
        self._correlation_id = correlation_id
        self._request_id = _text(request_id)
        self._flags = flags
        self._timeout = timeout
        if isinstance(parameters, str):
            parameters = json.loads(parameters) if parameters else {}
        self._parameters = dict(parameters or {})
        self._sender = None
        self._decoupled = False
        self._key = None

    @classmethod
    def _incoming(cls, inputs, outputs, request_id, correlation_id, flags, parameters, decoupled, key):
        """A request the server hands to `execute` (built by the stub; the fields of `__init__`, with the
        stub's own parameters dict, which nothing writes to)."""
        r = cls.__new__(cls)
        r._model_name = ""
        r._inputs = inputs
        r._outputs = list(outputs)
        r._model_version = -1
        r._correlation_id = correlation_id
        r._request_id = request_id
        r._flags = flags
        r._timeout = 0
        r._parameters = parameters
        r._sender = None
        r._decoupled = decoupled
        r._key = key
        return r

    def inputs(self):
        return self._inputs

    def requested_output_names(self):
        return self._outputs

    def get_input_tensor_by_name(self, name):
        for t in self._inputs:
            if t._name == name:
                return t
        return None

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def flags(self):
        return self._flags

    def set_flags(self, flags):
        """Sets the request's sequence flags (TRITONSERVER_REQUEST_FLAG_SEQUENCE_START / _END), for a BLS call."""
        self._flags = flags

    def trace(self):
        """The request's trace, to pass on to the BLS requests it makes (`trace=`): dinfer traces those as
        requests of their own, so it carries no context (`get_context()` is None)."""
        return InferenceTrace()

    def timeout(self):
        return self._timeout

    def parameters(self):
        return json.dumps(self._parameters)

    def is_cancelled(self):
        # Whether the client went away: the server sends a 'cancel' message for the request's key, read here
        # when no other thread is reading the socket.
        if self._key is None or _server is None:
            return False
        _server.poll()
        return self._key in _server.cancelled

    def set_release_flags(self, flags):
        """How the request is released when execute returns: TRITONSERVER_REQUEST_RELEASE_ALL (the default) ends
        it; TRITONSERVER_REQUEST_RELEASE_RESCHEDULE gives it back to the server, which runs it again in a later
        execute call (a model with `sequence_batching { iterative_sequence: true }`; any other model fails the
        request). A model that is not decoupled puts None in the rescheduled request's place of the list execute
        returns; a decoupled one sets the flag before execute returns."""
        if flags not in (TRITONSERVER_REQUEST_RELEASE_ALL, TRITONSERVER_REQUEST_RELEASE_RESCHEDULE):
            raise TritonModelException(f"Cannot set release flags {flags}: expected TRITONSERVER_REQUEST_RELEASE_ALL or "
                                       "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE")
        if self._key is None:
            raise TritonModelException("Cannot set release flags: the request was not given to execute")
        if flags == TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            _rescheduled.add(self)
        else:
            _rescheduled.discard(self)

    def get_response_sender(self):
        if self._sender is None:
            if self._key is None:
                raise TritonModelException("Cannot get a response sender: the request was not given to execute")
            if self._decoupled:
                self._sender = ResponseSender(self)
            else:
                self._sender = OneResponseSender(self)
                _one_senders.append(self)
        return self._sender

    def exec(self, decoupled=False):
        """Runs this request on `model_name` in the server and returns its InferenceResponse; with
        `decoupled=True`, an iterator over the responses of a decoupled model (a final flag sent alone arrives
        as an empty response)."""
        if _server is None:
            raise TritonModelException("Cannot exec: BLS calls need the server")
        if decoupled:
            return _ResponseIterator(_server.bls(self, decoupled=True))
        return _server.result(_server.bls(self))

    def async_exec(self, decoupled=False):
        """Like exec, as an awaitable, so that several calls run at the same time."""
        if _server is None:
            raise TritonModelException("Cannot exec: BLS calls need the server")
        if decoupled:
            responses = _ResponseIterator(_server.bls(self, decoupled=True))

            async def started():
                return responses

            return started()
        future = _server.bls(self)

        async def answered():
            # A worker thread waits, reading the server's messages meanwhile; the event loop stays free.
            return await asyncio.get_running_loop().run_in_executor(None, _server.result, future)

        return answered()


class _ResponseIterator:
    """The responses of a decoupled BLS call, as they arrive; iterate with `for` or `async for`."""

    def __init__(self, responses):
        self._responses = responses
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        response = _server.next_response(self._responses)
        if response is None:
            self._done = True
            raise StopIteration
        return response

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._done:
            raise StopAsyncIteration
        response = await asyncio.get_running_loop().run_in_executor(None, _server.next_response, self._responses)
        if response is None:
            self._done = True
            raise StopAsyncIteration
        return response


def get_input_tensor_by_name(request, name):
    """The input tensor `name` of a request, or None."""
    return request.get_input_tensor_by_name(name)


def get_output_tensor_by_name(response, name):
    """The output tensor `name` of a response (a BLS answer), or None."""
    for t in response.output_tensors():
        if t.name() == name:
            return t
    return None


def _config_entry(model_config, key, name):
    if isinstance(model_config, str):
        model_config = json.loads(model_config)
    for entry in model_config.get(key, []):
        if entry.get("name") == name:
            return entry
    return None


def get_model_dir():
    """The model's version folder (where its model.py is)."""
    return _model_dir


def _answered(answer, what):
    """A server's answer to a call, or TritonModelException(what: its error)."""
    error = answer.get("error")
    if error:
        raise TritonModelException(f"{what}: {error.get('message', 'unknown error')}")
    return answer


def _model_call(what, msg, parts=(), size=0):
    """Sends a model management call to the server; raises TritonModelException with `what` on an error."""
    if _server is None:
        raise TritonModelException(f"{what}: managing models needs the server")
    return _answered(_server.model_call(msg, parts, size), what)


def is_model_ready(model_name, model_version=""):
    """Whether the model (the version, when given as text; else the one its version policy serves) is ready."""
    answer = _model_call(
        "Failed to check model readiness",
        {"action": "ready", "model": str(model_name), "version": str(model_version)},
    )
    return bool(answer.get("ready"))


def load_model(model_name, config="", files=None):
    """Loads (or reloads) a model, as the repository API's load does (explicit model control only): `config` a
    JSON config that replaces its config.pbtxt, `files` its files by `file:<version>/<name>` (bytes). Returns once
    the model has loaded."""
    descs, parts, size = [], [], 0
    for key, data in (files or {}).items():
        if not isinstance(key, str) or not key.startswith("file:"):
            raise TritonModelException(f"Failed to load model: file key '{key}' must start with 'file:'")
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TritonModelException(f"Failed to load model: the contents of '{key}' must be bytes")
        data = bytes(data)
        descs.append({"name": key[5:], "nbytes": len(data)})
        parts.append(data)
        size += len(data)
    if size > _LOAD_FILES_MAX:
        raise TritonModelException("Failed to load model: the files hold more than 2 GiB; put them in the repository")
    msg = {"action": "load", "model": str(model_name), "config": str(config or ""), "files": descs}
    _model_call("Failed to load model", msg, parts, size)


def unload_model(model_name, unload_dependents=False):
    """Asks for a model to be unloaded, as the repository API's unload does (explicit model control only);
    returns once the unload has started (it may still be going on)."""
    msg = {"action": "unload", "model": str(model_name), "unload_dependents": bool(unload_dependents)}
    _model_call("Failed to unload model", msg)


# Handles of metric families and metrics the model let go of, sent with its next metric message.
_dropped_metrics = []


def _metric_send(msg, what=None):
    """Sends a metric message; with `what`, waits for its answer and raises TritonModelException(what: ...) on an
    error. Handles let go of since the last message go first."""
    if _server is None:
        raise TritonModelException(f"{what or 'Cannot use metrics'}: metrics need the server")
    if _dropped_metrics:
        # Another thread may take the same handles meanwhile: each is popped once (list.pop is atomic).
        handles = []
        while True:
            try:
                handles.append(_dropped_metrics.pop())
            except IndexError:
                break
        if handles:
            _server.send({"op": "metric", "action": "drop", "handles": handles})
    if what is None:
        _server.send({**msg, "op": "metric"})
        return None
    return _answered(_server.model_call(msg, op="metric"), what)


def _metric_value(value, what):
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TritonModelException(f"{what}: the value must be a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise TritonModelException(f"{what}: the value must be a finite number")
    return value


# Triton's name for the type of a decoupled BLS call's responses.
ResponseIterator = _ResponseIterator


class MetricFamily:
    """A custom metric family (a name, its description and kind), shown on the server's metrics endpoint; its
    metrics (`Metric(labels)`) are its label sets. Families and metrics of the same name and labels are shared,
    also with the model's other instances."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    _KINDS = {0: "counter", 1: "gauge", 2: "histogram"}

    def __init__(self, name, description, kind):
        what = "Error when creating MetricFamily"
        if kind not in self._KINDS:
            raise TritonModelException(f"{what}: unknown kind {kind!r}")
        self._handle = None
        self._kind = kind
        msg = {"action": "family", "name": str(name), "description": str(description), "kind": self._KINDS[kind]}
        self._handle = _metric_send(msg, what)["handle"]

    def Metric(self, labels=None, buckets=None):  # noqa: N802 (Triton's name)
        """The metric of these labels (a dict of strings); a histogram's takes its bucket bounds."""
        return _Metric(self, labels, buckets)

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _dropped_metrics.append(self._handle)


class _Metric:
    """One label set of a MetricFamily: `increment` (counters, gauges), `set` (gauges), `observe` (histograms)
    and `value` (counters, gauges)."""

    def __init__(self, family, labels, buckets):
        what = "Error when creating Metric"
        self._handle = None
        self._family = family  # the family lives as long as its metrics
        self._kind = family._kind
        labels = dict(labels or {})
        for k, v in labels.items():
            if not isinstance(v, str):
                raise TritonModelException(f"{what}: the value of label '{k}' is not a string")
        if buckets is not None:
            if self._kind != MetricFamily.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            buckets = [_metric_value(b, what) for b in buckets]
        msg = {"action": "metric", "family": family._handle, "labels": labels, "buckets": buckets}
        self._handle = _metric_send(msg, what)["handle"]

    def _kind_error(self, what, op):
        name = MetricFamily._KINDS[self._kind].upper()
        return TritonModelException(f"{what}: TRITONSERVER_METRIC_KIND_{name} does not support {op}")

    def increment(self, value):
        what = "Failed to increment metric value"
        if self._kind == MetricFamily.HISTOGRAM:
            raise self._kind_error(what, "Increment")
        value = _metric_value(value, what)
        if self._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException(
                f"{what}: TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."
            )
        _metric_send({"action": "increment", "metric": self._handle, "value": value})

    def set(self, value):
        what = "Failed to set metric value"
        if self._kind != MetricFamily.GAUGE:
            raise self._kind_error(what, "Set")
        _metric_send({"action": "set", "metric": self._handle, "value": _metric_value(value, what)})

    def observe(self, value):
        what = "Failed to observe metric value"
        if self._kind != MetricFamily.HISTOGRAM:
            raise self._kind_error(what, "Observe")
        _metric_send({"action": "observe", "metric": self._handle, "value": _metric_value(value, what)})

    def value(self):
        what = "Failed to get metric value"
        if self._kind == MetricFamily.HISTOGRAM:
            raise self._kind_error(what, "Value")
        return float(_metric_send({"action": "value", "metric": self._handle}, what)["value"])

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _dropped_metrics.append(self._handle)


class PreferredMemory:
    """Where a BLS call would like its outputs (TRITONSERVER_MEMORY_CPU or _GPU, and the device): dinfer answers
    BLS calls in CPU memory whatever it says."""

    def __init__(self, preferred_memory_type, preferred_device_id=0):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


def using_decoupled_model_transaction_policy(model_config):
    """Whether the model config (a dict or JSON string) makes the model decoupled."""
    if isinstance(model_config, str):
        model_config = json.loads(model_config)
    return bool((model_config.get("model_transaction_policy") or {}).get("decoupled", False))


def get_input_config_by_name(model_config, name):
    """The config of input `name` (a dict) from the model config, or None."""
    return _config_entry(model_config, "input", name)


def get_output_config_by_name(model_config, name):
    """The config of output `name` (a dict) from the model config, or None."""
    return _config_entry(model_config, "output", name)


class ModelConfig:
    """The config handed to `auto_complete_config`; the model fills in what is missing."""

    def __init__(self, config):
        self._config = config
        self._config.setdefault("input", [])
        self._config.setdefault("output", [])

    def as_dict(self):
        return self._config

    def max_batch_size(self):
        return int(self._config.get("max_batch_size", 0))

    def set_max_batch_size(self, max_batch_size):
        self._config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self):
        if not self._config.get("dynamic_batching"):
            self._config["dynamic_batching"] = {}

    def set_model_transaction_policy(self, transaction_policy_dict):
        self._config["model_transaction_policy"] = dict(transaction_policy_dict)

    def _add(self, key, entry):
        if not isinstance(entry, dict) or "name" not in entry:
            raise TritonModelException(f"Cannot add an {key} without a name: {entry!r}")
        for existing in self._config[key]:
            if existing.get("name") == entry["name"]:
                for field in ("data_type", "dims"):
                    if field in entry and not existing.get(field):
                        existing[field] = entry[field]
                    elif field in entry and existing.get(field) != entry[field]:
                        raise TritonModelException(
                            f"Cannot add {key} '{entry['name']}': the config gives {field} "
                            f"{existing.get(field)!r}, the model {entry[field]!r}"
                        )
                return
        added = dict(entry)
        if "dims" in added:
            added["dims"] = [int(d) for d in added["dims"]]
        self._config[key].append(added)

    def add_input(self, input):
        self._add("input", input)

    def add_output(self, output):
        self._add("output", output)


class LogLevel:
    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


class Logger:
    """Writes to the server's log (to standard error outside a running model, e.g. in auto_complete_config)."""

    # The levels, as `logger.log(message, logger.INFO)` names them.
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE
    model_name = ""
    verbose = False

    @staticmethod
    def log(message, level=LogLevel.INFO):
        if _server is not None:
            _server.log(level, message)
            return
        if level == LogLevel.VERBOSE and not Logger.verbose:
            return
        tag = {0: "I", 1: "W", 2: "E", 3: "V"}.get(level, "I")
        stamp = time.strftime("%m%d %H:%M:%S")
        sys.stderr.write(f"{tag}{stamp} python model '{Logger.model_name}': {message}\n")
        sys.stderr.flush()

    @staticmethod
    def log_info(message):
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message):
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message):
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message):
        Logger.log(message, LogLevel.VERBOSE)
