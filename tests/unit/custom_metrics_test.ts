/**
 * Custom metrics of models (pb_utils.MetricFamily): shared by name and labels between owners (a model's
 * instances), shown on a metrics registry, and gone once no owner holds them.
 * @module
 */

import assert from "node:assert/strict";
import client from "prom-client";
import { CustomMetrics } from "../../server/metrics/custom.ts";

Deno.test("two owners share a family and a metric; each keeps them until it lets go", async () => {
  const metrics = new CustomMetrics();
  const registry = new client.Registry();
  metrics.attach(registry);
  const a = {}, b = {};
  const fa = metrics.family(a, "jobs", "Jobs done", "counter");
  const fb = metrics.family(b, "jobs", "Jobs done", "counter");
  const ma = metrics.metric(a, fa, { stage: "x", model: "m" }, undefined);
  // The same labels in another order are the same metric.
  const mb = metrics.metric(b, fb, { model: "m", stage: "x" }, undefined);
  metrics.update(ma, "increment", 2);
  metrics.update(mb, "increment", 3);
  assert.deepEqual([metrics.value(ma), metrics.value(mb)], [5, 5]);
  const shown = '# HELP jobs Jobs done\n# TYPE jobs counter\njobs{model="m",stage="x"} 5\n';
  assert.equal(await registry.metrics(), shown);
  metrics.release(a);
  assert.throws(() => metrics.value(ma), /^ServerError: the Metric has been deleted$/);
  assert.equal(metrics.value(mb), 5);
  assert.equal(await registry.metrics(), shown);
  metrics.drop(b, mb);
  assert.equal(await registry.metrics(), "# HELP jobs Jobs done\n# TYPE jobs counter\n");
  metrics.release(b);
  assert.equal(await registry.metrics(), "\n");
  // Made anew, it starts from zero.
  const again = metrics.metric(a, metrics.family(a, "jobs", "", "counter"), {}, undefined);
  assert.equal(metrics.value(again), 0);
});

Deno.test("a family made before the registry is attached is shown once it is; another owner cannot drop a handle", async () => {
  const metrics = new CustomMetrics();
  const owner = {};
  const g = metrics.metric(owner, metrics.family(owner, "level", "Level", "gauge"), {}, undefined);
  metrics.update(g, "set", -2.5);
  metrics.update(g, "increment", 1);
  metrics.drop({}, g);
  const registry = new client.Registry();
  metrics.attach(registry);
  assert.equal(await registry.metrics(), "# HELP level Level\n# TYPE level gauge\nlevel -1.5\n");
});

Deno.test("a histogram's metric may not have a label named le, which its bucket lines use", () => {
  const metrics = new CustomMetrics();
  const owner = {};
  const f = metrics.family(owner, "sizes", "Sizes", "histogram");
  assert.throws(
    () => metrics.metric(owner, f, { le: "x" }, [1, 2]),
    /^ServerError: Invalid label name 'le'$/,
  );
  const g = metrics.family(owner, "levels", "Levels", "gauge");
  assert.equal(typeof metrics.metric(owner, g, { le: "x" }, undefined), "number");
});
