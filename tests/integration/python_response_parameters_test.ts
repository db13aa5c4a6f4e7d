/**
 * A Python model's response parameters (`pb_utils.InferenceResponse(parameters=...)`, which Triton releases
 * after 2.51 take) reach the client over HTTP and gRPC, streamed responses and BLS callers included, through
 * tritonclient as users read them; parameters a response cannot hold are refused with the exception's text.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { pythonPath, ROOT, startTestServer } from "../helpers.ts";

const MODELS = fileURLToPath(new URL("../fixtures/python_models", import.meta.url));

const CLIENT = `
import json, queue, sys
import numpy as np
import tritonclient.grpc as g
import tritonclient.http as h
from tritonclient.utils import InferenceServerException

http = h.InferenceServerClient(sys.argv[1])
grpc = g.InferenceServerClient(sys.argv[2])

def params_input(module, value):
    i = module.InferInput("PARAMS", [1], "BYTES")
    i.set_data_from_numpy(np.array([json.dumps(value).encode()], dtype=np.object_))
    return [i]

def grpc_params(response):
    out = {}
    for k, v in response.parameters.items():
        out[k] = getattr(v, v.WhichOneof("parameter_choice"))
    return out

res = {"http": [], "grpc": [], "errors": []}
for value in [{}, {"bool": True, "str": "Hello World!", "int": 1024}, {"big": 2**62 + 1, "neg": -5, "f": ""}]:
    r = http.infer("resp_params_py", params_input(h, value))
    res["http"].append(r.get_response().get("parameters", {}))
    r = grpc.infer("resp_params_py", params_input(g, value))
    res["grpc"].append(grpc_params(r.get_response()))
for value in [{"int": 2, "float": 0.5}, {"bool": True, "null": None}, {"list": ["x"]}, {"int_key": True}, [1]]:
    try:
        http.infer("resp_params_py", params_input(h, value))
        res["errors"].append("no error")
    except InferenceServerException as e:
        res["errors"].append(e.message())
q = queue.Queue()
grpc.start_stream(callback=lambda result, error: q.put((result, error)))
grpc.async_stream_infer("stream_resp_params_py", params_input(g, [{"bool": False, "int": 2048}, {"str": "?"}]))
res["stream"] = []
for _ in range(2):
    result, error = q.get(timeout=30)
    res["stream"].append(str(error) if error else grpc_params(result.get_response()))
grpc.stop_stream()
r = http.infer("bls_resp_params_py", params_input(h, {"bool": False, "int": 7, "str": "s"}))
res["bls"] = json.loads(r.as_numpy("OUT")[0])
print(json.dumps(res))
`;

Deno.test("response parameters of Python models reach tritonclient over HTTP, gRPC, streams and BLS", async () => {
  await using s = await startTestServer([
    `--model-repository=${MODELS}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
    "--model-control-mode=explicit",
    "--load-model=resp_params_py",
    "--load-model=stream_resp_params_py",
    "--load-model=bls_resp_params_py",
    "--allow-grpc=true",
  ]);
  const out = await new Deno.Command(pythonPath(), {
    args: ["-c", CLIENT, `127.0.0.1:${s.server.httpAddr!.port}`, `127.0.0.1:${s.server.grpcPort}`],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  assert.equal(out.code, 0, dec.decode(out.stderr));
  const big = 2n ** 62n + 1n;
  // Exact JSON text of the HTTP answer for the integer beyond 2^53: parsed here as a string to compare.
  const got = JSON.parse(dec.decode(out.stdout).replaceAll(String(big), `"${big}"`));
  const values = [{}, { bool: true, str: "Hello World!", int: 1024 }, { big: String(big), neg: -5, f: "" }];
  assert.deepEqual(got.http, values);
  assert.deepEqual(got.grpc, values);
  assert.deepEqual(got.errors, [
    "Expect parameters values to have type bool/int/str, found type <class 'float'>",
    "Expect parameters values to have type bool/int/str, found type <class 'NoneType'>",
    "Expect parameters values to have type bool/int/str, found type <class 'list'>",
    "Expect parameters keys to have type str, found type <class 'int'>",
    "Expect parameters to be a dict or its JSON text, got <class 'list'>",
  ]);
  assert.deepEqual(got.stream, [
    { bool: false, int: 2048, triton_final_response: false },
    { str: "?", triton_final_response: false },
  ]);
  assert.deepEqual(got.bls, { bool: false, int: 7, str: "s" });
});
