/**
 * The sequence batcher over HTTP, on temporary copies of the example accumulators (simple_sequence,
 * simple_dyna_sequence) with other `sequence_batching` settings: idle sequences are released, the oldest
 * strategy batches concurrent sequences by its preferred sizes, and the direct strategy keeps sequences beyond
 * its slots in a backlog until a slot frees.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, startTestServer } from "../helpers.ts";
import { type Answer, copyDir, get, inferJson, outputsOf } from "./_http.ts";

/** Copies an example sequence model into `repo` as `name`, its config edited by `edit`. */
async function copyModel(
  repo: string,
  example: string,
  name: string,
  edit: (config: string) => string,
): Promise<void> {
  const dir = `${repo}/${name}`;
  await copyDir(`${EXAMPLES}/${example}`, dir);
  const config = await Deno.readTextFile(`${dir}/config.pbtxt`);
  const edited = edit(config.replace(`name: "${example}"`, `name: "${name}"`));
  assert.notEqual(edited, config, `the config of '${name}' was not edited`);
  await Deno.writeTextFile(`${dir}/config.pbtxt`, edited);
}

/** Replaces one exact piece of a config, failing if it is absent. */
function replaceOnce(config: string, from: string, to: string): string {
  assert.ok(config.includes(from), `config lacks '${from}'`);
  return config.replace(from, to);
}

/** One request of a sequence: INPUT = value; parameters as given. */
function step(
  base: string,
  model: string,
  id: number | string,
  value: number,
  flags: { start?: boolean; end?: boolean } = {},
): Promise<Answer> {
  const parameters: Record<string, unknown> = { sequence_id: id };
  if (flags.start) parameters.sequence_start = true;
  if (flags.end) parameters.sequence_end = true;
  return inferJson(base, model, {
    parameters,
    inputs: [{ name: "INPUT", datatype: "INT32", shape: [1, 1], data: [value] }],
  });
}

/** The OUTPUT of a successful answer. */
function sum(a: Answer): number {
  assert.equal(a.status, 200, JSON.stringify(a.json));
  const out = outputsOf(a);
  assert.deepEqual(out.map((o) => o.name), ["OUTPUT"]);
  assert.deepEqual(out[0]!.shape, [1, 1]);
  return out[0]!.data![0] as number;
}

/** The error of a failed answer, asserting its status. */
function error(a: Answer, status = 400): string {
  assert.equal(a.status, status, JSON.stringify(a.json));
  return a.json?.error as string;
}

/** batch_size -> execution count, from the statistics extension. */
async function batchCounts(base: string, model: string): Promise<Record<number, number>> {
  const r = await get(base, `/v2/models/${model}/stats`);
  assert.equal(r.status, 200);
  const stats =
    (r.json!.model_stats as { batch_stats: { batch_size: number; compute_infer: { count: number } }[] }[])[
      0
    ]!;
  return Object.fromEntries(stats.batch_stats.map((b) => [b.batch_size, b.compute_infer.count]));
}

const VALUES = [11, 7, 5, 3, 2, 0, 1];
const SUMS = [11, 18, 23, 26, 28, 28, 29];

/** Runs `ids.length` sequences step by step, each step's requests sent concurrently; returns the outputs. */
async function lockstep(base: string, model: string, ids: number[]): Promise<number[][]> {
  const got: number[][] = ids.map(() => []);
  for (let s = 0; s < VALUES.length; s++) {
    const answers = await Promise.all(
      ids.map((id, k) =>
        step(base, model, id, (k + 1) * VALUES[s]!, { start: s === 0, end: s === VALUES.length - 1 })
      ),
    );
    answers.forEach((a, k) => got[k]!.push(sum(a)));
  }
  return got;
}

/** What `lockstep` should answer on simple_dyna_sequence copies: sums of (k+1)*VALUES, END adds the id. */
function dynaExpected(ids: number[]): number[][] {
  return ids.map((id, k) => SUMS.map((x, s) => (k + 1) * x + (s === SUMS.length - 1 ? id : 0)));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

Deno.test("sequence batcher: idle release, oldest batching, direct backlog", async (t) => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_seq_" });
  try {
    await copyModel(
      repo,
      "simple_sequence",
      "seq_idle",
      (c) =>
        replaceOnce(c, "max_sequence_idle_microseconds: 5000000", "max_sequence_idle_microseconds: 1000000"),
    );
    const oldest = (preferred: string) => (c: string) =>
      replaceOnce(
        c,
        "oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 0 }",
        `oldest { max_candidate_sequences: 4 preferred_batch_size: [ ${preferred} ] max_queue_delay_microseconds: 300000 }`,
      );
    await copyModel(repo, "simple_dyna_sequence", "dyna_pref4", oldest("4"));
    await copyModel(repo, "simple_dyna_sequence", "dyna_pref24", oldest("2, 4"));
    await copyModel(
      repo,
      "simple_sequence",
      "direct_two",
      (c) => replaceOnce(c, "max_batch_size: 8", "max_batch_size: 2"),
    );
    await using srv = await startTestServer([`--model-repository=${repo}`]);
    const base = srv.url;

    await t.step("a sequence idle longer than max_sequence_idle_microseconds is released", async () => {
      const m = "seq_idle";
      assert.equal(sum(await step(base, m, 77, 5, { start: true })), 5);
      assert.equal(sum(await step(base, m, "idle-s", 1, { start: true })), 1);
      // Requests closer together than the idle limit keep a sequence alive (gaps of 60 ms against 1 s, so that a
      // loaded machine's late timers and slow answers stay well inside it).
      assert.equal(sum(await step(base, m, 78, 1, { start: true })), 1);
      for (let i = 0; i < 6; i++) {
        await sleep(60);
        assert.equal(sum(await step(base, m, 78, 1)), 2 + i);
      }
      await sleep(100);
      assert.equal(sum(await step(base, m, 78, 1)), 8);
      // Idle for more than the limit plus one sweep (every half limit).
      await sleep(1700);
      const released = (id: string) =>
        `Cannot infer '${m}': sequence ${id} was released after being idle for more than ` +
        `max_sequence_idle_microseconds (1000000); start it again with sequence_start`;
      assert.equal(error(await step(base, m, 77, 1)), released("77"));
      assert.equal(error(await step(base, m, 78, 1, { end: true })), released("78"));
      assert.equal(error(await step(base, m, "idle-s", 1)), released("'idle-s'"));
      // An id never seen is not "released".
      assert.equal(
        error(await step(base, m, 79, 1)),
        `Cannot infer '${m}': sequence 79 is not active; its first request must set sequence_start`,
      );
      // START opens the id again, from a fresh sum.
      assert.equal(sum(await step(base, m, 77, 3, { start: true })), 3);
      assert.equal(sum(await step(base, m, 77, 4, { end: true })), 7);
    });

    await t.step("oldest: 4 concurrent sequences with preferred size 4 run in batches of 4", async () => {
      const ids = [101, 102, 103, 104];
      assert.deepEqual(await lockstep(base, "dyna_pref4", ids), dynaExpected(ids));
      assert.deepEqual(await batchCounts(base, "dyna_pref4"), { 4: VALUES.length });
    });

    await t.step("oldest: with preferred sizes [2, 4] a batch of 2 runs as soon as it forms", async () => {
      // Triton's GetDynamicBatch executes a preferred size as soon as it is reached: the first request of a
      // step waits (1 is not preferred), the second makes 2 and both run; the other two follow as a 2.
      const ids = [201, 202, 203, 204];
      assert.deepEqual(await lockstep(base, "dyna_pref24", ids), dynaExpected(ids));
      assert.deepEqual(await batchCounts(base, "dyna_pref24"), { 2: 2 * VALUES.length });
    });

    await t.step("direct: a third sequence on 2 slots waits in the backlog until one ends", async () => {
      const m = "direct_two";
      assert.equal(sum(await step(base, m, 301, 1, { start: true })), 1);
      assert.equal(sum(await step(base, m, 302, 2, { start: true })), 2);
      let thirdDone = false;
      const third = step(base, m, 303, 3, { start: true }).then((a) => {
        thirdDone = true;
        return a;
      });
      await sleep(300);
      assert.equal(thirdDone, false, "the third sequence ran without a free slot");
      // The two bound sequences go on meanwhile.
      assert.equal(sum(await step(base, m, 301, 10)), 11);
      assert.equal(sum(await step(base, m, 302, 10)), 12);
      assert.equal(thirdDone, false);
      assert.equal(sum(await step(base, m, 301, 100, { end: true })), 111);
      assert.equal(sum(await third), 3);
      assert.equal(sum(await step(base, m, 303, 4)), 7);
      assert.equal(sum(await step(base, m, 302, 1, { end: true })), 13);
      assert.equal(sum(await step(base, m, 303, 5, { end: true })), 12);
      // Three concurrent sequences from the start: the third waits, all get their sums.
      const run = async (id: number, scale: number) => {
        const out: number[] = [];
        for (let s = 0; s < VALUES.length; s++) {
          const a = await step(base, m, id, scale * VALUES[s]!, {
            start: s === 0,
            end: s === VALUES.length - 1,
          });
          out.push(sum(a));
        }
        return out;
      };
      const got = await Promise.all([run(401, 1), run(402, -1), run(403, 2)]);
      assert.deepEqual(got, [SUMS, SUMS.map((x) => -x), SUMS.map((x) => 2 * x)]);
    });

    await t.step(
      "a request without START after an END that is queued, not yet run, is refused (as Triton)",
      async () => {
        const m = "direct_two";
        assert.equal(sum(await step(base, m, 501, 1, { start: true })), 1);
        assert.equal(sum(await step(base, m, 502, 2, { start: true })), 2);
        // 503 waits in the backlog, its START and its END queued.
        const opened = step(base, m, 503, 3, { start: true });
        const ended = step(base, m, 503, 4, { end: true });
        await sleep(200);
        // Its id is forgotten once the END is queued: a request without START is not run on the ended sequence.
        assert.equal(
          error(await step(base, m, 503, 50)),
          `Cannot infer '${m}': sequence 503 is not active; its first request must set sequence_start`,
        );
        // A START after it opens a new sequence, which runs after the ended one.
        const again = step(base, m, 503, 30, { start: true, end: true });
        assert.equal(sum(await step(base, m, 501, 1, { end: true })), 2);
        assert.deepEqual([sum(await opened), sum(await ended), sum(await again)], [3, 7, 30]);
        assert.equal(sum(await step(base, m, 502, 1, { end: true })), 3);
      },
    );
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
