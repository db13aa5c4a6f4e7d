import { assertEquals, assertThrows } from "../assert.ts";
import { ServerError } from "../../server/core/errors.ts";
import { parseBucketUrl, parseS3Url, verifyObject } from "../../server/repository/cloud.ts";

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
