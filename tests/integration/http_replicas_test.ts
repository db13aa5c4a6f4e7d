/**
 * Small models on the HTTP listener threads (server/frontends/http/replicas.ts): with two HTTP threads,
 * `simple` with Triton's own config (no dynamic batching) runs on the listener thread as well as on the main
 * thread; answers, errors and statistics are those of a server with one thread, unloading the model stops
 * every thread from running it, and verbose logging sends its requests back to the main thread. Each request
 * goes on a fresh connection, so that the kernel spreads them over both threads (SO_REUSEPORT).
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, fileLogger, startTestServer } from "../helpers.ts";
import { rawRequest, SIMPLE_DIFF, SIMPLE_REQUEST, SIMPLE_SUM } from "./_http.ts";

const ROUNDS = 32;
/** Listener threads are capped at one per core: with one core there are none to run anything. */
const ONE_CORE = navigator.hardwareConcurrency < 2;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A repository with `simple` as Triton's example configures it: no dynamic batching. */
async function tritonSimple(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-replicas-" });
  await Deno.mkdir(`${dir}/simple/1`, { recursive: true });
  await Deno.copyFile(`${EXAMPLES}/simple/1/model.onnx`, `${dir}/simple/1/model.onnx`);
  const config = (await Deno.readTextFile(`${EXAMPLES}/simple/config.pbtxt`)).split("\n")
    .filter((l) => !l.startsWith("dynamic_batching")).join("\n");
  await Deno.writeTextFile(`${dir}/simple/config.pbtxt`, config);
  return dir;
}

/** A logger writing info and verbose lines to a file. */
async function infer(
  base: string,
  body: unknown = SIMPLE_REQUEST,
  model = "simple",
): Promise<{ status: number; body: string }> {
  const a = await rawRequest(base, {
    method: "POST",
    path: `/v2/models/${model}/infer`,
    headers: { "content-type": "application/json" },
    body: encoder.encode(JSON.stringify(body)),
  });
  return { status: a.status, body: decoder.decode(a.body) };
}

async function post(base: string, path: string, body: unknown = {}): Promise<number> {
  const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
  await res.body?.cancel();
  return res.status;
}

function assertSimple(answer: { status: number; body: string }): void {
  assert.equal(answer.status, 200, answer.body);
  const outputs = (JSON.parse(answer.body) as { outputs: { name: string; data: number[] }[] }).outputs;
  assert.deepEqual(outputs.map((o) => o.name), ["OUTPUT0", "OUTPUT1"]);
  assert.deepEqual(outputs[0]!.data, SIMPLE_SUM);
  assert.deepEqual(outputs[1]!.data, SIMPLE_DIFF);
}

interface Stats {
  inference_count: number;
  execution_count: number;
  inference_stats: Record<string, { count: number }>;
  batch_stats: { batch_size: number; compute_infer: { count: number } }[];
}

async function stats(base: string, model = "simple"): Promise<Stats> {
  const res = await fetch(`${base}/v2/models/${model}/versions/1/stats`);
  return ((await res.json()) as { model_stats: Stats[] }).model_stats[0]!;
}

const WRONG_SHAPE = {
  inputs: [
    { name: "INPUT0", datatype: "INT32", shape: [1, 15], data: Array(15).fill(1) },
    { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
  ],
};

/**
 * A test (skipped on one core) with a repository, `simple` with Triton's config unless `makeRepo` says
 * otherwise, and a log file for the server under test; both are removed afterwards.
 */
function replicaTest(
  name: string,
  body: (repo: string, log: string) => Promise<void>,
  makeRepo: () => Promise<string> = tritonSimple,
): void {
  Deno.test(name, { ignore: ONE_CORE }, async () => {
    const repo = await makeRepo();
    const log = await Deno.makeTempFile();
    try {
      await body(repo, log);
    } finally {
      await Deno.remove(repo, { recursive: true });
      await Deno.remove(log);
    }
  });
}

/** The server under test: two HTTP threads, its log in `log`. */
function twoThreads(log: string, flags: string[]) {
  return startTestServer([...flags, "--http-thread-count=2"], fileLogger(log, { warning: false }));
}

replicaTest(
  "a listener thread runs a small model itself, with the answers, errors and statistics of one thread",
  async (repo, log) => {
    await using one = await startTestServer([`--model-repository=${repo}`, "--http-thread-count=1"]);
    await using two = await twoThreads(log, [`--model-repository=${repo}`]);
    assert.match(await Deno.readTextFile(log), /Listener threads run requests of simple\/1 themselves/);
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    // Every request counts as an arrival once, whichever thread ran it (the memory reclaimer's idle test).
    assert.equal(two.server.registry.arrivals.total, ROUNDS);
    const refused = await infer(one.url, WRONG_SHAPE);
    assert.equal(refused.status, 400);
    for (let i = 0; i < ROUNDS; i++) assert.deepEqual(await infer(two.url, WRONG_SHAPE), refused);
    // Both threads' requests are counted, once each; refusals at validation are not.
    const s = await stats(two.url);
    assert.equal(s.inference_count, ROUNDS);
    assert.equal(s.execution_count, ROUNDS);
    assert.equal(s.inference_stats.success!.count, ROUNDS);
    assert.equal(s.inference_stats.fail!.count, 0);
    assert.equal(s.inference_stats.compute_infer!.count, ROUNDS);
    assert.deepEqual(s.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]), [[1, ROUNDS]]);
    // The Prometheus counters read the same.
    const metrics = await (await fetch(`http://127.0.0.1:${two.server.metricsAddr!.port}/metrics`)).text();
    for (const counter of ["nv_inference_count", "nv_inference_exec_count", "nv_inference_request_success"]) {
      assert.match(metrics, new RegExp(`^${counter}\\{model="simple",version="1"\\} ${ROUNDS}$`, "m"));
    }
  },
);

replicaTest(
  "unloading a model stops the listener threads running it; loading it again starts them anew",
  async (repo, log) => {
    const flags = [`--model-repository=${repo}`, "--model-control-mode=explicit", "--load-model=simple"];
    await using one = await startTestServer([...flags, "--http-thread-count=1"]);
    await using two = await twoThreads(log, flags);
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    assert.equal(await post(one.url, "/v2/repository/models/simple/unload"), 200);
    assert.equal(await post(two.url, "/v2/repository/models/simple/unload"), 200);
    const gone = await infer(one.url);
    assert.notEqual(gone.status, 200);
    for (let i = 0; i < ROUNDS; i++) assert.deepEqual(await infer(two.url), gone);
    assert.equal(await post(two.url, "/v2/repository/models/simple/load"), 200);
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    // The version loaded again counts from zero.
    assert.equal((await stats(two.url)).inference_count, ROUNDS);
  },
);

replicaTest(
  "with verbose logging on, every request of a copied model goes to the main thread, which logs it",
  async (repo, log) => {
    await using two = await twoThreads(log, [`--model-repository=${repo}`]);
    const lines = async () =>
      (await Deno.readTextFile(log)).split("\n")
        .filter((l) => l.includes("HTTP request: POST /v2/models/simple/infer")).length;
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    assert.equal(await lines(), 0);
    assert.equal(await post(two.url, "/v2/logging", { log_verbose_level: 1 }), 200);
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    assert.equal(await lines(), ROUNDS);
    assert.equal(await post(two.url, "/v2/logging", { log_verbose_level: 0 }), 200);
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    assert.equal(await lines(), ROUNDS);
    assert.equal((await stats(two.url)).inference_count, 3 * ROUNDS);
  },
);

/**
 * `simple` with the bundled config, and copies with priority levels, a queue delay, a big version folder and one
 * of many files.
 */
async function batchingRepo(): Promise<string> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-replicas-" });
  const bundled = await Deno.readTextFile(`${EXAMPLES}/simple/config.pbtxt`);
  assert.match(bundled, /^dynamic_batching \{ \}$/m);
  const variant = (name: string, batching: string) =>
    bundled.replace('name: "simple"', `name: "${name}"`).replace(/^dynamic_batching \{ \}$/m, batching);
  const configs = {
    simple: bundled,
    simple_prio: variant("simple_prio", "dynamic_batching { priority_levels: 2 default_priority_level: 1 }"),
    simple_delay: variant("simple_delay", "dynamic_batching { max_queue_delay_microseconds: 100 }"),
    simple_big: variant("simple_big", "dynamic_batching { }"),
    simple_many: variant("simple_many", "dynamic_batching { }"),
  };
  for (const [name, config] of Object.entries(configs)) {
    await Deno.mkdir(`${repo}/${name}/1`, { recursive: true });
    await Deno.copyFile(`${EXAMPLES}/simple/1/model.onnx`, `${repo}/${name}/1/model.onnx`);
    await Deno.writeTextFile(`${repo}/${name}/config.pbtxt`, config);
  }
  // Another file beside the model (as ONNX external data would be) takes the folder past 1 MiB.
  await Deno.writeFile(`${repo}/simple_big/1/weights.bin`, new Uint8Array(1 << 20));
  // Small files, but more than the listener threads walk through (256 entries).
  await Deno.mkdir(`${repo}/simple_many/1/extra`);
  for (let i = 0; i < 300; i++) {
    await Deno.writeFile(`${repo}/simple_many/1/extra/${i}.txt`, new Uint8Array(1));
  }
  return repo;
}

replicaTest(
  "a small model with dynamic batching runs on the listener threads too, unless it has priority levels, a queue delay, big files or too many",
  async (repo, log) => {
    await using two = await twoThreads(log, [`--model-repository=${repo}`]);
    assert.match(
      await Deno.readTextFile(log),
      /Listener threads run requests of simple\/1 themselves\n/,
    );
    const models = ["simple", "simple_prio", "simple_delay", "simple_big", "simple_many"];
    for (let i = 0; i < ROUNDS; i++) {
      for (const model of models) assertSimple(await infer(two.url, SIMPLE_REQUEST, model));
    }
    for (const model of models) {
      const s = await stats(two.url, model);
      assert.equal(s.inference_count, ROUNDS, model);
      assert.equal(s.inference_stats.success!.count, ROUNDS, model);
    }
  },
  batchingRepo,
);

replicaTest(
  "a listener thread does not copy a model whose file changed after the version loaded",
  async (repo, log) => {
    await using two = await twoThreads(log, [`--model-repository=${repo}`]);
    // The same bytes, written again: a new modification time is enough to refuse the copy.
    await Deno.utime(`${repo}/simple/1/model.onnx`, new Date(), new Date(Date.now() + 60_000));
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    assert.match(
      await Deno.readTextFile(log),
      /An HTTP listener thread cannot run 'simple' version 1 itself \(its requests go to the main thread\): '.*simple\/1' has changed since the version loaded/,
    );
    assert.equal((await stats(two.url)).inference_count, ROUNDS);
  },
);

replicaTest(
  "a listener thread does not copy a model whose version folder changed beside the model file",
  async (repo, log) => {
    // ONNX Runtime reads external data files beside the model: a file there written after the load (new
    // weights, say) must not reach a copy the main thread's session does not have.
    await Deno.writeFile(`${repo}/simple/1/weights.data`, new Uint8Array(16));
    await using two = await twoThreads(log, [`--model-repository=${repo}`]);
    await Deno.writeFile(`${repo}/simple/1/weights.data`, new Uint8Array(32));
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
    assert.match(
      await Deno.readTextFile(log),
      /An HTTP listener thread cannot run 'simple' version 1 itself \(its requests go to the main thread\): '.*simple\/1' has changed since the version loaded/,
    );
    assert.equal((await stats(two.url)).inference_count, ROUNDS);
  },
);

/** The MLP of bench/models (a 7 MB file, dynamic batching: its instances run on worker threads). */
replicaTest(
  "a thread-copy-max-bytes below a small model's size still copies it: the limit only adds bigger models",
  async (repo, log) => {
    await using two = await twoThreads(log, [
      `--model-repository=${repo}`,
      "--backend-config=onnxruntime,thread-copy-max-bytes=10",
    ]);
    assert.match(await Deno.readTextFile(log), /Listener threads run requests of simple\/1 themselves/);
    for (let i = 0; i < ROUNDS; i++) assertSimple(await infer(two.url));
  },
);

async function mlpRepo(): Promise<string> {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-replicas-" });
  const from = new URL("../../bench/models/mlp", import.meta.url).pathname;
  await Deno.mkdir(`${repo}/mlp/1`, { recursive: true });
  await Deno.copyFile(`${from}/config.pbtxt`, `${repo}/mlp/config.pbtxt`);
  await Deno.copyFile(`${from}/1/model.onnx`, `${repo}/mlp/1/model.onnx`);
  return repo;
}

replicaTest(
  "with thread-copy-max-bytes a larger model, whose instances run on worker threads, runs on the listener threads too",
  async (repo, log) => {
    const flags = [`--model-repository=${repo}`];
    const body = {
      inputs: [{
        name: "input",
        datatype: "FP32",
        shape: [1, 784],
        data: Array.from({ length: 784 }, (_, i) => (i % 13) / 13),
      }],
    };
    // Without the setting the model is too big to copy.
    const plainLog = await Deno.makeTempFile();
    try {
      await using plain = await twoThreads(plainLog, flags);
      assert.equal((await infer(plain.url, body, "mlp")).status, 200);
      assert.doesNotMatch(await Deno.readTextFile(plainLog), /Listener threads run requests of/);
    } finally {
      await Deno.remove(plainLog);
    }
    await using one = await startTestServer([...flags, "--http-thread-count=1"]);
    await using two = await twoThreads(log, [
      ...flags,
      "--backend-config=onnxruntime,thread-copy-max-bytes=16777216",
    ]);
    assert.match(await Deno.readTextFile(log), /Listener threads run requests of mlp\/1 themselves\n/);
    const expected = await infer(one.url, body, "mlp");
    assert.equal(expected.status, 200, expected.body);
    type Answer = { outputs: { name: string; datatype: string; shape: number[]; data: number[] }[] };
    const want = (JSON.parse(expected.body) as Answer).outputs;
    assert.deepEqual(want.map((o) => [o.name, o.datatype, o.shape, o.data.length]), [["logits", "FP32", [
      1,
      10,
    ], 10]]);
    for (let i = 0; i < ROUNDS; i++) {
      const a = await infer(two.url, body, "mlp");
      assert.equal(a.status, 200, a.body);
      const got = (JSON.parse(a.body) as Answer).outputs;
      assert.deepEqual(got.map((o) => [o.name, o.datatype, o.shape]), [["logits", "FP32", [1, 10]]]);
      // A session with other intra-op threads than the one-thread server's may round the last places
      // differently on other machines; a wrong answer differs by far more.
      for (const [j, v] of got[0]!.data.entries()) {
        const w = want[0]!.data[j]!;
        assert.ok(Math.abs(v - w) <= 1e-5 * Math.max(1, Math.abs(w)), `logit ${j}: ${v} against ${w}`);
      }
    }
    const s = await stats(two.url, "mlp");
    assert.equal(s.inference_count, ROUNDS);
    assert.equal(s.inference_stats.success!.count, ROUNDS);
    assert.equal(s.inference_stats.fail!.count, 0);
  },
  mlpRepo,
);

replicaTest(
  "the config parameter thread_copy_max_bytes copies one larger model; a bad value fails its load",
  async (repo, log) => {
    const config = await Deno.readTextFile(`${repo}/mlp/config.pbtxt`);
    const withCopies = (value: string) =>
      Deno.writeTextFile(
        `${repo}/mlp/config.pbtxt`,
        `${config}\nparameters { key: "thread_copy_max_bytes" value: { string_value: "${value}" } }\n`,
      );
    await withCopies("16777216");
    {
      await using _two = await twoThreads(log, [`--model-repository=${repo}`]);
      assert.match(await Deno.readTextFile(log), /Listener threads run requests of mlp\/1 themselves\n/);
    }
    // Too small for the model's folder: no copy.
    await withCopies("1000000");
    const small = await Deno.makeTempFile();
    try {
      await using _two = await twoThreads(small, [`--model-repository=${repo}`]);
      assert.doesNotMatch(await Deno.readTextFile(small), /Listener threads run requests of/);
    } finally {
      await Deno.remove(small);
    }
    await withCopies("16 MB");
    const bad = await Deno.makeTempFile();
    try {
      await using two = await twoThreads(bad, [
        `--model-repository=${repo}`,
        "--model-control-mode=explicit",
      ]);
      const res = await fetch(`${two.url}/v2/repository/models/mlp/load`, { method: "POST" });
      const body = await res.json() as { error: string };
      assert.equal(res.status, 400);
      assert.match(body.error, /thread_copy_max_bytes is '16 MB', expected a number of bytes/);
    } finally {
      await Deno.remove(bad);
    }
  },
  mlpRepo,
);

replicaTest(
  "requests in flight together on copies of a larger model are batched and each gets its own answer",
  async (repo, log) => {
    const flags = [`--model-repository=${repo}`];
    const n = 48;
    const body = (k: number) => ({
      id: `r${k}`,
      inputs: [{
        name: "input",
        datatype: "FP32",
        shape: [1, 784],
        data: Array.from({ length: 784 }, (_, i) => ((i * (k + 1)) % 17) / 17),
      }],
    });
    const logitsOf = (a: { status: number; body: string }) => {
      assert.equal(a.status, 200, a.body);
      return (JSON.parse(a.body) as { outputs: { data: number[] }[] }).outputs[0]!.data;
    };
    // One at a time on a server with one thread: each request a batch of its own.
    const expected: number[][] = [];
    {
      await using one = await startTestServer([...flags, "--http-thread-count=1"]);
      for (let k = 0; k < n; k++) expected.push(logitsOf(await infer(one.url, body(k), "mlp")));
    }
    await using two = await twoThreads(log, [
      ...flags,
      "--backend-config=onnxruntime,thread-copy-max-bytes=16777216",
    ]);
    // A first round opens the listener thread's copy; the second runs on it, the requests batched together.
    for (let round = 0; round < 2; round++) {
      const answers = await Promise.all(Array.from({ length: n }, (_, k) => infer(two.url, body(k), "mlp")));
      for (const [k, a] of answers.entries()) {
        assert.equal((JSON.parse(a.body) as { id: string }).id, `r${k}`);
        const got = logitsOf(a);
        // Batched, the sums may round differently in the last places; another request's logits differ by far
        // more.
        for (const [i, v] of got.entries()) {
          assert.ok(
            Math.abs(v - expected[k]![i]!) <= 1e-4 * Math.max(1, Math.abs(expected[k]![i]!)),
            `request ${k}`,
          );
        }
      }
    }
    const s = await stats(two.url, "mlp");
    assert.equal(s.inference_count, 2 * n);
    assert.ok(s.execution_count < 2 * n, `${s.execution_count} executions for ${2 * n} requests`);
  },
  mlpRepo,
);
