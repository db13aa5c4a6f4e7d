/**
 * Repository polling (`--model-control-mode=poll`): every `--repository-poll-secs` the repositories are
 * scanned; new models load, changed ones reload (the old versions serve until the new ones are ready) and
 * removed ones unload.
 * @module
 */

import { join } from "node:path";
import type { ModelRegistry } from "../models/registry.ts";
import { scanRepositories } from "./repository.ts";

/**
 * A fingerprint of a model folder: every file's path, size and modification time.
 * @param dir the model folder
 */
export async function fingerprint(dir: string): Promise<string> {
  const parts: string[] = [];
  const walk = async (d: string, rel: string) => {
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(d));
    } catch {
      return;
    }
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const path = join(d, e.name);
      const st = await Deno.stat(path).catch(() => undefined);
      if (!st) continue;
      if (st.isDirectory) await walk(path, `${rel}${e.name}/`);
      else parts.push(`${rel}${e.name}:${st.size}:${st.mtime?.getTime() ?? 0}`);
    }
  };
  await walk(dir, "");
  return parts.join("|");
}

/** A running poller. */
export interface Poller {
  /** Runs one poll now (also what the timer runs). */
  pollOnce(): Promise<void>;
  /** Stops polling and waits for a poll in progress. */
  stop(): Promise<void>;
}

/**
 * Starts polling the registry's repositories.
 * @param registry the models
 * @param repositories the repository paths
 * @param intervalSecs seconds between polls; 0 polls only when pollOnce is called
 * @param log where to report changes
 * @param beforePoll runs before each scan (brings cloud repositories' mirrors up to date)
 */
export async function startPoller(
  registry: ModelRegistry,
  repositories: string[],
  intervalSecs: number,
  log: (message: string) => void,
  beforePoll?: () => Promise<void>,
): Promise<Poller> {
  const known = new Map<string, string>();
  const { models } = await scanRepositories(repositories);
  for (const [name, loc] of models) known.set(name, await fingerprint(loc.dir));
  let running: Promise<void> | undefined;
  let stopped = false;

  const poll = async () => {
    let current;
    try {
      await beforePoll?.();
      current = (await scanRepositories(repositories)).models;
    } catch (err) {
      log(`Cannot poll the model repositories: ${(err as Error).message}`);
      return;
    }
    for (const [name, loc] of current) {
      const fp = await fingerprint(loc.dir);
      if (known.get(name) === fp) continue;
      known.set(name, fp);
      log(`Model '${name}' changed in the repository: loading`);
      await registry.reloadModel(name).catch((err) => log((err as Error).message));
    }
    for (const name of [...known.keys()]) {
      if (current.has(name)) continue;
      known.delete(name);
      log(`Model '${name}' left the repository: unloading`);
      await registry.retireModel(name).catch((err) => log((err as Error).message));
    }
  };
  const pollOnce = () => {
    running ??= poll().finally(() => (running = undefined));
    return running;
  };
  const timer = intervalSecs > 0
    ? setInterval(() => {
      if (!stopped) void pollOnce();
    }, intervalSecs * 1000)
    : undefined;
  return {
    pollOnce,
    async stop() {
      stopped = true;
      if (timer !== undefined) clearInterval(timer);
      await running;
    },
  };
}
