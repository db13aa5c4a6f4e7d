import { assertEquals, assertThrows } from "../assert.ts";
import { CleanupStack } from "../../server/cleanup.ts";

/** A step that never finishes (a drain or an unload that hangs). */
const never = () => new Promise<void>(() => {});

Deno.test("a cleanup stack undoes its steps newest first, once, however often it is unwound", async () => {
  const done: string[] = [];
  const stack = new CleanupStack();
  for (const name of ["log", "traces", "models", "HTTP"]) stack.defer(name, () => void done.push(name));
  assertEquals(stack.names, ["log", "traces", "models", "HTTP"]);
  const [a, b] = await Promise.all([stack.unwind(1000), stack.unwind(1000)]);
  assertEquals([a, b], [true, true]);
  assertEquals(done, ["HTTP", "models", "traces", "log"]);
  assertEquals(await stack.unwind(1000), true);
  assertEquals(done, ["HTTP", "models", "traces", "log"]);
  assertThrows(() => stack.defer("late", () => {}), Error, {
    message: "Cannot register 'late': the cleanup stack is unwinding",
  });
});

Deno.test("steps of one group next to each other are undone together", async () => {
  const events: string[] = [];
  const stack = new CleanupStack();
  stack.defer("models", () => void events.push("models"));
  let release: () => void = () => {};
  const released = new Promise<void>((r) => (release = r));
  stack.defer("HTTP", async () => {
    events.push("HTTP stops");
    await released;
    events.push("HTTP stopped");
  }, { group: "endpoints" });
  stack.defer("gRPC", () => {
    // Runs while HTTP is still draining, and lets it finish.
    events.push("gRPC stops");
    release();
  }, { group: "endpoints" });
  assertEquals(await stack.unwind(10_000), true);
  assertEquals(events, ["gRPC stops", "HTTP stops", "HTTP stopped", "models"]);
});

Deno.test("a failing step is reported and the others still run", async () => {
  const done: string[] = [];
  const errors: string[] = [];
  const stack = new CleanupStack({
    onError: (name, err) => errors.push(`${name}: ${(err as Error).message}`),
  });
  stack.defer("a", () => void done.push("a"));
  stack.defer("b", () => Promise.reject(new Error("gone")));
  stack.defer("c", () => {
    throw new Error("broken");
  });
  assertEquals(await stack.unwind(1000), true);
  assertEquals(done, ["a"]);
  assertEquals(errors, ["c: broken", "b: gone"]);
});

Deno.test("past the time limit a step still running is forced, later steps are forced or run", async () => {
  const events: string[] = [];
  let late = 0;
  const stack = new CleanupStack({ onLate: () => late++ });
  stack.defer("log", () => void events.push("log closed"));
  stack.defer("models", never, { force: () => void events.push("models forced") });
  stack.defer("shm", () => void events.push("shm closed"));
  stack.defer("HTTP", never, { group: "endpoints" });
  stack.defer("gRPC", never, { group: "endpoints", force: () => void events.push("gRPC forced") });
  stack.defer("readiness", () => void events.push("not ready"));
  assertEquals(await stack.unwind(20), false);
  assertEquals(late, 1);
  assertEquals(events, ["not ready", "gRPC forced", "shm closed", "models forced", "log closed"]);
});
