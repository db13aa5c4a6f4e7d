/**
 * Compatibility of the gRPC endpoint: the official Python `tritonclient.grpc` package
 * (tests/compat/test_grpc_client.py) and raw `grpcio` stubs (tests/compat/test_grpc_raw.py), run by pytest from
 * the compatibility venv against a real server; and TLS with a certificate made at test time.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, FIXTURES, pythonPath, ROOT, startTestServer } from "../helpers.ts";

const SERVER_FLAGS = [
  "--allow-grpc=true",
  `--model-repository=${EXAMPLES}`,
  `--model-repository=${FIXTURES}`,
  // The fixtures hold a deliberately broken model.
  "--strict-readiness=false",
  // Two threads on the gRPC port: the kernel gives each of the clients' connections to the main thread or to the
  // listener thread, so the suites run through both.
  "--grpc-thread-count=2",
];

/** Runs Python asynchronously, so that the server keeps answering on this event loop meanwhile. */
async function python(args: string[], env: Record<string, string>): Promise<{ code: number; text: string }> {
  const out = await new Deno.Command(pythonPath(), {
    args,
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { PYTHONDONTWRITEBYTECODE: "1", ...env },
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, text: dec.decode(out.stdout) + dec.decode(out.stderr) };
}

async function pytest(file: string): Promise<void> {
  await using srv = await startTestServer(SERVER_FLAGS);
  const port = srv.server.grpcPort;
  assert.ok(port, "the gRPC service did not start");
  const { code, text } = await python(
    ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", file],
    { DINFER_GRPC_URL: `127.0.0.1:${port}` },
  );
  if (code !== 0) console.error(text);
  assert.equal(code, 0, `pytest ${file} exited with ${code}; its output is above`);
  // The summary line, e.g. "98 passed, 2 xfailed in 6.26s".
  assert.match(text, /\d+ passed/);
}

Deno.test("tritonclient.grpc (sync, async, aio, streaming) against a real server", async () => {
  await pytest("tests/compat/test_grpc_client.py");
});

Deno.test("raw grpcio stubs: malformed requests, typed and raw contents, health", async () => {
  await pytest("tests/compat/test_grpc_raw.py");
});

/** Makes a self-signed certificate for 127.0.0.1 and localhost with openssl; returns the PEM paths. */
async function selfSignedCertificate(dir: string): Promise<{ cert: string; key: string }> {
  const cert = `${dir}/server.crt`;
  const key = `${dir}/server.key`;
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("openssl", {
      args: [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout",
        key,
        "-out",
        cert,
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
  } catch (err) {
    throw new Error(`Cannot make a test certificate: openssl is not available (${(err as Error).message})`);
  }
  if (out.code !== 0) {
    throw new Error(`Cannot make a test certificate: openssl: ${new TextDecoder().decode(out.stderr)}`);
  }
  return { cert, key };
}

const TLS_CLIENT = `
import os, sys
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

url, cert = os.environ["DINFER_GRPC_URL"], os.environ["DINFER_ROOT_CERT"]
c = grpcclient.InferenceServerClient(url, ssl=True, root_certificates=cert)
assert c.is_server_live()
a = np.arange(16, dtype=np.int32).reshape(1, 16)
b = np.full((1, 16), 5, dtype=np.int32)
inputs = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), grpcclient.InferInput("INPUT1", [1, 16], "INT32")]
inputs[0].set_data_from_numpy(a)
inputs[1].set_data_from_numpy(b)
r = c.infer("simple", inputs)
assert (r.as_numpy("OUTPUT0") == a + b).all(), r.as_numpy("OUTPUT0")
assert (r.as_numpy("OUTPUT1") == a - b).all(), r.as_numpy("OUTPUT1")
c.close()

plain = grpcclient.InferenceServerClient(url)
try:
    plain.is_server_live(client_timeout=10)
except InferenceServerException as e:
    print("plain-text client refused:", e.status())
    assert e.status() == "StatusCode.UNAVAILABLE", e.status()
else:
    sys.exit("a plain-text client was answered on the TLS port")
plain.close()
print("TLS OK")
`;

Deno.test("gRPC over TLS: a client with the root certificate infers, a plain-text client fails", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer_tls_" });
  try {
    const { cert, key } = await selfSignedCertificate(dir);
    await using srv = await startTestServer([
      ...SERVER_FLAGS,
      "--grpc-use-ssl=true",
      `--grpc-server-cert=${cert}`,
      `--grpc-server-key=${key}`,
    ]);
    const port = srv.server.grpcPort;
    assert.ok(port, "the gRPC service did not start");
    const { code, text } = await python(["-c", TLS_CLIENT], {
      DINFER_GRPC_URL: `127.0.0.1:${port}`,
      DINFER_ROOT_CERT: cert,
    });
    if (code !== 0) console.error(text);
    assert.equal(code, 0, `the TLS client exited with ${code}; its output is above`);
    assert.match(text, /TLS OK/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
