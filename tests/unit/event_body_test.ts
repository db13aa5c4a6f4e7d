/**
 * The server-sent events body: events wait for a client that does not read only up to the bound, past which
 * the body fails and the request is told once; a client that goes away is told once as well.
 * @module
 */

import assert from "node:assert/strict";
import { EventBody } from "../../server/frontends/http/event_body.ts";

Deno.test("events up to the bound wait for the reader and reach it in order", async () => {
  const gone: string[] = [];
  const events = new EventBody((why) => gone.push(why), 10);
  events.push(new Uint8Array([1, 2, 3, 4]));
  events.push(new Uint8Array([5, 6, 7, 8, 9, 10]));
  events.close();
  events.push(new Uint8Array([11]));
  assert.equal(events.open, false);
  const got = new Uint8Array(await new Response(events.body).arrayBuffer());
  assert.deepEqual([...got], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
  assert.deepEqual(gone, []);
});

Deno.test("one byte past the bound fails the body and tells the request once: the client is not reading", async () => {
  const gone: string[] = [];
  const events = new EventBody((why) => gone.push(why), 10);
  events.push(new Uint8Array(10));
  assert.equal(events.open, true);
  events.push(new Uint8Array(1));
  assert.equal(events.open, false);
  events.push(new Uint8Array(1));
  events.close();
  assert.deepEqual(gone, ["not reading"]);
  await assert.rejects(
    new Response(events.body).arrayBuffer(),
    /the client read none of the last 10 bytes of events: the answer was cut/,
  );
});

Deno.test("bytes the reader took no longer count against the bound", async () => {
  const gone: string[] = [];
  const events = new EventBody((why) => gone.push(why), 10);
  const reader = events.body.getReader();
  for (let i = 0; i < 5; i++) {
    events.push(new Uint8Array(8).fill(i));
    assert.deepEqual([...(await reader.read()).value!], new Array(8).fill(i));
  }
  assert.equal(events.open, true);
  assert.deepEqual(gone, []);
});

Deno.test("a client that goes away (the body cancelled) is told once, and later events are dropped", async () => {
  const gone: string[] = [];
  const events = new EventBody((why) => gone.push(why), 10);
  events.push(new Uint8Array(4));
  await events.body.cancel();
  events.push(new Uint8Array(4));
  events.close();
  events.fail(new Error("late"));
  assert.equal(events.open, false);
  assert.deepEqual(gone, ["left"]);
});
