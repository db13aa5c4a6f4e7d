/**
 * The server's files outside the repository: shared-memory objects under /dev/shm and folders under the
 * temporary folder, each named with the id of the process that made it. At start-up those of processes that no
 * longer run are removed (a crash or kill -9 leaves them behind); at exit the process removes its own.
 * @module
 */

import { tmpdir } from "node:os";
import { join } from "node:path";

/** Where shared-memory objects live on Linux. */
const SHM_DIR = "/dev/shm";

/** Names of the server's objects in /dev/shm: `<prefix>-<pid>-...`, where pid is the process that made it. */
const SHM_NAMES = /^dinfer-(?:py|resp|bls|blsr)-(\d+)-/;
/** Names of the server's folders in the temporary folder: uploaded models, Python stubs' files, cloud mirrors. */
const TMP_NAMES = /^dinfer-(?:upload|py|cloud)-(\d+)-/;

function alive(pid: number): boolean {
  if (pid === Deno.pid) return true;
  try {
    Deno.statSync(`/proc/${pid}`);
    return true;
  } catch {
    return false;
  }
}

function sweep(dir: string, names: RegExp, remove: (pid: number) => boolean): string[] {
  const removed: string[] = [];
  let entries: Deno.DirEntry[];
  try {
    entries = [...Deno.readDirSync(dir)];
  } catch {
    return removed;
  }
  for (const e of entries) {
    const m = names.exec(e.name);
    if (!m || !remove(Number(m[1]))) continue;
    try {
      Deno.removeSync(join(dir, e.name), { recursive: true });
      removed.push(join(dir, e.name));
    } catch {
      // Taken meanwhile, or not ours to remove.
    }
  }
  return removed;
}

/**
 * Removes the shared-memory objects and temporary folders that processes no longer running left behind.
 * @returns the paths removed
 */
export function removeStaleFiles(): string[] {
  const dead = (pid: number) => !alive(pid);
  return [...sweep(SHM_DIR, SHM_NAMES, dead), ...sweep(tmpdir(), TMP_NAMES, dead)];
}

/**
 * Removes this process's own shared-memory objects and temporary folders (at exit, whatever the way out).
 * @returns the paths removed
 */
export function removeOwnFiles(): string[] {
  const own = (pid: number) => pid === Deno.pid;
  return [...sweep(SHM_DIR, SHM_NAMES, own), ...sweep(tmpdir(), TMP_NAMES, own)];
}
