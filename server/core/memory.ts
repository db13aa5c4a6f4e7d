/**
 * Gives memory back when the server goes idle: after a burst of requests that grew the process, a full V8
 * garbage collection frees what the requests left (V8 collects on its own only when it allocates again, so an
 * idle process keeps its garbage) and `malloc_trim(0)` returns the freed native memory of every malloc arena
 * to the system.
 * @module
 */

import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { glibc } from "./libc.ts";

/** Options of {@linkcode MemoryReclaimer}. */
export interface ReclaimOptions {
  /** How often the process is looked at, in ms; it reclaims at a look that saw no new request since the last. */
  intervalMs?: number;
  /** Growth of the RSS over its level after the last reclaim, in bytes, that is worth a reclaim. */
  growthBytes?: number;
  /** Reads the process's RSS in bytes (tests pass their own). */
  rss?: () => number;
  /**
   * Frees memory (tests pass their own); the default is {@linkcode reclaimMemory}. A promise means that part of
   * the work goes on elsewhere (other threads collecting their own garbage): the RSS after the reclaim is read
   * once it settles, and no look reclaims meanwhile.
   */
  reclaim?: () => void | Promise<void>;
  /** How many inference requests have arrived so far (the server passes its ArrivalCounter's total). */
  arrivals: () => number;
  /**
   * Also reclaim at the first look that finds the process idle, whatever it grew by: what the start left
   * (module compilation, model loading) is garbage by then.
   */
  afterStart?: boolean;
}

type Gc = (options?: { type: "major"; execution: "sync" }) => void;

let gc: Gc | null | undefined;
let trim: (() => void) | null | undefined;

/** V8's `gc()`, exposed for this process once; null where the runtime refuses. */
function v8Gc(): Gc | null {
  if (gc !== undefined) return gc;
  gc = null;
  try {
    const global = (globalThis as { gc?: Gc }).gc;
    if (typeof global === "function") return (gc = global);
    setFlagsFromString("--expose-gc");
    // The flag applies to contexts made after it: a new context has `gc`, which collects the whole isolate.
    const fn = runInNewContext("gc") as unknown;
    if (typeof fn === "function") gc = fn as Gc;
  } catch { /* not exposed: V8 collects on its own schedule */ }
  return gc;
}

/** glibc's `malloc_trim(0)` through FFI once; null without glibc or without FFI permission. */
function mallocTrim(): (() => void) | null {
  if (trim !== undefined) return trim;
  // Without it (musl, no FFI permission) the allocator keeps its free memory.
  const libc = glibc({ malloc_trim: { parameters: ["usize"], result: "i32" } });
  return trim = libc ? () => void libc.malloc_trim(0n) : null;
}

/**
 * Frees what it can at once: a full garbage collection of this isolate, then the malloc arenas' free memory
 * back to the system. Each step is skipped where the runtime does not offer it.
 * @returns which steps ran
 */
export function reclaimMemory(): { gc: boolean; trim: boolean } {
  const collect = v8Gc();
  collect?.({ type: "major", execution: "sync" });
  const release = mallocTrim();
  release?.();
  return { gc: collect !== null, trim: release !== null };
}

/**
 * The longest wait, in looks, between two reclaims that left the RSS above its level (see MemoryReclaimer):
 * about a minute at the default interval.
 */
export const MAX_BACKOFF_LOOKS = 64;

/**
 * Watches the process and reclaims memory when it is idle and has grown: at each look that saw no new request
 * since the previous one, when the RSS is more than `growthBytes` above its level (the least it has been).
 * Under steady load it does nothing (V8 and the allocator reuse what they hold); a busy server that goes idle
 * is brought back near its level before the burst within about two intervals.
 *
 * A reclaim that leaves the RSS above that level found the memory still in use: connections a client holds
 * open (a flood of them needs no inference request, so the process looks idle), or a model loaded since. It
 * looks again after 1, 2, 4, ... looks, up to MAX_BACKOFF_LOOKS, so that memory freed later (the connections
 * closed) is given back without a full collection at every look; a level that a reclaim at the longest wait
 * still leaves is the new level.
 */
export class MemoryReclaimer {
  #intervalMs: number;
  #growth: number;
  #rss: () => number;
  #reclaim: () => void | Promise<void>;
  #arrivals: () => number;
  #timer: ReturnType<typeof setInterval> | undefined;
  #floor: number;
  #lastArrivals: number;
  #reclaims = 0;
  /** Looks to let pass before the next reclaim. */
  #wait = 0;
  /** The last wait set after a reclaim that left the RSS high (0: the last reclaim brought it back). */
  #backoff = 0;
  /** Whether the first idle look reclaims (see ReclaimOptions.afterStart) and has not yet. */
  #afterStart: boolean;
  /** Whether a reclaim's work elsewhere has not finished yet (see ReclaimOptions.reclaim). */
  #reclaiming = false;

  /** @param options interval, growth threshold, and the readings tests replace */
  constructor(options: ReclaimOptions) {
    this.#intervalMs = options.intervalMs ?? 1000;
    this.#growth = options.growthBytes ?? 16 * 2 ** 20;
    this.#rss = options.rss ?? (() => Deno.memoryUsage().rss);
    this.#reclaim = options.reclaim ?? (() => void reclaimMemory());
    this.#arrivals = options.arrivals;
    this.#floor = this.#rss();
    this.#lastArrivals = this.#arrivals();
    this.#afterStart = options.afterStart ?? false;
  }

  /** How many times memory was reclaimed. */
  get reclaims(): number {
    return this.#reclaims;
  }

  /** Starts looking every interval (the timer does not keep the process alive). */
  start(): void {
    if (this.#timer !== undefined) return;
    const timer = setInterval(() => this.check(), this.#intervalMs);
    Deno.unrefTimer(timer);
    this.#timer = timer;
  }

  /** Stops looking. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * One look: reclaims when no request arrived since the previous look and the RSS grew past the threshold
   * (unless a reclaim that left it there asked to wait).
   * @returns whether it reclaimed
   */
  check(): boolean {
    const arrivals = this.#arrivals();
    const busy = arrivals !== this.#lastArrivals;
    this.#lastArrivals = arrivals;
    const rss = this.#rss();
    if (rss < this.#floor) this.#floor = rss;
    if (this.#reclaiming) return false;
    if (!busy && this.#afterStart) {
      this.#afterStart = false;
      this.#run(() => (this.#floor = Math.min(this.#floor, this.#rss())));
      return true;
    }
    if (busy || rss <= this.#floor + this.#growth) return false;
    if (this.#wait > 0) {
      this.#wait--;
      return false;
    }
    this.#run(() => this.#judge(this.#rss()));
    return true;
  }

  /** Reclaims, then reads the result: at once, or once the work elsewhere has settled. */
  #run(then: () => void): void {
    this.#reclaims++;
    const done = this.#reclaim();
    if (!(done instanceof Promise)) return then();
    this.#reclaiming = true;
    done.catch(() => {}).finally(() => {
      this.#reclaiming = false;
      then();
    });
  }

  /** Sets the wait before the next reclaim, and the level, from the RSS a reclaim left. */
  #judge(after: number): void {
    if (after <= this.#floor + this.#growth) {
      this.#backoff = 0;
    } else if (this.#backoff < MAX_BACKOFF_LOOKS) {
      this.#backoff = Math.min(Math.max(1, 2 * this.#backoff), MAX_BACKOFF_LOOKS);
      this.#wait = this.#backoff;
    } else {
      // Still there after the longest wait: memory the process keeps (a model loaded since, caches).
      this.#floor = after;
      this.#backoff = 0;
    }
    if (after < this.#floor) this.#floor = after;
  }
}
