/**
 * The logging extension: `GET/POST /v2/logging` and gRPC LogSettings (tritonclient) show and change the
 * server's logger; with a log file and verbose level 1 every HTTP request writes one line in the chosen format.
 * @module
 */

import assert from "node:assert/strict";
import { parseCommandLine } from "../../server/cli.ts";
import type { ServerConfig } from "../../server/config.ts";
import { type RunningServer, startServer } from "../../server/server.ts";
import { startTestServer } from "../helpers.ts";
import { call, get, inferJson, SIMPLE_REQUEST } from "./_http.ts";
import { pythonJson } from "./_python.ts";

const DEFAULTS = {
  log_file: "",
  log_info: true,
  log_warning: true,
  log_error: true,
  log_verbose_level: 0,
  log_format: "default",
};

/** Starts a server whose logger comes from the command line (not the test helper's silent one). */
async function startWithOwnLogger(flags: string[]): Promise<{ server: RunningServer; url: string }> {
  const config = parseCommandLine([
    "--http-port=0",
    "--http-address=127.0.0.1",
    "--allow-grpc=false",
    "--allow-metrics=false",
    ...flags,
  ]) as ServerConfig;
  const server = await startServer(config);
  return { server, url: `http://127.0.0.1:${server.httpAddr!.port}` };
}

function post(url: string, body: unknown) {
  return call(`${url}/v2/logging`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
}

Deno.test("GET /v2/logging shows Triton's defaults when no log flag is given", async () => {
  const repo = await Deno.makeTempDir({ prefix: "dinfer_logging_" });
  // Info lines of start-up and shutdown go to standard error: that is the default under test.
  const { server, url } = await startWithOwnLogger([`--model-repository=${repo}`]);
  try {
    const a = await get(url, "/v2/logging");
    assert.deepEqual([a.status, a.json], [200, DEFAULTS]);
  } finally {
    await server.shutdown();
    await Deno.remove(repo, { recursive: true });
  }
});

Deno.test("POST /v2/logging changes the settings it names and answers all of them", async () => {
  await using s = await startTestServer();
  {
    const quiet = { ...DEFAULTS, log_info: false, log_warning: false, log_error: false };
    assert.deepEqual((await get(s.url, "/v2/logging")).json, quiet);
    const update = { log_info: true, log_verbose_level: 2, log_format: "ISO8601" };
    const changed = { ...quiet, ...update };
    const a = await post(s.url, update);
    assert.deepEqual([a.status, a.json], [200, changed]);
    assert.deepEqual((await get(s.url, "/v2/logging")).json, changed);
    // An empty update changes nothing and answers the settings.
    assert.deepEqual((await post(s.url, {})).json, changed);
    const back = await post(s.url, { log_info: false, log_verbose_level: 0, log_format: "default" });
    assert.deepEqual([back.status, back.json], [200, quiet]);
  }
});

Deno.test("POST /v2/logging refuses log_file with 501 and ignores settings it does not know, as Triton", async () => {
  await using s = await startTestServer();
  const before = (await get(s.url, "/v2/logging")).json;
  const refused = {
    error: "Cannot update the log settings: log file location can not be updated through network protocol",
  };
  for (
    const body of [{ log_file: "/tmp/dinfer_elsewhere.log" }, { log_file: "" }, {
      log_info: true,
      log_file: 3,
    }]
  ) {
    const a = await post(s.url, body);
    assert.deepEqual([a.status, a.json], [501, refused], JSON.stringify(body));
  }
  const ignored = await post(s.url, { log_level: 1, bogus: "x" });
  assert.deepEqual([ignored.status, ignored.json], [200, before]);
  const mixed = await post(s.url, { bogus: 1, log_verbose_level: 2 });
  assert.deepEqual([mixed.status, mixed.json], [200, { ...before, log_verbose_level: 2 }]);
});

Deno.test("bad log settings answer 400 with the reason and change nothing", async () => {
  await using s = await startTestServer();
  const before = (await get(s.url, "/v2/logging")).json;
  const cases: [unknown, string][] = [
    [{ log_info: "yes" }, `Cannot update the log settings: 'log_info' is "yes", expected a boolean`],
    [{ log_error: 1 }, "Cannot update the log settings: 'log_error' is 1, expected a boolean"],
    [
      { log_verbose_level: -1 },
      "Cannot update the log settings: 'log_verbose_level' is -1, expected a non-negative integer",
    ],
    [
      { log_verbose_level: 1.5 },
      "Cannot update the log settings: 'log_verbose_level' is 1.5, expected a non-negative integer",
    ],
    [
      { log_verbose_level: "1" },
      `Cannot update the log settings: 'log_verbose_level' is "1", expected a non-negative integer`,
    ],
    [
      { log_format: "json" },
      `Cannot update the log settings: 'log_format' is "json", expected 'default' or 'ISO8601'`,
    ],
    // Every value is checked before any takes effect.
    [
      { log_info: true, log_format: "xml" },
      `Cannot update the log settings: 'log_format' is "xml", expected 'default' or 'ISO8601'`,
    ],
    ["[1]", "Cannot read the log settings: the body must be a JSON object"],
  ];
  for (const [body, error] of cases) {
    const a = await post(s.url, body);
    assert.deepEqual([a.status, a.json], [400, { error }], JSON.stringify(body));
  }
  const malformed = await post(s.url, "{");
  assert.equal(malformed.status, 400);
  assert.match(String(malformed.json?.error), /^Cannot read the log settings: malformed JSON: /);
  assert.deepEqual((await get(s.url, "/v2/logging")).json, before);
});

Deno.test("with a log file and verbose level 1 each HTTP request writes a line naming its method and path", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer_logging_" });
  const file = `${dir}/server.log`;
  const s = await startWithOwnLogger([
    `--log-file=${file}`,
    "--log-info=false",
    "--log-warning=false",
    "--log-error=false",
  ]);
  try {
    const set = await post(s.url, { log_verbose_level: 1 });
    assert.deepEqual(set.json, {
      ...DEFAULTS,
      log_info: false,
      log_warning: false,
      log_error: false,
      log_file: file,
      log_verbose_level: 1,
    });
    assert.equal((await get(s.url, "/v2/health/live")).status, 200);
    assert.equal((await inferJson(s.url, "simple", SIMPLE_REQUEST)).status, 200);
    assert.equal((await get(s.url, "/v2/models/nope")).status, 404);
    // This request is logged in the default format, before it switches to ISO8601.
    assert.equal((await post(s.url, { log_format: "ISO8601" })).status, 200);
    assert.equal((await get(s.url, "/v2")).status, 200);
    // Back to level 0; this request is logged before the change.
    assert.equal((await post(s.url, { log_verbose_level: 0, log_format: "default" })).status, 200);
    assert.equal((await get(s.url, "/v2/health/ready")).status, 200);

    const lines = (await Deno.readTextFile(file)).split("\n");
    assert.equal(lines.pop(), "", "the file ends with a newline");
    const pid = Deno.pid;
    const defaultLine = (what: string) =>
      new RegExp(`^V\\d{4} \\d{2}:\\d{2}:\\d{2}\\.\\d{3} ${pid} HTTP request: ${what}$`);
    const isoLine = (what: string) =>
      new RegExp(`^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}Z V ${pid} HTTP request: ${what}$`);
    const expected = [
      defaultLine("GET /v2/health/live"),
      defaultLine("POST /v2/models/simple/infer"),
      defaultLine("GET /v2/models/nope"),
      defaultLine("POST /v2/logging"),
      isoLine("GET /v2"),
      isoLine("POST /v2/logging"),
    ];
    assert.equal(lines.length, expected.length, lines.join("\n"));
    lines.forEach((line, i) => assert.match(line, expected[i]!));
    // The timestamps are today's UTC date (the month and day of the default format, the date of ISO8601).
    const iso = lines[4]!.slice(0, 20);
    assert.ok(!Number.isNaN(Date.parse(iso)), iso);
    assert.equal(lines[0]!.slice(1, 5), iso.slice(5, 7) + iso.slice(8, 10));
  } finally {
    await s.server.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("--log-file, --log-verbose and --log-format configure the logger the extension shows", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer_logging_" });
  const file = `${dir}/server.log`;
  const repo = `${dir}/models`;
  await Deno.mkdir(repo);
  const { server, url } = await startWithOwnLogger([
    `--model-repository=${repo}`,
    `--log-file=${file}`,
    "--log-verbose=1",
    "--log-format=ISO8601",
    "--log-warning=false",
  ]);
  try {
    const a = await get(url, "/v2/logging");
    assert.deepEqual(a.json, {
      ...DEFAULTS,
      log_file: file,
      log_verbose_level: 1,
      log_format: "ISO8601",
      log_warning: false,
    });
  } finally {
    await server.shutdown();
  }
  try {
    const lines = (await Deno.readTextFile(file)).trimEnd().split("\n");
    assert.ok(lines.length >= 3, lines.join("\n"));
    for (const line of lines) assert.match(line, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z [IV] \d+ /);
    assert.ok(lines.some((l) => / I \d+ Started HTTPService at 127\.0\.0\.1:\d+$/.test(l)), lines.join("\n"));
    assert.ok(lines.some((l) => / V \d+ HTTP request: GET \/v2\/logging$/.test(l)), lines.join("\n"));
    assert.match(lines[lines.length - 1]!, / I \d+ Stopped$/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("gRPC LogSettings through tritonclient shows and changes the same settings", async () => {
  await using s = await startTestServer(["--allow-grpc=true"]);
  const out = await pythonJson(
    `
import json, os
import tritonclient.grpc as g
from tritonclient.utils import InferenceServerException
c = g.InferenceServerClient(os.environ["URL"])
def refused(update):
    try:
        c.update_log_settings(update)
        return None
    except InferenceServerException as e:
        return [e.status(), e.message()]
before = c.get_log_settings(as_json=True)
after = c.update_log_settings(
    {"log_info": True, "log_verbose_level": 3, "log_format": "ISO8601", "unknown_setting": 1}, as_json=True)
bad = refused({"log_format": "xml"})
file = refused({"log_file": "/tmp/dinfer_elsewhere.log"})
print(json.dumps({"before": before, "after": after, "bad": bad, "file": file}))
`,
    { URL: `127.0.0.1:${s.server.grpcPort}` },
  );
  assert.deepEqual(out, {
    before: {
      settings: {
        log_file: { string_param: "" },
        log_info: { bool_param: false },
        log_warning: { bool_param: false },
        log_error: { bool_param: false },
        log_verbose_level: { uint32_param: 0 },
        log_format: { string_param: "default" },
      },
    },
    after: {
      settings: {
        log_file: { string_param: "" },
        log_info: { bool_param: true },
        log_warning: { bool_param: false },
        log_error: { bool_param: false },
        log_verbose_level: { uint32_param: 3 },
        log_format: { string_param: "ISO8601" },
      },
    },
    bad: [
      "StatusCode.INVALID_ARGUMENT",
      `Cannot update the log settings: 'log_format' is "xml", expected 'default' or 'ISO8601'`,
    ],
    file: [
      "StatusCode.UNIMPLEMENTED",
      "Cannot update the log settings: log file location can not be updated through network protocol",
    ],
  });
  // HTTP sees the change.
  assert.deepEqual((await get(s.url, "/v2/logging")).json, {
    ...DEFAULTS,
    log_warning: false,
    log_error: false,
    log_verbose_level: 3,
    log_format: "ISO8601",
  });
});
