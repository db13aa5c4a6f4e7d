"""The stub process of dinfer's Python backend: runs one instance of a Triton-style `model.py`.

    stub.py serve <socket> <model.py> <shm file>     one model instance, controlled by the server
    stub.py autocomplete <model.py> <in.json> <out.json>

Control messages travel over the Unix socket as a 4-byte little-endian length and a JSON body. Tensor bytes
travel through the shared-memory file: the server writes the inputs at the offsets it names, the stub
builds numpy views over them, and writes the outputs after them (growing the file when needed).
"""

import asyncio
import concurrent.futures
import importlib.util
import inspect
import json
import mmap
import os
import queue
import socket
import struct
import sys
import threading
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import triton_python_backend_utils as pb_utils  # noqa: E402

ALIGN = 64


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


def read_tensor(mm, desc, copy=False):
    dt = desc["datatype"]
    shape = tuple(desc["shape"])
    offset = desc["offset"]
    count = int(np.prod(shape)) if shape else 1
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
    dtype = pb_utils.triton_string_to_numpy(dt)
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


def write_tensors(shared, start, tensors):
    """Writes tensors from `start` on; returns their descriptions."""
    prepared = []
    offset = align(start)
    for t in tensors:
        arr = t.as_numpy()
        dt = t.triton_dtype()
        if dt == "BYTES":
            data = serialize_bytes(arr)
            nbytes = len(data)
        else:
            data = np.ascontiguousarray(arr)
            nbytes = data.nbytes
        prepared.append((t, dt, list(arr.shape), offset, nbytes, data))
        offset = align(offset + nbytes)
    mm = shared.ensure(offset)
    descs = []
    for t, dt, shape, off, nbytes, data in prepared:
        if nbytes:
            if dt == "BYTES":
                mm[off : off + nbytes] = data
            else:
                np.frombuffer(mm, dtype=np.uint8, count=nbytes, offset=off)[:] = data.reshape(-1).view(np.uint8)
        descs.append({"name": t.name(), "datatype": dt, "shape": shape, "offset": off, "nbytes": nbytes})
    return descs


class Connection:
    """The control socket: a reader thread, a write lock, BLS futures."""

    def __init__(self, sock, shm_dir):
        self.sock = sock
        self.shm_dir = shm_dir
        self.write_lock = threading.Lock()
        self.commands = queue.Queue()
        self.pending = {}
        self.pending_lock = threading.Lock()
        self.next_id = 0
        # (execute id, index) of the requests whose client went away; request.is_cancelled() reads it.
        self.cancelled = set()
        threading.Thread(target=self._read_loop, daemon=True).start()

    def send(self, msg):
        body = json.dumps(msg).encode("utf-8")
        with self.write_lock:
            self.sock.sendall(struct.pack("<I", len(body)) + body)

    def _recv_exact(self, n):
        chunks = []
        while n > 0:
            chunk = self.sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _read_loop(self):
        try:
            while True:
                head = self._recv_exact(4)
                if head is None:
                    break
                body = self._recv_exact(struct.unpack("<I", head)[0])
                if body is None:
                    break
                msg = json.loads(body)
                if msg.get("op") == "bls_result":
                    self._finish_bls(msg)
                elif msg.get("op") == "bls_stream":
                    self._stream_bls(msg)
                elif msg.get("op") == "cancel":
                    # Read here, not by the command loop, so that a running execute() sees it.
                    self.cancelled.add((msg["id"], msg["index"]))
                else:
                    self.commands.put(msg)
        finally:
            self.commands.put(None)
            # The server closed the socket or died: exit even when the model's code never returns.
            timer = threading.Timer(2.0, os._exit, args=(1,))
            timer.daemon = True
            timer.start()

    def _new_file(self, prefix):
        with self.pending_lock:
            self.next_id += 1
            n = self.next_id
        return os.path.join(self.shm_dir, f"{prefix}-{os.getpid()}-{n}-{threading.get_ident()}")

    def bls(self, request, decoupled=False):
        """Sends a BLS request; returns a Future of its response, or for `decoupled` a queue of responses that
        ends with None."""
        future = queue.Queue() if decoupled else concurrent.futures.Future()
        with self.pending_lock:
            self.next_id += 1
            call_id = self.next_id
        path = os.path.join(self.shm_dir, f"dinfer-bls-{os.getpid()}-{call_id}")
        shared = SharedFile(path, create=True)
        try:
            descs = write_tensors(shared, 0, request.inputs())
        except Exception:
            shared.close()
            os.unlink(path)
            raise
        with self.pending_lock:
            self.pending[call_id] = (future, shared)
        version = request.model_version()
        self.send(
            {
                "op": "bls",
                "id": call_id,
                "model": request.model_name(),
                "version": "" if version in (None, -1, "") else str(version),
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "parameters": json.loads(request.parameters()),
                "outputs": list(request.requested_output_names()),
                "inputs": descs,
                "file": path,
                "decoupled": decoupled,
            }
        )
        return future

    def _stream_bls(self, msg):
        with self.pending_lock:
            if msg.get("final"):
                responses, shared = self.pending.pop(msg["id"], (None, None))
            else:
                responses, shared = self.pending.get(msg["id"], (None, None))
        if responses is None:
            return
        if shared is not None and msg.get("final"):
            shared.close()
            try:
                os.unlink(shared.path)
            except OSError:
                pass
        try:
            if msg.get("error"):
                err = msg["error"]
                code = getattr(pb_utils.TritonError, err.get("code", "INTERNAL"), pb_utils.TritonError.INTERNAL)
                responses.put(pb_utils.InferenceResponse(error=pb_utils.TritonError(err["message"], code)))
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
                tensors = [pb_utils.Tensor(d["name"], read_tensor(data, d, copy=True), d["datatype"]) for d in msg["outputs"]]
                responses.put(pb_utils.InferenceResponse(output_tensors=tensors))
            elif msg.get("final"):
                # A final flag alone: an empty response, as for any decoupled model.
                responses.put(pb_utils.InferenceResponse())
        except Exception as e:  # noqa: BLE001
            responses.put(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"Cannot read BLS outputs: {e}")))
        if msg.get("final"):
            responses.put(None)

    def _finish_bls(self, msg):
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
            mm = shared.ensure(0)
            tensors = [
                pb_utils.Tensor(d["name"], read_tensor(mm, d, copy=True), d["datatype"]) for d in msg["outputs"]
            ]
            future.set_result(pb_utils.InferenceResponse(output_tensors=tensors))
        except Exception as e:  # noqa: BLE001
            future.set_result(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"Cannot read BLS outputs: {e}")))
        finally:
            shared.mm = None
            shared.close()
            try:
                os.unlink(shared.path)
            except OSError:
                pass

    def send_response(self, request, response, flags):
        """Sends one response of a decoupled request; its tensors go in a file of their own."""
        if request._key is None:
            raise pb_utils.TritonModelException("Cannot send a response: the request did not come from the server")
        exec_id, index = request._key
        msg = {"op": "response", "id": exec_id, "index": index, "flags": int(flags)}
        if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.cancelled.discard(request._key)
        if response is not None:
            if response.has_error():
                msg["error"] = error_of(response.error())
            elif response.output_tensors():
                path = self._new_file("dinfer-resp")
                shared = SharedFile(path, create=True)
                try:
                    msg["outputs"] = write_tensors(shared, 0, response.output_tensors())
                except Exception:
                    shared.close()
                    os.unlink(path)
                    raise
                shared.mm = None
                shared.close()
                msg["file"] = path
            else:
                msg["outputs"] = []
        self.send(msg)

    def log(self, level, message):
        self.send({"op": "log", "level": int(level), "message": str(message)})


def error_of(err):
    if isinstance(err, pb_utils.TritonError):
        return {"message": err.message(), "code": err.code_name()}
    return {"message": str(err), "code": "INTERNAL"}


def serve(socket_path, model_path, shm_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(socket_path)
    conn = Connection(sock, os.path.dirname(shm_path))
    pb_utils._server = conn
    shared = SharedFile(shm_path)
    model = None
    name = ""
    decoupled = False
    loop = asyncio.new_event_loop()

    while True:
        msg = conn.commands.get()
        if msg is None:
            return
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
                        loop.run_until_complete(result)
                conn.send({"op": "ready"})
            except BaseException as e:  # noqa: BLE001
                traceback.print_exc()
                conn.send({"op": "init_error", "message": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
                return
        elif op == "execute":
            try:
                conn.send({"op": "result", "id": msg["id"], "responses": execute(model, loop, shared, msg, decoupled)})
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, (SystemExit, KeyboardInterrupt)):
                    raise
                message = e.message() if isinstance(e, pb_utils.TritonModelException) else str(e)
                conn.send(
                    {
                        "op": "error",
                        "id": msg["id"],
                        "message": f"{type(e).__name__}: {message}",
                        "trace": traceback.format_exc(),
                    }
                )
        elif op == "finalize":
            try:
                if model is not None and hasattr(model, "finalize"):
                    result = model.finalize()
                    if inspect.isawaitable(result):
                        loop.run_until_complete(result)
            finally:
                conn.send({"op": "finalized"})
            return


def execute(model, loop, shared, msg, decoupled):
    mm = shared.ensure(msg["shm_size"])
    requests = []
    for index, r in enumerate(msg["requests"]):
        # A decoupled model may read its inputs after execute returns, when the server reuses the shared
        # file for the next call: its inputs are copies.
        inputs = [pb_utils.Tensor(d["name"], read_tensor(mm, d, copy=decoupled), d["datatype"]) for d in r["inputs"]]
        request = pb_utils.InferenceRequest(
            inputs=inputs,
            requested_output_names=r["outputs"],
            request_id=r["id"],
            correlation_id=r["correlation_id"],
            flags=r["flags"],
            parameters=r["parameters"],
        )
        request._decoupled = decoupled
        request._key = (msg["id"], index)
        requests.append(request)
    try:
        result = model.execute(requests)
        if inspect.isawaitable(result):
            result = loop.run_until_complete(result)
    finally:
        if not decoupled:
            for request in requests:
                pb_utils._server.cancelled.discard(request._key)
    if decoupled:
        if result is not None:
            raise pb_utils.TritonModelException(
                "the model is decoupled: execute() must return None and send responses through "
                "request.get_response_sender()"
            )
        return [{} for _ in requests]
    if result is None or len(result) != len(requests):
        got = "None" if result is None else str(len(result))
        raise pb_utils.TritonModelException(f"execute returned {got} responses for {len(requests)} requests")
    answers = []
    offset = msg["out_offset"]
    for response in result:
        if response is None or not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(f"execute returned {type(response).__name__}, not an InferenceResponse")
        if response.has_error():
            answers.append({"error": error_of(response.error())})
            continue
        descs = write_tensors(shared, offset, response.output_tensors())
        if descs:
            offset = descs[-1]["offset"] + descs[-1]["nbytes"]
        answers.append({"outputs": descs, "parameters": json.loads(response.parameters())})
    return answers


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


def main():
    mode = sys.argv[1]
    if mode == "serve":
        serve(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "autocomplete":
        autocomplete(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"Unknown mode '{mode}'")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
