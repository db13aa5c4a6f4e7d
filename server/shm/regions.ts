/**
 * What system and CUDA shared memory have in common: the location a tensor's `shared_memory_*` parameters
 * name, the table of registered regions (lookup, bounds, the count of running requests that use each,
 * unregistering), and the registry base both kinds build on.
 * @module
 */

import { invalidArg, notFound, unavailable } from "../core/errors.ts";
import type { ParamValue } from "../core/types.ts";

function intParam(v: ParamValue | undefined, name: string, what: string): number | undefined {
  if (v === undefined) return undefined;
  const n = typeof v === "bigint" ? Number(v) : v;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) {
    throw invalidArg(`Cannot read ${what}: '${name}' must be a non-negative integer`);
  }
  return n;
}

/** The parameters naming a shared-memory location. */
export interface ShmLocation {
  region: string;
  offset: number;
  byteSize: number;
}

/**
 * The shared-memory location a tensor's parameters name, if any.
 * @param params the tensor's parameters
 * @param what names the tensor in error messages
 */
export function shmLocation(params: Record<string, ParamValue>, what: string): ShmLocation | undefined {
  const region = params.shared_memory_region;
  if (region === undefined) return undefined;
  if (typeof region !== "string" || region === "") {
    throw invalidArg(`Cannot read ${what}: 'shared_memory_region' must be a region name`);
  }
  const byteSize = intParam(params.shared_memory_byte_size, "shared_memory_byte_size", what);
  if (byteSize === undefined) throw invalidArg(`Cannot read ${what}: 'shared_memory_byte_size' is missing`);
  return {
    region,
    offset: intParam(params.shared_memory_offset, "shared_memory_offset", what) ?? 0,
    byteSize,
  };
}

/** What every registered region has. */
export interface TableRegion {
  name: string;
  byte_size: number;
  /** Running requests that use the region. */
  inUse: number;
}

/**
 * The most regions of one kind registered at once: each holds an open file (or a CUDA mapping and stream), and
 * a client must not be able to take every file descriptor of the process.
 */
export const MAX_REGIONS = 1024;

/** The regions of one kind, by name. */
export class RegionTable<R extends TableRegion> {
  #regions = new Map<string, R>();
  /** Names whose registration is under way (it waits on the file system), held so that no other takes them. */
  #pending = new Set<string>();
  readonly #kind: string;

  /**
   * Creates an empty table.
   * @param kind the kind in messages: "shared memory" or "CUDA shared memory"
   */
  constructor(kind: string) {
    this.#kind = kind;
  }

  /** Whether a region of that name is registered, or being registered. */
  has(name: string): boolean {
    return this.#regions.has(name) || this.#pending.has(name);
  }

  /**
   * Holds a name for a registration under way, which ends with `add` or `release`.
   * @param name the region name (the caller checked that it is free)
   * @param where the start of an error message
   * @throws ServerError UNAVAILABLE when MAX_REGIONS regions are registered or being registered
   */
  reserve(name: string, where: string): void {
    this.checkRoom(where);
    this.#pending.add(name);
  }

  /**
   * Throws unless one more region may be registered.
   * @param where the start of an error message
   * @throws ServerError UNAVAILABLE when MAX_REGIONS regions are registered or being registered
   */
  checkRoom(where: string): void {
    if (this.#regions.size + this.#pending.size >= MAX_REGIONS) {
      throw unavailable(
        `${where}: ${MAX_REGIONS} ${this.#kind} regions are registered, the most there may be`,
      );
    }
  }

  /** Gives up a name held for a registration that failed. */
  release(name: string): void {
    this.#pending.delete(name);
  }

  /** Adds a registered region. */
  add(region: R): void {
    this.#pending.delete(region.name);
    this.#regions.set(region.name, region);
  }

  /**
   * Removes one region, or every region when `name` is "" (an unknown name is not an error); a region that a
   * running request uses is refused and nothing is removed.
   * @param name the region name
   * @param release frees what a removed region holds
   */
  unregister(name: string, release: (r: R) => void): void {
    const targets = name === "" ? [...this.#regions.values()] : [this.#regions.get(name)];
    if (name !== "" && !targets[0]) return;
    for (const r of targets) {
      if (r && r.inUse > 0) {
        throw unavailable(
          `Cannot unregister ${this.#kind} region '${r.name}': ${r.inUse} running requests use it`,
        );
      }
    }
    for (const r of targets) {
      if (!r) continue;
      this.#regions.delete(r.name);
      release(r);
    }
  }

  /**
   * One region, or all of them when `name` is "".
   * @throws ServerError NOT_FOUND for an unknown name
   */
  select(name: string): R[] {
    const list = name === ""
      ? [...this.#regions.values()]
      : [this.#regions.get(name)].filter((r) => r !== undefined);
    if (name !== "" && list.length === 0) {
      // Triton's wording, which clients match on: "system shared memory" or "cuda shared memory".
      const kind = this.#kind === "shared memory"
        ? "system shared memory"
        : this.#kind.replace("CUDA", "cuda");
      throw notFound(`Unable to find ${kind} region: '${name}'`);
    }
    return list;
  }

  /**
   * The region of a location, checked to hold `size` bytes from the location's offset.
   * @throws ServerError INVALID_ARG for an unknown region or an access beyond its end
   */
  locate(loc: ShmLocation, what: string, size: number, action: "read" | "write"): R {
    const r = this.#regions.get(loc.region);
    if (!r) throw invalidArg(`Cannot ${action} ${what}: unknown shared memory region '${loc.region}'`);
    if (loc.offset + size > r.byte_size) {
      throw invalidArg(
        `Cannot ${action} ${what}: offset ${loc.offset} + ${size} bytes is beyond region '${loc.region}' of ${r.byte_size} bytes`,
      );
    }
    return r;
  }

  /**
   * Marks regions as used by a running request.
   * @param names region names (names of other kinds are ignored)
   * @returns a function that ends the use
   */
  use(names: Iterable<string>): () => void {
    const rs = [...new Set(names)].map((n) => this.#regions.get(n)).filter((r) => r !== undefined);
    for (const r of rs) r.inUse++;
    return () => {
      for (const r of rs) r.inUse--;
    };
  }

  /**
   * Removes the regions `keep` does not keep, and frees them.
   * @param release frees what a removed region holds
   * @param keep regions to leave registered
   */
  clear(release: (r: R) => void, keep: (r: R) => boolean = () => false): void {
    for (const r of [...this.#regions.values()]) {
      if (keep(r)) continue;
      this.#regions.delete(r.name);
      release(r);
    }
  }
}

/**
 * What the system and CUDA shared-memory registries share: their region table, the `--allow-client-shm` check,
 * and locating, checking and marking regions.
 */
export abstract class ShmRegistry<R extends TableRegion> {
  /** The registered regions of this kind. */
  protected readonly regions: RegionTable<R>;
  readonly #allowed: boolean;

  /**
   * Creates an empty registry.
   * @param kind the kind in messages: "shared memory" or "CUDA shared memory"
   * @param allowed whether clients may register regions (`--allow-client-shm`)
   */
  constructor(kind: string, allowed: boolean) {
    this.regions = new RegionTable<R>(kind);
    this.#allowed = allowed;
  }

  /** Throws UNAVAILABLE unless clients may use shared memory (`--allow-client-shm`). */
  checkAllowed(): void {
    if (!this.#allowed) {
      throw unavailable("Shared memory is disabled: start the server with --allow-client-shm=true to use it");
    }
  }

  /** Whether a region of this kind and that name is registered. */
  has(name: string): boolean {
    return this.regions.has(name);
  }

  /**
   * The region a location names, once shared memory is allowed and the location is inside it.
   * @param loc the location
   * @param what names the tensor in error messages
   * @param size the bytes read or written
   * @param action whether they are read or written
   */
  protected locate(loc: ShmLocation, what: string, size: number, action: "read" | "write"): R {
    this.checkAllowed();
    return this.regions.locate(loc, what, size, action);
  }

  /**
   * Checks, when a request arrives, that an output's location is inside its region.
   * @param loc where the output goes (`byteSize` is the room the client gave)
   * @param what names the output in error messages
   */
  checkWrite(loc: ShmLocation, what: string): void {
    this.locate(loc, what, loc.byteSize, "write");
  }

  /**
   * Marks regions as used by a running request.
   * @param names region names (names of other kinds are ignored)
   * @returns a function that ends the use
   */
  use(names: Iterable<string>): () => void {
    return this.regions.use(names);
  }
}
