/**
 * The benchmarks' wrk runs (bench/wrk.ts): every answer is checked, and the wrong ones are counted. Runs where
 * `wrk` is on PATH (Debian package `wrk`); ignored elsewhere.
 * @module
 */

import { assert, assertEquals } from "../assert.ts";
import { findWrk, runWrk } from "../../bench/wrk.ts";

const WRK = findWrk();

Deno.test({
  name: "a wrk run counts answers with a wrong status or body, and sends the body it was given",
  ignore: WRK === undefined,
  async fn() {
    let n = 0;
    const bodies = new Set<string>();
    const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
      bodies.add(`${req.method} ${req.headers.get("content-type")} ${await req.text()}`);
      n++;
      // The first three answers lack one expected text, the fourth fails; the rest are right.
      if (n <= 2) return new Response('{"a":[1,2]}');
      if (n === 3) return new Response('{"b":[3]}');
      if (n === 4) return new Response('{"a":[1,2],"b":[3]}', { status: 500 });
      return new Response('{"a":[1,2],"b":[3]}');
    });
    try {
      const url = `http://127.0.0.1:${server.addr.port}/infer`;
      const r = await runWrk(WRK!, url, '{"x":"q\\"uote"}', ["[1,2]", '"b":[3]'], 1, 1);
      assertEquals(r.wrong, 4);
      assert(r.count >= 5 && r.count <= n, `wrk counted ${r.count} answers, the server sent ${n}`);
      assertEquals([...bodies], ['POST application/json {"x":"q\\"uote"}']);
    } finally {
      await server.shutdown();
    }
  },
});
