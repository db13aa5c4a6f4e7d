/**
 * The rate limiter (`--rate-limit=execution_count`): model instances run only when the resources their
 * instance group's `rate_limiter` lists are free, across every model of the server. An instance about to run
 * is staged; staged instances get their resources in the order of their scaled priority (executions so far
 * times the group's `priority`, 0 counting as 1; ties in staging order), and only the first of that order is
 * served: an instance whose resources are taken makes those behind it wait, so that priorities hold. A group's
 * priority of 2 thus gets half the executions of a priority of 1 while both compete.
 *
 * Resources are per device (instances on device N use device N's copies; CPU instances count as device 0)
 * unless listed `global: true`. A resource's copies are, by default, the most that any loaded instance asks
 * for; `--rate-limit-resource=<name>:<count>[:<device>]` sets them instead, and then every resource an
 * instance lists must be given there.
 * @module
 */

import { setImmediate } from "node:timers";
import { invalidArg } from "../core/errors.ts";
import type { BackendInstance } from "../backends/backend.ts";

/** `--rate-limit`: off ignores every `rate_limiter` setting. */
export type RateLimitMode = "off" | "execution_count";

/** A `--rate-limit-resource`: copies of a resource on one device, or on every device when none is given. */
export interface ResourceLimit {
  /** The resource name. */
  name: string;
  /** The copies available. */
  count: number;
  /** The device; undefined for every device (and for global resources). */
  device?: number;
}

/** One resource an instance group lists (`rate_limiter { resources [...] }`). */
export interface ResourceNeed {
  name: string;
  /** Whether it is one copy for the whole server rather than per device. */
  global: boolean;
  count: number;
}

/** What one instance asks of the rate limiter. */
export interface InstanceLimits {
  /** The resources it needs to run. */
  resources: ResourceNeed[];
  /** The group's priority (`rate_limiter { priority }`); 0 counts as 1. */
  priority: number;
  /** Its device (0 for CPU instances). */
  device: number;
}

const GLOBAL = "GLOBAL";

/** Copies of each resource by where they live (`GLOBAL` or a device number) and name. */
type ResourceMap = Map<string, Map<string, number>>;

function needsOf(l: InstanceLimits): ResourceMap {
  const out: ResourceMap = new Map();
  for (const r of l.resources) {
    const where = r.global ? GLOBAL : String(l.device);
    const m = out.get(where) ?? new Map<string, number>();
    m.set(r.name, r.count);
    out.set(where, m);
  }
  return out;
}

/** An instance known to the rate limiter. */
export class LimitedInstance {
  /** The model name, for messages. */
  readonly model: string;
  /** What it needs, by place and resource. */
  readonly needs: ResourceMap;
  /** The group's priority, at least 1. */
  readonly priority: number;
  /** Executions finished. */
  executions = 0;

  constructor(model: string, limits: InstanceLimits) {
    this.model = model;
    this.needs = needsOf(limits);
    this.priority = Math.max(1, limits.priority);
  }

  /** The order among staged instances: lower runs first. */
  get scaledPriority(): number {
    return this.executions * this.priority;
  }
}

interface Staged {
  instance: LimitedInstance;
  seq: number;
  grant: () => void;
}

/** The server's rate limiter. */
export class RateLimiter {
  #explicit: readonly ResourceLimit[];
  #instances = new Set<LimitedInstance>();
  /** The copies of each resource, recomputed when instances come and go. */
  #limits: ResourceMap = new Map();
  #allocated: ResourceMap = new Map();
  #staged: Staged[] = [];
  #seq = 0;
  #attemptScheduled = false;

  /**
   * Creates a rate limiter.
   * @param explicit the `--rate-limit-resource` settings
   */
  constructor(explicit: readonly ResourceLimit[] = []) {
    this.#explicit = explicit;
  }

  /**
   * Adds the instances of a model version.
   * @param model the model name
   * @param limits what each instance asks for
   * @returns one handle per instance, in order
   * @throws ServerError INVALID_ARG when the resources cannot serve them (then nothing is added)
   */
  register(model: string, limits: readonly InstanceLimits[]): LimitedInstance[] {
    const added = limits.map((l) => new LimitedInstance(model, l));
    for (const a of added) this.#instances.add(a);
    try {
      this.#limits = this.#compute(model);
    } catch (err) {
      for (const a of added) this.#instances.delete(a);
      throw err;
    }
    return added;
  }

  /**
   * Removes instances (when their model version unloads).
   * @param instances the handles register gave
   */
  unregister(instances: readonly LimitedInstance[]): void {
    for (const i of instances) this.#instances.delete(i);
    this.#staged = this.#staged.filter((s) => !instances.includes(s.instance));
    this.#limits = this.#compute("");
    this.#attempt();
  }

  /** The copies of every resource now, as `[place, name, count]` rows (place `GLOBAL` or a device). */
  limits(): [string, string, number][] {
    const rows: [string, string, number][] = [];
    for (const [where, m] of this.#limits) for (const [name, n] of m) rows.push([where, name, n]);
    return rows.sort((a, b) => (a[0] + a[1] < b[0] + b[1] ? -1 : 1));
  }

  #compute(model: string): ResourceMap {
    const max: ResourceMap = new Map();
    for (const i of this.#instances) {
      for (const [where, m] of i.needs) {
        const mm = max.get(where) ?? new Map<string, number>();
        for (const [name, n] of m) mm.set(name, Math.max(mm.get(name) ?? 0, n));
        max.set(where, mm);
      }
    }
    const fail = (reason: string): never => {
      throw invalidArg(model ? `Cannot load '${model}': ${reason}` : reason);
    };
    for (const name of max.get(GLOBAL)?.keys() ?? []) {
      for (const [where, m] of max) {
        if (where !== GLOBAL && m.has(name)) {
          fail(
            `Resource '${name}' is present as both global and device-specific resource in the model configuration`,
          );
        }
      }
    }
    if (this.#explicit.length === 0) return max;
    for (const [where, m] of max) {
      for (const [name, needed] of m) {
        let count = 0;
        for (const e of this.#explicit) {
          if (e.name !== name) continue;
          if (where === GLOBAL || e.device === undefined || String(e.device) === where) {
            count = Math.max(count, e.count);
          }
        }
        if (count < needed) {
          fail(
            `Resource count for '${name}' is limited to ${count} which will prevent scheduling of one or more model instances, the minimum required count is ${needed}`,
          );
        }
        m.set(name, count);
      }
    }
    return max;
  }

  /**
   * Waits until the instance's resources are allocated to it.
   * @param instance the instance about to run
   */
  acquire(instance: LimitedInstance): Promise<void> {
    return new Promise((grant) => {
      this.#staged.push({ instance, seq: this.#seq++, grant });
      this.#attempt();
    });
  }

  /**
   * Frees the instance's resources after its execution and counts the execution.
   * @param instance the instance that ran
   */
  release(instance: LimitedInstance): void {
    instance.executions++;
    for (const [where, m] of instance.needs) {
      const a = this.#allocated.get(where)!;
      for (const [name, n] of m) a.set(name, a.get(name)! - n);
    }
    // The next allocation waits one event-loop turn, so that the instance just released, when its model has
    // requests waiting, is staged again and competes by its priority (as in Triton, where a released
    // instance is staged before the next allocation).
    if (this.#attemptScheduled) return;
    this.#attemptScheduled = true;
    setImmediate(() => {
      this.#attemptScheduled = false;
      this.#attempt();
    });
  }

  /** Allocates to the first staged instance as long as its resources are free. */
  #attempt(): void {
    while (this.#staged.length > 0) {
      let best = 0;
      for (let k = 1; k < this.#staged.length; k++) {
        const s = this.#staged[k]!, b = this.#staged[best]!;
        const d = s.instance.scaledPriority - b.instance.scaledPriority;
        if (d < 0 || (d === 0 && s.seq < b.seq)) best = k;
      }
      const head = this.#staged[best]!;
      if (!this.#fits(head.instance)) return;
      this.#staged.splice(best, 1);
      for (const [where, m] of head.instance.needs) {
        const a = this.#allocated.get(where) ?? new Map<string, number>();
        for (const [name, n] of m) a.set(name, (a.get(name) ?? 0) + n);
        this.#allocated.set(where, a);
      }
      head.grant();
    }
  }

  #fits(instance: LimitedInstance): boolean {
    for (const [where, m] of instance.needs) {
      for (const [name, n] of m) {
        const used = this.#allocated.get(where)?.get(name) ?? 0;
        if (used + n > (this.#limits.get(where)?.get(name) ?? 0)) return false;
      }
    }
    return true;
  }
}

/** How a model version's scheduler runs its instances under the rate limiter. */
export interface InstanceGate {
  /**
   * Picks the free instance to run next: the lowest scaled priority (the first of equals).
   * @param free the free instances
   * @returns its index in `free`
   */
  pick(free: readonly BackendInstance[]): number;
  /** Resolves when the instance may execute. */
  acquire(instance: BackendInstance): Promise<void>;
  /** Ends the instance's execution. */
  release(instance: BackendInstance): void;
}

/**
 * The gate of a model version's instances.
 * @param limiter the server's rate limiter
 * @param handles each instance's handle from `register`
 */
export function instanceGate(
  limiter: RateLimiter,
  handles: ReadonlyMap<BackendInstance, LimitedInstance>,
): InstanceGate {
  const handle = (i: BackendInstance) => handles.get(i)!;
  return {
    pick(free) {
      let best = 0;
      for (let k = 1; k < free.length; k++) {
        if (handle(free[k]!).scaledPriority < handle(free[best]!).scaledPriority) best = k;
      }
      return best;
    },
    acquire: (i) => limiter.acquire(handle(i)),
    release: (i) => limiter.release(handle(i)),
  };
}
