import { assertEquals } from "../assert.ts";
import { setBytes } from "../../server/core/shared_copy.ts";

/** Bytes 0, 1, 2, ... (mod 251) at byte offset `at` of a buffer of their own. */
function pattern(n: number, at: number, seed: number): Uint8Array {
  const b = new Uint8Array(at + n);
  for (let i = 0; i < n; i++) b[at + i] = (seed + i * 7) % 251;
  return b.subarray(at);
}

Deno.test("setBytes copies into shared memory at every relative alignment, leaving the rest untouched", () => {
  for (const n of [0, 1, 255, 256, 3136, 5000]) {
    for (let srcAt = 0; srcAt < 8; srcAt++) {
      for (const outAt of [0, 3, 8, 13]) {
        const shared = new Uint8Array(new SharedArrayBuffer(n + 64)).fill(0xee);
        const out = shared.subarray(5);
        const src = pattern(n, srcAt, n + srcAt);
        setBytes(out, src, outAt);
        const want = new Uint8Array(n + 64).fill(0xee);
        want.set(src, 5 + outAt);
        assertEquals(Array.from(shared), Array.from(want), `n ${n}, src at ${srcAt}, out at ${outAt}`);
      }
    }
  }
});

Deno.test("setBytes copies out of shared memory and between plain buffers as set does", () => {
  const shared = new Uint8Array(new SharedArrayBuffer(4000));
  shared.set(pattern(4000, 0, 9));
  for (const [from, to] of [[0, 0], [3, 0], [8, 5], [17, 2]]) {
    const src = shared.subarray(from!, from! + 3000);
    const out = new Uint8Array(3100);
    setBytes(out, src, to!);
    assertEquals(Array.from(out.subarray(to!, to! + 3000)), Array.from(src));
    assertEquals(out[to! + 3000], 0);
    const plain = new Uint8Array(3100);
    setBytes(plain, out.subarray(1, 3001), 7);
    assertEquals(Array.from(plain.subarray(7, 3007)), Array.from(out.subarray(1, 3001)));
  }
});

Deno.test("setBytes stages copies larger than the kept staging buffer through one of their own", () => {
  const n = (1 << 20) + 3;
  const shared = new Uint8Array(new SharedArrayBuffer(n + 8));
  const src = pattern(n, 1, 3);
  setBytes(shared, src, 8);
  assertEquals(shared[8 + n - 1], src[n - 1]);
  assertEquals(shared[8 + 12345], src[12345]);
  assertEquals(shared[7], 0);
});
