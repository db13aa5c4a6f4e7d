import { strict as assert } from "node:assert";
import { Slab } from "../../server/core/slab.ts";

Deno.test("a slab gives room without taking it until kept, and kept views follow each other", () => {
  const slab = new Slab(64);
  const a = slab.room(10);
  assert.equal(a.byteLength, 10);
  assert.equal(a.byteOffset, 0);
  assert.equal(slab.room(12).byteOffset, 0); // not kept: the same bytes again
  const b = slab.room(12);
  slab.keep(b, 5);
  const c = slab.room(8);
  assert.equal(c.byteOffset, 5);
  assert.equal(c.buffer, b.buffer);
  slab.keep(c, 8);
  assert.equal(slab.room(1).byteOffset, 13);
});

Deno.test("take keeps a view whole and starts the next one at a multiple of 8", () => {
  const slab = new Slab(64);
  const a = slab.take(3);
  const b = slab.take(9);
  const c = slab.take(1);
  assert.deepEqual([a.byteOffset, a.byteLength, b.byteOffset, b.byteLength, c.byteOffset], [0, 3, 8, 9, 24]);
  assert.equal(a.buffer, c.buffer);
});

Deno.test("a slab without room is replaced, and views already given keep their bytes", () => {
  const slab = new Slab(64);
  const views = [slab.take(16), slab.take(16), slab.take(16)];
  views.forEach((v, i) => v.fill(i + 1));
  const next = slab.take(16 + 1); // 48 + 17 > 64: a new slab
  assert.notEqual(next.buffer, views[0]!.buffer);
  assert.equal(next.byteOffset, 0);
  next.fill(9);
  assert.deepEqual(views.map((v) => [...new Set(v)]), [[1], [2], [3]]);
});

Deno.test("more than a quarter of the slab is a buffer of its own, and keeping it changes nothing", () => {
  const slab = new Slab(64);
  slab.take(8);
  const big = slab.room(17);
  assert.equal(big.byteOffset, 0);
  assert.equal(big.buffer.byteLength, 17);
  slab.keep(big, 17);
  assert.equal(slab.room(4).byteOffset, 8);
  assert.equal(slab.room(16).buffer.byteLength, 64);
});
