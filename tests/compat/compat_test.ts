/**
 * Compatibility: the official Python `tritonclient.http` package (tests/compat/test_http_client.py, run by
 * pytest from the compatibility venv) drives a real server, as users do.
 * @module
 */

import assert from "node:assert/strict";
import { EXTENSIONS, VERSION } from "../../server/server.ts";
import { EXAMPLES, FIXTURES, pythonPath, ROOT, startTestServer } from "../helpers.ts";

const SERVER_ID = "dinfer-compat";

Deno.test("tritonclient.http against a real server (tests/compat/test_http_client.py)", async () => {
  await using srv = await startTestServer([
    `--model-repository=${EXAMPLES}`,
    `--model-repository=${FIXTURES}`,
    // The fixtures hold a deliberately broken model.
    "--strict-readiness=false",
    `--id=${SERVER_ID}`,
  ]);
  // Asynchronous: the server answers on this event loop while pytest runs.
  const out = await new Deno.Command(pythonPath(), {
    args: ["-m", "pytest", "-q", "-rxXfE", "-p", "no:cacheprovider", "tests/compat/test_http_client.py"],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: {
      DINFER_HTTP_URL: srv.httpHost,
      DINFER_SERVER_METADATA: JSON.stringify({ name: SERVER_ID, version: VERSION, extensions: EXTENSIONS }),
      PYTHONDONTWRITEBYTECODE: "1",
    },
  }).output();
  const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  if (out.code !== 0) console.error(text);
  assert.equal(out.code, 0, `pytest exited with ${out.code}; its output is above`);
  // The summary line, e.g. "114 passed, 5 xfailed in 1.60s".
  assert.match(text, /\d+ passed/);
});
