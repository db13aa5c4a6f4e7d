/**
 * CPU time of processes, of their threads and of the whole machine, from /proc (Linux), for the benchmarks:
 * they share their cores with the server and with other sessions, so every point says who used the CPU.
 * @module
 */

/**
 * User + system CPU seconds of a process.
 * @param pid a process id, or "self"
 * @returns the seconds, or NaN once the process has exited
 */
export function cpuSeconds(pid: number | "self"): number {
  let stat: string;
  try {
    stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return NaN;
  }
  return statSeconds(stat);
}

/** utime + stime of a `stat` line (fields 14 and 15; the name in parentheses may hold spaces). */
function statSeconds(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

/**
 * A process and its descendants (a server and its Python stubs), by process id, the process first.
 * @param pid a process id
 */
export function processTree(pid: number): number[] {
  const out = [pid];
  for (let i = 0; i < out.length; i++) {
    try {
      for (const t of Deno.readDirSync(`/proc/${out[i]}/task`)) {
        const kids = Deno.readTextFileSync(`/proc/${out[i]}/task/${t.name}/children`).trim();
        if (kids) out.push(...kids.split(" ").map(Number));
      }
    } catch {
      // Exited.
    }
  }
  return out;
}

/**
 * User + system CPU seconds of processes together (those that have exited count 0).
 * @param pids process ids, e.g. from processTree
 */
export function treeCpuSeconds(pids: number[]): number {
  return pids.reduce((sum, pid) => sum + (cpuSeconds(pid) || 0), 0);
}

/**
 * User + system CPU seconds of each thread of a process, by thread id, with the thread's name.
 * @param pid a process id
 * @returns the threads; empty once the process has exited
 */
export function threadCpuSeconds(pid: number): Map<number, { name: string; seconds: number }> {
  const out = new Map<number, { name: string; seconds: number }>();
  let entries: Deno.DirEntry[];
  try {
    entries = [...Deno.readDirSync(`/proc/${pid}/task`)];
  } catch {
    return out;
  }
  for (const e of entries) {
    try {
      const stat = Deno.readTextFileSync(`/proc/${pid}/task/${e.name}/stat`);
      const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      out.set(Number(e.name), { name, seconds: statSeconds(stat) });
    } catch { /* the thread has ended */ }
  }
  return out;
}

/** Busy CPU seconds of the whole machine (all cores together). */
export function machineBusySeconds(): number {
  const line = Deno.readTextFileSync("/proc/stat").split("\n", 1)[0]!;
  const [user, nice, system, _idle, _iowait, irq, softirq, steal] = line.split(/\s+/).slice(1).map(Number);
  return (user! + nice! + system! + irq! + softirq! + steal!) / 100;
}

/**
 * Waits (up to `maxS`) for a quarter second in which other processes use less than `thresholdPct` CPU, since
 * other sessions share the machine.
 * @param maxS the longest wait in seconds
 * @param options the threshold in percent of one core (default 20) and processes of our own not to count
 * @returns what other processes used in the last quarter second, in percent of one core
 */
export async function waitQuiet(
  maxS: number,
  options: { thresholdPct?: number; ours?: number[] } = {},
): Promise<number> {
  const threshold = options.thresholdPct ?? 20;
  const ours = options.ours ?? [];
  const own = () => cpuSeconds("self") + ours.reduce((s, pid) => s + (cpuSeconds(pid) || 0), 0);
  const deadline = performance.now() + maxS * 1000;
  let other = NaN;
  do {
    const m0 = machineBusySeconds(), c0 = own();
    await new Promise((r) => setTimeout(r, 250));
    other = (100 * (machineBusySeconds() - m0 - (own() - c0))) / 0.25;
    if (other < threshold) break;
  } while (performance.now() < deadline);
  return other;
}
