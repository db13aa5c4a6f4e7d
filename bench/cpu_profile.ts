/**
 * CPU profiles of a running Deno process over its inspector (`--inspect=host:port`), through the Chrome
 * DevTools Protocol's Profiler domain, and a summary by self and total time per function and per file.
 * @module
 */

/** One node of a V8 CPU profile (the `.cpuprofile` format). */
export interface ProfileNode {
  /** Node id. */
  id: number;
  /** The function. */
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber: number };
  /** Child node ids. */
  children?: number[];
}

/** A V8 CPU profile (the `.cpuprofile` format). */
export interface CpuProfile {
  /** The call tree. */
  nodes: ProfileNode[];
  /** Start time in microseconds. */
  startTime: number;
  /** End time in microseconds. */
  endTime: number;
  /** The node id of each sample. */
  samples: number[];
  /** Microseconds between consecutive samples. */
  timeDeltas: number[];
}

/** A profiler attached to a process's inspector. */
export interface Profiler {
  /** Stops profiling and returns the profile (the connection is closed). */
  stop(): Promise<CpuProfile>;
}

/**
 * Attaches to a Deno inspector and starts sampling.
 * @param inspector the inspector's host:port (as given to `--inspect`)
 * @param options the sampling interval in microseconds (default 100)
 * @returns the running profiler
 */
export async function startProfiler(
  inspector: string,
  options: { intervalUs?: number } = {},
): Promise<Profiler> {
  const targets = await (await fetch(`http://${inspector}/json/list`)).json() as {
    webSocketDebuggerUrl: string;
  }[];
  const url = targets[0]?.webSocketDebuggerUrl;
  if (!url) throw new Error(`Cannot profile: the inspector at '${inspector}' lists no target`);
  const ws = new WebSocket(url);
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    ws.onerror = (e) => reject(new Error(`Cannot connect to the inspector at '${url}': ${String(e)}`));
  });
  let nextId = 1;
  const pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  ws.onmessage = (e) => {
    const msg = JSON.parse(String(e.data)) as { id?: number; result?: unknown; error?: { message: string } };
    if (msg.id === undefined) return;
    const p = pending.get(msg.id);
    if (!p) return;
    pending.delete(msg.id);
    if (msg.error) p.reject(new Error(`Inspector call failed: ${msg.error.message}`));
    else p.resolve(msg.result);
  };
  const call = (method: string, params: Record<string, unknown> = {}) =>
    new Promise<unknown>((resolve, reject) => {
      const id = nextId++;
      pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ id, method, params }));
    });
  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: options.intervalUs ?? 100 });
  await call("Profiler.start");
  return {
    async stop() {
      const { profile } = await call("Profiler.stop") as { profile: CpuProfile };
      await call("Profiler.disable");
      ws.close();
      await new Promise((r) => (ws.readyState === WebSocket.CLOSED ? r(undefined) : (ws.onclose = r)));
      return profile;
    },
  };
}

/** One row of a profile summary. */
export interface ProfileRow {
  /** Function name, file and line (or the file alone, for the per-file table). */
  name: string;
  /** Self time in milliseconds. */
  selfMs: number;
  /** Self time as a share of the busy (non-idle) time, in percent. */
  selfPct: number;
  /** Total (inclusive) time as a share of the busy time, in percent. */
  totalPct: number;
}

/** A profile summarized. */
export interface ProfileSummary {
  /** The profile's wall time in milliseconds. */
  wallMs: number;
  /** Time not idle in milliseconds (on the main JS thread). */
  busyMs: number;
  /** Functions by self time, largest first. */
  functions: ProfileRow[];
  /** Files (modules; natives grouped by their kind) by self time, largest first. */
  files: ProfileRow[];
}

function shortUrl(url: string): string {
  if (url === "") return "";
  const i = url.indexOf("/node_modules/");
  if (i >= 0) {
    const rest = url.slice(i + "/node_modules/".length).replace(/^\.deno\/[^/]+\/node_modules\//, "");
    return rest;
  }
  const s = url.indexOf("/server/");
  if (s >= 0) return url.slice(s + 1);
  return url.replace(/^file:\/\/.*\/(?=[^/]+\/[^/]+$)/, "");
}

/**
 * Summarizes a profile by self time (and total time) per function and per file.
 * @param profile the profile
 * @returns the summary, busy time excluding `(idle)`
 */
export function summarizeProfile(profile: CpuProfile): ProfileSummary {
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of profile.nodes) {
    byId.set(n.id, n);
    for (const c of n.children ?? []) parent.set(c, n.id);
  }
  const fnKey = (n: ProfileNode): string => {
    const f = n.callFrame;
    const url = shortUrl(f.url);
    if (!url && !f.functionName) {
      // Native code called from JavaScript (a Node-API addon, for example): name it by its caller.
      const caller = parent.get(n.id);
      const p = caller === undefined ? undefined : byId.get(caller);
      return p && p.callFrame.functionName !== "(root)" ? `(native, called from ${fnKey(p)})` : "(native)";
    }
    const name = f.functionName || "(anonymous)";
    return url ? `${name} ${url}:${f.lineNumber + 1}` : name;
  };
  const fileKey = (n: ProfileNode): string => {
    const url = shortUrl(n.callFrame.url);
    if (url || n.callFrame.functionName) return url || n.callFrame.functionName;
    const caller = parent.get(n.id);
    const p = caller === undefined ? undefined : byId.get(caller);
    return p && p.callFrame.url ? `(native, called from ${shortUrl(p.callFrame.url)})` : "(native)";
  };
  const self = new Map<string, number>();
  const total = new Map<string, number>();
  const fileSelf = new Map<string, number>();
  const fileTotal = new Map<string, number>();
  let busy = 0;
  let wall = 0;
  for (let i = 0; i < profile.samples.length; i++) {
    const dt = (profile.timeDeltas[i + 1] ?? 0) / 1000;
    wall += dt;
    const node = byId.get(profile.samples[i]!);
    if (!node) continue;
    if (node.callFrame.functionName === "(idle)") continue;
    busy += dt;
    const k = fnKey(node);
    self.set(k, (self.get(k) ?? 0) + dt);
    const fk = fileKey(node);
    fileSelf.set(fk, (fileSelf.get(fk) ?? 0) + dt);
    const seen = new Set<string>();
    const seenFiles = new Set<string>();
    for (let id: number | undefined = node.id; id !== undefined; id = parent.get(id)) {
      const n = byId.get(id)!;
      if (n.callFrame.functionName === "(root)") break;
      seen.add(fnKey(n));
      seenFiles.add(fileKey(n));
    }
    for (const s of seen) total.set(s, (total.get(s) ?? 0) + dt);
    for (const s of seenFiles) fileTotal.set(s, (fileTotal.get(s) ?? 0) + dt);
  }
  const rows = (m: Map<string, number>, t: Map<string, number>) =>
    [...m.entries()]
      .map(([name, ms]) => ({
        name,
        selfMs: ms,
        selfPct: (100 * ms) / busy,
        totalPct: (100 * (t.get(name) ?? ms)) / busy,
      }))
      .sort((a, b) => b.selfMs - a.selfMs);
  return { wallMs: wall, busyMs: busy, functions: rows(self, total), files: rows(fileSelf, fileTotal) };
}
