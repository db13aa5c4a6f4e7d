/**
 * Compatibility of a mixed repository: one model repository holding ONNX (digits), Python (add_sub_py) and
 * PyTorch (digits_torch, add_sub_pt, checked_pt) models, served to the official `tritonclient.http` and
 * `tritonclient.grpc` packages (tests/compat/test_pytorch.py, run by pytest from the compatibility venv).
 * @module
 */

import assert from "node:assert/strict";
import { join } from "node:path";
import { EXAMPLES, pythonPath, ROOT, startTestServer, torchPythonPath } from "../helpers.ts";
import { copyDir } from "../integration/_http.ts";

Deno.test("tritonclient (HTTP and gRPC) against one repository of ONNX, Python and PyTorch models", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-mixed-" });
  try {
    await copyDir(join(EXAMPLES, "digits"), join(repo, "digits"));
    await copyDir(join(ROOT, "examples", "pytorch_models", "digits_torch"), join(repo, "digits_torch"));
    await copyDir(join(ROOT, "tests", "fixtures", "python_models", "add_sub_py"), join(repo, "add_sub_py"));
    for (const m of ["add_sub_pt", "checked_pt"]) {
      await copyDir(join(ROOT, "tests", "fixtures", "pytorch_models", m), join(repo, m));
    }
    await using srv = await startTestServer([
      "--allow-grpc=true",
      `--model-repository=${repo}`,
      `--backend-config=python,python-executable=${pythonPath()}`,
      `--backend-config=pytorch,python-executable=${torchPythonPath()}`,
    ]);
    const out = await new Deno.Command(pythonPath(), {
      args: ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", "tests/compat/test_pytorch.py"],
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
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
