/**
 * Cloud model repositories against real local servers started by the tests: moto's S3 server (PyPI
 * `moto[server]`), gcp-storage-emulator (PyPI) for Google Cloud Storage and Azurite (npm `azurite`) for Azure
 * Blob Storage. For each: models load from the store, poll mode follows models added to and removed from it,
 * explicit mode loads through the repository API what the store holds now. The server runs as a process with
 * the store's credentials in its environment. The emulators are looked for in `DINFER_MOTO_SERVER`,
 * `DINFER_GCS_EMULATOR` and `DINFER_AZURITE_BLOB` (else `.venv/bin/moto_server`,
 * `.venv/bin/gcp-storage-emulator`, `tools/azurite/node_modules/.bin/azurite-blob`, which `./dinfer test`
 * installs from `tests/compat/requirements.txt` and `tools/azurite/package-lock.json`); a store whose emulator is missing has
 * its tests skipped.
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { CreateBucketCommand, DeleteObjectCommand, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import { Storage } from "@google-cloud/storage";
import { BlobServiceClient } from "@azure/storage-blob";
import { FIXTURES, freePorts, ROOT, type ServerProcess, startServerProcess } from "../helpers.ts";
import { inferJson, outputsOf } from "../integration/_http.ts";

/** A store emulator running for a test, with a client that writes to it. */
interface Store {
  /** The repository URL of `models/repo` in it. */
  url: string;
  /** The environment the server needs to reach it. */
  env: Record<string, string>;
  put(key: string, bytes: Uint8Array): Promise<void>;
  remove(key: string): Promise<void>;
  stop(): Promise<void>;
}

interface Provider {
  name: string;
  /** The emulator's program, if found. */
  program: string | undefined;
  start(program: string): Promise<Store>;
}

async function find(env: string, fallback: string): Promise<string | undefined> {
  const path = Deno.env.get(env) ?? fallback;
  return await Deno.stat(path).then(() => path, () => undefined);
}

/** Starts a program and waits until `http://127.0.0.1:<port>/` answers at all. */
async function spawn(program: string, args: string[], port: number): Promise<Deno.ChildProcess> {
  const child = new Deno.Command(program, { args, stdin: "null", stdout: "null", stderr: "null" }).spawn();
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const r = await fetch(`http://127.0.0.1:${port}/`);
      await r.body?.cancel();
      return child;
    } catch {
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        await child.status;
        throw new Error(`${program} did not start`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** Stops an emulator (SIGKILL: their data is in memory, and Azurite waits for idle connections on SIGTERM). */
async function end(child: Deno.ChildProcess): Promise<void> {
  child.kill("SIGKILL");
  await child.status;
}

const S3_CREDENTIALS = { AWS_ACCESS_KEY_ID: "dinfer-test", AWS_SECRET_ACCESS_KEY: "dinfer-test-secret" };

const s3: Provider = {
  name: "s3",
  program: await find("DINFER_MOTO_SERVER", `${ROOT}.venv/bin/moto_server`),
  async start(program) {
    const [port] = freePorts(1);
    const child = await spawn(program, ["-H", "127.0.0.1", "-p", String(port)], port!);
    const client = new S3Client({
      region: "us-east-1",
      endpoint: `http://127.0.0.1:${port}`,
      forcePathStyle: true,
      credentials: {
        accessKeyId: S3_CREDENTIALS.AWS_ACCESS_KEY_ID,
        secretAccessKey: S3_CREDENTIALS.AWS_SECRET_ACCESS_KEY,
      },
    });
    await client.send(new CreateBucketCommand({ Bucket: "models" }));
    return {
      url: `s3://127.0.0.1:${port}/models/repo`,
      env: S3_CREDENTIALS,
      put: async (key, bytes) => {
        await client.send(new PutObjectCommand({ Bucket: "models", Key: `repo/${key}`, Body: bytes }));
      },
      remove: async (key) => {
        await client.send(new DeleteObjectCommand({ Bucket: "models", Key: `repo/${key}` }));
      },
      stop: async () => {
        client.destroy();
        await end(child);
      },
    };
  },
};

const gcs: Provider = {
  name: "gs",
  program: await find("DINFER_GCS_EMULATOR", `${ROOT}.venv/bin/gcp-storage-emulator`),
  async start(program) {
    const [port] = freePorts(1);
    const child = await spawn(program, [
      "start",
      "-H",
      "127.0.0.1",
      "--port",
      String(port),
      "--default-bucket",
      "models",
      "--in-memory",
      "-q",
    ], port!);
    const endpoint = `http://127.0.0.1:${port}`;
    const bucket = new Storage({ apiEndpoint: endpoint, projectId: "dinfer-test" }).bucket("models");
    return {
      url: "gs://models/repo",
      env: { STORAGE_EMULATOR_HOST: endpoint },
      put: async (key, bytes) => {
        await bucket.file(`repo/${key}`).save(Buffer.from(bytes), { resumable: false });
      },
      remove: async (key) => {
        await bucket.file(`repo/${key}`).delete();
      },
      stop: () => end(child),
    };
  },
};

const azure: Provider = {
  name: "as",
  program: await find("DINFER_AZURITE_BLOB", `${ROOT}tools/azurite/node_modules/.bin/azurite-blob`),
  async start(program) {
    const [port] = freePorts(1);
    const child = await spawn(program, [
      "--blobHost",
      "127.0.0.1",
      "--blobPort",
      String(port),
      "--inMemoryPersistence",
      "--silent",
      "--skipApiVersionCheck",
    ], port!);
    // Azurite's well-known development account.
    const connection = "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
      "AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
      `BlobEndpoint=http://127.0.0.1:${port}/devstoreaccount1;`;
    const container = BlobServiceClient.fromConnectionString(connection).getContainerClient("models");
    await container.create();
    return {
      url: "as://devstoreaccount1/models/repo",
      env: { AZURE_STORAGE_CONNECTION_STRING: connection },
      put: async (key, bytes) => {
        await container.getBlockBlobClient(`repo/${key}`).uploadData(bytes);
      },
      remove: async (key) => {
        await container.getBlockBlobClient(`repo/${key}`).delete();
      },
      stop: () => end(child),
    };
  },
};

const FILES = ["config.pbtxt", "1/model.onnx"];

async function upload(store: Store, name: string): Promise<void> {
  for (const rel of FILES) {
    await store.put(`${name}/${rel}`, await Deno.readFile(`${FIXTURES}/${name}/${rel}`));
  }
}

async function removeModel(store: Store, name: string): Promise<void> {
  for (const rel of FILES) await store.remove(`${name}/${rel}`);
}

async function stopServer(p: ServerProcess): Promise<void> {
  p.child.kill("SIGTERM");
  await p.output;
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

async function withStore(provider: Provider, fn: (store: Store) => Promise<void>): Promise<void> {
  const store = await provider.start(provider.program!);
  try {
    await fn(store);
  } finally {
    await store.stop();
  }
}

for (const provider of [s3, gcs, azure]) {
  Deno.test({
    name: `a ${provider.name}:// repository loads, and poll mode follows models added to and removed from it`,
    ignore: provider.program === undefined,
    fn: () =>
      withStore(provider, async (store) => {
        await upload(store, "identity_fp32");
        const server = await startServerProcess([
          `--model-repository=${store.url}`,
          "--model-control-mode=poll",
          "--repository-poll-secs=1",
          "--allow-grpc=false",
        ], { env: store.env });
        try {
          assert.deepEqual(await identity(server.url, "identity_fp32", "FP32", [1.5, -2, 3]), [1.5, -2, 3]);
          await upload(store, "identity_int32");
          await waitStatus(server.url, "/v2/models/identity_int32/ready", 200);
          assert.deepEqual(await identity(server.url, "identity_int32", "INT32", [7, 8]), [7, 8]);
          await removeModel(store, "identity_fp32");
          await waitStatus(server.url, "/v2/models/identity_fp32/ready", 400);
          const index =
            await (await fetch(`${server.url}/v2/repository/index`, { method: "POST", body: "{}" }))
              .json() as { name: string; state: string }[];
          assert.deepEqual(index.filter((r) => r.state === "READY").map((r) => r.name), ["identity_int32"]);
        } finally {
          await stopServer(server);
        }
      }),
  });

  Deno.test({
    name:
      `in explicit mode the repository API loads a model from the ${provider.name}:// repository as it is now`,
    ignore: provider.program === undefined,
    fn: () =>
      withStore(provider, async (store) => {
        await upload(store, "identity_fp32");
        const server = await startServerProcess([
          `--model-repository=${store.url}`,
          "--model-control-mode=explicit",
          "--allow-grpc=false",
        ], { env: store.env });
        try {
          // Uploaded after the start: the load brings the mirror up to date first.
          await upload(store, "identity_int32");
          const load = await fetch(`${server.url}/v2/repository/models/identity_int32/load`, {
            method: "POST",
            body: "{}",
          });
          assert.equal(load.status, 200, await load.text());
          assert.deepEqual(await identity(server.url, "identity_int32", "INT32", [1, 2, 3]), [1, 2, 3]);
          await removeModel(store, "identity_fp32");
          const gone = await fetch(`${server.url}/v2/repository/models/identity_fp32/load`, {
            method: "POST",
            body: "{}",
          });
          assert.deepEqual([gone.status, await gone.json()], [400, {
            error:
              "Cannot load 'identity_fp32': failed to load 'identity_fp32': no model folder of that name in the model repositories",
          }]);
        } finally {
          await stopServer(server);
        }
      }),
  });
}

Deno.test({
  name: "a bucket that cannot be listed stops the start with the reason",
  ignore: s3.program === undefined,
  fn: () =>
    withStore(s3, async (store) => {
      const [http, grpc, metrics] = freePorts(3);
      const url = store.url.replace("/models/", "/no-such-bucket/");
      const out = await new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          "main.ts",
          `--model-repository=${url}`,
          `--http-port=${http}`,
          `--grpc-port=${grpc}`,
          `--metrics-port=${metrics}`,
          "--http-address=127.0.0.1",
          "--grpc-address=127.0.0.1",
          "--metrics-address=127.0.0.1",
        ],
        cwd: ROOT,
        env: store.env,
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
      }).output();
      const stderr = new TextDecoder().decode(out.stderr);
      assert.notEqual(out.code, 0);
      assert.match(stderr, new RegExp(`Cannot list model repository '${url}': .*bucket`, "i"));
    }),
});

Deno.test({
  name: "TRITON_CLOUD_CREDENTIAL_PATH gives the S3 credentials when the environment has none",
  ignore: s3.program === undefined,
  fn: () =>
    withStore(s3, async (store) => {
      await upload(store, "identity_fp32");
      const dir = await Deno.makeTempDir({ prefix: "dinfer-cloud-creds-" });
      try {
        const file = `${dir}/credentials.json`;
        await Deno.writeTextFile(
          file,
          JSON.stringify({
            s3: {
              [store.url.slice(0, store.url.indexOf("/models/"))]: {
                key_id: S3_CREDENTIALS.AWS_ACCESS_KEY_ID,
                secret_key: S3_CREDENTIALS.AWS_SECRET_ACCESS_KEY,
                region: "us-east-1",
              },
            },
          }),
        );
        // The SDK finds no credentials of its own here: the server uses the file's.
        const env = {
          TRITON_CLOUD_CREDENTIAL_PATH: file,
          AWS_CONFIG_FILE: file,
          AWS_SHARED_CREDENTIALS_FILE: file,
        };
        const server = await startServerProcess([`--model-repository=${store.url}`, "--allow-grpc=false"], {
          env,
        });
        try {
          assert.deepEqual(await identity(server.url, "identity_fp32", "FP32", [4, 5]), [4, 5]);
        } finally {
          await stopServer(server);
        }
        // A file without a credential for the URL stops the start with the reason.
        await Deno.writeTextFile(file, JSON.stringify({ s3: { "s3://elsewhere": { key_id: "x" } } }));
        const [http, grpc, metrics] = freePorts(3);
        const out = await new Deno.Command(Deno.execPath(), {
          args: [
            "run",
            "-A",
            "main.ts",
            `--model-repository=${store.url}`,
            `--http-port=${http}`,
            `--grpc-port=${grpc}`,
            `--metrics-port=${metrics}`,
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            "--metrics-address=127.0.0.1",
          ],
          cwd: ROOT,
          env,
          stdin: "null",
          stdout: "piped",
          stderr: "piped",
        }).output();
        assert.notEqual(out.code, 0);
        assert.ok(
          new TextDecoder().decode(out.stderr).includes(
            `Cannot use model repository '${store.url}': TRITON_CLOUD_CREDENTIAL_PATH '${file}' has no 's3' credential for it`,
          ),
        );
      } finally {
        await Deno.remove(dir, { recursive: true });
      }
    }),
});
