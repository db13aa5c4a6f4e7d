/**
 * Model repositories: finding model folders across one or more repositories, their numeric version folders,
 * and the versions a version policy selects.
 * @module
 */

import { join } from "node:path";
import { invalidArg } from "../core/errors.ts";
import type { VersionPolicyConfig } from "../core/model_config.ts";

/** A model folder found in a repository. */
export interface ModelLocation {
  /** The model name (the folder's name). */
  name: string;
  /** The repository holding it. */
  repository: string;
  /** The model folder. */
  dir: string;
}

/**
 * Lists the model folders of the given repositories. A name found in two repositories is an error for that
 * name only, reported in `duplicates`.
 * @param repositories repository paths
 * @returns the models by name and the names found more than once
 */
export async function scanRepositories(
  repositories: readonly string[],
): Promise<{ models: Map<string, ModelLocation>; duplicates: Map<string, string[]> }> {
  const models = new Map<string, ModelLocation>();
  const duplicates = new Map<string, string[]>();
  for (const repository of repositories) {
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(repository));
    } catch (err) {
      throw invalidArg(`Cannot read model repository '${repository}': ${(err as Error).message}`);
    }
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      if (e.name.startsWith(".")) continue;
      let isDir = e.isDirectory;
      if (e.isSymlink) {
        isDir = (await Deno.stat(join(repository, e.name)).catch(() => undefined))?.isDirectory ?? false;
      }
      if (!isDir) continue;
      const prior = models.get(e.name);
      if (prior) {
        duplicates.set(e.name, [...(duplicates.get(e.name) ?? [prior.repository]), repository]);
        continue;
      }
      models.set(e.name, { name: e.name, repository, dir: join(repository, e.name) });
    }
  }
  return { models, duplicates };
}

/**
 * The numeric version folders of a model, ascending. Other entries are ignored, as are numbers with a sign,
 * names starting with "0" (as Triton ignores them, "0" included) and numbers beyond 2^53.
 * @param modelDir the model folder
 */
export async function listVersions(modelDir: string): Promise<number[]> {
  const versions: number[] = [];
  for await (const e of Deno.readDir(modelDir)) {
    if (!/^[1-9][0-9]*$/.test(e.name)) continue;
    const n = Number(e.name);
    if (!Number.isSafeInteger(n)) continue;
    const isDir = e.isDirectory ||
      (e.isSymlink &&
        ((await Deno.stat(join(modelDir, e.name)).catch(() => undefined))?.isDirectory ?? false));
    if (isDir) versions.push(n);
  }
  return versions.sort((a, b) => a - b);
}

/**
 * The versions a policy serves: `latest` the newest N, `all` every one, `specific` the listed ones (also those
 * without a folder, which then fail to load).
 * @param policy the config's version_policy
 * @param available the version folders found
 */
export function selectVersions(
  policy: VersionPolicyConfig | undefined,
  available: readonly number[],
): number[] {
  if (policy?.all) return [...available];
  if (policy?.specific) return [...new Set(policy.specific.versions)].sort((a, b) => a - b);
  const n = policy?.latest?.num_versions ?? 1;
  return available.slice(Math.max(0, available.length - n));
}

/**
 * The file names inside a model's version folders (to guess the backend of a config that names none).
 * @param modelDir the model folder
 * @param versions the version folders
 */
export async function versionFileNames(modelDir: string, versions: readonly number[]): Promise<string[]> {
  const names = new Set<string>();
  for (const v of versions) {
    for await (const e of Deno.readDir(join(modelDir, String(v)))) names.add(e.name);
  }
  return [...names];
}
