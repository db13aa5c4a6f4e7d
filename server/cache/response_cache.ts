/**
 * The response cache (`--cache-config=local,size=<bytes>` and a model's `response_cache { enable: true }`):
 * responses of successful requests kept in memory under a digest of the model, the version, the input tensors
 * (names, datatypes, shapes, contents) and the requested outputs. A request whose digest is found is answered
 * from the cache without running the model; entries are evicted least recently used first when an insertion
 * needs room.
 * @module
 */

import { createHash } from "node:crypto";
import type { InferResponse, Tensor } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import { nowNs } from "../core/clock.ts";
import type { VersionStats } from "../metrics/stats.ts";

/** The cache implementation built into dinfer (`--cache-config=local,...`). */
export const LOCAL_CACHE = "local";

/** Bytes counted for every entry on top of its outputs (its key and bookkeeping). */
export const ENTRY_OVERHEAD_BYTES = 64;

/**
 * The bytes an entry with these outputs takes from the cache: ENTRY_OVERHEAD_BYTES, plus for every output the
 * UTF-8 bytes of its name and datatype, 8 bytes per dim and its contents (BYTES elements with their 4-byte
 * length prefixes, as on the wire).
 * @param outputs the output tensors
 */
export function entryBytes(outputs: readonly Tensor[]): number {
  const enc = new TextEncoder();
  let n = ENTRY_OVERHEAD_BYTES;
  for (const t of outputs) {
    n += enc.encode(t.name).byteLength + t.datatype.length + 8 * t.shape.length;
    n += t.data.byteLength;
  }
  return n;
}

interface Entry {
  outputs: Tensor[];
  parameters: InferResponse["parameters"];
  bytes: number;
}

/** Counters of the whole cache (the server-wide `nv_cache_*` gauges). */
export interface CacheCounters {
  /** Lookups, hits and misses. */
  lookups: number;
  hits: number;
  misses: number;
  /** Entries removed to make room for newer ones. */
  evictions: number;
  /** Entries stored. */
  insertions: number;
  /** Cumulative nanoseconds spent looking up (hits and misses) and inserting. */
  lookupNs: number;
  insertionNs: number;
}

/** Copies a tensor's contents, so that an entry never shares memory with a request or a backend. */
function copyTensor(t: Tensor): Tensor {
  const data = t.data instanceof Uint8Array ? t.data.slice() : t.data.copy();
  return { name: t.name, datatype: t.datatype, shape: [...t.shape], data };
}

/** An in-memory response cache of a fixed size in bytes, shared by every model that enables it. */
export class ResponseCache {
  /** The capacity in bytes. */
  readonly size: number;
  /** Entries by key, least recently used first (a hit moves its entry to the end). */
  #entries = new Map<string, Entry>();
  #used = 0;
  /** The counters since start. */
  readonly counters: CacheCounters = {
    lookups: 0,
    hits: 0,
    misses: 0,
    evictions: 0,
    insertions: 0,
    lookupNs: 0,
    insertionNs: 0,
  };

  /**
   * Creates an empty cache.
   * @param size the capacity in bytes (at least 1)
   */
  constructor(size: number) {
    if (!Number.isSafeInteger(size) || size < 1) {
      throw new RangeError(`Cannot create the response cache: size ${size} must be a positive integer`);
    }
    this.size = size;
  }

  /** The bytes the entries take. */
  get used(): number {
    return this.#used;
  }

  /** The number of entries. */
  get entryCount(): number {
    return this.#entries.size;
  }

  /**
   * The key of a request: a SHA-256 digest of the model name and version, the inputs in name order (name,
   * datatype, shape, contents) and the requested outputs (name, classification). A digest, not a weak hash,
   * so that no client can make its request collide with another's.
   * @param model the model name
   * @param version the version that serves the request
   * @param request the validated request, with its final input contents (shared-memory inputs included)
   * @param generation which load of the version it is: a reloaded model never answers from its previous
   *   load's entries (they age out)
   */
  key(model: string, version: string, request: ValidatedRequest, generation = 0): string {
    const inputs = [...request.inputs.values()].sort((
      a,
      b,
    ) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const header = JSON.stringify([
      model,
      version,
      generation,
      inputs.map((t) => [
        t.name,
        t.datatype,
        t.shape,
        t.data.byteLength,
      ]),
      request.outputs.map((o) => [o.name, o.classification]),
    ]);
    const h = createHash("sha256");
    h.update(header);
    for (const t of inputs) {
      // BYTES contents are hashed with their length prefixes: the elements' boundaries are part of the key.
      h.update(t.data instanceof Uint8Array ? t.data : t.data.data);
    }
    return h.digest("hex");
  }

  /**
   * Looks a key up; a hit becomes the most recently used entry.
   * @param key the request's key
   * @returns the cached outputs and parameters, or undefined on a miss
   */
  lookup(key: string): { outputs: Tensor[]; parameters: InferResponse["parameters"] } | undefined {
    const start = nowNs();
    this.counters.lookups++;
    const e = this.#entries.get(key);
    if (e) {
      this.#entries.delete(key);
      this.#entries.set(key, e);
      this.counters.hits++;
    } else {
      this.counters.misses++;
    }
    this.counters.lookupNs += nowNs() - start;
    return e && { outputs: e.outputs, parameters: e.parameters };
  }

  /**
   * Stores a response's outputs under a key (copied), evicting the least recently used entries as needed.
   * @param key the request's key
   * @param response the response to keep
   * @returns whether it was stored (false when it is larger than the whole cache)
   */
  insert(key: string, response: InferResponse): boolean {
    const start = nowNs();
    try {
      const bytes = entryBytes(response.outputs);
      if (bytes > this.size) return false;
      const old = this.#entries.get(key);
      if (old) {
        this.#entries.delete(key);
        this.#used -= old.bytes;
      }
      while (this.#used + bytes > this.size) {
        const [k, lru] = this.#entries.entries().next().value!;
        this.#entries.delete(k);
        this.#used -= lru.bytes;
        this.counters.evictions++;
      }
      this.#entries.set(key, {
        outputs: response.outputs.map(copyTensor),
        parameters: { ...response.parameters },
        bytes,
      });
      this.#used += bytes;
      this.counters.insertions++;
      return true;
    } finally {
      this.counters.insertionNs += nowNs() - start;
    }
  }
}

/** The model version a cached request is for. */
export interface CachedModel {
  /** The model name. */
  name: string;
  /** The version that serves the request, as responses report it. */
  version: string;
  /** Where hits and misses are counted. */
  stats: VersionStats;
  /** Which load of the version this is (see ResponseCache.key). */
  generation: number;
}

/**
 * Answers a request from the cache, or runs it and stores its response. A hit records the request as a
 * success with its queue time (arrival to lookup) and the lookup as `cache_hit`; nothing executes. A miss that
 * succeeds records the lookup and the insertion as `cache_miss` (and adds them to the request's duration).
 * Failed requests are not stored.
 * @param cache the server's cache
 * @param model the model version
 * @param request the validated request
 * @param options `received`: when the request arrived (nowNs); `run`: runs it on the model's scheduler
 */
export async function inferWithCache(
  cache: ResponseCache,
  model: CachedModel,
  request: ValidatedRequest,
  options: { received: number; run: (request: ValidatedRequest) => Promise<InferResponse> },
): Promise<InferResponse> {
  const lookupStart = nowNs();
  const key = cache.key(model.name, model.version, request, model.generation);
  const hit = cache.lookup(key);
  const lookupEnd = nowNs();
  if (hit) {
    model.stats.recordCacheHit(options.received, lookupStart, lookupEnd);
    return {
      model: model.name,
      version: model.version,
      id: request.request.id,
      outputs: hit.outputs.map((t) => ({ ...t, shape: [...t.shape] })),
      parameters: { ...hit.parameters },
    };
  }
  const response = await options.run(request);
  const insertStart = nowNs();
  cache.insert(key, response);
  model.stats.recordCacheMiss(lookupEnd - lookupStart + nowNs() - insertStart);
  return response;
}
