/**
 * `s3://host:port/bucket/path` model repositories against moto's S3 server (PyPI `moto[server]`), started by
 * the tests: models load from the bucket, poll mode follows models added to and removed from it, explicit mode
 * loads from it through the repository API, and a bucket that cannot be read stops the start with its reason.
 * The server runs as a process with the credentials in its environment. moto_server is looked for in
 * `DINFER_MOTO_SERVER`, then in `.venv/bin`; without it these tests are skipped.
 * @module
 */

import assert from "node:assert/strict";
import {
  CreateBucketCommand,
  DeleteObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import { FIXTURES, freePorts, ROOT, type ServerProcess, startServerProcess } from "../helpers.ts";
import { inferJson, outputsOf } from "./_http.ts";

const MOTO = Deno.env.get("DINFER_MOTO_SERVER") ?? `${ROOT}.venv/bin/moto_server`;
const HAVE_MOTO = await Deno.stat(MOTO).then(() => true, () => false);
const CREDENTIALS = { AWS_ACCESS_KEY_ID: "dinfer-test", AWS_SECRET_ACCESS_KEY: "dinfer-test-secret" };

/** A moto S3 server on a free loopback port, with a client for it. */
async function startMoto(): Promise<{ endpoint: string; client: S3Client; stop: () => Promise<void> }> {
  const [port] = freePorts(1);
  const child = new Deno.Command(MOTO, {
    args: ["-H", "127.0.0.1", "-p", String(port)],
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
  const endpoint = `127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const r = await fetch(`http://${endpoint}/`);
      await r.body?.cancel();
      break;
    } catch {
      if (Date.now() > deadline) throw new Error("moto_server did not start");
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const client = new S3Client({
    region: "us-east-1",
    endpoint: `http://${endpoint}`,
    forcePathStyle: true,
    credentials: {
      accessKeyId: CREDENTIALS.AWS_ACCESS_KEY_ID,
      secretAccessKey: CREDENTIALS.AWS_SECRET_ACCESS_KEY,
    },
  });
  return {
    endpoint,
    client,
    stop: async () => {
      client.destroy();
      child.kill("SIGTERM");
      await child.status;
    },
  };
}

/** Uploads a fixture model under `repo/<name>/`. */
async function upload(client: S3Client, bucket: string, name: string): Promise<void> {
  const dir = `${FIXTURES}/${name}`;
  for (const rel of ["config.pbtxt", "1/model.onnx"]) {
    await client.send(
      new PutObjectCommand({
        Bucket: bucket,
        Key: `repo/${name}/${rel}`,
        Body: await Deno.readFile(`${dir}/${rel}`),
      }),
    );
  }
}

async function remove(client: S3Client, bucket: string, name: string): Promise<void> {
  const listed = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `repo/${name}/` }));
  for (const o of listed.Contents ?? []) {
    await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: o.Key }));
  }
}

async function stopServer(p: ServerProcess): Promise<string> {
  p.child.kill("SIGTERM");
  const out = await p.output;
  return new TextDecoder().decode(out.stderr);
}

async function identity(url: string, model: string, datatype: string, values: number[]): Promise<unknown> {
  const a = await inferJson(url, model, {
    inputs: [{ name: "INPUT0", datatype, shape: [1, values.length], data: values }],
  });
  assert.equal(a.status, 200, JSON.stringify(a.json));
  return outputsOf(a)[0]!.data;
}

async function waitStatus(url: string, path: string, status: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const r = await fetch(url + path);
    await r.body?.cancel();
    if (r.status === status) return;
    if (Date.now() > deadline) throw new Error(`${path} did not answer ${status} (last ${r.status})`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

Deno.test({
  name: "an s3:// repository loads, and poll mode follows models added to and removed from the bucket",
  ignore: !HAVE_MOTO,
  async fn() {
    const moto = await startMoto();
    try {
      await moto.client.send(new CreateBucketCommand({ Bucket: "models" }));
      await upload(moto.client, "models", "identity_fp32");
      const server = await startServerProcess([
        `--model-repository=s3://${moto.endpoint}/models/repo`,
        "--model-control-mode=poll",
        "--repository-poll-secs=1",
        "--allow-grpc=false",
      ], { env: CREDENTIALS });
      try {
        assert.deepEqual(await identity(server.url, "identity_fp32", "FP32", [1.5, -2, 3]), [1.5, -2, 3]);
        await upload(moto.client, "models", "identity_int32");
        await waitStatus(server.url, "/v2/models/identity_int32/ready", 200);
        assert.deepEqual(await identity(server.url, "identity_int32", "INT32", [7, 8]), [7, 8]);
        await remove(moto.client, "models", "identity_fp32");
        await waitStatus(server.url, "/v2/models/identity_fp32/ready", 400);
        const index = await (await fetch(`${server.url}/v2/repository/index`, { method: "POST", body: "{}" }))
          .json() as { name: string; state: string }[];
        assert.deepEqual(index.filter((r) => r.state === "READY").map((r) => r.name), ["identity_int32"]);
      } finally {
        await stopServer(server);
      }
    } finally {
      await moto.stop();
    }
  },
});

Deno.test({
  name: "in explicit mode the repository API loads a model from the s3:// repository as it is now",
  ignore: !HAVE_MOTO,
  async fn() {
    const moto = await startMoto();
    try {
      await moto.client.send(new CreateBucketCommand({ Bucket: "models" }));
      const server = await startServerProcess([
        `--model-repository=s3://${moto.endpoint}/models/repo`,
        "--model-control-mode=explicit",
        "--allow-grpc=false",
      ], { env: CREDENTIALS });
      try {
        // Uploaded after the start: the load brings the mirror up to date first.
        await upload(moto.client, "models", "identity_int32");
        const load = await fetch(`${server.url}/v2/repository/models/identity_int32/load`, {
          method: "POST",
          body: "{}",
        });
        assert.equal(load.status, 200, await load.text());
        assert.deepEqual(await identity(server.url, "identity_int32", "INT32", [1, 2, 3]), [1, 2, 3]);
        const missing = await fetch(`${server.url}/v2/repository/models/identity_fp32/load`, {
          method: "POST",
          body: "{}",
        });
        assert.deepEqual([missing.status, await missing.json()], [400, {
          error: "Cannot load 'identity_fp32': no model folder of that name in the model repositories",
        }]);
      } finally {
        await stopServer(server);
      }
    } finally {
      await moto.stop();
    }
  },
});

Deno.test({
  name: "a bucket that cannot be listed stops the start with the reason",
  ignore: !HAVE_MOTO,
  async fn() {
    const moto = await startMoto();
    try {
      const [http, grpc, metrics] = freePorts(3);
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "main.ts",
          `--model-repository=s3://${moto.endpoint}/no-such-bucket/repo`,
          `--http-port=${http}`,
          `--grpc-port=${grpc}`,
          `--metrics-port=${metrics}`,
          "--http-address=127.0.0.1",
          "--grpc-address=127.0.0.1",
          "--metrics-address=127.0.0.1",
        ],
        cwd: ROOT,
        env: CREDENTIALS,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.notEqual(out.code, 0);
      assert.match(
        stderr,
        new RegExp(`Cannot list model repository 's3://${moto.endpoint}/no-such-bucket/repo': .*bucket`, "i"),
      );
    } finally {
      await moto.stop();
    }
  },
});
