#!/usr/bin/env python3
"""Differential test: the same requests to dinfer and to the real Triton, side by side.

Both servers serve one repository of Python-backend models (tests/fixtures/compat_models and a few of
tests/fixtures/python_models, copied to a temporary folder) in explicit model control mode. Each check sends the
same request(s) to both and compares what a client sees: status codes, JSON bodies, gRPC codes, and for error
messages whether dinfer's message holds Triton's (dinfer words its messages its own way but keeps the phrases
Triton's clients match on). Every check is reported as `same`, `different` or `documented` (a deliberate
difference listed in docs/compatibility.md); the exit code is 1 when a check is `different`.

Triton comes from PyPI's `nvidia-pytriton` wheel, which bundles `tritonserver` 2.51 with its Python backend:

    python3 -m venv /tmp/triton-venv && /tmp/triton-venv/bin/pip install nvidia-pytriton==0.7.0
    .venv/bin/python tests/compat/differential.py --triton-venv /tmp/triton-venv

The script runs under the compatibility venv (.venv: tritonclient, numpy); the Python models run under the
interpreter of each server (the Triton venv's for Triton, DINFER_PYTHON or .venv's for dinfer).
"""

import argparse
import base64
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import grpc
from google.protobuf.json_format import MessageToDict
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_MODELS = ["add_sub_py", "error_py", "empty_py", "repeat_py"]


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def make_repository():
    repo = tempfile.mkdtemp(prefix="dinfer_differential_")
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/fixtures/compat_models/*"))):
        shutil.copytree(path, os.path.join(repo, os.path.basename(path)))
    for name in PYTHON_MODELS:
        shutil.copytree(os.path.join(ROOT, "tests/fixtures/python_models", name), os.path.join(repo, name))
    return repo


class Server:
    """A server process and its HTTP, gRPC and metrics ports."""

    def __init__(self, name, args, env, ports):
        self.name = name
        self.http, self.grpc, self.metrics = ports
        self.log = tempfile.NamedTemporaryFile(prefix=f"dinfer_differential_{name}_", suffix=".log", delete=False)
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, cwd=ROOT)
        self.stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(f"127.0.0.1:{self.grpc}"))

    def wait_ready(self, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log: {self.log.name}")
            try:
                if self.request("GET", "/v2/health/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{self.name} did not get ready in {timeout} s; log: {self.log.name}")

    def stop(self, keep_log=False):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        if keep_log:
            print(f"{self.name}'s log: {self.log.name}", file=sys.stderr)
        else:
            os.unlink(self.log.name)

    def request(self, method, path, body=None, port=None):
        """Returns (status, parsed JSON or text or None)."""
        data = None if body is None else (body if isinstance(body, (bytes, str)) else json.dumps(body))
        if isinstance(data, str):
            data = data.encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port or self.http}{path}", data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        if not raw:
            return status, None
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def rpc(self, method, request):
        """Returns ("OK", message as a dict) or (status code name, details)."""
        try:
            reply = getattr(self.stub, method)(request, timeout=60)
            return "OK", MessageToDict(reply, preserving_proto_field_name=True)
        except grpc.RpcError as e:
            return e.code().name, e.details()


def start_triton(venv, repo, ports):
    site = glob.glob(os.path.join(venv, "lib/python3*/site-packages"))[0]
    tri = os.path.join(site, "pytriton/tritonserver")
    stub = os.path.join(tri, "backends/python/triton_python_backend_stub")
    if not os.path.exists(stub):
        # The Python backend's stub for the venv's Python version (site is .../lib/python3.X/site-packages).
        version = os.path.basename(os.path.dirname(site)).removeprefix("python")
        shutil.copy(os.path.join(tri, "python_backend_stubs", version, "triton_python_backend_stub"), stub)
    env = dict(os.environ, PYTHONPATH=site, PATH=os.path.join(venv, "bin") + ":" + os.environ["PATH"],
               LD_LIBRARY_PATH=os.path.join(site, "nvidia_pytriton.libs"))
    http, grpc_port, metrics = ports
    args = [os.path.join(tri, "bin/tritonserver"), f"--model-repository={repo}",
            f"--backend-directory={os.path.join(tri, 'backends')}", f"--http-port={http}",
            f"--grpc-port={grpc_port}", f"--metrics-port={metrics}", "--model-control-mode=explicit",
            "--load-model=*", "--log-info=false"]
    return Server("triton", args, env, ports)


def start_dinfer(repo, ports):
    http, grpc_port, metrics = ports
    env = dict(os.environ)
    env.setdefault("DINFER_PYTHON", os.path.join(ROOT, ".venv/bin/python"))
    args = [os.path.join(ROOT, "dinfer"), "serve", f"--model-repository={repo}", f"--http-port={http}",
            f"--grpc-port={grpc_port}", f"--metrics-port={metrics}", "--model-control-mode=explicit",
            "--load-model=*", "--log-info=false"]
    return Server("dinfer", args, env, ports)


# --- the checks -----------------------------------------------------------------------------------------------

CHECKS = []


def check(name, compare="equal", documented=None):
    """Registers a check: `fn(server)` returns what a client sees; `compare` says how the two are compared."""

    def register(fn):
        CHECKS.append((name, fn, compare, documented))
        return fn

    return register


def key_phrase(message):
    """Triton's message without what no client matches on: the request id prefix, C++ exception details, a
    trailing NOTE and the final period."""
    prefix = "[request id: <id_unknown>] "
    if message.startswith(prefix):
        message = message[len(prefix):]
    message = re.sub(r" \(details: [^)]*\)", "", message)
    message = re.sub(r" NOTE: .*$", "", message, flags=re.S).rstrip()
    return message[:-1] if message.endswith(".") and not message.endswith("(s).") else message


def infer_body(inputs, **extra):
    return dict(extra, inputs=[{"name": n, "datatype": d, "shape": s, "data": v} for n, d, s, v in inputs])


ADD_SUB = [("INPUT0", "FP32", [1, 4], [1, 2, 3, 4]), ("INPUT1", "FP32", [1, 4], [1, 1, 1, 1])]
ENS = [("IN0", "FP32", [1, 4], [1, 2, 3, 4]), ("IN1", "FP32", [1, 4], [1, 1, 1, 1])]


def sorted_outputs(body):
    if isinstance(body, dict) and isinstance(body.get("outputs"), list):
        body = dict(body, outputs=sorted(body["outputs"], key=lambda o: o["name"]))
    return body


@check("GET /v2: extensions")
def _(s):
    return s.request("GET", "/v2")[1]["extensions"]


@check("health live and ready")
def _(s):
    return [s.request("GET", "/v2/health/live")[0], s.request("GET", "/v2/health/ready")[0]]


@check("model metadata of add_sub_py")
def _(s):
    return s.request("GET", "/v2/models/add_sub_py")


@check("model configs (partial_py, add_sub_py, oldest_py, ens_py)")
def _(s):
    return [json.dumps(s.request("GET", f"/v2/models/{m}/config"), sort_keys=True)
            for m in ["partial_py", "add_sub_py", "oldest_py", "ens_py"]]


@check("inference on add_sub_py (JSON)")
def _(s):
    return s.request("POST", "/v2/models/add_sub_py/infer", infer_body(ADD_SUB))


@check("unknown model: ready, metadata, infer (HTTP)", compare="phrase")
def _(s):
    return [s.request("GET", "/v2/models/nope/ready")[0], s.request("GET", "/v2/models/nope"),
            s.request("POST", "/v2/models/nope/infer", infer_body(ADD_SUB)),
            s.request("GET", "/v2/models/add_sub_py/versions/9")]


@check("unknown model: ready, metadata, config (gRPC)", compare="phrase")
def _(s):
    return [s.rpc("ModelReady", pb.ModelReadyRequest(name="nope")),
            s.rpc("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
            s.rpc("ModelConfig", pb.ModelConfigRequest(name="nope"))]


@check("inference: wrong datatype, wrong shape, unknown input, unknown output, batch too large", compare="phrase")
def _(s):
    wrong_type = [("INPUT0", "INT32", [1, 4], [1, 2, 3, 4]), ADD_SUB[1]]
    wrong_shape = [("INPUT0", "FP32", [1, 3], [1, 2, 3]), ADD_SUB[1]]
    unknown = ADD_SUB + [("BOGUS", "FP32", [1, 4], [1, 2, 3, 4])]
    big = [(n, d, [9, 4], [1.0] * 36) for n, d, _, _ in ADD_SUB]
    url = "/v2/models/add_sub_py/infer"
    return [s.request("POST", url, infer_body(wrong_type)), s.request("POST", url, infer_body(wrong_shape)),
            s.request("POST", url, infer_body(unknown[:1] + unknown[2:])),
            s.request("POST", url, infer_body(ADD_SUB, outputs=[{"name": "NOPE"}])),
            s.request("POST", url, infer_body(big))]


@check("repository index")
def _(s):
    return sorted((r["name"], r.get("version"), r.get("state")) for r in s.request("POST", "/v2/repository/index")[1])


@check("statistics of every model: names")
def _(s):
    return sorted(m["name"] for m in s.request("GET", "/v2/models/stats")[1]["model_stats"])


@check("trace and log settings: defaults")
def _(s):
    return [s.request("GET", "/v2/trace/setting"), s.request("GET", "/v2/models/add_sub_py/trace/setting"),
            s.request("GET", "/v2/logging")]


@check("system shared memory: status with no regions, unknown region", compare="phrase")
def _(s):
    return [s.request("GET", "/v2/systemsharedmemory/status"),
            s.request("GET", "/v2/systemsharedmemory/region/nope/status")]


@check("gRPC: server metadata and model config")
def _(s):
    meta = s.rpc("ServerMetadata", pb.ServerMetadataRequest())
    config = s.rpc("ModelConfig", pb.ModelConfigRequest(name="add_sub_py"))
    return [meta[1]["extensions"], json.dumps(config, sort_keys=True)]


@check("metrics: the names reported", documented="dinfer also reports nv_model_load_duration_secs, which "
       "later Triton releases added")
def _(s):
    text = s.request("GET", "/metrics", port=s.metrics)[1]
    return sorted({line.split()[2] for line in text.splitlines() if line.startswith("# TYPE nv_")})


@check("classification of an FP32 output")
def _(s):
    return s.request("POST", "/v2/models/add_sub_py/infer",
                     infer_body(ADD_SUB, outputs=[{"name": "OUTPUT0", "parameters": {"classification": 2}}]))


@check("inference: request id, output selection, binary output")
def _(s):
    body = infer_body(ADD_SUB, id="req-7", outputs=[{"name": "OUTPUT1", "parameters": {"binary_data": False}}])
    return s.request("POST", "/v2/models/add_sub_py/infer", body)


@check("inference with tritonclient (HTTP binary and gRPC)")
def _(s):
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    out = []
    for lib, url in ((httpclient, f"127.0.0.1:{s.http}"), (grpcclient, f"127.0.0.1:{s.grpc}")):
        client = lib.InferenceServerClient(url)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            t = lib.InferInput(name, [2, 4], "FP32")
            t.set_data_from_numpy(np.arange(8, dtype=np.float32).reshape(2, 4))
            inputs.append(t)
        result = client.infer("add_sub_py", inputs)
        out.append([result.as_numpy("OUTPUT0").tolist(), result.as_numpy("OUTPUT1").tolist()])
    return out


@check("gRPC inference: unknown model, unknown version", compare="phrase")
def _(s):
    return [s.rpc("ModelInfer", pb.ModelInferRequest(model_name="nope")),
            s.rpc("ModelInfer", pb.ModelInferRequest(model_name="add_sub_py", model_version="9"))]


@check("model ready and statistics of version 1")
def _(s):
    st = s.request("GET", "/v2/models/partial_py/versions/1/stats")
    return [s.request("GET", "/v2/models/add_sub_py/versions/1/ready")[0], st[0],
            [(m["name"], m["version"]) for m in st[1]["model_stats"]]]


@check("trace and log settings: an update answers the settings")
def _(s):
    trace = s.request("POST", "/v2/trace/setting", {"trace_rate": "7", "trace_count": "3"})
    s.request("POST", "/v2/trace/setting", {"trace_rate": "1000", "trace_count": "-1"})
    log = s.request("POST", "/v2/logging", {"log_verbose_level": 1, "log_info": False})
    s.request("POST", "/v2/logging", {"log_verbose_level": 0})
    return [trace, log]


@check("repository: index rows of an unloaded model")
def _(s):
    s.request("POST", "/v2/repository/models/empty_py/unload")
    for _ in range(100):  # Triton shows UNLOADING while the model's stub stops
        rows = [r for r in s.request("POST", "/v2/repository/index")[1] if r["name"] == "empty_py"]
        if rows and rows[0].get("state") != "UNLOADING":
            break
        time.sleep(0.1)
    ready = [r for r in s.request("POST", "/v2/repository/index", {"ready": True})[1] if r["name"] == "empty_py"]
    s.request("POST", "/v2/repository/models/empty_py/load")
    return [rows, ready]


def stream(s, requests):
    """Sends requests on one ModelStreamInfer stream; returns each response's error or outputs and final flag."""
    import queue

    import numpy as np
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc}")
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for model, inputs, params in requests:
            tensors = []
            for name, datatype, values in inputs:
                t = grpcclient.InferInput(name, [len(values)], datatype)
                t.set_data_from_numpy(np.array(values, dtype={"INT32": np.int32, "UINT32": np.uint32}[datatype]))
                tensors.append(t)
            client.async_stream_infer(model, tensors, **params)
        out = []
        while True:
            try:
                result, error = answers.get(timeout=5)
            except queue.Empty:
                break
            if error is not None:
                out.append(["error", error.message()])
                continue
            response = result.get_response()
            final = response.parameters["triton_final_response"].bool_param
            out.append([[result.as_numpy(o.name).tolist() for o in response.outputs], final])
        return out
    finally:
        client.stop_stream()


@check("decoupled model: responses on a stream, with and without the empty final response")
def _(s):
    inputs = [("IN", "INT32", [4, 5]), ("DELAY", "UINT32", [0, 0]), ("WAIT", "UINT32", [0])]
    return [stream(s, [("repeat_py", inputs, {})]),
            stream(s, [("repeat_py", inputs, {"enable_empty_final_response": True})])]


@check("decoupled model: HTTP and unary gRPC refuse it", compare="phrase")
def _(s):
    r = pb.ModelInferRequest(model_name="repeat_py")
    return [s.request("POST", "/v2/models/repeat_py/infer", infer_body([("IN", "INT32", [1], [1])])),
            s.rpc("ModelInfer", r)]


@check("sequence model: a request without a correlation id", compare="phrase")
def _(s):
    return s.request("POST", "/v2/models/oldest_py/infer", infer_body([("IN", "INT32", [1, 1], [1])]))


@check("HTTP: a version that is not a number is 404")
def _(s):
    return [s.request("GET", p)[0] for p in
            ["/v2/models/add_sub_py/versions/abc", "/v2/models/add_sub_py/versions/abc/ready",
             "/v2/models/add_sub_py/versions/-1/config"]]


@check("gRPC: a version that is not a number", compare="phrase")
def _(s):
    return [s.rpc("ModelMetadata", pb.ModelMetadataRequest(name="add_sub_py", version="abc")),
            s.rpc("ModelReady", pb.ModelReadyRequest(name="add_sub_py", version="abc")),
            s.rpc("ModelStatistics", pb.ModelStatisticsRequest(name="add_sub_py", version="abc"))]


@check("statistics of an unknown model and version", compare="phrase")
def _(s):
    return [s.request("GET", "/v2/models/nope/stats"), s.request("GET", "/v2/models/add_sub_py/versions/9/stats"),
            s.rpc("ModelStatistics", pb.ModelStatisticsRequest(name="nope"))]


@check("statistics: the shape of an entry")
def _(s):
    st = s.request("GET", "/v2/models/partial_py/stats")[1]["model_stats"][0]
    return [list(st.keys()), list(st["inference_stats"].keys()), st["response_stats"], st["memory_usage"]]


@check("statistics: error response, failed execute, validation refusal")
def _(s):
    statuses = [s.request("POST", "/v2/models/error_py/infer", infer_body([("MODE", "INT32", [1], [mode])]))[0]
                for mode in [0, 1, 2, 3]]
    statuses.append(s.request("POST", "/v2/models/error_py/infer", infer_body([("MODE", "FP32", [1], [1])]))[0])
    st = s.request("GET", "/v2/models/error_py/stats")[1]["model_stats"][0]
    return [statuses, st["inference_count"], st["execution_count"],
            {k: v.get("count", 0) for k, v in st["inference_stats"].items()},
            [b["compute_infer"]["count"] for b in st["batch_stats"]]]


@check("a Python model that leaves out an output")
def _(s):
    body = infer_body([("IN", "INT32", [2], [1, 2])])
    return [s.request("POST", "/v2/models/partial_py/infer", body),
            s.request("POST", "/v2/models/partial_py/infer", dict(body, outputs=[{"name": "OUT1"}]))]


@check("a request without inputs to a model whose inputs are all optional")
def _(s):
    return s.request("POST", "/v2/models/optional_py/infer", {"inputs": []})


@check("the parameters a Python model sees (HTTP)")
def _(s):
    params = {"priority": 1, "timeout": 5, "sequence_id": 3, "sequence_start": True, "sequence_end": False,
              "binary_data_output": False, "custom": "x", "n": 7}
    status, body = s.request("POST", "/v2/models/params_py/infer",
                             infer_body([("IN", "INT32", [1], [1])], parameters=params))
    return [status, json.loads(body["outputs"][0]["data"][0])]


@check("the parameters a Python model sees (gRPC)")
def _(s):
    r = pb.ModelInferRequest(model_name="params_py")
    r.inputs.add(name="IN", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    for k, v in {"priority": 1, "timeout": 5, "sequence_id": 3, "custom": 7}.items():
        r.parameters[k].int64_param = v
    r.parameters["sequence_start"].bool_param = True
    r.parameters["triton_enable_empty_final_response"].bool_param = True
    code, reply = s.rpc("ModelInfer", r)
    raw = base64.b64decode(reply["raw_output_contents"][0]) if code == "OK" else b""
    return [code, json.loads(raw[4:]) if raw else reply]


@check("parameter keys starting with 'triton_'", compare="phrase")
def _(s):
    r = pb.ModelInferRequest(model_name="params_py")
    r.inputs.add(name="IN", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    r.parameters["triton_x"].int64_param = 1
    return [s.request("POST", "/v2/models/params_py/infer",
                      infer_body([("IN", "INT32", [1], [1])], parameters={"triton_x": 1})),
            s.rpc("ModelInfer", r)]


@check("missing inputs", compare="phrase")
def _(s):
    return [s.request("POST", "/v2/models/add_sub_py/infer", infer_body(ADD_SUB[:1])),
            s.request("POST", "/v2/models/add_sub_py/infer", {"inputs": []})]


@check("input byte size mismatch (gRPC raw contents)", compare="phrase")
def _(s):
    r = pb.ModelInferRequest(model_name="add_sub_py")
    for name in ("INPUT0", "INPUT1"):
        r.inputs.add(name=name, datatype="FP32", shape=[1, 4])
    r.raw_input_contents.extend([b"\0" * 16, b"\0" * 20])
    return s.rpc("ModelInfer", r)


@check("logging: log_file and unknown settings", compare="phrase")
def _(s):
    return [s.request("POST", "/v2/logging", {"log_file": "/tmp/dinfer_differential.log"}),
            s.request("POST", "/v2/logging", {"no_such_setting": 1})[0]]


@check("trace settings: TIMESTAMPS without a file, unknown model, unknown setting", compare="phrase")
def _(s):
    return [s.request("POST", "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]})[0],
            s.request("GET", "/v2/models/nope/trace/setting")[0],
            s.request("POST", "/v2/trace/setting", {"no_such_setting": ["1"]})[0]]


@check("trace settings: trace_rate as a JSON number", documented="Triton answers 500 for a value of the wrong type")
def _(s):
    return s.request("POST", "/v2/trace/setting", {"trace_rate": 5})[0]


@check("repository: unloading an unknown model")
def _(s):
    return [s.request("POST", "/v2/repository/models/nope/unload")[0],
            s.rpc("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="nope"))[0]]


@check("repository: a bad config override", compare="phrase",
       documented="Triton answers 500 (INTERNAL) for a load that fails; dinfer 400 with the reason")
def _(s):
    return s.request("POST", "/v2/repository/models/add_sub_py/load",
                     {"parameters": {"config": '"parameters": {"config": {{"max_batch_size": "16"}}}'}})


@check("ensemble: response parameters and outputs")
def _(s):
    return sorted_outputs(s.request("POST", "/v2/models/ens_py/infer",
                                    infer_body(ENS, parameters={"sequence_id": 5, "sequence_start": True}))[1])


@check("ensemble: unloading a composing model unloads the ensemble")
def _(s):
    before = s.request("GET", "/v2/models/ens_py/ready")[0]
    s.request("POST", "/v2/repository/models/add_sub_py/unload")
    time.sleep(1)
    after = s.request("GET", "/v2/models/ens_py/ready")[0]
    s.request("POST", "/v2/repository/models/add_sub_py/load")
    s.request("POST", "/v2/repository/models/ens_py/load")
    return [before, after]


@check("ensemble: unload_dependents keeps a composing model loaded on its own")
def _(s):
    s.request("POST", "/v2/repository/models/ens_py/unload", {"parameters": {"unload_dependents": True}})
    time.sleep(1)
    states = {r["name"]: r.get("state") for r in s.request("POST", "/v2/repository/index")[1]}
    s.request("POST", "/v2/repository/models/ens_py/load")
    return [states.get("ens_py"), states.get("add_sub_py")]


@check("metrics: pinned memory pool gauges are reported")
def _(s):
    text = s.request("GET", "/metrics", port=s.metrics)[1]
    return [name in text for name in ["nv_pinned_memory_pool_total_bytes", "nv_pinned_memory_pool_used_bytes"]]


@check("malformed JSON body", documented="Triton answers 500 for malformed requests; dinfer 400")
def _(s):
    return s.request("POST", "/v2/models/add_sub_py/infer", "{not json")[0]


@check("wrong HTTP method", documented="Triton answers 405; dinfer 404 (no such route)")
def _(s):
    return s.request("DELETE", "/v2/models/add_sub_py")[0]


@check("repository: a config override, then a plain load of the unchanged files (keeps the override)")
def _(s):
    status = s.request("POST", "/v2/repository/models/partial_py/load",
                       {"parameters": {"config": json.dumps({"backend": "python", "max_batch_size": 0,
                                                             "input": [{"name": "IN", "data_type": "TYPE_INT32",
                                                                        "dims": [2]}],
                                                             "output": [{"name": "OUT0", "data_type": "TYPE_INT32",
                                                                         "dims": [2]}]})}})[0]
    config = s.request("GET", "/v2/models/partial_py/config")[1]
    s.request("POST", "/v2/repository/models/partial_py/load")
    after = s.request("GET", "/v2/models/partial_py/config")[1]
    return [status, [o["name"] for o in config["output"]], [o["name"] for o in after["output"]]]


def same_phrase(triton, dinfer):
    """Equal, except that dinfer's error messages need only hold Triton's."""
    if isinstance(triton, str) and isinstance(dinfer, str):
        return key_phrase(triton) in dinfer or triton == dinfer
    if isinstance(triton, dict) and isinstance(dinfer, dict) and set(triton) == {"error"} == set(dinfer):
        return same_phrase(triton["error"], dinfer["error"])
    if isinstance(triton, (list, tuple)) and isinstance(dinfer, (list, tuple)) and len(triton) == len(dinfer):
        return all(same_phrase(a, b) for a, b in zip(triton, dinfer))
    return triton == dinfer


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--triton-venv", required=True, help="a venv with nvidia-pytriton==0.7.0 installed")
    parser.add_argument("-v", "--verbose", action="store_true", help="print both answers of every check")
    args = parser.parse_args()
    repo = make_repository()
    ports = free_ports(6)
    servers = []
    started = False
    try:
        servers = [start_triton(args.triton_venv, repo, ports[:3]), start_dinfer(repo, ports[3:])]
        for s in servers:
            s.wait_ready()
        started = True
        triton, dinfer = servers
        counts = {"same": 0, "different": 0, "documented": 0}
        for name, fn, compare, documented in CHECKS:
            try:
                a = fn(triton)
            except Exception as e:  # a failing check is reported, the others still run
                a = f"check failed: {e!r}"
            try:
                b = fn(dinfer)
            except Exception as e:
                b = f"check failed: {e!r}"
            same = same_phrase(a, b) if compare == "phrase" else a == b
            verdict = "same" if same else ("documented" if documented else "different")
            counts[verdict] += 1
            print(f"{verdict:10} {name}" + (f"  ({documented})" if documented and not same else ""))
            if args.verbose or verdict == "different":
                print(f"           triton: {json.dumps(a, default=str)[:600]}")
                print(f"           dinfer: {json.dumps(b, default=str)[:600]}")
        print(f"\n{counts['same']} same, {counts['documented']} documented differences, "
              f"{counts['different']} different")
        return 1 if counts["different"] else 0
    finally:
        for s in servers:
            s.stop(keep_log=not started)
        shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
