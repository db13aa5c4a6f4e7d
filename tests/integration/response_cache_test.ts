/**
 * The response cache against a real server: `count_py` (tests/fixtures/cache_models) answers RUNS, the number
 * of requests its instance executed, so a cached answer is told apart from an execution by its RUNS. Hits,
 * misses and evictions are checked in the answers, the statistics extension (HTTP and gRPC through
 * tritonclient) and the `nv_cache_*` metrics, with exact counts.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { startTestServer, type TestServer } from "../helpers.ts";
import {
  binaryOutputs,
  copyDir,
  get,
  inferBinary,
  inferJson,
  outputsOf,
  type OutputTensor,
} from "./_http.ts";
import { pythonJson } from "./_python.ts";

const CACHE_MODELS = fileURLToPath(new URL("../fixtures/cache_models", import.meta.url));

interface Duration {
  count: number;
  ns: number;
}

interface ModelStats {
  inference_count: number;
  execution_count: number;
  inference_stats: Record<string, Duration>;
}

/** A repository with count_py, a copy of it without the cache, and the given extra models. */
async function repository(extra: Record<string, string> = {}): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-cache-test-" });
  await copyDir(`${CACHE_MODELS}/count_py`, `${dir}/count_py`);
  const config = await Deno.readTextFile(`${CACHE_MODELS}/count_py/config.pbtxt`);
  await copyDir(`${CACHE_MODELS}/count_py`, `${dir}/count_nocache_py`);
  await Deno.writeTextFile(
    `${dir}/count_nocache_py/config.pbtxt`,
    config.replace('name: "count_py"', 'name: "count_nocache_py"').replace(
      "response_cache { enable: true }",
      "",
    ),
  );
  for (const [name, more] of Object.entries(extra)) {
    await copyDir(`${CACHE_MODELS}/count_py`, `${dir}/${name}`);
    await Deno.writeTextFile(
      `${dir}/${name}/config.pbtxt`,
      config.replace('name: "count_py"', `name: "${name}"`) + more,
    );
  }
  return dir;
}

async function serve(dir: string, flags: string[]): Promise<TestServer> {
  return await startTestServer([`--model-repository=${dir}`, ...flags]);
}

/** Runs count_py (or another model) on IN and returns [OUT, RUNS]. */
async function count(s: TestServer, values: number[], model = "count_py"): Promise<[number[], number]> {
  const a = await inferJson(s.url, model, {
    inputs: [{ name: "IN", datatype: "FP32", shape: [values.length], data: values }],
  });
  assert.equal(a.status, 200, JSON.stringify(a.json));
  const out = outputsOf(a);
  const find = (n: string): OutputTensor => out.find((t) => t.name === n)!;
  return [find("OUT").data as number[], (find("RUNS").data as number[])[0]!];
}

async function stats(s: TestServer, model: string): Promise<ModelStats> {
  const a = await get(s.url, `/v2/models/${model}/stats`);
  assert.equal(a.status, 200);
  return (a.json as { model_stats: ModelStats[] }).model_stats[0]!;
}

/** The samples of a scrape as `name{labels}` => value. */
async function scrape(s: TestServer): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${s.server.metricsAddr!.port}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const i = line.lastIndexOf(" ");
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

Deno.test("a repeated request is answered from the cache without running the model; hits and misses are counted", async () => {
  const dir = await repository();
  try {
    await using s = await serve(dir, ["--cache-config=local,size=1048576"]);
    assert.deepEqual(await count(s, [1, 2, 3]), [[2, 4, 6], 1]);
    assert.deepEqual(await count(s, [1, 2, 3]), [[2, 4, 6], 1]);
    assert.deepEqual(await count(s, [1, 2, 3]), [[2, 4, 6], 1]);
    // Other contents, another shape: each its own entry.
    assert.deepEqual(await count(s, [1, 2, 4]), [[2, 4, 8], 2]);
    assert.deepEqual(await count(s, [1, 2]), [[2, 4], 3]);
    assert.deepEqual(await count(s, [1, 2, 4]), [[2, 4, 8], 2]);
    // Asking for one output is another request.
    const only = await inferJson(s.url, "count_py", {
      inputs: [{ name: "IN", datatype: "FP32", shape: [3], data: [1, 2, 3] }],
      outputs: [{ name: "RUNS" }],
    });
    assert.deepEqual(outputsOf(only).map((t) => [t.name, t.data]), [["RUNS", [4]]]);
    // A model without response_cache runs every time.
    assert.deepEqual(await count(s, [1, 2, 3], "count_nocache_py"), [[2, 4, 6], 1]);
    assert.deepEqual(await count(s, [1, 2, 3], "count_nocache_py"), [[2, 4, 6], 2]);

    const st = await stats(s, "count_py");
    assert.equal(st.inference_count, 4);
    assert.equal(st.execution_count, 4);
    const is = st.inference_stats;
    assert.deepEqual([is.success!.count, is.cache_hit!.count, is.cache_miss!.count], [7, 3, 4]);
    assert.equal(is.compute_infer!.count, 4);
    assert.equal(is.queue!.count, 7);
    assert.ok(is.cache_hit!.ns > 0 && is.cache_miss!.ns > 0);
    const plain = (await stats(s, "count_nocache_py")).inference_stats;
    assert.deepEqual([plain.success!.count, plain.cache_hit, plain.cache_miss], [2, { count: 0, ns: 0 }, {
      count: 0,
      ns: 0,
    }]);

    const m = await scrape(s);
    const labels = '{model="count_py",version="1"}';
    assert.equal(m.get(`nv_cache_num_hits_per_model${labels}`), 3);
    assert.equal(m.get(`nv_cache_num_misses_per_model${labels}`), 4);
    assert.equal(m.get(`nv_cache_hit_duration_per_model${labels}`), Math.round(is.cache_hit!.ns / 1000));
    assert.equal(m.get(`nv_cache_miss_duration_per_model${labels}`), Math.round(is.cache_miss!.ns / 1000));
    assert.equal(m.get(`nv_inference_request_success${labels}`), 7);
    assert.equal(m.get(`nv_inference_count${labels}`), 4);
    assert.equal(m.get(`nv_inference_exec_count${labels}`), 4);
    // Models without the cache have no cache series.
    assert.equal(m.has('nv_cache_num_hits_per_model{model="count_nocache_py",version="1"}'), false);
    assert.equal(m.get("nv_cache_num_lookups"), 7);
    assert.equal(m.get("nv_cache_num_hits"), 3);
    assert.equal(m.get("nv_cache_num_misses"), 4);
    assert.equal(m.get("nv_cache_num_entries"), 4);
    assert.equal(m.get("nv_cache_num_evictions"), 0);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("without --cache-config a model with response_cache runs every time and reports no cache metrics", async () => {
  const dir = await repository();
  try {
    await using s = await serve(dir, []);
    assert.deepEqual(await count(s, [5]), [[10], 1]);
    assert.deepEqual(await count(s, [5]), [[10], 2]);
    const is = (await stats(s, "count_py")).inference_stats;
    assert.deepEqual([is.cache_hit, is.cache_miss], [{ count: 0, ns: 0 }, { count: 0, ns: 0 }]);
    const m = await scrape(s);
    assert.equal([...m.keys()].some((k) => k.startsWith("nv_cache_")), false);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the cache evicts the least recently used entry when an insertion needs room", async () => {
  const dir = await repository();
  try {
    // An entry of count_py on 1 element: 64 + (3 + 4 + 8 + 4) for OUT + (4 + 5 + 8 + 8) for RUNS = 108 bytes;
    // 250 bytes hold two.
    await using s = await serve(dir, ["--cache-config=local,size=250"]);
    assert.deepEqual(await count(s, [1]), [[2], 1]); // A: miss
    assert.deepEqual(await count(s, [2]), [[4], 2]); // B: miss
    assert.deepEqual(await count(s, [1]), [[2], 1]); // A: hit, now the most recently used
    assert.deepEqual(await count(s, [3]), [[6], 3]); // C: miss, evicts B
    assert.deepEqual(await count(s, [2]), [[4], 4]); // B: miss, evicts A
    assert.deepEqual(await count(s, [3]), [[6], 3]); // C: hit
    assert.deepEqual(await count(s, [1]), [[2], 5]); // A: miss, evicts B
    const m = await scrape(s);
    assert.equal(m.get("nv_cache_num_evictions"), 3);
    assert.equal(m.get("nv_cache_num_entries"), 2);
    assert.equal(m.get("nv_cache_num_hits"), 2);
    assert.equal(m.get("nv_cache_num_misses"), 5);
    assert.equal(m.get("nv_cache_util"), 216 / 250);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a response larger than the whole cache is served and not stored", async () => {
  const dir = await repository();
  try {
    await using s = await serve(dir, ["--cache-config=local,size=100"]);
    assert.deepEqual(await count(s, [1]), [[2], 1]);
    assert.deepEqual(await count(s, [1]), [[2], 2]);
    const m = await scrape(s);
    assert.deepEqual([m.get("nv_cache_num_entries"), m.get("nv_cache_num_misses")], [0, 2]);
    const is = (await stats(s, "count_py")).inference_stats;
    assert.deepEqual([is.cache_hit!.count, is.cache_miss!.count], [0, 2]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a reloaded model does not answer from the entries of its previous load", async () => {
  const dir = await repository();
  try {
    await using s = await serve(dir, [
      "--cache-config=local,size=1048576",
      "--model-control-mode=explicit",
      "--load-model=count_py",
    ]);
    assert.deepEqual(await count(s, [1]), [[2], 1]);
    assert.deepEqual(await count(s, [1]), [[2], 1]);
    const before = (await stats(s, "count_py")).inference_stats;
    assert.deepEqual([before.cache_hit!.count, before.cache_miss!.count], [1, 1]);
    // Unloaded and loaded again (a load of unchanged files while the model serves changes nothing, as Triton).
    const unload = await fetch(`${s.url}/v2/repository/models/count_py/unload`, {
      method: "POST",
      body: "{}",
    });
    assert.equal(unload.status, 200, await unload.text());
    const load = await fetch(`${s.url}/v2/repository/models/count_py/load`, { method: "POST", body: "{}" });
    assert.equal(load.status, 200, await load.text());
    // The new load's instance starts counting again: RUNS 1 from an execution, not from the cache.
    assert.deepEqual(await count(s, [1]), [[2], 1]);
    assert.deepEqual(await count(s, [1]), [[2], 1]);
    const after = (await stats(s, "count_py")).inference_stats;
    assert.deepEqual([after.cache_hit!.count, after.cache_miss!.count, after.compute_infer!.count], [
      1,
      1,
      1,
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("decoupled and sequence-batched models with response_cache are refused at load with Triton's reasons", async () => {
  const dir = await repository({
    decoupled_cache_py: "model_transaction_policy { decoupled: true }\n",
    sequence_cache_py: "sequence_batching { max_sequence_idle_microseconds: 1000000 }\n",
  });
  try {
    await using s = await serve(dir, ["--cache-config=local,size=1048576", "--strict-readiness=false"]);
    const index = await fetch(`${s.url}/v2/repository/index`, { method: "POST", body: "{}" });
    const rows = (await index.json()) as { name: string; state: string; reason: string }[];
    const row = (n: string) => rows.find((r) => r.name === n)!;
    assert.deepEqual([row("decoupled_cache_py").state, row("decoupled_cache_py").reason], [
      "UNAVAILABLE",
      "Cannot load 'decoupled_cache_py': Response Cache does not currently support model decoupled_cache_py with 'decoupled' transaction policy. Please disable the response cache",
    ]);
    assert.deepEqual([row("sequence_cache_py").state, row("sequence_cache_py").reason], [
      "UNAVAILABLE",
      "Cannot load 'sequence_cache_py': Response Cache does not currently support model sequence_cache_py with sequence batching scheduler. Please disable the response cache",
    ]);
    assert.equal(row("count_py").state, "READY");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("shared-memory inputs are keyed on their contents; tritonclient sees the hits over HTTP and gRPC", async () => {
  const dir = await repository();
  try {
    await using s = await serve(dir, [
      "--cache-config=local,size=1048576",
      "--allow-client-shm=true",
      "--allow-grpc=true",
    ]);
    const result = await pythonJson(
      `
import json, os
import numpy as np
import tritonclient.http as httpclient
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm

c = httpclient.InferenceServerClient(os.environ["URL"])
g = grpcclient.InferenceServerClient(os.environ["GRPC"])
key = "/dinfer_cache_test_%d" % os.getpid()
h = shm.create_shared_memory_region("cache_in", key, 12)
runs = []
try:
    c.register_system_shared_memory("cache_in", key, 12)
    def from_shm():
        i = httpclient.InferInput("IN", [3], "FP32")
        i.set_shared_memory("cache_in", 12)
        r = c.infer("count_py", [i])
        return [r.as_numpy("OUT").tolist(), int(r.as_numpy("RUNS")[0])]
    shm.set_shared_memory_region(h, [np.array([1, 2, 3], dtype=np.float32)])
    runs.append(from_shm())
    runs.append(from_shm())
    shm.set_shared_memory_region(h, [np.array([4, 5, 6], dtype=np.float32)])
    runs.append(from_shm())
    # The same contents sent inline over gRPC: the entry the shared-memory request made.
    i = grpcclient.InferInput("IN", [3], "FP32")
    i.set_data_from_numpy(np.array([1, 2, 3], dtype=np.float32))
    r = g.infer("count_py", [i])
    runs.append([r.as_numpy("OUT").tolist(), int(r.as_numpy("RUNS")[0])])
    c.unregister_system_shared_memory("cache_in")
finally:
    shm.destroy_shared_memory_region(h)
gs = g.get_inference_statistics("count_py", as_json=True)["model_stats"][0]["inference_stats"]
hs = c.get_inference_statistics("count_py")["model_stats"][0]["inference_stats"]
print(json.dumps({
    "runs": runs,
    "grpc": [int(gs["cache_hit"]["count"]), int(gs["cache_miss"]["count"]), int(gs["success"]["count"])],
    "http": [hs["cache_hit"]["count"], hs["cache_miss"]["count"], hs["success"]["count"]],
}))
`,
      { URL: s.httpHost, GRPC: `127.0.0.1:${s.server.grpcPort}` },
    );
    assert.deepEqual(result, {
      runs: [[[2, 4, 6], 1], [[2, 4, 6], 1], [[8, 10, 12], 2], [[2, 4, 6], 1]],
      grpc: [2, 2, 4],
      http: [2, 2, 4],
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a cached answer of 1 MiB or more over binary HTTP carries the same bytes at every hit", async () => {
  // Such answers are streamed in their parts, the cached output's own bytes among them: a stream that took
  // (detached) them emptied the cache entry, and later hits answered no data.
  const dir = await Deno.makeTempDir({ prefix: "dinfer-cache-test-" });
  try {
    const fixtures = fileURLToPath(new URL("../fixtures/models/identity_fp32", import.meta.url));
    await copyDir(fixtures, `${dir}/identity_fp32`);
    const config = await Deno.readTextFile(`${fixtures}/config.pbtxt`);
    await Deno.writeTextFile(
      `${dir}/identity_fp32/config.pbtxt`,
      `${config}\nresponse_cache { enable: true }\n`,
    );
    await using s = await serve(dir, [`--cache-config=local,size=${64 << 20}`]);
    const n = 300_000; // 1.2 MB of FP32
    const input = new Float32Array(n).map((_, i) => i % 1000);
    const bytes = new Uint8Array(input.buffer);
    for (let i = 0; i < 3; i++) {
      const a = await inferBinary(s.url, "identity_fp32", {
        inputs: [{
          name: "INPUT0",
          datatype: "FP32",
          shape: [1, n],
          parameters: { binary_data_size: bytes.byteLength },
        }],
        outputs: [{ name: "OUTPUT0", parameters: { binary_data: true } }],
      }, [bytes]);
      assert.equal(a.status, 200, `request ${i + 1}`);
      const out = binaryOutputs(a).get("OUTPUT0")!;
      assert.equal(out.byteLength, bytes.byteLength, `request ${i + 1}`);
      assert.ok(out.every((b, k) => b === bytes[k]), `request ${i + 1}: the bytes differ`);
    }
    const st = await stats(s, "identity_fp32");
    assert.equal(st.inference_stats.cache_hit!.count, 2);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
