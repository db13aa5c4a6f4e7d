/**
 * The response cache's Prometheus metrics, with Triton's names: per model version (`model`, `version` labels)
 * the hits, misses and their cumulative microseconds of the versions that use the cache; server-wide the
 * local cache's gauges (utilization, entries, lookups, hits, misses, evictions, lookup and insertion time).
 * @module
 */

import client from "prom-client";
import type { ResponseCache } from "../cache/response_cache.ts";
import type { ModelRegistry } from "../models/registry.ts";
import type { Duration } from "./stats.ts";

/**
 * Registers the cache metrics on a metrics registry.
 * @param registry the prom-client registry of the metrics endpoint
 * @param models the model registry
 * @param cache the server's response cache
 */
export function registerCacheMetrics(
  registry: client.Registry,
  models: ModelRegistry,
  cache: ResponseCache,
): void {
  const perModel = (name: string, help: string, value: (hit: Duration, miss: Duration) => number) =>
    new client.Counter({
      name,
      help,
      labelNames: ["model", "version"] as const,
      registers: [registry],
      collect() {
        this.reset();
        for (const v of models.readyVersions()) {
          if (!v.responseCache) continue;
          this.inc({ model: v.name, version: String(v.version) }, value(v.stats.cacheHit, v.stats.cacheMiss));
        }
      },
    });
  perModel("nv_cache_num_hits_per_model", "Number of cache hits per model", (h) => h.count);
  perModel("nv_cache_num_misses_per_model", "Number of cache misses per model", (_, m) => m.count);
  perModel(
    "nv_cache_hit_duration_per_model",
    "Total cache hit duration per model, in microseconds",
    (h) => Math.round(h.ns / 1000),
  );
  perModel(
    "nv_cache_miss_duration_per_model",
    "Total cache miss (insert+lookup) duration per model, in microseconds",
    (_, m) => Math.round(m.ns / 1000),
  );
  const gauge = (name: string, help: string, value: () => number) =>
    new client.Gauge({
      name,
      help,
      registers: [registry],
      collect() {
        this.set(value());
      },
    });
  const c = cache.counters;
  gauge("nv_cache_util", "Cache utilization [0.0 - 1.0]", () => cache.used / cache.size);
  gauge("nv_cache_num_entries", "Number of responses stored in response cache", () => cache.entryCount);
  gauge("nv_cache_num_lookups", "Number of cache lookups in response cache", () => c.lookups);
  gauge("nv_cache_num_hits", "Number of cache hits in response cache", () => c.hits);
  gauge("nv_cache_num_misses", "Number of cache misses in response cache", () => c.misses);
  gauge("nv_cache_num_evictions", "Number of cache evictions in response cache", () => c.evictions);
  gauge(
    "nv_cache_lookup_duration",
    "Total cache lookup duration (hit and miss), in microseconds",
    () => Math.round(c.lookupNs / 1000),
  );
  gauge(
    "nv_cache_insertion_duration",
    "Total cache insertion duration, in microseconds",
    () => Math.round(c.insertionNs / 1000),
  );
}
