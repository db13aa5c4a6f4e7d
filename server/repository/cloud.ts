/**
 * Model repositories in cloud storage, in Triton's URL forms: Amazon S3 (`s3://bucket/path`, and
 * `s3://host:port/bucket/path` for an S3-compatible server over plain HTTP with path-style addressing), Google
 * Cloud Storage (`gs://bucket/path`) and Azure Blob Storage (`as://account/container/path`), each read through
 * its own SDK with credentials from that SDK's usual sources: for S3 `AWS_ACCESS_KEY_ID`,
 * `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` / `AWS_DEFAULT_REGION` (else us-east-1),
 * `~/.aws/credentials` and `~/.aws/config`, `AWS_PROFILE`; for GCS `GOOGLE_APPLICATION_CREDENTIALS` and
 * `STORAGE_EMULATOR_HOST`; for Azure `AZURE_STORAGE_CONNECTION_STRING`, else `AZURE_STORAGE_KEY` for the
 * URL's account. Triton's `TRITON_CLOUD_CREDENTIAL_PATH` JSON, when set, gives them instead: per scheme, the
 * entry whose name is the longest prefix of the URL (`s3`: key_id, secret_key, session_token, region,
 * profile; `gs`: the path of a service account key file; `as`: account_key).
 *
 * A repository is mirrored into a local folder that the server reads like any repository. A sync lists the
 * objects under the path; a model whose objects (paths, sizes, versions) changed is downloaded whole into a
 * hidden staging folder, every object checked against its listed size and, where the store keeps one, its
 * MD5, and only then moved into place, so a half-downloaded model is never seen; models gone from the store
 * are removed. Keys that would leave the folder (`..`, empty segments) are refused.
 * @module
 */

import { createHash } from "node:crypto";
import { join } from "node:path";
import { GetObjectCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { Storage } from "@google-cloud/storage";
import { BlobServiceClient, StorageSharedKeyCredential } from "@azure/storage-blob";
import { invalidArg, ServerError } from "../core/errors.ts";

/** Where an `s3://` repository lives. */
export interface S3Location {
  /** `http://host:port` for an S3-compatible server; undefined for AWS. */
  endpoint: string | undefined;
  bucket: string;
  /** The path inside the bucket, without leading or trailing slashes ("" for the whole bucket). */
  prefix: string;
}

/**
 * Reads an `s3://` repository path; undefined for anything else.
 * @param url the `--model-repository` value
 * @throws ServerError INVALID_ARG for an `s3://` path without a bucket
 */
export function parseS3Url(url: string): S3Location | undefined {
  if (!url.startsWith("s3://")) return undefined;
  const parts = url.slice(5).split("/").filter((p) => p !== "");
  let endpoint: string | undefined;
  if (parts[0]?.includes(":")) endpoint = `http://${parts.shift()}`;
  const bucket = parts.shift();
  if (!bucket) throw invalidArg(`Cannot use model repository '${url}': it names no bucket`);
  return { endpoint, bucket, prefix: parts.join("/") };
}

/** One object of a cloud repository as its listing describes it. */
export interface ListedObject {
  /** The path below the repository, `<model>/...`. */
  rel: string;
  /** The byte size. */
  size: number;
  /** The MD5 of the contents as hex, when the store keeps one. */
  md5: string | undefined;
  /** A token that changes when the object changes (ETag, generation). */
  version: string;
}

/** What a cloud repository is read through: its objects below the repository path. */
export interface ObjectStore {
  /** Lists every object below the repository path (folder markers left out). */
  list(): Promise<ListedObject[]>;
  /** Reads an object's contents. */
  get(rel: string): Promise<Uint8Array>;
  /** Frees the client. */
  close(): void;
}

/**
 * The credential Triton's `TRITON_CLOUD_CREDENTIAL_PATH` JSON gives a repository URL: in the section of its
 * scheme (`s3`, `gs`, `as`), the entry whose name is the longest prefix of the URL ("" matches every URL).
 * Undefined when the variable is not set (each SDK's own sources apply then).
 * @param url the repository URL
 * @param scheme its scheme
 * @throws ServerError INVALID_ARG when the file cannot be read or no entry matches
 */
export async function tritonCredential(url: string, scheme: "s3" | "gs" | "as"): Promise<unknown> {
  const path = Deno.env.get("TRITON_CLOUD_CREDENTIAL_PATH");
  if (path === undefined) return undefined;
  let json: Record<string, Record<string, unknown>>;
  try {
    json = JSON.parse(await Deno.readTextFile(path));
  } catch (err) {
    throw invalidArg(`Cannot read TRITON_CLOUD_CREDENTIAL_PATH '${path}': ${(err as Error).message}`);
  }
  const section = json?.[scheme];
  const names = section && typeof section === "object"
    ? Object.keys(section).filter((n) => url.startsWith(n))
    : [];
  if (names.length === 0) {
    throw invalidArg(
      `Cannot use model repository '${url}': TRITON_CLOUD_CREDENTIAL_PATH '${path}' has no '${scheme}' credential for it`,
    );
  }
  const name = names.reduce((a, b) => (b.length > a.length ? b : a));
  return section![name];
}

/** Turns a key below the repository path into its path, or refuses one that would leave the folder. */
function relativePath(url: string, key: string, base: string): string | undefined {
  if (key.endsWith("/")) return undefined; // a folder marker
  const rel = key.slice(base.length);
  const segments = rel.split("/");
  if (segments.length < 2) return undefined; // a file beside the model folders
  if (segments.some((s) => s === "" || s === "." || s === ".." || /[\\\0]/.test(s))) {
    throw invalidArg(`Cannot sync model repository '${url}': object key '${key}' is not a plain path`);
  }
  return rel;
}

/** An S3 bucket path through the AWS SDK. */
function s3Store(url: string, location: S3Location, credential: unknown): ObjectStore {
  const c = (credential ?? {}) as Record<string, string | undefined>;
  const region = c.region || Deno.env.get("AWS_REGION") || Deno.env.get("AWS_DEFAULT_REGION") || "us-east-1";
  const client = new S3Client({
    region,
    ...(location.endpoint ? { endpoint: location.endpoint, forcePathStyle: true } : {}),
    ...(c.key_id
      ? {
        credentials: {
          accessKeyId: c.key_id,
          secretAccessKey: c.secret_key ?? "",
          ...(c.session_token ? { sessionToken: c.session_token } : {}),
        },
      }
      : {}),
    ...(c.profile ? { profile: c.profile } : {}),
  });
  const base = location.prefix === "" ? "" : `${location.prefix}/`;
  return {
    async list() {
      const out: ListedObject[] = [];
      let token: string | undefined;
      do {
        const page = await client.send(
          new ListObjectsV2Command({ Bucket: location.bucket, Prefix: base, ContinuationToken: token }),
        );
        for (const o of page.Contents ?? []) {
          const rel = relativePath(url, o.Key ?? "", base);
          if (rel === undefined) continue;
          const etag = (o.ETag ?? "").replaceAll('"', "");
          // A single-part upload's ETag is the MD5 of its contents; a multipart one's is not.
          out.push({
            rel,
            size: o.Size ?? 0,
            md5: /^[0-9a-f]{32}$/.test(etag) ? etag : undefined,
            version: etag,
          });
        }
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return out;
    },
    async get(rel) {
      const res = await client.send(new GetObjectCommand({ Bucket: location.bucket, Key: base + rel }));
      return await res.Body!.transformToByteArray();
    },
    close: () => client.destroy(),
  };
}

/** Where a `gs://` or `as://` repository lives. */
export interface BucketLocation {
  /** The Azure storage account (`as://` only). */
  account?: string;
  /** The bucket or container. */
  bucket: string;
  /** The path inside it, without leading or trailing slashes. */
  prefix: string;
}

/**
 * Reads a `gs://bucket/path` or `as://account/container/path` repository path; undefined for anything else.
 * @param url the `--model-repository` value
 * @throws ServerError INVALID_ARG when the bucket (or account and container) is missing
 */
export function parseBucketUrl(url: string): { scheme: "gs" | "as"; location: BucketLocation } | undefined {
  const m = /^(gs|as):\/\/(.*)$/.exec(url);
  if (!m) return undefined;
  const scheme = m[1] as "gs" | "as";
  const parts = m[2]!.split("/").filter((p) => p !== "");
  const account = scheme === "as" ? parts.shift() : undefined;
  const bucket = parts.shift();
  if (!bucket) {
    throw invalidArg(
      `Cannot use model repository '${url}': it names no ${
        scheme === "as" ? "account and container" : "bucket"
      }`,
    );
  }
  return { scheme, location: { ...(account ? { account } : {}), bucket, prefix: parts.join("/") } };
}

/** Hex of a base64 MD5 (as GCS and Azure list them); undefined when there is none. */
function md5Hex(b64: string | Uint8Array | undefined): string | undefined {
  if (b64 === undefined || b64 === "") return undefined;
  const bytes = typeof b64 === "string" ? Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)) : b64;
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A Google Cloud Storage path through `@google-cloud/storage`: credentials from
 * `GOOGLE_APPLICATION_CREDENTIALS` (or the other sources the library reads), an emulator from
 * `STORAGE_EMULATOR_HOST`.
 */
function gcsStore(url: string, location: BucketLocation, credential: unknown): ObjectStore {
  const keyFilename = typeof credential === "string" && credential !== "" ? credential : undefined;
  const bucket = new Storage(keyFilename ? { keyFilename } : {}).bucket(location.bucket);
  const base = location.prefix === "" ? "" : `${location.prefix}/`;
  return {
    async list() {
      const [files] = await bucket.getFiles({ prefix: base, autoPaginate: true });
      const out: ListedObject[] = [];
      for (const f of files) {
        const rel = relativePath(url, f.name, base);
        if (rel === undefined) continue;
        const md = f.metadata;
        out.push({
          rel,
          size: Number(md.size ?? 0),
          md5: md5Hex(md.md5Hash),
          version: `${md.generation ?? ""}:${md.etag ?? ""}`,
        });
      }
      return out;
    },
    async get(rel) {
      const [buf] = await bucket.file(base + rel).download();
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    },
    close: () => {},
  };
}

/**
 * An Azure Blob Storage path through `@azure/storage-blob`: `AZURE_STORAGE_CONNECTION_STRING` when set (as
 * the Azure tools read it; Azurite's included), else the account of the URL with `AZURE_STORAGE_KEY` (Triton's
 * variables), else anonymous access.
 */
function azureStore(url: string, location: BucketLocation, credential: unknown): ObjectStore {
  const c = credential as Record<string, string | undefined> | undefined;
  const conn = c ? undefined : Deno.env.get("AZURE_STORAGE_CONNECTION_STRING");
  const key = c ? c.account_key : Deno.env.get("AZURE_STORAGE_KEY");
  const account = location.account!;
  const service = conn ? BlobServiceClient.fromConnectionString(conn) : new BlobServiceClient(
    `https://${account}.blob.core.windows.net`,
    key ? new StorageSharedKeyCredential(account, key) : undefined,
  );
  const container = service.getContainerClient(location.bucket);
  const base = location.prefix === "" ? "" : `${location.prefix}/`;
  return {
    async list() {
      const out: ListedObject[] = [];
      for await (const blob of container.listBlobsFlat({ prefix: base })) {
        const rel = relativePath(url, blob.name, base);
        if (rel === undefined) continue;
        const p = blob.properties;
        out.push({ rel, size: p.contentLength ?? 0, md5: md5Hex(p.contentMD5), version: p.etag ?? "" });
      }
      return out;
    },
    async get(rel) {
      const buf = await container.getBlockBlobClient(base + rel).downloadToBuffer();
      return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
    },
    close: () => {},
  };
}

/** A cloud repository mirrored into a local folder. */
export class MirroredRepository {
  /** The repository's URL. */
  readonly url: string;
  /** The local folder the server reads. */
  readonly localDir: string;
  #store: ObjectStore;
  /** What each mirrored model was made from (its objects' paths, sizes and versions). */
  #mirrored = new Map<string, string>();
  #syncing: Promise<void> | undefined;

  private constructor(url: string, store: ObjectStore, localDir: string) {
    this.url = url;
    this.localDir = localDir;
    this.#store = store;
  }

  /**
   * Mirrors a cloud repository into a new temporary folder (removed by `close`).
   * @param url the repository URL
   * @param store its objects
   * @throws ServerError INVALID_ARG when it cannot be read
   */
  static async open(url: string, store: ObjectStore): Promise<MirroredRepository> {
    const dir = await Deno.makeTempDir({ prefix: `dinfer-cloud-${Deno.pid}-` });
    const repo = new MirroredRepository(url, store, dir);
    try {
      await repo.sync();
    } catch (err) {
      await repo.close();
      throw err;
    }
    return repo;
  }

  /** Brings the local folder up to date with the repository (one sync at a time). */
  sync(): Promise<void> {
    this.#syncing ??= this.#sync().finally(() => (this.#syncing = undefined));
    return this.#syncing;
  }

  async #sync(): Promise<void> {
    let listed: ListedObject[];
    try {
      listed = await this.#store.list();
    } catch (err) {
      if (err instanceof ServerError) throw err;
      throw invalidArg(`Cannot list model repository '${this.url}': ${(err as Error).message}`);
    }
    const byModel = new Map<string, ListedObject[]>();
    for (const o of listed) {
      const segments = o.rel.split("/");
      if (
        segments.length < 2 || segments.some((x) => x === "" || x === "." || x === ".." || /[\\\0]/.test(x))
      ) {
        throw invalidArg(`Cannot sync model repository '${this.url}': object '${o.rel}' is not a plain path`);
      }
      const model = segments[0]!;
      byModel.set(model, [...(byModel.get(model) ?? []), o]);
    }
    for (const [model, objects] of byModel) {
      const signature = objects.map((o) => `${o.rel}:${o.size}:${o.version}`).sort().join("|");
      if (this.#mirrored.get(model) === signature) continue;
      await this.#download(model, objects);
      this.#mirrored.set(model, signature);
    }
    for (const model of [...this.#mirrored.keys()]) {
      if (byModel.has(model)) continue;
      await Deno.remove(join(this.localDir, model), { recursive: true }).catch(() => {});
      this.#mirrored.delete(model);
    }
  }

  /** Downloads a model whole into a staging folder, checks every object, then moves it into place. */
  async #download(model: string, objects: ListedObject[]): Promise<void> {
    const staging = join(this.localDir, `.staging-${model}-${crypto.randomUUID()}`);
    try {
      for (const o of objects) {
        let bytes: Uint8Array;
        try {
          bytes = await this.#store.get(o.rel);
        } catch (err) {
          throw invalidArg(`Cannot download '${o.rel}' from '${this.url}': ${(err as Error).message}`);
        }
        verifyObject(o.rel, bytes, o.size, o.md5);
        const segments = o.rel.split("/").slice(1);
        await Deno.mkdir(join(staging, ...segments.slice(0, -1)), { recursive: true });
        await Deno.writeFile(join(staging, ...segments), bytes);
      }
      const target = join(this.localDir, model);
      const old = join(this.localDir, `.old-${model}-${crypto.randomUUID()}`);
      const had = await Deno.rename(target, old).then(() => true, () => false);
      await Deno.rename(staging, target);
      if (had) await Deno.remove(old, { recursive: true });
    } finally {
      await Deno.remove(staging, { recursive: true }).catch(() => {});
    }
  }

  /** Stops using the store and removes the local folder. */
  async close(): Promise<void> {
    await this.#syncing?.catch(() => {});
    this.#store.close();
    await Deno.remove(this.localDir, { recursive: true }).catch(() => {});
  }
}

/**
 * Checks a downloaded object against its listing: its size, and its MD5 where the store keeps one.
 * @param name the object, for messages
 * @param bytes the downloaded contents
 * @param size the listed size
 * @param md5 the listed MD5 as hex, if any
 * @throws ServerError INVALID_ARG naming the object when it does not match
 */
export function verifyObject(name: string, bytes: Uint8Array, size: number, md5: string | undefined): void {
  if (bytes.byteLength !== size) {
    throw invalidArg(
      `Cannot use object '${name}': downloaded ${bytes.byteLength} bytes, the listing says ${size}`,
    );
  }
  if (md5 !== undefined) {
    const got = createHash("md5").update(bytes).digest("hex");
    if (got !== md5) {
      throw invalidArg(`Cannot use object '${name}': its MD5 ${got} differs from the listed ${md5}`);
    }
  }
}

/**
 * The store of a cloud repository URL, with its credential from `TRITON_CLOUD_CREDENTIAL_PATH` when that is
 * set; undefined for a local path.
 * @param url the `--model-repository` value
 */
export async function openStore(url: string): Promise<ObjectStore | undefined> {
  const s3 = parseS3Url(url);
  if (s3) return s3Store(url, s3, await tritonCredential(url, "s3"));
  const other = parseBucketUrl(url);
  if (other?.scheme === "gs") return gcsStore(url, other.location, await tritonCredential(url, "gs"));
  if (other?.scheme === "as") return azureStore(url, other.location, await tritonCredential(url, "as"));
  return undefined;
}

/** The cloud repositories of a server: mirrored folders, kept in sync. */
export class CloudRepositories {
  #repos: MirroredRepository[];

  private constructor(repos: MirroredRepository[]) {
    this.#repos = repos;
  }

  /**
   * Mirrors every cloud repository (`s3://`, `gs://`, `as://`) among the repositories.
   * @param repositories the `--model-repository` values
   * @returns the repositories with each cloud URL replaced by its local folder, and the mirrors
   * @throws ServerError INVALID_ARG when one cannot be read (the others are closed)
   */
  static async open(repositories: readonly string[]): Promise<{ paths: string[]; cloud: CloudRepositories }> {
    const repos: MirroredRepository[] = [];
    const paths: string[] = [];
    try {
      for (const r of repositories) {
        const store = await openStore(r);
        if (!store) {
          paths.push(r);
          continue;
        }
        const repo = await MirroredRepository.open(r, store);
        repos.push(repo);
        paths.push(repo.localDir);
      }
    } catch (err) {
      await Promise.all(repos.map((r) => r.close()));
      throw err;
    }
    return { paths, cloud: new CloudRepositories(repos) };
  }

  /** Whether there is any cloud repository. */
  get any(): boolean {
    return this.#repos.length > 0;
  }

  /** Brings every mirror up to date. */
  async sync(): Promise<void> {
    await Promise.all(this.#repos.map((r) => r.sync()));
  }

  /** Removes the mirrors. */
  async close(): Promise<void> {
    await Promise.all(this.#repos.map((r) => r.close()));
  }
}
