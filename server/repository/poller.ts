/**
 * Repository polling (`--model-control-mode=poll`): every `--repository-poll-secs` the repositories are
 * scanned; new models load, changed ones reload (the old versions serve until the new ones are ready) and
 * removed ones unload.
 * @module
 */

import { join } from "node:path";
import { scanRepositories } from "./repository.ts";

/** What the poller asks of the models (the model registry provides it). */
export interface PolledModels {
  /** Loads a new or changed model; its old versions serve until the new ones are ready. */
  reloadModel(name: string): Promise<void>;
  /** Unloads a model that left the repositories. */
  retireModel(name: string): Promise<void>;
}

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
  /** Runs one poll now and waits for the loads and unloads it started. */
  pollOnce(): Promise<void>;
  /** Stops polling and waits for a scan in progress (not for the loads it started). */
  stop(): Promise<void>;
}

/**
 * Starts polling the repositories.
 * @param registry loads and unloads the models that change
 * @param repositories the repository paths
 * @param intervalSecs seconds between polls; 0 polls only when pollOnce is called
 * @param log where to report changes
 * @param beforePoll runs before each scan (brings cloud repositories' mirrors up to date)
 */
export async function startPoller(
  registry: PolledModels,
  repositories: string[],
  intervalSecs: number,
  log: (message: string) => void,
  beforePoll?: () => Promise<void>,
): Promise<Poller> {
  const known = new Map<string, string>();
  const { models } = await scanRepositories(repositories);
  for (const [name, loc] of models) known.set(name, await fingerprint(loc.dir));
  let scanning: Promise<Promise<void>[]> | undefined;
  let stopped = false;
  // The load or unload in progress for each model: a model whose load hangs (an initialize() that never
  // returns) holds up only its own later changes, not the polls or the other models.
  const busy = new Map<string, Promise<void>>();
  const change = (name: string, op: () => Promise<void>): Promise<void> => {
    const run = (busy.get(name) ?? Promise.resolve())
      .then(op)
      .catch((err) => log((err as Error).message))
      .finally(() => {
        if (busy.get(name) === run) busy.delete(name);
      });
    busy.set(name, run);
    return run;
  };

  /** Scans the repositories and starts a load or unload for each change; returns those operations. */
  const scan = async (): Promise<Promise<void>[]> => {
    let current;
    try {
      await beforePoll?.();
      current = (await scanRepositories(repositories)).models;
    } catch (err) {
      log(`Cannot poll the model repositories: ${(err as Error).message}`);
      return [];
    }
    const started: Promise<void>[] = [];
    for (const [name, loc] of current) {
      const fp = await fingerprint(loc.dir);
      if (known.get(name) === fp) continue;
      known.set(name, fp);
      log(`Model '${name}' changed in the repository: loading`);
      started.push(change(name, () => registry.reloadModel(name)));
    }
    for (const name of [...known.keys()]) {
      if (current.has(name)) continue;
      known.delete(name);
      log(`Model '${name}' left the repository: unloading`);
      started.push(change(name, () => registry.retireModel(name)));
    }
    return started;
  };
  const startScan = () => {
    scanning ??= scan().finally(() => (scanning = undefined));
    return scanning;
  };
  const pollOnce = async () => {
    await Promise.all(await startScan());
  };
  const timer = intervalSecs > 0
    ? setInterval(() => {
      if (!stopped) void startScan();
    }, intervalSecs * 1000)
    : undefined;
  return {
    pollOnce,
    async stop() {
      stopped = true;
      if (timer !== undefined) clearInterval(timer);
      // A scan in progress finishes; loads still running are left to the registry's close.
      await scanning;
    },
  };
}
