import assert from "node:assert/strict";
import { BytesTensor } from "../../server/core/bytes_tensor.ts";
import { CliError, parseCommandLine } from "../../server/cli.ts";
import type { ServerConfig } from "../../server/config.ts";
import { entryBytes, ResponseCache } from "../../server/cache/response_cache.ts";
import type { InferResponse, RequestedOutput, Tensor } from "../../server/core/types.ts";
import type { ValidatedRequest } from "../../server/core/validate.ts";

function request(inputs: Tensor[], outputs: RequestedOutput[] = []): ValidatedRequest {
  return {
    request: { model: "m", version: "", id: "", inputs, outputs, parameters: {} },
    batchSize: 1,
    inputs: new Map(inputs.map((t) => [t.name, t])),
    outputs: outputs.length > 0 ? outputs : [{ name: "OUT", classification: 0, parameters: {} }],
  };
}

function fp32(name: string, values: number[], shape = [values.length]): Tensor {
  return { name, datatype: "FP32", shape, data: new Uint8Array(new Float32Array(values).buffer) };
}

function response(bytes: number): InferResponse {
  return {
    model: "m",
    version: "1",
    id: "",
    outputs: [{ name: "O", datatype: "UINT8", shape: [bytes], data: new Uint8Array(bytes) }],
    parameters: {},
  };
}

Deno.test("cache keys differ in model, version, load, input name, datatype, shape, contents and requested outputs", () => {
  const c = new ResponseCache(1000);
  const base = request([fp32("A", [1, 2]), fp32("B", [3])]);
  const keys = [
    c.key("m", "1", base),
    c.key("n", "1", base),
    c.key("m", "2", base),
    c.key("m", "1", base, 7),
    c.key("m", "1", request([fp32("C", [1, 2]), fp32("B", [3])])),
    c.key("m", "1", request([{ ...fp32("A", [1, 2]), datatype: "INT32" }, fp32("B", [3])])),
    c.key("m", "1", request([fp32("A", [1, 2], [1, 2]), fp32("B", [3])])),
    c.key("m", "1", request([fp32("A", [1, 5]), fp32("B", [3])])),
    c.key(
      "m",
      "1",
      request([fp32("A", [1, 2]), fp32("B", [3])], [{ name: "X", classification: 0, parameters: {} }]),
    ),
    c.key(
      "m",
      "1",
      request([fp32("A", [1, 2]), fp32("B", [3])], [{ name: "OUT", classification: 2, parameters: {} }]),
    ),
  ];
  assert.equal(new Set(keys).size, keys.length);
  // Input order does not matter, the contents do; BYTES element boundaries count.
  assert.equal(c.key("m", "1", request([fp32("B", [3]), fp32("A", [1, 2])])), keys[0]);
  const enc = new TextEncoder();
  const bytes = (els: string[]): Tensor => ({
    name: "S",
    datatype: "BYTES",
    shape: [els.length],
    data: BytesTensor.of(els.map((e) => enc.encode(e))),
  });
  assert.notEqual(
    c.key("m", "1", request([bytes(["ab", "c"])])),
    c.key("m", "1", request([bytes(["a", "bc"])])),
  );
  assert.match(keys[0]!, /^[0-9a-f]{64}$/);
});

Deno.test("entry sizes count names, datatypes, dims and contents plus 64 bytes", () => {
  const enc = new TextEncoder();
  assert.equal(entryBytes([fp32("OUT", [1, 2, 3])]), 64 + 3 + 4 + 8 + 12);
  assert.equal(
    entryBytes([{
      name: "S",
      datatype: "BYTES",
      shape: [1, 2],
      data: BytesTensor.of([enc.encode("abc"), enc.encode("")]),
    }]),
    64 + 1 + 5 + 16 + (4 + 3) + 4,
  );
});

Deno.test("the cache evicts least recently used entries until an insertion fits", () => {
  // Each response(10) entry: 64 + 1 + 5 + 8 + 10 = 88 bytes.
  const c = new ResponseCache(200);
  assert.equal(c.insert("a", response(10)), true);
  assert.equal(c.insert("b", response(10)), true);
  assert.deepEqual([c.used, c.entryCount], [176, 2]);
  assert.ok(c.lookup("a")); // a is now the most recently used
  assert.equal(c.insert("c", response(10)), true); // evicts b
  assert.equal(c.lookup("b"), undefined);
  assert.ok(c.lookup("a"));
  assert.ok(c.lookup("c"));
  // 64 + 1 + 5 + 8 + 100 = 178 bytes: both others go.
  assert.equal(c.insert("d", response(100)), true);
  assert.deepEqual([c.used, c.entryCount, c.counters.evictions], [178, 1, 3]);
  // Larger than the whole cache: not stored, nothing evicted.
  assert.equal(c.insert("e", response(200)), false);
  assert.deepEqual([c.used, c.entryCount, c.counters.evictions], [178, 1, 3]);
  // Replacing a key frees its old bytes first.
  assert.equal(c.insert("d", response(10)), true);
  assert.deepEqual([c.used, c.entryCount, c.counters.evictions], [88, 1, 3]);
  assert.deepEqual(
    [c.counters.lookups, c.counters.hits, c.counters.misses, c.counters.insertions],
    [4, 3, 1, 5],
  );
});

Deno.test("a stored response is a copy: changing the original afterwards does not change the entry", () => {
  const c = new ResponseCache(1000);
  const r = response(4);
  c.insert("k", r);
  (r.outputs[0]!.data as Uint8Array).fill(7);
  assert.deepEqual([...(c.lookup("k")!.outputs[0]!.data as Uint8Array)], [0, 0, 0, 0]);
});

Deno.test("--cache-config=local,size=N and the deprecated --response-cache-byte-size set the cache size", () => {
  const size = (args: string[]) => (parseCommandLine(args) as ServerConfig).cache.size;
  assert.equal(size([]), 0);
  assert.equal(size(["--cache-config=local,size=1048576"]), 1048576);
  assert.equal(size(["--response-cache-byte-size=4096"]), 4096);
  assert.equal((parseCommandLine([]) as ServerConfig).cache.directory, "/opt/tritonserver/caches");
  assert.equal(
    (parseCommandLine(["--cache-directory=/srv/caches"]) as ServerConfig).cache.directory,
    "/srv/caches",
  );
  const bad: [string[], string][] = [
    [
      ["--cache-config=redis,host=localhost"],
      "Bad value 'redis,host=localhost' for --cache-config: cache 'redis' is not supported (dinfer has the built-in 'local' cache)",
    ],
    [
      ["--cache-config=local,bytes=5"],
      "Bad value 'local,bytes=5' for --cache-config: unknown setting 'bytes' of the 'local' cache",
    ],
    [
      ["--cache-config=local,size=0"],
      "Bad value 'local,size=0' for --cache-config: size must be a positive number of bytes",
    ],
    [
      ["--cache-config=local,size=1k"],
      "Bad value 'local,size=1k' for --cache-config: size must be a positive number of bytes",
    ],
    [["--cache-config=size=5"], "Bad value 'size=5' for --cache-config: expected <cache>,<key>=<value>"],
    [
      ["--cache-config=local,size=5", "--response-cache-byte-size=5"],
      "Flags --response-cache-byte-size and --cache-config cannot both be given",
    ],
    [["--response-cache-byte-size=-1"], "Bad value '-1' for --response-cache-byte-size: must be at least 0"],
  ];
  for (const [args, message] of bad) {
    assert.throws(
      () => parseCommandLine(args),
      (e: unknown) => e instanceof CliError && e.message === message,
    );
  }
});
