import { assertEquals, assertThrows } from "../assert.ts";
import { ServerError } from "../../server/core/errors.ts";
import { loadOptions } from "../../server/frontends/load_parameters.ts";

const CONFIG = '{"backend":"python"}';

Deno.test("load parameters read the config override and base64 files (HTTP), other parameters ignored", () => {
  assertEquals(
    loadOptions("m", { config: CONFIG, "file:1/model.py": btoa("abc"), unload_dependents: true }, true),
    { config: CONFIG, files: new Map([["1/model.py", new Uint8Array([97, 98, 99])]]) },
  );
  assertEquals(loadOptions("m", {}, true), { files: new Map() });
});

Deno.test("load parameters take files as bytes (gRPC)", () => {
  assertEquals(
    loadOptions("m", { config: CONFIG, "file:1/model.py": new Uint8Array([1, 2]) }, false),
    { config: CONFIG, files: new Map([["1/model.py", new Uint8Array([1, 2])]]) },
  );
});

Deno.test("load parameters of the wrong kind are refused, naming the parameter", () => {
  const refused = (params: Record<string, unknown>, base64: boolean, message: string) =>
    assertThrows(() => loadOptions("m", params, base64), ServerError, { code: "INVALID_ARG", message });
  refused({ config: 3 }, true, "Cannot load 'm': parameter 'config' must be a string holding JSON");
  refused(
    { config: new Uint8Array(1) },
    false,
    "Cannot load 'm': parameter 'config' must be a string holding JSON",
  );
  refused({ "file:1/a": 3 }, true, "Cannot load 'm': parameter 'file:1/a' must be base64 text");
  refused({ "file:1/a": "YWJj" }, false, "Cannot load 'm': parameter 'file:1/a' must be bytes");
  refused({ "file:1/a": "**" }, true, "Cannot load 'm': parameter 'file:1/a' is not valid base64");
});
