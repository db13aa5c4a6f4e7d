/**
 * The rate limiter against a real server: busy_a_py (two instances) and busy_b_py (one) from
 * tests/fixtures/rate_limit_models each need one copy of resource R, and count in a shared file how many of
 * their executions ran at once. Exact counts with the limiter on, off, and with more copies of R.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { startTestServer } from "../helpers.ts";
import { copyDir, get, inferJson, outputsOf } from "../integration/_http.ts";

const MODELS = fileURLToPath(new URL("../fixtures/rate_limit_models", import.meta.url));

interface Executions {
  running: number;
  max_running: number;
  runs: Record<string, number>;
}

/** Starts a server on a copy of the fixtures, sends 8 requests to busy_a_py and 4 to busy_b_py at once. */
async function runAll(flags: string[]): Promise<{ executions: Executions; counts: number[] }> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-rate-limit-test-" });
  try {
    await copyDir(MODELS, dir);
    await using s = await startTestServer([`--model-repository=${dir}`, ...flags]);
    const send = async (model: string, value: number) => {
      const a = await inferJson(s.url, model, {
        inputs: [{ name: "IN", datatype: "INT32", shape: [1], data: [value] }],
      });
      assert.equal(a.status, 200, JSON.stringify(a.json));
      return outputsOf(a)[0]!.data![0];
    };
    const jobs = [
      ...Array.from({ length: 8 }, (_, i) => send("busy_a_py", i)),
      ...Array.from({ length: 4 }, (_, i) => send("busy_b_py", 100 + i)),
    ];
    assert.deepEqual(await Promise.all(jobs), [0, 1, 2, 3, 4, 5, 6, 7, 100, 101, 102, 103]);
    const counts = [];
    for (const m of ["busy_a_py", "busy_b_py"]) {
      const st = (await get(s.url, `/v2/models/${m}/stats`)).json as {
        model_stats: { execution_count: number }[];
      };
      counts.push(st.model_stats[0]!.execution_count);
    }
    const executions = JSON.parse(await Deno.readTextFile(`${dir}/executions.json`)) as Executions;
    return { executions, counts };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function total(e: Executions, prefix: string): number {
  return Object.entries(e.runs).filter(([k]) => k.startsWith(prefix)).reduce((n, [, v]) => n + v, 0);
}

Deno.test("with --rate-limit=execution_count instances sharing one copy of a resource never run at once", async () => {
  const { executions, counts } = await runAll(["--rate-limit=execution_count"]);
  assert.equal(executions.max_running, 1);
  assert.equal(executions.running, 0);
  assert.deepEqual(Object.keys(executions.runs).sort(), ["busy_a_py_0_0", "busy_a_py_0_1", "busy_b_py_0_0"]);
  assert.deepEqual([total(executions, "busy_a_py"), total(executions, "busy_b_py")], [8, 4]);
  assert.deepEqual(counts, [8, 4]);
});

Deno.test("with --rate-limit=off the rate_limiter settings are ignored: all three instances run at once", async () => {
  const { executions } = await runAll([]);
  assert.equal(executions.max_running, 3);
  assert.deepEqual([total(executions, "busy_a_py"), total(executions, "busy_b_py")], [8, 4]);
});

Deno.test("--rate-limit-resource=R:2 lets two of the three instances run at once", async () => {
  const { executions } = await runAll(["--rate-limit=execution_count", "--rate-limit-resource=R:2"]);
  assert.equal(executions.max_running, 2);
  assert.deepEqual([total(executions, "busy_a_py"), total(executions, "busy_b_py")], [8, 4]);
});

Deno.test("a resource that --rate-limit-resource leaves out cannot be scheduled: the models fail to load", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-rate-limit-test-" });
  try {
    await copyDir(MODELS, dir);
    await using s = await startTestServer([
      `--model-repository=${dir}`,
      "--rate-limit=execution_count",
      "--rate-limit-resource=S:4",
      "--strict-readiness=false",
    ]);
    const rows = await (await fetch(`${s.url}/v2/repository/index`, { method: "POST", body: "{}" }))
      .json() as {
        name: string;
        state: string;
        reason: string;
      }[];
    assert.deepEqual(
      rows.map((r) => [r.name, r.state, r.reason]),
      ["busy_a_py", "busy_b_py"].map((n) => [
        n,
        "UNAVAILABLE",
        `Cannot load '${n}': Resource count for 'R' is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 1`,
      ]),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
