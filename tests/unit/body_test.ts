import { assert, assertEquals, assertRejects } from "../assert.ts";
import { readDeclared } from "../../server/frontends/http/_body.ts";
import { ServerError } from "../../server/core/errors.ts";

function stream(...chunks: number[][]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(new Uint8Array(c));
      controller.close();
    },
  });
}

Deno.test("readDeclared reads the chunks of a body into one buffer of its declared length", async () => {
  const body = await readDeclared(stream([1, 2], [3], [4, 5, 6]), 6);
  assertEquals(body, new Uint8Array([1, 2, 3, 4, 5, 6]));
  assertEquals(body.buffer.byteLength, 6);
  assertEquals(await readDeclared(null, 0), new Uint8Array(0));
});

Deno.test("readDeclared places the asked offset of the body 8-byte aligned", async () => {
  const body = await readDeclared(stream([9, 9, 9], [1, 2, 3, 4]), 7, 3);
  assertEquals(body, new Uint8Array([9, 9, 9, 1, 2, 3, 4]));
  assertEquals((body.byteOffset + 3) % 8, 0);
  assert(
    new Float32Array(body.buffer, body.byteOffset + 3, 1).length === 1,
    "a typed view at the offset works",
  );
  // An offset beyond the body is ignored.
  assertEquals((await readDeclared(stream([1]), 1, 5)).byteOffset, 0);
});

Deno.test("readDeclared refuses a body shorter or longer than its Content-Length", async () => {
  await assertRejects(
    () => readDeclared(stream([1, 2]), 3),
    ServerError,
    {
      code: "INVALID_ARG",
      message: "Cannot read the request body: it ended after 2 of its Content-Length (3 bytes)",
    },
  );
  await assertRejects(
    () => readDeclared(stream([1, 2], [3, 4]), 3),
    ServerError,
    {
      code: "INVALID_ARG",
      message: "Cannot read the request body: it is longer than its Content-Length (3 bytes)",
    },
  );
});
