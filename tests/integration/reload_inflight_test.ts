/**
 * A request whose body is still arriving when a reload of its model finishes is served by the new version: the
 * frontend had chosen the old version before reading the body, and the old one refuses requests once unloaded.
 * @module
 */

import assert from "node:assert/strict";
import { EXAMPLES, startTestServer } from "../helpers.ts";
import { copyDir } from "./_http.ts";

Deno.test("a request whose body arrives across a reload of its model is answered by the new version", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer-reload-" });
  try {
    await copyDir(`${EXAMPLES}/simple`, `${repo}/simple`);
    await using s = await startTestServer([`--model-repository=${repo}`, "--model-control-mode=explicit"]);
    assert.equal((await fetch(`${s.url}/v2/repository/models/simple/load`, { method: "POST" })).status, 200);
    const body = JSON.stringify({
      inputs: [
        { name: "INPUT0", datatype: "INT32", shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
        { name: "INPUT1", datatype: "INT32", shape: [1, 16], data: Array(16).fill(1) },
      ],
      outputs: [{ name: "OUTPUT0" }],
    });
    const bytes = new TextEncoder().encode(body);
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: s.server.httpAddr!.port });
    try {
      const head = `POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${bytes.byteLength}\r\n\r\n`;
      await conn.write(new TextEncoder().encode(head));
      await conn.write(bytes.subarray(0, 10));
      // The request is in; a reload (a config override makes one) replaces version 1 meanwhile.
      await new Promise((r) => setTimeout(r, 100));
      const config = await (await fetch(`${s.url}/v2/models/simple/config`)).text();
      const reload = await fetch(`${s.url}/v2/repository/models/simple/load`, {
        method: "POST",
        body: JSON.stringify({ parameters: { config } }),
      });
      assert.equal(reload.status, 200, await reload.text());
      await conn.write(bytes.subarray(10));
      const buf = new Uint8Array(64 * 1024);
      let text = "";
      // Read until the head and as much body as its Content-Length says.
      const complete = () => {
        const end = text.indexOf("\r\n\r\n");
        const length = /content-length: (\d+)/i.exec(text)?.[1];
        return end >= 0 && length !== undefined && text.length - end - 4 >= Number(length);
      };
      while (!complete()) {
        const n = await conn.read(buf);
        if (n === null) break;
        text += new TextDecoder().decode(buf.subarray(0, n));
      }
      assert.match(text, /^HTTP\/1\.1 200 /, text);
      assert.match(text, /"data":\[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\]/);
    } finally {
      conn.close();
    }
  } finally {
    await Deno.remove(repo, { recursive: true });
  }
});
