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

/** Where the server's files live: the shared-memory folder and the temporary folder. */
export interface FileDirs {
  /** Default: /dev/shm. */
  shm?: string;
  /** Default: the temporary folder ($TMPDIR, else /tmp). */
  tmp?: string;
}

/** Sweeps both folders of `dirs` (their defaults where not given) of the files whose process `remove` names. */
function sweepBoth(dirs: FileDirs, remove: (pid: number) => boolean): string[] {
  return [
    ...sweep(dirs.shm ?? SHM_DIR, SHM_NAMES, remove),
    ...sweep(dirs.tmp ?? tmpdir(), TMP_NAMES, remove),
  ];
}

/**
 * Removes the shared-memory objects and temporary folders that processes no longer running left behind.
 * @returns the paths removed
 */
export function removeStaleFiles(dirs: FileDirs = {}): string[] {
  return sweepBoth(dirs, (pid) => !alive(pid));
}

/**
 * Removes this process's own shared-memory objects and temporary folders (at exit, whatever the way out).
 * @returns the paths removed
 */
export function removeOwnFiles(dirs: FileDirs = {}): string[] {
  return sweepBoth(dirs, (pid) => pid === Deno.pid);
}

/** How a registered step is undone. */
export interface CleanupOptions {
  /**
   * Steps of one group that follow each other on the stack are undone together (the endpoints stop accepting
   * and drain at the same time).
   */
  group?: string;
  /** Undoes the thing at once, without waiting; called instead of waiting once the time is up. */
  force?: () => void;
}

interface Step extends CleanupOptions {
  name: string;
  undo: () => void | Promise<void>;
}

/**
 * The undo of everything a start-up made, in the order it was made: every way out (a failed start, a signal, an
 * uncaught error, a shutdown) unwinds the same stack, newest first, within one time limit.
 *
 * ```ts
 * const stack = new CleanupStack();
 * const file = await Deno.open("x");
 * stack.defer("file", () => file.close());
 * await stack.unwind(30_000);
 * ```
 */
export class CleanupStack {
  #steps: Step[] = [];
  #unwinding: Promise<boolean> | undefined;
  #onError: (name: string, err: unknown) => void;
  #onLate: () => void;

  /**
   * Creates an empty stack.
   * @param hooks `onError`: told of a step that failed (the others still run); `onLate`: told when the time
   *   is up with steps still running
   */
  constructor(
    hooks: { onError?: (name: string, err: unknown) => void; onLate?: () => void } = {},
  ) {
    this.#onError = hooks.onError ?? (() => {});
    this.#onLate = hooks.onLate ?? (() => {});
  }

  /** The names of the steps registered, oldest first. */
  get names(): string[] {
    return this.#steps.map((s) => s.name);
  }

  /**
   * Registers the undo of something just made.
   * @param name what it undoes, for the log
   * @param undo the undo; it may wait (drain requests, unload models) until the time is up
   * @param options its group, and its undo without waiting
   */
  defer(name: string, undo: () => void | Promise<void>, options: CleanupOptions = {}): void {
    if (this.#unwinding) throw new Error(`Cannot register '${name}': the cleanup stack is unwinding`);
    this.#steps.push({ name, undo, ...options });
  }

  /**
   * Undoes every step, newest first; a second call returns the first one's result. Once `timeoutMs` has passed,
   * a step still running is left to its `force`, and each later step with a `force` runs that instead; the
   * steps without one still run and are waited for (they must not wait on requests or models).
   * @param timeoutMs the time limit for the steps that wait
   * @returns whether every step finished within the time
   */
  unwind(timeoutMs: number): Promise<boolean> {
    this.#unwinding ??= this.#unwind(timeoutMs);
    return this.#unwinding;
  }

  async #unwind(timeoutMs: number): Promise<boolean> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let late = false;
    const deadline = new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)));
    deadline.then(() => (late = true));
    const steps = this.#steps.reverse();
    this.#steps = [];
    try {
      for (let i = 0; i < steps.length;) {
        let j = i + 1;
        const group = steps[i]!.group;
        if (group !== undefined) { while (j < steps.length && steps[j]!.group === group) j++; }
        const batch = steps.slice(i, j);
        i = j;
        if (late) {
          await Promise.all(
            batch.map((s) => s.force ? this.#run(s.name, s.force) : this.#run(s.name, s.undo)),
          );
          continue;
        }
        const done = new Set<Step>();
        const running = Promise.all(batch.map((s) => this.#run(s.name, s.undo).then(() => done.add(s))));
        await Promise.race([running, deadline]);
        if (late) {
          this.#onLate();
          for (const s of batch) if (!done.has(s) && s.force) await this.#run(s.name, s.force);
        }
      }
    } finally {
      clearTimeout(timer);
    }
    return !late;
  }

  async #run(name: string, undo: () => void | Promise<void>): Promise<void> {
    try {
      await undo();
    } catch (err) {
      this.#onError(name, err);
    }
  }
}
