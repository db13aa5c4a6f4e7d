"""The stub process of dinfer's Python backend: runs one instance of a Triton-style `model.py`.

    stub.py serve <socket> <model.py> <shm file> <commands fifo>     one model instance, controlled by the server
    stub.py autocomplete <model.py> <in.json> <out.json>

Messages travel as frames, the server's through a pipe (a FIFO, see `open_commands`) and the stub's over a
Unix socket: a 4-byte little-endian length of the rest, a 4-byte length
of the JSON header, a 4-byte tag (the id of an execute call and of its result, else 0), the header, then the
payload. The header of an execute call carries no id, so that calls of the same form have the same header:
the stub parses each such header once (with a plan of the views and requests it builds from it, see
`_plan`), and encodes the header of a result of a given form once. Small tensors travel inline in the
payload (their description says `inline` and gives the offset in the payload); larger ones through the
shared-memory file: the server writes the inputs at the offsets it names, the stub builds numpy views over
them, and writes the outputs after them (growing the file when needed). Each call's answer goes out as soon
as the call ends, before the next call runs: a model that ends the process, or a signal that kills it, takes
no earlier call's answer with it.

One thread at a time reads the pipe: whichever thread waits for something (the main thread for the next
command, a model's thread for a BLS answer) takes the reading role while no other thread holds it, so that
a request reaches the model with no hand-over between threads. Before a read sleeps, the reader looks for
the server's next bytes for as long as the last execute call's `spin_us` says (see `_spin`), when the wait
before was about that short and a core is free (`_core_free`).
"""

import asyncio
import collections
import concurrent.futures
import importlib.util
import inspect
import json
import math
import mmap
import os
import queue
import select
import socket
import struct
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb_utils  # noqa: E402

ALIGN = 64
# Tensors of a message travel inline up to this many bytes in all; larger ones through shared memory.
INLINE_MAX = 64 * 1024
HEAD = struct.Struct("<III")
# Parsed execute headers by their bytes, and encoded result headers by the form of their outputs.
CACHE_MAX = 64
# The most cancel markers the stub keeps (see `_dispatch`).
CANCELLED_MAX = 1024
# The size asked for the pipe of the server's frames: room for a few calls with inline tensors.
PIPE_BYTES = 1 << 20


def align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def load_module(model_path):
    model_dir = os.path.dirname(os.path.abspath(model_path))
    if model_dir not in sys.path:
        sys.path.insert(0, model_dir)
    spec = importlib.util.spec_from_file_location("model", model_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    if not hasattr(module, "TritonPythonModel"):
        raise pb_utils.TritonModelException(f"'{model_path}' defines no class TritonPythonModel")
    return module


class SharedFile:
    """A file under /dev/shm mapped into this process; grows on demand."""

    def __init__(self, path, create=False):
        self.path = path
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        self.fd = os.open(path, flags, 0o600)
        self.mm = None

    def ensure(self, size):
        size = max(size, ALIGN)
        current = os.fstat(self.fd).st_size
        if current < size:
            os.ftruncate(self.fd, size)
            current = size
        if self.mm is None or len(self.mm) < current:
            # An older map stays alive as long as numpy views of it do.
            self.mm = mmap.mmap(self.fd, current)
        return self.mm

    def close(self):
        os.close(self.fd)


def tensor_source(desc, payload, mm):
    """The buffer a tensor's bytes are in: the message's payload when inline, else the shared file."""
    return payload if desc.get("inline") else mm


def read_tensor(mm, desc, copy=False):
    dt = desc["datatype"]
    shape = tuple(desc["shape"])
    offset = desc["offset"]
    count = math.prod(shape)
    if dt == "BYTES":
        items = []
        pos = offset
        for _ in range(count):
            (n,) = struct.unpack_from("<I", mm, pos)
            items.append(bytes(mm[pos + 4 : pos + 4 + n]))
            pos += 4 + n
        arr = np.empty(count, dtype=np.object_)
        arr[:] = items
        return arr.reshape(shape)
    # BF16 elements are kept as uint16 (numpy has no bfloat16; the tensor crosses through DLPack).
    dtype = np.uint16 if dt == "BF16" else pb_utils.triton_string_to_numpy(dt)
    if count == 0:
        return np.empty(shape, dtype=dtype)
    arr = np.frombuffer(mm, dtype=dtype, count=count, offset=offset).reshape(shape)
    return arr.copy() if copy else arr


def serialize_bytes(arr):
    parts = []
    for v in arr.reshape(-1):
        b = pb_utils._to_bytes(v)
        parts.append(struct.pack("<I", len(b)))
        parts.append(b)
    return b"".join(parts)


def prepare_tensors(tensors):
    """Each tensor with its datatype, shape and contiguous bytes (BYTES serialized)."""
    prepared = []
    total = 0
    for t in tensors:
        arr = t._array
        dt = t.triton_dtype()
        if dt == "BYTES":
            data = serialize_bytes(arr)
            nbytes = len(data)
        else:
            data = np.ascontiguousarray(arr)
            nbytes = data.nbytes
        prepared.append((t.name(), dt, list(arr.shape), nbytes, data))
        total += align(nbytes)
    return prepared, total


def inline_parts(prepared, parts, size):
    """Appends tensors' bytes to a message's payload parts (`size` bytes so far, 8-aligned); returns the new
    size. `inline_tensors` describes them."""
    for _, dt, _, nbytes, data in prepared:
        if nbytes:
            parts.append(data if dt == "BYTES" else data.reshape(-1).view(np.uint8).data)
            pad = -nbytes % 8
            if pad:
                parts.append(b"\0" * pad)
            size += nbytes + pad
    return size


def inline_tensors(prepared, parts, size):
    """Appends tensors to a message's payload parts (`size` bytes so far, 8-aligned); returns their
    descriptions and the new size."""
    descs = []
    for name, dt, shape, nbytes, data in prepared:
        descs.append({"name": name, "datatype": dt, "shape": shape, "offset": size, "nbytes": nbytes, "inline": True})
        if nbytes:
            parts.append(data if dt == "BYTES" else data.reshape(-1).view(np.uint8).data)
            pad = -nbytes % 8
            if pad:
                parts.append(b"\0" * pad)
            size += nbytes + pad
    return descs, size


def write_tensors(shared, start, prepared):
    """Writes prepared tensors (see `prepare_tensors`) into the shared file from `start` on; returns their
    descriptions."""
    offset = align(start)
    placed = []
    for name, dt, shape, nbytes, data in prepared:
        placed.append((name, dt, shape, offset, nbytes, data))
        offset = align(offset + nbytes)
    mm = shared.ensure(offset)
    descs = []
    for name, dt, shape, off, nbytes, data in placed:
        if nbytes:
            if dt == "BYTES":
                mm[off : off + nbytes] = data
            else:
                np.frombuffer(mm, dtype=np.uint8, count=nbytes, offset=off)[:] = data.reshape(-1).view(np.uint8)
        descs.append({"name": name, "datatype": dt, "shape": shape, "offset": off, "nbytes": nbytes})
    return descs


class Connection:
    """The control channel (the server's pipe, this process's socket): framed messages, a write lock, BLS futures; the reading role goes to whichever
    thread waits (see the module doc)."""

    def __init__(self, sock, commands_fd, shm_dir):
        self.sock = sock
        # The server's frames come through a pipe (see `open_commands`), this process's go out on the socket.
        self.commands_fd = commands_fd
        self.shm_dir = shm_dir
        self.write_lock = threading.Lock()
        # `with self.lock` is `with self.cond` without the Python-level call in between.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.reading = False
        self.waiting = 0  # threads waiting on `cond`
        self.closed = False
        self.buf = bytearray()
        self.readable = select.poll()
        self.readable.register(commands_fd, select.POLLIN)
        # How long a wait for the server may spin first (the server's `spin_us`, see `_spin`), whether the next
        # one does, and when the current one began.
        self.spin_s = 0.0
        self.spin = True
        self.wait_started = 0.0
        self.wait_avg = 0.0
        self.headers = {}
        self.commands = collections.deque()
        self.pending = {}
        self.pending_lock = threading.Lock()
        self.next_id = 0
        # (execute id, index) of the requests whose client went away; request.is_cancelled() reads it.
        self.cancelled = set()

    def send(self, msg, parts=(), size=0, tag=0):
        """Sends one frame: the header `msg` (a dict, or its encoded bytes) and the payload `parts` (`size`
        bytes in all)."""
        self.send_frames(((msg, parts, size, tag),))

    def send_frames(self, frames):
        """Sends frames, each (header, payload parts, payload size, tag) as `send` takes them, in one write."""
        chunks = []
        for msg, parts, size, tag in frames:
            head = msg if isinstance(msg, bytes) else _encode(msg).encode("utf-8")
            chunks.append(HEAD.pack(8 + len(head) + size, len(head), tag))
            chunks.append(head)
            chunks.extend(parts)
        data = b"".join(chunks)
        with self.write_lock:
            self.sock.sendall(data)

    def _take_frame(self):
        """Takes one whole frame out of the read buffer: its header, payload and tag, or None when the buffer
        holds no whole frame."""
        buf = self.buf
        need = 4 + int.from_bytes(buf[:4], "little") if len(buf) >= 4 else 4
        if len(buf) < need or need < 12:
            return None
        n, h, tag = HEAD.unpack_from(buf)
        frame = buf[: 4 + n]
        del buf[: 4 + n]
        key = bytes(frame[12 : 12 + h])
        msg = self.headers.get(key)
        if msg is None:
            msg = json.loads(key)
            if msg.get("op") == "execute" and len(self.headers) < CACHE_MAX:
                self.headers[key] = msg  # read-only from here on: every call of this form shares it
        return msg, memoryview(frame)[12 + h :], tag

    def _spin(self):
        """Looks for the server's next bytes for up to `spin_s` before the read sleeps, while the recent waits
        were short enough for a spin to nearly cover (the next one is likely alike) and a core is free: a
        process that sleeps costs a wake-up on each side, tens of microseconds on a virtual machine."""
        clock = time.perf_counter
        self.wait_started = start = clock()
        if not self.spin or not _core_free():
            return
        deadline = start + self.spin_s
        poll = self.readable.poll
        while not poll(0) and clock() < deadline:
            pass

    def _recv_frame(self):
        """Reads one frame; returns its header and payload, or None when the server closed the pipe."""
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            buf = self.buf
            need = 4 + int.from_bytes(buf[:4], "little") if len(buf) >= 4 else 4
            spin_s = self.spin_s
            if spin_s > 0:
                self._spin()
            chunk = os.read(self.commands_fd, max(1 << 16, need - len(buf)))
            if spin_s > 0:
                # The next wait is likely like the last ones: spin before it only while they were short enough on
                # average for a spin to cover (a wait slept through also holds the wake-up, hence the margin).
                self.wait_avg += (time.perf_counter() - self.wait_started - self.wait_avg) * SPIN_WEIGHT
                self.spin = self.wait_avg < spin_s * SPIN_COVER
            if not chunk:
                return None
            buf += chunk

    def wait_for(self, ready):
        """Returns once `ready()` holds (checked under the lock) or the pipe closed; reads the pipe
        meanwhile when no other thread does."""
        while True:
            with self.lock:
                while not (ready() or self.closed):
                    if not self.reading:
                        self.reading = True
                        break
                    self.waiting += 1
                    try:
                        self.cond.wait()
                    finally:
                        self.waiting -= 1
                else:
                    return
            frame = None
            try:
                frame = self._recv_frame()
            except OSError:
                frame = None
            finally:
                with self.lock:
                    self.reading = False
                    if frame is None:
                        self._closed_now()
                    else:
                        try:
                            self._dispatch(*frame)
                        except Exception:  # noqa: BLE001
                            traceback.print_exc()
                    if self.waiting:
                        self.cond.notify_all()

    def next_command(self):
        """The next command from the server as (header, payload, tag), or None when the pipe closed."""
        with self.lock:
            if self.commands:
                return self.commands.popleft()
        self.wait_for(lambda: self.commands)
        with self.lock:
            return self.commands.popleft() if self.commands else None

    def result(self, future):
        """Waits for a BLS future (reading the pipe meanwhile) and returns its response."""
        self.wait_for(future.done)
        if not future.done():
            return pb_utils.InferenceResponse(error=pb_utils.TritonError("Cannot run BLS: the server closed the connection"))
        return future.result()

    def next_response(self, responses):
        """Waits for the next response of a decoupled BLS call (None after the last)."""
        self.wait_for(lambda: responses)
        if not responses:
            return None
        return responses.popleft()

    def model_call(self, msg, parts=(), size=0, op="model"):
        """Sends a call that the server answers with its id (`op` "model": managing the server's models, see
        pb_utils.load_model; "metric": see pb_utils.MetricFamily) and waits for the answer (reading the pipe
        meanwhile); returns the answer's dict."""
        future = concurrent.futures.Future()
        call_id = self._next_id()
        with self.pending_lock:
            self.pending[call_id] = (future, None)
        self.send({**msg, "op": op, "id": call_id}, parts, size)
        self.wait_for(future.done)
        if not future.done():
            return {"error": {"code": "UNAVAILABLE", "message": "the server closed the connection"}}
        return future.result()

    def _dispatch(self, msg, payload, tag):
        op = msg.get("op")
        if op == "model_result" or op == "metric_result":
            with self.pending_lock:
                future, _ = self.pending.pop(msg["id"], (None, None))
            if future is not None:
                future.set_result(msg)
        elif op == "bls_result":
            self._finish_bls(msg, payload)
        elif op == "bls_stream":
            self._stream_bls(msg, payload)
        elif op == "cancel":
            # Kept apart from the commands, so that a running execute() sees it (request.is_cancelled()).
            # A cancel that arrives after its call has ended stays in the set: it is kept bounded (a request's
            # cancellation is best effort; a marker dropped only means is_cancelled() reads False).
            if len(self.cancelled) >= CANCELLED_MAX:
                self.cancelled.pop()
            self.cancelled.add((msg["id"], msg["index"]))
        else:
            self.commands.append((msg, payload, tag))

    def _closed_now(self):
        """The server closed the pipe or died: exit soon, even when the model's code never returns."""
        self.closed = True
        timer = threading.Timer(2.0, os._exit, args=(1,))
        timer.daemon = True
        timer.start()

    def poll(self):
        """Reads, without waiting, what the server has sent when no other thread reads the pipe (so that a
        cancellation reaches a model that asks for it while its execute() runs)."""
        with self.lock:
            if self.reading or self.closed:
                return
            self.reading = True
        eof = False
        try:
            while self.readable.poll(0):
                chunk = os.read(self.commands_fd, 1 << 16)
                if not chunk:
                    eof = True
                    break
                self.buf += chunk
        except OSError:
            eof = True
        finally:
            with self.lock:
                try:
                    while True:
                        frame = self._take_frame()
                        if frame is None:
                            break
                        self._dispatch(*frame)
                finally:
                    self.reading = False
                    if eof:
                        self._closed_now()
                    if self.waiting:
                        self.cond.notify_all()

    def _next_id(self):
        """A number no other call or file of this process has (any thread may ask)."""
        with self.pending_lock:
            self.next_id += 1
            return self.next_id

    def _new_file(self, prefix):
        return os.path.join(self.shm_dir, f"{prefix}-{os.getpid()}-{self._next_id()}-{threading.get_ident()}")

    def bls(self, request, decoupled=False):
        """Sends a BLS request; returns a Future of its response, or for `decoupled` a deque of responses that
        ends with None (wait on either through `result` / `next_response`)."""
        cid = request.correlation_id()
        if type(cid) is int and not 0 <= cid < 2**64:
            raise pb_utils.TritonModelException(f"Cannot exec: correlation_id {cid} is not a uint64")
        future = collections.deque() if decoupled else concurrent.futures.Future()
        call_id = self._next_id()
        prepared, total = prepare_tensors(request.inputs())
        parts, size, shared = [], 0, None
        if total <= INLINE_MAX:
            descs, size = inline_tensors(prepared, parts, 0)
            path = None
        else:
            path = os.path.join(self.shm_dir, f"dinfer-bls-{os.getpid()}-{call_id}")
            shared = SharedFile(path, create=True)
            try:
                descs = write_tensors(shared, 0, prepared)
            except Exception:
                shared.close()
                os.unlink(path)
                raise
        with self.pending_lock:
            self.pending[call_id] = (future, shared)
        version = request.model_version()
        # Integers beyond 2^53 go as they are: the server reads them exactly.
        msg = {
            "op": "bls",
            "id": call_id,
            "model": request.model_name(),
            "version": "" if version in (None, -1, "") else str(version),
            "request_id": request.request_id(),
            "correlation_id": cid,
            "flags": request.flags(),
            "timeout": request.timeout(),
            "parameters": json.loads(request.parameters()),
            "outputs": list(request.requested_output_names()),
            "inputs": descs,
            "decoupled": decoupled,
        }
        if path is not None:
            msg["file"] = path
        self.send(msg, parts, size)
        return future

    @staticmethod
    def _release(shared):
        if shared is None:
            return
        shared.mm = None
        shared.close()
        try:
            os.unlink(shared.path)
        except OSError:
            pass

    def _stream_bls(self, msg, payload):
        with self.pending_lock:
            if msg.get("final"):
                responses, shared = self.pending.pop(msg["id"], (None, None))
            else:
                responses, shared = self.pending.get(msg["id"], (None, None))
        if responses is None:
            return
        if msg.get("final"):
            self._release(shared)
        try:
            if msg.get("error"):
                err = msg["error"]
                code = getattr(pb_utils.TritonError, err.get("code", "INTERNAL"), pb_utils.TritonError.INTERNAL)
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(err["message"], code)))
            elif msg.get("file"):
                path = msg["file"]
                base = os.path.basename(path)
                if os.path.dirname(path) != self.shm_dir or not base.startswith("dinfer-blsr-"):
                    raise ValueError(f"bad response file '{path}'")
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                finally:
                    os.unlink(path)
                tensors = [pb_utils.Tensor._of(d["name"], read_tensor(data, d, copy=True), d["datatype"]) for d in msg["outputs"]]
                responses.append(_bls_response(tensors, msg))
            elif msg.get("outputs") is not None:
                tensors = [pb_utils.Tensor._of(d["name"], read_tensor(payload, d), d["datatype"]) for d in msg["outputs"]]
                responses.append(_bls_response(tensors, msg))
            elif msg.get("final"):
                # A final flag alone: an empty response, as for any decoupled model.
                responses.append(pb_utils.InferenceResponse())
        except Exception as e:  # noqa: BLE001
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"Cannot read BLS outputs: {e}")))
        if msg.get("final"):
            responses.append(None)

    def _finish_bls(self, msg, payload):
        with self.pending_lock:
            future, shared = self.pending.pop(msg["id"], (None, None))
        if future is None:
            return
        try:
            if msg.get("error"):
                err = msg["error"]
                code = getattr(pb_utils.TritonError, err.get("code", "INTERNAL"), pb_utils.TritonError.INTERNAL)
                future.set_result(pb_utils.InferenceResponse(error=pb_utils.TritonError(err["message"], code)))
                return
            mm = shared.ensure(0) if shared is not None and not all(d.get("inline") for d in msg["outputs"]) else None
            tensors = [
                pb_utils.Tensor._of(d["name"], read_tensor(tensor_source(d, payload, mm), d, copy=mm is not None), d["datatype"])
                for d in msg["outputs"]
            ]
            future.set_result(_bls_response(tensors, msg))
        except Exception as e:  # noqa: BLE001
            future.set_result(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"Cannot read BLS outputs: {e}")))
        finally:
            self._release(shared)

    def send_response(self, request, response, flags):
        """Sends one response of a decoupled request; small tensors inline, larger ones in a file of their
        own."""
        if request._key is None:
            raise pb_utils.TritonModelException("Cannot send a response: the request did not come from the server")
        exec_id, index = request._key
        msg = {"op": "response", "id": exec_id, "index": index, "flags": int(flags)}
        if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.cancelled.discard(request._key)
        parts, size = [], 0
        if response is not None:
            if response.has_error():
                msg["error"] = error_of(response.error())
            elif response.output_tensors():
                prepared, total = prepare_tensors(response.output_tensors())
                if total <= INLINE_MAX:
                    msg["outputs"], size = inline_tensors(prepared, parts, 0)
                else:
                    path = self._new_file("dinfer-resp")
                    shared = SharedFile(path, create=True)
                    try:
                        msg["outputs"] = write_tensors(shared, 0, prepared)
                    except Exception:
                        shared.close()
                        os.unlink(path)
                        raise
                    shared.mm = None
                    shared.close()
                    msg["file"] = path
            else:
                msg["outputs"] = []
            if response._parameters and not response.has_error():
                msg["parameters"] = response._parameters
        self.send(msg, parts, size)

    def log(self, level, message):
        self.send({"op": "log", "level": int(level), "message": str(message)})


def error_of(err):
    if isinstance(err, pb_utils.TritonError):
        return {"message": err.message(), "code": err.code_name()}
    return {"message": str(err), "code": "INTERNAL"}


def open_commands(path):
    """Makes the pipe that the server's frames come through (a FIFO at `path`) and opens it for reading without
    waiting for the writer (the server opens it once this process has connected); returns its descriptor, made
    blocking, and the pipe's capacity as the server counts it: its size in pages and the page size.

    A pipe, not the socket: the reader of a Unix socket wakes the writer each time it takes data (the socket
    has room again), whether or not the writer waits to write, so each call the server sends would wake the
    server's event loop once more; reading a pipe wakes its writer only when the pipe was full. The server
    writes a frame at once, without a thread, when what the stub has not answered yet and the frame fit in the
    pipe's pages (see `Stub.#pipeRoom` in python.ts)."""
    os.mkfifo(path, 0o600)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        import fcntl

        try:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # over the user's limit: the default size serves
        size = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
    except (ImportError, AttributeError, OSError):
        # No way to ask (not Linux): one page holds at least PIPE_BUF bytes; the server writes through a thread
        # when a frame does not fit.
        return fd, 1, select.PIPE_BUF
    return fd, size // page, page


def serve(socket_path, model_path, shm_path, commands_path):
    commands_fd, pipe_pages, page_size = open_commands(commands_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path)
    conn = Connection(sock, commands_fd, os.path.dirname(shm_path))
    # Until the server has opened the pipe, a read would find no writer and return nothing: wait for its first
    # frame.
    conn.readable.poll()
    pb_utils._server = conn
    pb_utils._model_dir = os.path.dirname(os.path.abspath(model_path))
    shared = SharedFile(shm_path)
    model = None
    name = ""
    decoupled = False

    while True:
        command = conn.next_command()
        if command is None:
            return
        msg, payload, tag = command
        op = msg["op"]
        if op == "init":
            args = msg["args"]
            name = args["model_name"]
            pb_utils.Logger.model_name = name
            config = json.loads(args["model_config"])
            decoupled = bool((config.get("model_transaction_policy") or {}).get("decoupled"))
            try:
                module = load_module(model_path)
                model = module.TritonPythonModel()
                if hasattr(model, "initialize"):
                    result = model.initialize(args)
                    if inspect.isawaitable(result):
                        _coroutines.run(result)
                conn.send({"op": "ready", "pipe_pages": pipe_pages, "page_size": page_size})
            except BaseException as e:  # noqa: BLE001
                traceback.print_exc()
                conn.send({"op": "init_error", "message": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
                return
        elif op == "execute":
            conn.spin_s = msg.get("spin_us", 0) / 1e6
            try:
                head, parts, size = execute(model, shared, msg, payload, tag, decoupled)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, (SystemExit, KeyboardInterrupt)):
                    raise
                conn.send({"op": "error", "message": _error_text(e), "trace": traceback.format_exc()}, tag=tag)
            else:
                conn.send(head, parts, size, tag)
        elif op == "finalize":
            try:
                if model is not None and hasattr(model, "finalize"):
                    result = model.finalize()
                    if inspect.isawaitable(result):
                        _coroutines.run(result)
            finally:
                conn.send({"op": "finalized"})
            return


try:
    _LOADAVG = os.open("/proc/loadavg", os.O_RDONLY)
    _CORES = len(os.sched_getaffinity(0))
except (OSError, AttributeError):
    _LOADAVG = None
    _CORES = 1


# Ready tasks beyond the cores that still let a stub spin. Taken as a wait begins, the count holds the stub
# and the server thread that its answer woke; at one connection on 2 cores about a quarter of the waits found
# one task more (a client's or a runtime's thread, running for a moment), and refusing to spin then left the
# server with 0.77x the HTTP JSON requests per second at 1.22x the CPU per request (bench/ab.ts, 2026-11-27).
_CORE_SLACK = 1


def _bls_response(tensors, msg):
    """The response of a BLS call: its outputs, and the parameters of the called model's response as the server
    sent them."""
    response = pb_utils.InferenceResponse(output_tensors=tensors)
    response._parameters = dict(msg.get("parameters") or {})
    return response


def _core_free():
    """Whether the tasks ready to run on the machine now, this one included, leave a core for a spin: at
    most _CORE_SLACK of them beyond the cores, so that a spin does not take a core that other threads (the
    server's, busy stubs') are waiting for. The count is the machine's (`/proc/loadavg`); where it cannot be
    read, no spin."""
    if _LOADAVG is None:
        return False
    try:
        running = int(os.pread(_LOADAVG, 64, 0).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return False
    return running <= _CORES + _CORE_SLACK


# Waits averaging up to this many times the spin count as ones a spin would nearly cover (a wait the stub slept
# through also holds the wake-up, which spinning saves); beyond it a spin would mostly end in a sleep, its time
# lost. The average weighs the last wait this much.
SPIN_COVER = 1.5
SPIN_WEIGHT = 0.25
# NaN and the infinities are refused (ValueError), as JSON has no such numbers: a model's response parameters holding
# one fail that request rather than send the server a header it cannot read.
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
# Encoded result headers by the form of the outputs (names, datatypes, shapes, sizes), see the module doc.
_result_heads = {}


def _plan(msg):
    """What building the requests of an execute header takes, worked out once per header (a cached header
    keeps it): per request its fields and, per input, its name, datatype and, for an inline tensor of a
    fixed-size datatype, the numpy dtype, element count, offset and shape of its view (else its description).
    """
    plan = []
    for r in msg["requests"]:
        inputs = []
        for d in r["inputs"]:
            dtype = pb_utils._NUMPY.get(d["datatype"])
            if d.get("inline") and dtype is not None and dtype is not np.object_ and d["nbytes"]:
                dtype = np.dtype(dtype)
                view = (dtype, d["nbytes"] // dtype.itemsize, d["offset"], tuple(d["shape"]))
                inputs.append((d["name"], d["datatype"], view, None))
            else:
                inputs.append((d["name"], d["datatype"], None, d))
        plan.append((inputs, r["outputs"], r["id"], r["correlation_id"], r["flags"], r["parameters"]))
    return plan


_PADS = [b"\0" * n for n in range(8)]


def _plain_parts(result):
    """For responses that carry outputs alone (no error, no parameters), each a C-contiguous array of a
    fixed-size datatype: their form (the key of their cached header: names, datatypes, shapes and sizes),
    payload parts and payload size; else None."""
    form = []
    parts = []
    size = 0
    for response in result:
        if type(response) is not pb_utils.InferenceResponse or response._error is not None or response._parameters:
            return None
        for t in response._outputs:
            if type(t) is not pb_utils.Tensor:
                return None
            arr = t._array
            dt = t._datatype
            if dt == "BYTES" or not arr.flags.c_contiguous:
                return None
            n = arr.nbytes
            form.append((t._name, dt, arr.shape, n))
            if n:
                parts.append(arr)
                pad = -n % 8
                if pad:
                    parts.append(_PADS[pad])
                size += n + pad
        form.append(None)
    return tuple(form), parts, size


# Stands in execute's list for a request that asked to be rescheduled (see _take_rescheduled).
_RESCHEDULED = object()


def _take_rescheduled(requests, result, decoupled):
    """The indexes of this call's requests that asked to be rescheduled (set_release_flags) before execute
    returned, and execute's result with, for a model that is not decoupled, each one's None turned into
    _RESCHEDULED (anything else there fails the call, in Triton's words). A flag set later, from a decoupled
    model's own task, comes too late and is ignored: the request has been released."""
    asked = pb_utils._rescheduled
    found = [i for i, r in enumerate(requests) if r in asked]
    if decoupled or not found:
        return found, result
    if isinstance(result, (list, tuple)) and len(result) == len(requests):
        result = list(result)
        for i in found:
            if result[i] is not None:
                raise pb_utils.TritonModelException(
                    "Expected a None object in the execute function return list for reschduled request, "
                    f"found type '{type(result[i])}'."
                )
            result[i] = _RESCHEDULED
    return found, result


def _with_sent_responses(requests, result):
    """The responses of a call to a model that is not decoupled and took response senders: each response sent
    through a request's sender takes its place in the list execute returned (None there, or execute returned
    None). As Triton, it waits for those still to come (a model may send them from threads or tasks of its own
    after execute returns); a request whose sender was never taken gets none, which fails the call. A result
    that is not one entry per request is left for the caller to refuse."""
    if result is not None and (not isinstance(result, (list, tuple)) or len(result) != len(requests)):
        return result
    out = [None] * len(requests) if result is None else list(result)
    awaited = [
        r._sender for i, r in enumerate(requests) if out[i] is None and isinstance(r._sender, pb_utils.OneResponseSender)
    ]
    with pb_utils._one_sent:
        pb_utils._one_sent.wait_for(lambda: all(s._response is not None for s in awaited))
    for i, request in enumerate(requests):
        if out[i] is _RESCHEDULED:
            continue
        sender = request._sender
        sent = sender._response if isinstance(sender, pb_utils.OneResponseSender) else None
        if sent is not None:
            out[i] = sent
        elif out[i] is None:
            raise pb_utils.TritonModelException(
                f"request {i} has no response: execute returned None for it and took no response sender"
            )
    return out


def _error_text(e):
    """An exception as its answer says it: its type and message."""
    message = e.message() if isinstance(e, pb_utils.TritonModelException) else str(e)
    return f"{type(e).__name__}: {message}"


def _exit_now(e):
    """Ends the process at once with a SystemExit's code, its output flushed (threads are not waited for)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(e.code if isinstance(e.code, int) else (0 if e.code is None else 1))


class _Exit:
    """A SystemExit or KeyboardInterrupt raised in a coroutine, carried back to the stub's thread to be raised
    there (raised on the loop's thread, it would stop the loop and leave the waiting thread waiting)."""

    def __init__(self, exc):
        self.exc = exc


async def _awaited(awaitable):
    try:
        return await awaitable
    except (SystemExit, KeyboardInterrupt) as e:
        return _Exit(e)


class EventLoop:
    """The event loop of the model's coroutines (an async `initialize`, `execute`, `finalize`), on a thread of its
    own started with the first, as Triton's stub runs them: `run` waits for one; `start` lets a decoupled model's
    execute go on in the background, so that the stub takes the next call while it sends its responses. Tasks a
    coroutine starts keep running between calls."""

    def __init__(self):
        self.loop = None

    def _loop(self):
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            threading.Thread(target=self._run, name="dinfer-asyncio", daemon=True).start()
        return self.loop

    def _run(self):
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        except SystemExit as e:
            # sys.exit() in a task stops the loop with it: the stub ends as it would on its own thread (a thread
            # left waiting for the loop would wait for good).
            _exit_now(e)
        except BaseException:  # noqa: BLE001
            traceback.print_exc()
            os._exit(1)

    def run(self, awaitable):
        """Runs a coroutine to its end and returns its result (raises what it raised)."""
        result = asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop()).result()
        if isinstance(result, _Exit):
            raise result.exc
        return result

    def start(self, awaitable, requests):
        """Runs a decoupled execute's coroutine in the background. One that fails (or is cancelled) ends each of
        its requests that has had no final response with an error response, so that no client waits for good
        (Triton only logs it)."""

        async def run():
            try:
                await awaitable
            except BaseException as e:  # noqa: BLE001 (a cancelled or exiting coroutine too)
                exiting = isinstance(e, (SystemExit, KeyboardInterrupt))
                traceback.print_exc()
                error = pb_utils.TritonError(_error_text(e))
                for request in requests:
                    try:
                        sender = request.get_response_sender()
                        if not sender._closed:
                            final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                            sender.send(pb_utils.InferenceResponse(error=error), flags=final)
                    except Exception:  # noqa: BLE001 (closed meanwhile, or the server gone: the others still)
                        traceback.print_exc()
                if exiting:
                    raise  # out of the loop: the stub ends (see _run)

        asyncio.run_coroutine_threadsafe(run(), self._loop())


_coroutines = EventLoop()


def execute(model, shared, msg, payload, tag, decoupled):
    """Runs one execute call; returns the answer's header (encoded), payload parts and payload size."""
    mm = None
    requests = []
    plan = msg.get(" plan")
    if plan is None:
        plan = msg[" plan"] = _plan(msg)
    make_tensor = pb_utils.Tensor._of
    for index, (inputs_plan, outputs, request_id, correlation_id, flags, parameters) in enumerate(plan):
        inputs = []
        for name, dt, view, d in inputs_plan:
            if view is not None:
                # The payload belongs to this message alone: views stay valid after execute returns.
                dtype, count, offset, shape = view
                arr = np.frombuffer(payload, dtype, count, offset).reshape(shape)
            elif d.get("inline"):
                arr = read_tensor(payload, d)
            else:
                if mm is None:
                    mm = shared.ensure(msg["shm_size"])
                # A decoupled model may read its inputs after execute returns, when the server reuses the
                # shared file for the next call: its inputs are copies.
                arr = read_tensor(mm, d, copy=decoupled)
            inputs.append(make_tensor(name, arr, dt))
        requests.append(
            pb_utils.InferenceRequest._incoming(
                inputs, outputs, request_id, correlation_id, flags, parameters, decoupled, (tag, index)
            )
        )
    try:
        result = model.execute(requests)
        # A list is the common answer; the check for a coroutine (an ABC instance check) is slower.
        if type(result) is not list and inspect.isawaitable(result):
            if decoupled:
                # As Triton: a decoupled model's coroutine goes on in the background, its responses sent as it
                # makes them, while the stub takes the next call.
                _coroutines.start(result, requests)
                result = None
            else:
                result = _coroutines.run(result)
        rescheduled = None
        if pb_utils._rescheduled:
            rescheduled, result = _take_rescheduled(requests, result, decoupled)
        if not decoupled and pb_utils._one_senders:
            result = _with_sent_responses(requests, result)
    finally:
        if pb_utils._rescheduled:
            pb_utils._rescheduled.clear()
        if not decoupled:
            cancelled = pb_utils._server.cancelled
            if cancelled:
                for request in requests:
                    cancelled.discard(request._key)
            one_senders = pb_utils._one_senders
            if one_senders:
                # The call is answered (or fails): a response sent from now on has no answer to go with.
                with pb_utils._one_sent:
                    for request in one_senders:
                        request._sender._answered = True
                one_senders.clear()
    if decoupled:
        if result is not None:
            raise pb_utils.TritonModelException(
                "the model is decoupled: execute() must return None and send responses through "
                "request.get_response_sender()"
            )
        answers = [{} for _ in requests]
        for i in rescheduled or ():
            answers[i] = {"rescheduled": True}
        return _encode({"op": "result", "responses": answers}).encode(), [], 0
    if result is None or len(result) != len(requests):
        got = "None" if result is None else str(len(result))
        raise pb_utils.TritonModelException(f"execute returned {got} responses for {len(requests)} requests")
    plain = _plain_parts(result)
    if plain is not None:
        form, parts, size = plain
        if size <= INLINE_MAX or not msg.get("shm"):
            head = _result_heads.get(form)
            if head is not None:
                return head, parts, size
        else:
            plain = None
    prepared = []
    total = 0
    for response in result:
        if response is _RESCHEDULED:
            prepared.append(response)
            continue
        if response is None or not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(f"execute returned {type(response).__name__}, not an InferenceResponse")
        if response.has_error():
            prepared.append(None)
            continue
        tensors, nbytes = prepare_tensors(response.output_tensors())
        prepared.append(tensors)
        total += nbytes
    parts = []
    size = 0
    # Large outputs go to the shared file when this call holds it, else inline too.
    inline = total <= INLINE_MAX or not msg.get("shm")
    answers = []
    offset = msg.get("out_offset", 0)
    for response, tensors in zip(result, prepared):
        if tensors is _RESCHEDULED:
            answers.append({"rescheduled": True})
            continue
        if tensors is None:
            answers.append({"error": error_of(response.error())})
            continue
        if inline:
            descs, size = inline_tensors(tensors, parts, size)
        else:
            descs = write_tensors(shared, offset, tensors)
            if descs:
                offset = descs[-1]["offset"] + descs[-1]["nbytes"]
        answer = {"outputs": descs}
        if response._parameters:
            answer["parameters"] = response._parameters
        answers.append(answer)
    head = _encode({"op": "result", "responses": answers}).encode()
    # Responses of a plain form that went inline have the header of that form (the id is the frame's tag).
    if plain is not None and inline and len(_result_heads) < CACHE_MAX:
        _result_heads[plain[0]] = head
    return head, parts, size


def autocomplete(model_path, in_path, out_path):
    with open(in_path) as f:
        config = pb_utils.ModelConfig(json.load(f))
    module = load_module(model_path)
    cls = module.TritonPythonModel
    if hasattr(cls, "auto_complete_config"):
        result = cls.auto_complete_config(config)
        if result is not None:
            config = result
    with open(out_path, "w") as f:
        json.dump(config.as_dict(), f)


def _exit_with_parent():
    """Ends the stub when the server that started it is gone (its parent changes), even while the model's code
    runs and nothing reads the socket."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def main():
    _exit_with_parent()
    args = sys.argv
    # The model sees the command line of Triton's stub, whose interpreter is embedded: [""] (a model that runs
    # `unittest.main()`, as Triton's own test models do, would take the stub's arguments for test names).
    sys.argv = [""]
    mode = args[1]
    if mode == "serve":
        try:
            serve(args[2], args[3], args[4], args[5])
        except SystemExit as e:
            # A model that calls sys.exit() ends the stub at once: the interpreter's own exit would wait for every
            # thread the model started, and a thread that never ends would leave the stub, and its calls, hanging.
            _exit_now(e)
    elif mode == "autocomplete":
        autocomplete(args[2], args[3], args[4])
    else:
        sys.exit(f"Unknown mode '{mode}'")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
