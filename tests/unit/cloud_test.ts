import { assertEquals, assertThrows } from "../assert.ts";
import { ServerError } from "../../server/core/errors.ts";
import { parseS3Url, verifyObject } from "../../server/repository/cloud.ts";

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

Deno.test("a downloaded object must have its listed size and, where the ETag is an MD5, that digest", () => {
  const bytes = new TextEncoder().encode("hello");
  verifyObject("k", bytes, 5, "5d41402abc4b2a76b9719d911017c592");
  verifyObject("k", bytes, 5, "0123-2"); // a multipart ETag is not an MD5 of the contents
  assertThrows(() => verifyObject("repo/m/1/model.onnx", bytes, 6, ""), ServerError, {
    message: "Cannot use object 'repo/m/1/model.onnx': downloaded 5 bytes, the listing says 6",
  });
  assertThrows(() => verifyObject("k", bytes, 5, "00000000000000000000000000000000"), ServerError, {
    message:
      "Cannot use object 'k': its MD5 5d41402abc4b2a76b9719d911017c592 differs from its ETag 00000000000000000000000000000000",
  });
});
