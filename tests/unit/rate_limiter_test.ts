/**
 * The rate limiter with PoolSchedulers over fake instances that log when each execution starts and ends:
 * exclusive resources, counts, global and per-device resources, priorities, and the load-time checks.
 * @module
 */

import { assertEquals, assertThrows } from "../assert.ts";
import { CliError, parseCommandLine } from "../../server/cli.ts";
import type { ServerConfig } from "../../server/config.ts";
import { ServerError } from "../../server/core/errors.ts";
import type { Tensor } from "../../server/core/types.ts";
import type { ValidatedRequest } from "../../server/core/validate.ts";
import type { BackendInstance } from "../../server/backends/backend.ts";
import type { BatchModel } from "../../server/scheduler/batch.ts";
import { PoolScheduler } from "../../server/scheduler/scheduler.ts";
import {
  instanceGate,
  type InstanceLimits,
  RateLimiter,
  type ResourceNeed,
} from "../../server/scheduler/rate_limiter.ts";

/** Executions of every fake instance: who started and ended, and the most running at once. */
class Log {
  events: string[] = [];
  running = 0;
  maxRunning = 0;
}

/** An instance that runs for `ms` milliseconds and logs its start and end. */
class FakeInstance implements BackendInstance {
  constructor(readonly name: string, readonly log: Log, readonly ms = 5) {}

  async execute(inputs: Map<string, Tensor>): Promise<Map<string, Tensor>> {
    this.log.events.push(`+${this.name}`);
    this.log.running++;
    this.log.maxRunning = Math.max(this.log.maxRunning, this.log.running);
    await new Promise((r) => setTimeout(r, this.ms));
    this.log.running--;
    this.log.events.push(`-${this.name}`);
    return new Map([["Y", { ...inputs.get("X")!, name: "Y" }]]);
  }

  close(): Promise<void> {
    return Promise.resolve();
  }
}

function model(name: string): BatchModel {
  return {
    name,
    version: "1",
    batched: false,
    outputs: new Map([["Y", {
      name: "Y",
      datatype: "INT32",
      dims: [1],
      modelDims: [1],
      optional: false,
      labels: undefined,
    }]]),
  };
}

function request(): ValidatedRequest {
  const x: Tensor = { name: "X", datatype: "INT32", shape: [1], data: new Uint8Array(4) };
  return {
    request: { model: "m", version: "", id: "", inputs: [x], outputs: [], parameters: {} },
    batchSize: 1,
    inputs: new Map([["X", x]]),
    outputs: [{ name: "Y", classification: 0, parameters: {} }],
  };
}

/** A scheduler for model `name` whose instances (one per entry of `limits`) go through the limiter. */
function scheduler(
  limiter: RateLimiter,
  name: string,
  limits: InstanceLimits[],
  log: Log,
): PoolScheduler {
  const instances = limits.map((_, i) => new FakeInstance(`${name}${i}`, log));
  const handles = limiter.register(name, limits);
  const m = model(name);
  m.gate = instanceGate(limiter, new Map(instances.map((inst, i) => [inst, handles[i]!])));
  return new PoolScheduler(m, instances);
}

const R1: ResourceNeed[] = [{ name: "R", global: false, count: 1 }];

function limits(n: number, resources: ResourceNeed[], priority = 0, device = 0): InstanceLimits[] {
  return Array.from({ length: n }, () => ({ resources, priority, device }));
}

async function run(s: PoolScheduler, n: number): Promise<void> {
  await Promise.all(Array.from({ length: n }, () => s.enqueue(request())));
}

Deno.test("instances of two models that share a resource of one copy never run at the same time", async () => {
  const log = new Log();
  const limiter = new RateLimiter();
  const a = scheduler(limiter, "a", limits(2, R1), log);
  const b = scheduler(limiter, "b", limits(1, R1), log);
  await Promise.all([run(a, 8), run(b, 4)]);
  assertEquals(log.maxRunning, 1);
  assertEquals(log.events.length, 24);
  // Every start is followed by its own end.
  for (let i = 0; i < log.events.length; i += 2) {
    assertEquals(log.events[i + 1], `-${log.events[i]!.slice(1)}`);
  }
  assertEquals(limiter.limits(), [["0", "R", 1]]);
});

Deno.test("the same instances without the limiter run three at a time", async () => {
  const log = new Log();
  const mk = (name: string, n: number) =>
    new PoolScheduler(model(name), Array.from({ length: n }, (_, i) => new FakeInstance(`${name}${i}`, log)));
  await Promise.all([run(mk("a", 2), 8), run(mk("b", 1), 4)]);
  assertEquals(log.maxRunning, 3);
});

Deno.test("--rate-limit-resource gives a resource more copies: two of three instances run at once", async () => {
  const log = new Log();
  const limiter = new RateLimiter([{ name: "R", count: 2 }]);
  const a = scheduler(limiter, "a", limits(3, R1), log);
  await run(a, 9);
  assertEquals(log.maxRunning, 2);
  assertEquals(limiter.limits(), [["0", "R", 2]]);
});

Deno.test("under the limiter an instance that takes batches early (pipeline depth 2) runs one at a time", async () => {
  const log = new Log();
  // Two copies of R: enough for two batches of the one instance, if the scheduler handed it two.
  const limiter = new RateLimiter([{ name: "R", count: 2 }]);
  const instance = Object.assign(new FakeInstance("a0", log), { pipelineDepth: 2 });
  const [handle] = limiter.register("a", limits(1, R1));
  const m = model("a");
  m.gate = instanceGate(limiter, new Map([[instance, handle!]]));
  await run(new PoolScheduler(m, [instance]), 6);
  assertEquals(log.maxRunning, 1);
  assertEquals(log.events.length, 12);
  // Without the limiter the same instance takes two batches at once.
  const free = new Log();
  const early = Object.assign(new FakeInstance("b0", free), { pipelineDepth: 2 });
  await run(new PoolScheduler(model("b"), [early]), 6);
  assertEquals(free.maxRunning, 2);
});

Deno.test("by default a resource has the most copies any instance asks for", async () => {
  const log = new Log();
  const limiter = new RateLimiter();
  const a = scheduler(limiter, "a", limits(2, [{ name: "R", global: false, count: 1 }]), log);
  const b = scheduler(limiter, "b", limits(1, [{ name: "R", global: false, count: 2 }]), log);
  assertEquals(limiter.limits(), [["0", "R", 2]]);
  await Promise.all([run(a, 6), run(b, 3)]);
  // Two instances of a may run together (1 + 1), b runs alone (2).
  assertEquals(log.maxRunning, 2);
  for (let i = 0; i < log.events.length; i++) {
    if (log.events[i] === "+b0") assertEquals(log.events[i + 1], "-b0");
  }
});

Deno.test("per-device resources are counted per device, global ones across devices", async () => {
  const perDevice = new Log();
  const limiter = new RateLimiter();
  const a = scheduler(limiter, "a", [...limits(2, R1, 0, 0), ...limits(2, R1, 0, 1)], perDevice);
  await run(a, 8);
  assertEquals(perDevice.maxRunning, 2);
  assertEquals(limiter.limits(), [["0", "R", 1], ["1", "R", 1]]);

  const global = new Log();
  const g = new RateLimiter();
  const G: ResourceNeed[] = [{ name: "G", global: true, count: 1 }];
  const b = scheduler(g, "b", [...limits(2, G, 0, 0), ...limits(2, G, 0, 1)], global);
  await run(b, 8);
  assertEquals(global.maxRunning, 1);
  assertEquals(g.limits(), [["GLOBAL", "G", 1]]);

  // A device-specific --rate-limit-resource applies to its device only.
  const d = new RateLimiter([{ name: "R", count: 2, device: 1 }, { name: "R", count: 1 }]);
  d.register("c", [...limits(1, R1, 0, 0), ...limits(1, R1, 0, 1)]);
  assertEquals(d.limits(), [["0", "R", 1], ["1", "R", 2]]);
});

Deno.test("priorities weight the choice: priority 2 gets half the executions of priority 1", async () => {
  const log = new Log();
  const limiter = new RateLimiter();
  const s = scheduler(limiter, "p", [...limits(1, R1, 1), ...limits(1, R1, 2)], log);
  await run(s, 20);
  assertEquals(log.maxRunning, 1);
  const order = log.events.filter((e) => e.startsWith("+")).map((e) => e.slice(1));
  // Staged instances take turns by executions x priority (p0: 1, p1: 2; ties go to the one staged first):
  // after the first two rounds p0 runs twice for each run of p1.
  assertEquals(order.join(","), "p0,p1,p0,p1,p0,p0,p1,p0,p0,p1,p0,p0,p1,p0,p0,p1,p0,p0,p1,p0");
  const busy = order.slice(0, 18);
  assertEquals([busy.filter((n) => n === "p0").length, busy.filter((n) => n === "p1").length], [12, 6]);
});

Deno.test("resources the limiter cannot serve fail the load with Triton's reasons, and nothing is kept", () => {
  const limiter = new RateLimiter([{ name: "R", count: 1 }]);
  assertThrows(
    () => limiter.register("m", limits(1, [{ name: "R", global: false, count: 2 }])),
    ServerError,
    {
      message:
        "Cannot load 'm': Resource count for 'R' is limited to 1 which will prevent scheduling of one or more model instances, the minimum required count is 2",
    },
  );
  assertThrows(
    () => limiter.register("m", limits(1, [{ name: "S", global: false, count: 1 }])),
    ServerError,
    {
      message:
        "Cannot load 'm': Resource count for 'S' is limited to 0 which will prevent scheduling of one or more model instances, the minimum required count is 1",
    },
  );
  assertEquals(limiter.limits(), []);
  const l2 = new RateLimiter();
  l2.register("a", limits(1, [{ name: "R", global: true, count: 1 }]));
  assertThrows(
    () => l2.register("b", limits(1, R1)),
    ServerError,
    {
      message:
        "Cannot load 'b': Resource 'R' is present as both global and device-specific resource in the model configuration",
    },
  );
  assertEquals(l2.limits(), [["GLOBAL", "R", 1]]);
});

Deno.test("unregistering instances recomputes the default copies", () => {
  const limiter = new RateLimiter();
  limiter.register("a", limits(1, [{ name: "R", global: false, count: 1 }]));
  const b = limiter.register("b", limits(1, [{ name: "R", global: false, count: 3 }]));
  assertEquals(limiter.limits(), [["0", "R", 3]]);
  limiter.unregister(b);
  assertEquals(limiter.limits(), [["0", "R", 1]]);
});

Deno.test("--rate-limit and --rate-limit-resource parse Triton's forms and name bad values", () => {
  const parse = (args: string[]) => parseCommandLine(args) as ServerConfig;
  assertEquals([parse([]).rateLimit.mode, parse([]).rateLimit.resources], ["off", []]);
  const o = parse([
    "--rate-limit=EXECUTION_COUNT",
    "--rate-limit-resource=R1:10",
    "--rate-limit-resource=R2:5:0",
    "--rate-limit-resource=R2:8:1",
  ]);
  assertEquals(o.rateLimit.mode, "execution_count");
  assertEquals(o.rateLimit.resources, [
    { name: "R1", count: 10 },
    { name: "R2", count: 5, device: 0 },
    { name: "R2", count: 8, device: 1 },
  ]);
  assertThrows(() => parse(["--rate-limit=fast"]), CliError, {
    message: "Bad value 'fast' for --rate-limit: expected off or execution_count",
  });
  for (const bad of ["R", "R:x", "R:1:2:3", ":4", "R:-1"]) {
    assertThrows(
      () => parse([`--rate-limit-resource=${bad}`]),
      CliError,
      {
        message:
          `Bad value '${bad}' for --rate-limit-resource: expected <name>:<count> or <name>:<count>:<device>`,
      },
    );
  }
});
