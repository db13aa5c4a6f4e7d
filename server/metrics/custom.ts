/**
 * Custom metrics that models' own code makes (the Python backend's `pb_utils.MetricFamily` and its `Metric`s),
 * shown on the metrics endpoint beside the server's: a family is a metric name with its help text and kind
 * (counter, gauge or histogram), a metric one label set of it. Families and metrics are shared by name and
 * labels (two instances that make the same one share its value) and counted by the handles held on them: a
 * family leaves the endpoint once no handle holds it or any of its metrics, a metric once no handle holds it;
 * every handle of an owner (a Python stub) goes when the owner does. Errors are INVALID_ARG with Triton's
 * wording, without the caller's prefix ("Error when creating Metric: ...", which the stub adds).
 * @module
 */

import type client from "prom-client";
import { invalidArg } from "../core/errors.ts";
import type { MetricKind, ModelMetrics } from "../backends/backend.ts";

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

interface Metric {
  family: Family;
  key: string;
  labels: Record<string, string>;
  value: number;
  /** Histograms: the upper bounds, the count in each bucket (not cumulative), the sum and the count. */
  buckets?: number[];
  counts?: number[];
  sum: number;
  count: number;
  handles: number;
}

interface Family {
  name: string;
  help: string;
  kind: MetricKind;
  metrics: Map<string, Metric>;
  handles: number;
}

type Handle = { owner: object; family: Family; metric?: Metric };

/** What prom-client's registry reads of a metric: its name, help, type and values. */
interface Exposed {
  name: string;
  help: string;
  type: string;
  get(): { name: string; help: string; type: string; values: client.MetricValueWithName<string>[] };
}

/** The custom metrics of the server's models. */
export class CustomMetrics implements ModelMetrics {
  #families = new Map<string, Family>();
  #handles = new Map<number, Handle>();
  #nextHandle = 1;
  #registry: client.Registry | undefined;

  /**
   * Shows the families on a metrics registry (the metrics endpoint's), those made before and after.
   * @param registry the registry
   */
  attach(registry: client.Registry): void {
    this.#registry = registry;
    for (const f of this.#families.values()) this.#register(f);
  }

  family(owner: object, name: string, description: string, kind: MetricKind): number {
    if (!NAME.test(name)) throw invalidArg(`Invalid metric name '${name}'`);
    let f = this.#families.get(name);
    if (f && f.kind !== kind) throw invalidArg("Family name already exists with different type");
    if (!f) {
      if (name.startsWith("nv_")) throw invalidArg("names starting with 'nv_' are the server's");
      f = { name, help: description, kind, metrics: new Map(), handles: 0 };
      this.#families.set(name, f);
      this.#register(f);
    }
    f.handles++;
    return this.#hold({ owner, family: f });
  }

  metric(
    owner: object,
    family: number,
    labels: Record<string, string>,
    buckets: number[] | undefined,
  ): number {
    const f = this.#handles.get(family)?.family;
    if (!f) throw invalidArg("the MetricFamily has been deleted");
    for (const [k, v] of Object.entries(labels)) {
      // A histogram's bucket lines add `le` themselves.
      if (!LABEL.test(k) || k.startsWith("__") || (k === "le" && f.kind === "histogram")) {
        throw invalidArg(`Invalid label name '${k}'`);
      }
      if (typeof v !== "string") throw invalidArg(`the value of label '${k}' is not a string`);
    }
    if (f.kind === "histogram") {
      if (!buckets) throw invalidArg("a histogram needs buckets");
      if (
        buckets.some((b, i) => typeof b !== "number" || Number.isNaN(b) || (i > 0 && b <= buckets[i - 1]!))
      ) {
        throw invalidArg("buckets must be numbers in increasing order");
      }
    } else if (buckets) throw invalidArg("Failed to create metric. Unexpected buckets found.");
    const sorted = Object.fromEntries(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : 1)));
    const key = JSON.stringify(sorted);
    let m = f.metrics.get(key);
    if (!m) {
      m = { family: f, key, labels: sorted, value: 0, sum: 0, count: 0, handles: 0 };
      if (buckets) {
        m.buckets = [...buckets];
        m.counts = new Array(buckets.length + 1).fill(0);
      }
      f.metrics.set(key, m);
    }
    m.handles++;
    return this.#hold({ owner, family: f, metric: m });
  }

  update(metric: number, action: "increment" | "set" | "observe", value: number): void {
    const m = this.#metricOf(metric);
    const kind = m.family.kind;
    if (typeof value !== "number") throw invalidArg("the value is not a number");
    if (action === "observe") {
      if (kind !== "histogram") throw invalidArg(`${kindName(kind)} does not support Observe`);
      const at = m.buckets!.findIndex((b) => value <= b);
      m.counts![at < 0 ? m.buckets!.length : at]!++;
      m.sum += value;
      m.count++;
      return;
    }
    if (kind === "histogram") throw invalidArg(`${kindName(kind)} does not support ${capital(action)}`);
    if (action === "set") {
      if (kind !== "gauge") throw invalidArg(`${kindName(kind)} does not support Set`);
      m.value = value;
      return;
    }
    if (kind === "counter" && !(value >= 0)) {
      throw invalidArg(`${kindName(kind)} can only be incremented monotonically by non-negative values.`);
    }
    m.value += value;
  }

  value(metric: number): number {
    const m = this.#metricOf(metric);
    if (m.family.kind === "histogram") throw invalidArg(`${kindName("histogram")} does not support Value`);
    return m.value;
  }

  drop(owner: object, handle: number): void {
    const h = this.#handles.get(handle);
    if (!h || h.owner !== owner) return;
    this.#handles.delete(handle);
    const f = h.family;
    if (h.metric) {
      if (--h.metric.handles === 0) f.metrics.delete(h.metric.key);
    } else f.handles--;
    if (f.handles === 0 && f.metrics.size === 0) {
      this.#families.delete(f.name);
      this.#registry?.removeSingleMetric(f.name);
    }
  }

  release(owner: object): void {
    for (const [handle, h] of [...this.#handles]) if (h.owner === owner) this.drop(owner, handle);
  }

  #hold(h: Handle): number {
    const id = this.#nextHandle++;
    this.#handles.set(id, h);
    return id;
  }

  #metricOf(handle: number): Metric {
    const m = this.#handles.get(handle)?.metric;
    if (!m) throw invalidArg("the Metric has been deleted");
    return m;
  }

  #register(f: Family): void {
    if (!this.#registry) return;
    const exposed: Exposed = {
      name: f.name,
      help: f.help,
      type: f.kind,
      get: () => ({ name: f.name, help: f.help, type: f.kind, values: valuesOf(f) }),
    };
    this.#registry.registerMetric(exposed as unknown as client.Metric);
  }
}

/** The sample lines of a family: one per metric, or a histogram's buckets (cumulative), sum and count. */
function valuesOf(f: Family): client.MetricValueWithName<string>[] {
  const out: client.MetricValueWithName<string>[] = [];
  for (const m of f.metrics.values()) {
    if (f.kind !== "histogram") {
      out.push({ metricName: f.name, labels: m.labels, value: m.value });
      continue;
    }
    let seen = 0;
    m.buckets!.forEach((b, i) => {
      seen += m.counts![i]!;
      out.push({ metricName: `${f.name}_bucket`, labels: { ...m.labels, le: b }, value: seen });
    });
    out.push({ metricName: `${f.name}_bucket`, labels: { ...m.labels, le: "+Inf" }, value: m.count });
    out.push({ metricName: `${f.name}_sum`, labels: m.labels, value: m.sum });
    out.push({ metricName: `${f.name}_count`, labels: m.labels, value: m.count });
  }
  return out;
}

function kindName(kind: MetricKind): string {
  return `TRITONSERVER_METRIC_KIND_${kind.toUpperCase()}`;
}

function capital(s: string): string {
  return s[0]!.toUpperCase() + s.slice(1);
}
