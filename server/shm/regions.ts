/**
 * What system and CUDA shared memory have in common: the location a tensor's `shared_memory_*` parameters
 * name, the table of registered regions (lookup, bounds, the count of running requests that use each,
 * unregistering) and the outputs a response writes to regions.
 * @module
 */

import { invalidArg, notFound, unavailable } from "../core/errors.ts";
import type { InferResponse, ParamValue, RequestedOutput } from "../core/types.ts";

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

/** The regions of one kind, by name. */
export class RegionTable<R extends TableRegion> {
  #regions = new Map<string, R>();
  readonly #kind: string;

  /**
   * Creates an empty table.
   * @param kind the kind in messages: "shared memory" or "CUDA shared memory"
   */
  constructor(kind: string) {
    this.#kind = kind;
  }

  /** Whether a region of that name is registered. */
  has(name: string): boolean {
    return this.#regions.has(name);
  }

  /** Adds a registered region. */
  add(region: R): void {
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

/** An output of a response that goes to shared memory. */
export interface ShmOutput {
  /** The output name. */
  name: string;
  /** Names the output in messages. */
  what: string;
  /** Where it goes. */
  loc: ShmLocation;
  /** Its bytes (BYTES serialized). */
  bytes: Uint8Array;
}

/**
 * The outputs of a response that name a shared-memory region (among those `requested` selects), each checked
 * to fit the room the client gave.
 * @param response the response
 * @param requested the requested outputs with their parameters
 */
export function shmOutputs(response: InferResponse, requested: readonly RequestedOutput[]): ShmOutput[] {
  const out: ShmOutput[] = [];
  for (const o of requested) {
    const what = `output '${o.name}'`;
    const loc = shmLocation(o.parameters, what);
    if (!loc) continue;
    const t = response.outputs.find((x) => x.name === o.name);
    if (!t) continue;
    const bytes = t.data instanceof Uint8Array ? t.data : t.data.data;
    if (bytes.byteLength > loc.byteSize) {
      throw invalidArg(
        `Cannot write ${what}: it has ${bytes.byteLength} bytes, more than shared_memory_byte_size ${loc.byteSize}`,
      );
    }
    out.push({ name: o.name, what, loc, bytes });
  }
  return out;
}

/** The parameters a response reports for an output written to shared memory. */
export function writtenParameters(output: ShmOutput): Record<string, ParamValue> {
  const params: Record<string, ParamValue> = {
    shared_memory_region: output.loc.region,
    shared_memory_byte_size: output.bytes.byteLength,
  };
  if (output.loc.offset) params.shared_memory_offset = output.loc.offset;
  return params;
}
