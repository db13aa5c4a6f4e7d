import { createHash } from "node:crypto";
import { assertEquals, assertRejects, assertThrows } from "../assert.ts";
import { ServerError } from "../../server/core/errors.ts";
import {
  type ListedObject,
  MirroredRepository,
  type ObjectStore,
  parseBucketUrl,
  parseS3Url,
  tritonCredential,
  verifyObject,
} from "../../server/repository/cloud.ts";

Deno.test("s3:// paths name a bucket and a path, with a host:port for S3-compatible servers", () => {
  assertEquals(parseS3Url("s3://bucket/path/to/models"), {
    endpoint: undefined,
    bucket: "bucket",
    prefix: "path/to/models",
  });
  assertEquals(parseS3Url("s3://bucket"), { endpoint: undefined, bucket: "bucket", prefix: "" });
  assertEquals(parseS3Url("s3://127.0.0.1:9000/bucket/models/"), {
    endpoint: "http://127.0.0.1:9000",
    bucket: "bucket",
    prefix: "models",
  });
  assertEquals(parseS3Url("/local/models"), undefined);
  assertThrows(() => parseS3Url("s3://host:9000/"), ServerError, {
    message: "Cannot use model repository 's3://host:9000/': it names no bucket",
  });
});

Deno.test("gs:// paths name a bucket and a path; as:// paths an account, a container and a path", () => {
  assertEquals(parseBucketUrl("gs://bucket/a/b"), {
    scheme: "gs",
    location: { bucket: "bucket", prefix: "a/b" },
  });
  assertEquals(parseBucketUrl("as://acct/container/models/"), {
    scheme: "as",
    location: { account: "acct", bucket: "container", prefix: "models" },
  });
  assertEquals(parseBucketUrl("s3://bucket/a"), undefined);
  assertThrows(() => parseBucketUrl("gs://"), ServerError, {
    message: "Cannot use model repository 'gs://': it names no bucket",
  });
  assertThrows(() => parseBucketUrl("as://acct"), ServerError, {
    message: "Cannot use model repository 'as://acct': it names no account and container",
  });
});

Deno.test("a downloaded object must have its listed size and, where the store keeps one, its MD5", () => {
  const bytes = new TextEncoder().encode("hello");
  verifyObject("k", bytes, 5, "5d41402abc4b2a76b9719d911017c592");
  verifyObject("k", bytes, 5, undefined);
  assertThrows(() => verifyObject("m/1/model.onnx", bytes, 6, undefined), ServerError, {
    message: "Cannot use object 'm/1/model.onnx': downloaded 5 bytes, the listing says 6",
  });
  assertThrows(() => verifyObject("k", bytes, 5, "00000000000000000000000000000000"), ServerError, {
    message:
      "Cannot use object 'k': its MD5 5d41402abc4b2a76b9719d911017c592 differs from the listed 00000000000000000000000000000000",
  });
});

function jsonError(text: string): string {
  try {
    JSON.parse(text);
  } catch (err) {
    return (err as Error).message;
  }
  return "";
}

/** A store in memory that counts its downloads; `corrupt` makes one object come back wrong. */
class FakeStore implements ObjectStore {
  objects = new Map<string, { bytes: Uint8Array; version: number }>();
  downloads: string[] = [];
  corrupt: string | undefined;
  closed = false;

  put(rel: string, text: string): void {
    const v = (this.objects.get(rel)?.version ?? 0) + 1;
    this.objects.set(rel, { bytes: new TextEncoder().encode(text), version: v });
  }

  list(): Promise<ListedObject[]> {
    return Promise.resolve([...this.objects].map(([rel, o]) => ({
      rel,
      size: o.bytes.byteLength,
      md5: createHash("md5").update(o.bytes).digest("hex"),
      version: String(o.version),
    })));
  }

  get(rel: string): Promise<Uint8Array> {
    this.downloads.push(rel);
    const bytes = this.objects.get(rel)!.bytes;
    return Promise.resolve(rel === this.corrupt ? bytes.map((b) => b ^ 1) : bytes);
  }

  close(): void {
    this.closed = true;
  }
}

async function tree(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string, rel: string) => {
    for await (const e of Deno.readDir(d)) {
      if (e.isDirectory) await walk(`${d}/${e.name}`, `${rel}${e.name}/`);
      else out.push(`${rel}${e.name}=${await Deno.readTextFile(`${d}/${e.name}`)}`);
    }
  };
  await walk(dir, "");
  return out.sort();
}

Deno.test("a mirror downloads changed models only, removes models gone from the store, and cleans up", async () => {
  const store = new FakeStore();
  store.put("a/config.pbtxt", "A");
  store.put("a/1/model.onnx", "a1");
  store.put("b/config.pbtxt", "B");
  const repo = await MirroredRepository.open("s3://fake/repo", store);
  assertEquals(await tree(repo.localDir), ["a/1/model.onnx=a1", "a/config.pbtxt=A", "b/config.pbtxt=B"]);
  assertEquals(store.downloads.length, 3);
  await repo.sync(); // nothing changed: nothing downloaded
  assertEquals(store.downloads.length, 3);
  store.put("a/1/model.onnx", "a2"); // a changes: all of a again
  store.objects.delete("b/config.pbtxt");
  await repo.sync();
  assertEquals(store.downloads.slice(3).sort(), ["a/1/model.onnx", "a/config.pbtxt"]);
  assertEquals(await tree(repo.localDir), ["a/1/model.onnx=a2", "a/config.pbtxt=A"]);
  const dir = repo.localDir;
  await repo.close();
  assertEquals([store.closed, await Deno.stat(dir).then(() => true, () => false)], [true, false]);
});

Deno.test("a model whose download does not verify is not put in place; the copy before stays", async () => {
  const store = new FakeStore();
  store.put("a/config.pbtxt", "A");
  const repo = await MirroredRepository.open("s3://fake/repo", store);
  try {
    store.put("a/config.pbtxt", "A2");
    store.put("a/1/model.onnx", "x");
    store.corrupt = "a/1/model.onnx";
    const md5 = (t: string) => createHash("md5").update(t).digest("hex");
    await assertRejects(() => repo.sync(), ServerError, {
      message: `Cannot use object 'a/1/model.onnx': its MD5 ${md5("y")} differs from the listed ${md5("x")}`,
    });
    // Only the model as it was: no half-downloaded files, no staging folder left.
    assertEquals(await tree(repo.localDir), ["a/config.pbtxt=A"]);
    assertEquals((await Array.fromAsync(Deno.readDir(repo.localDir))).map((e) => e.name), ["a"]);
    store.corrupt = undefined;
    await repo.sync();
    assertEquals(await tree(repo.localDir), ["a/1/model.onnx=x", "a/config.pbtxt=A2"]);
  } finally {
    await repo.close();
  }
});

Deno.test("object paths that would leave the mirror are refused", async () => {
  const store = new FakeStore();
  store.put("a/../../escape", "x");
  await assertRejects(
    () => MirroredRepository.open("s3://fake/repo", store),
    ServerError,
    { message: "Cannot sync model repository 's3://fake/repo': object 'a/../../escape' is not a plain path" },
  );
  assertEquals(store.downloads, []);
});

Deno.test("TRITON_CLOUD_CREDENTIAL_PATH gives the credential of the longest matching name of the URL's scheme", async () => {
  const dir = await Deno.makeTempDir();
  const before = Deno.env.get("TRITON_CLOUD_CREDENTIAL_PATH");
  try {
    assertEquals(before === undefined ? await tritonCredential("s3://b/p", "s3") : undefined, undefined);
    const file = `${dir}/creds.json`;
    await Deno.writeTextFile(
      file,
      JSON.stringify({
        s3: {
          "": { key_id: "default" },
          "s3://bucket": { key_id: "bucket" },
          "s3://bucket/deep": { key_id: "deep" },
        },
        gs: { "gs://models": "/keys/models.json" },
      }),
    );
    Deno.env.set("TRITON_CLOUD_CREDENTIAL_PATH", file);
    assertEquals(await tritonCredential("s3://bucket/deep/repo", "s3"), { key_id: "deep" });
    assertEquals(await tritonCredential("s3://bucket/other", "s3"), { key_id: "bucket" });
    assertEquals(await tritonCredential("s3://elsewhere/x", "s3"), { key_id: "default" });
    assertEquals(await tritonCredential("gs://models/repo", "gs"), "/keys/models.json");
    await assertRejects(() => tritonCredential("gs://other/repo", "gs"), ServerError, {
      message:
        `Cannot use model repository 'gs://other/repo': TRITON_CLOUD_CREDENTIAL_PATH '${file}' has no 'gs' credential for it`,
    });
    await assertRejects(() => tritonCredential("as://a/c/p", "as"), ServerError, {
      message:
        `Cannot use model repository 'as://a/c/p': TRITON_CLOUD_CREDENTIAL_PATH '${file}' has no 'as' credential for it`,
    });
    await Deno.writeTextFile(file, "{ not json");
    const err = await assertRejects(() => tritonCredential("s3://b/p", "s3"), ServerError, {
      message: `Cannot read TRITON_CLOUD_CREDENTIAL_PATH '${file}': ${jsonError("{ not json")}`,
    });
    assertEquals(err.code, "INVALID_ARG");
  } finally {
    if (before === undefined) Deno.env.delete("TRITON_CLOUD_CREDENTIAL_PATH");
    else Deno.env.set("TRITON_CLOUD_CREDENTIAL_PATH", before);
    await Deno.remove(dir, { recursive: true });
  }
});
