/**
 * The quick run of the reliability suite (bench/reliability.ts): structured HTTP and gRPC fuzzing, a connection
 * flood, slowloris, reloads under load, stub kills and SIGTERM under load end with no crash, no hang, no 5xx
 * answer to a client error and no lost request, and the server's RSS comes back within 20% of its level before.
 * @module
 */

import assert from "node:assert/strict";
import { formatReport, runReliability } from "../../bench/reliability.ts";
import { pythonPath } from "../helpers.ts";

Deno.test("reliability suite, quick run: no crash, hang, 5xx for client errors or lost request; RSS back within 20%", async () => {
  const report = await runReliability({ quick: true, seed: 7, python: pythonPath() });
  const table = formatReport(report);
  const sum = (key: "crashes" | "hangs" | "serverErrors" | "lost") =>
    report.rows.reduce((n, r) => n + r[key], 0);
  assert.deepEqual(
    { crashes: sum("crashes"), hangs: sum("hangs"), serverErrors: sum("serverErrors"), lost: sum("lost") },
    { crashes: 0, hangs: 0, serverErrors: 0, lost: 0 },
    table,
  );
  assert.ok(report.rows.find((r) => r.part === "HTTP fuzz")!.inputs >= 1500, table);
  assert.ok(report.rows.find((r) => r.part === "gRPC fuzz")!.inputs >= 1000, table);
  assert.ok(report.rssAfterMb <= report.rssBeforeMb * 1.2, table);
});
