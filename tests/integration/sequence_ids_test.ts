/**
 * Correlation ids at the edges of uint64 over HTTP JSON: an id beyond 2^53 stays exact (a sequence opened with
 * it is found again with it), and ids outside uint64 or inexact are refused with a 400.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, startTestServer } from "../helpers.ts";

/** One request to simple_sequence with the id written as it is (JSON text), and its status and body. */
async function send(url: string, id: string, flags: string, value: number): Promise<[number, string]> {
  const r = await fetch(`${url}/v2/models/simple_sequence/infer`, {
    method: "POST",
    body: `{"parameters":{"sequence_id":${id}${flags}},"inputs":[{"name":"INPUT","datatype":"INT32",` +
      `"shape":[1,1],"data":[${value}]}]}`,
  });
  return [r.status, await r.text()];
}

Deno.test("sequence ids beyond 2^53 stay exact; ids outside uint64 or inexact are refused", async () => {
  await using s = await startTestServer([`--model-repository=${EXAMPLES}`]);
  // 2^53 + 1 and 2^53 + 2 are different sequences (as doubles both would be 2^53).
  const [a, b] = ["9007199254740993", "9007199254740994"];
  assert.equal((await send(s.url, a, `,"sequence_start":true`, 5))[0], 200);
  assert.equal((await send(s.url, b, `,"sequence_start":true`, 100))[0], 200);
  const [status, body] = await send(s.url, a, `,"sequence_end":true`, 2);
  assert.equal(status, 200, body);
  // simple_sequence accumulates: 5 + 2 in sequence a, whatever b holds.
  assert.deepEqual((JSON.parse(body) as { outputs: { data: number[] }[] }).outputs[0]!.data, [7]);
  const refused =
    `{"error":"Cannot infer 'simple_sequence': sequence_id must be an unsigned integer or a string"}`;
  for (const id of ["-9007199254740993", "18446744073709551616", "9007199254740993.0", "1e300"]) {
    assert.deepEqual(await send(s.url, id, `,"sequence_start":true`, 1), [400, refused], id);
  }
  // The largest uint64 is an id like any other.
  assert.equal(
    (await send(s.url, "18446744073709551615", `,"sequence_start":true,"sequence_end":true`, 1))[0],
    200,
  );
});
