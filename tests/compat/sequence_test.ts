/**
 * Compatibility: the sequence batcher through the official `tritonclient` (HTTP sync, gRPC sync and gRPC
 * streaming), as Triton's simple_sequence example clients use it (tests/compat/test_sequence.py, run by
 * pytest from the compatibility venv against a real server).
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, pythonPath, ROOT, startTestServer } from "../helpers.ts";

Deno.test("tritonclient drives simple_sequence and simple_dyna_sequence (tests/compat/test_sequence.py)", async () => {
  // Two gRPC threads: the clients' connections reach the main thread or the listener thread.
  await using srv = await startTestServer([
    "--allow-grpc=true",
    "--grpc-thread-count=2",
    `--model-repository=${EXAMPLES}`,
  ]);
  assert.ok(srv.server.grpcPort, "the gRPC service did not start");
  // Asynchronous: the server answers on this event loop while pytest runs.
  const out = await new Deno.Command(pythonPath(), {
    args: ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", "tests/compat/test_sequence.py"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: {
      DINFER_HTTP_URL: srv.httpHost,
      DINFER_GRPC_URL: `127.0.0.1:${srv.server.grpcPort}`,
      PYTHONDONTWRITEBYTECODE: "1",
    },
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (out.code !== 0) console.error(text);
  assert.equal(out.code, 0, `pytest exited with ${out.code}; its output is above`);
  assert.match(text, /\d+ passed/);
});
