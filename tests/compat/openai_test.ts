/**
 * Compatibility: the official `openai` Python package (tests/compat/test_openai.py, run by pytest from the
 * compatibility venv) drives the OpenAI-compatible API of a real server serving examples/genai_models.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { pythonPath, ROOT, startTestServer } from "../helpers.ts";

const GENAI = fileURLToPath(new URL("../../examples/genai_models", import.meta.url));

Deno.test("the openai Python client against a real server (tests/compat/test_openai.py)", async () => {
  await using srv = await startTestServer([
    `--model-repository=${GENAI}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
  ]);
  // Asynchronous: the server answers on this event loop while pytest runs.
  const out = await new Deno.Command(pythonPath(), {
    args: ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", "tests/compat/test_openai.py"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { DINFER_OPENAI_URL: `${srv.url}/v1`, PYTHONDONTWRITEBYTECODE: "1" },
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (out.code !== 0) console.error(text);
  assert.equal(out.code, 0, `pytest exited with ${out.code}; its output is above`);
  assert.match(text, /8 passed/);
});
