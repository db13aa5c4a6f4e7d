/**
 * Runs a short Python script of the compatibility venv (tritonclient, numpy) against a test server and reads
 * the JSON it prints, so that the observability tests compare the official client's view with exact numbers.
 * @module
 */

import { pythonPath, ROOT, startTestServer, type TestServer } from "../helpers.ts";

/**
 * Runs Python source asynchronously (the server keeps answering on this event loop meanwhile) and parses the
 * last line of its standard output as JSON.
 * @param source the Python program; it prints one JSON line last
 * @param env extra environment variables, e.g. `{ URL: "127.0.0.1:8001" }`
 * @returns the parsed JSON
 * @throws Error with the script's output when it exits with a non-zero code
 */
export async function pythonJson(source: string, env: Record<string, string> = {}): Promise<unknown> {
  const out = await new Deno.Command(pythonPath(), {
    args: ["-c", source],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
    env: { PYTHONDONTWRITEBYTECODE: "1", ...env },
  }).output();
  const dec = new TextDecoder();
  const stdout = dec.decode(out.stdout);
  if (out.code !== 0) {
    throw new Error(`Python exited with ${out.code}:\n${stdout}\n${dec.decode(out.stderr)}`);
  }
  const lines = stdout.trim().split("\n");
  return JSON.parse(lines[lines.length - 1]!);
}

/**
 * Writes a Python model into a repository: `<repo>/<name>/config.pbtxt` and version 1's `model.py`.
 * @param repo the repository folder
 * @param name the model's name (its folder)
 * @param config the config.pbtxt text
 * @param model the model.py source
 */
export async function writePythonModel(
  repo: string,
  name: string,
  config: string,
  model: string,
): Promise<void> {
  await Deno.mkdir(`${repo}/${name}/1`, { recursive: true });
  await Deno.writeTextFile(`${repo}/${name}/config.pbtxt`, config);
  await Deno.writeTextFile(`${repo}/${name}/1/model.py`, model);
}

/**
 * Serves Python models from a temporary repository with a test server (default flags), runs `body` against it,
 * then stops the server and removes the repository.
 * @param models each model's name, config.pbtxt and model.py
 * @param body what to do with the server
 */
export async function servePythonModels(
  models: readonly (readonly [name: string, config: string, model: string])[],
  body: (server: TestServer) => Promise<void>,
): Promise<void> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-python-models-" });
  try {
    for (const [name, config, model] of models) await writePythonModel(repo, name, config, model);
    await using server = await startTestServer([`--model-repository=${repo}`]);
    await body(server);
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
}
