/**
 * Model repositories in Amazon S3 (or an S3-compatible server): `s3://bucket/path` and
 * `s3://host:port/bucket/path` (plain HTTP to that server, path-style addressing), as Triton writes them.
 * Credentials and region come from the AWS SDK's usual sources (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
 * `AWS_SESSION_TOKEN`, `AWS_REGION` / `AWS_DEFAULT_REGION`, `~/.aws/credentials` and `~/.aws/config`,
 * `AWS_PROFILE`); without a region, us-east-1.
 *
 * The repository is mirrored into a local folder that the server reads like any repository. A sync lists the
 * objects under the path; a model whose objects (keys, sizes, ETags) changed is downloaded whole into a
 * hidden staging folder, every object checked against its listed size and, where the ETag is an MD5, its
 * digest, and only then moved into place, so a half-downloaded model is never seen; models gone from the
 * bucket are removed. Keys that would leave the folder (`..`, empty segments) are refused.
 * @module
 */

import { createHash } from "node:crypto";
import { join } from "node:path";
import { GetObjectCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
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

interface Listed {
  /** The path below the repository, `<model>/...`. */
  rel: string;
  key: string;
  size: number;
  etag: string;
}

/** An S3 repository mirrored into a local folder. */
export class S3Repository {
  /** The `s3://` path. */
  readonly url: string;
  /** The local folder the server reads. */
  readonly localDir: string;
  #location: S3Location;
  #client: S3Client;
  /** What each mirrored model was made from (its objects' keys, sizes and ETags). */
  #mirrored = new Map<string, string>();
  #syncing: Promise<void> | undefined;

  private constructor(url: string, location: S3Location, localDir: string) {
    this.url = url;
    this.localDir = localDir;
    this.#location = location;
    const region = Deno.env.get("AWS_REGION") ?? Deno.env.get("AWS_DEFAULT_REGION") ?? "us-east-1";
    this.#client = new S3Client({
      region,
      ...(location.endpoint ? { endpoint: location.endpoint, forcePathStyle: true } : {}),
    });
  }

  /**
   * Mirrors an S3 repository into a new temporary folder (removed by `close`).
   * @param url the `s3://` path
   * @throws ServerError INVALID_ARG when the bucket cannot be read
   */
  static async open(url: string): Promise<S3Repository> {
    const location = parseS3Url(url);
    if (!location) throw invalidArg(`Cannot use model repository '${url}': not an s3:// path`);
    const dir = await Deno.makeTempDir({ prefix: "dinfer-s3-" });
    const repo = new S3Repository(url, location, dir);
    try {
      await repo.sync();
    } catch (err) {
      await repo.close();
      throw err;
    }
    return repo;
  }

  /** Brings the local folder up to date with the bucket (one sync at a time). */
  sync(): Promise<void> {
    this.#syncing ??= this.#sync().finally(() => (this.#syncing = undefined));
    return this.#syncing;
  }

  async #list(): Promise<Listed[]> {
    const { bucket, prefix } = this.#location;
    const base = prefix === "" ? "" : `${prefix}/`;
    const out: Listed[] = [];
    let token: string | undefined;
    do {
      const page = await this.#client.send(
        new ListObjectsV2Command({ Bucket: bucket, Prefix: base, ContinuationToken: token }),
      );
      for (const o of page.Contents ?? []) {
        const key = o.Key ?? "";
        if (key.endsWith("/")) continue; // a folder marker
        const rel = key.slice(base.length);
        const segments = rel.split("/");
        if (segments.length < 2) continue; // a file beside the model folders
        if (segments.some((s) => s === "" || s === "." || s === ".." || /[\\\0]/.test(s))) {
          throw invalidArg(
            `Cannot sync model repository '${this.url}': object key '${key}' is not a plain path`,
          );
        }
        out.push({ rel, key, size: o.Size ?? 0, etag: (o.ETag ?? "").replaceAll('"', "") });
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return out;
  }

  async #sync(): Promise<void> {
    let listed: Listed[];
    try {
      listed = await this.#list();
    } catch (err) {
      if (err instanceof ServerError) throw err;
      throw invalidArg(`Cannot list model repository '${this.url}': ${(err as Error).message}`);
    }
    const byModel = new Map<string, Listed[]>();
    for (const o of listed) {
      const model = o.rel.split("/")[0]!;
      byModel.set(model, [...(byModel.get(model) ?? []), o]);
    }
    for (const [model, objects] of byModel) {
      const signature = objects.map((o) => `${o.rel}:${o.size}:${o.etag}`).sort().join("|");
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
  async #download(model: string, objects: Listed[]): Promise<void> {
    const staging = join(this.localDir, `.staging-${model}-${crypto.randomUUID()}`);
    try {
      for (const o of objects) {
        let bytes: Uint8Array;
        try {
          const res = await this.#client.send(
            new GetObjectCommand({ Bucket: this.#location.bucket, Key: o.key }),
          );
          bytes = await res.Body!.transformToByteArray();
        } catch (err) {
          throw invalidArg(`Cannot download '${o.key}' from '${this.url}': ${(err as Error).message}`);
        }
        verifyObject(o.key, bytes, o.size, o.etag);
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

  /** Stops using the bucket and removes the local folder. */
  async close(): Promise<void> {
    await this.#syncing?.catch(() => {});
    this.#client.destroy();
    await Deno.remove(this.localDir, { recursive: true }).catch(() => {});
  }
}

/**
 * Checks a downloaded object against its listing: its size, and its MD5 where the ETag is one (objects
 * uploaded in one part).
 * @param key the object key, for messages
 * @param bytes the downloaded contents
 * @param size the listed size
 * @param etag the listed ETag, without quotes
 * @throws ServerError INVALID_ARG naming the object when it does not match
 */
export function verifyObject(key: string, bytes: Uint8Array, size: number, etag: string): void {
  if (bytes.byteLength !== size) {
    throw invalidArg(
      `Cannot use object '${key}': downloaded ${bytes.byteLength} bytes, the listing says ${size}`,
    );
  }
  if (/^[0-9a-f]{32}$/.test(etag)) {
    const md5 = createHash("md5").update(bytes).digest("hex");
    if (md5 !== etag) {
      throw invalidArg(`Cannot use object '${key}': its MD5 ${md5} differs from its ETag ${etag}`);
    }
  }
}

/** The cloud repositories of a server: mirrored folders, kept in sync. */
export class CloudRepositories {
  #repos: S3Repository[];

  private constructor(repos: S3Repository[]) {
    this.#repos = repos;
  }

  /**
   * Mirrors every `s3://` path among the repositories.
   * @param repositories the `--model-repository` values
   * @returns the repositories with each `s3://` path replaced by its local folder, and the mirrors
   * @throws ServerError INVALID_ARG when one cannot be read (the others are closed)
   */
  static async open(repositories: readonly string[]): Promise<{ paths: string[]; cloud: CloudRepositories }> {
    const repos: S3Repository[] = [];
    const paths: string[] = [];
    try {
      for (const r of repositories) {
        if (!r.startsWith("s3://")) {
          paths.push(r);
          continue;
        }
        const repo = await S3Repository.open(r);
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
