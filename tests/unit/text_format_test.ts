import * as assert from "node:assert/strict";
import * as protobuf from "protobufjs";
import { modelConfigType } from "../../server/core/protos.ts";
import { formatTextFormat, parseTextFormat, TextFormatError } from "../../server/repository/text_format.ts";

const SCHEMA = `
syntax = "proto3";
package test;

enum Color {
  COLOR_UNSPECIFIED = 0;
  RED = 1;
  GREEN = 2;
  DARK = -1;
}

message Inner {
  int32 a = 1;
  string s = 2;
  repeated Inner children = 3;
}

message All {
  int32 i32 = 1;
  int64 i64 = 2;
  uint32 u32 = 3;
  uint64 u64 = 4;
  sint32 s32 = 5;
  sfixed64 sf64 = 6;
  fixed32 fx32 = 7;
  float f = 8;
  double d = 9;
  bool b = 10;
  string s = 11;
  bytes by = 12;
  Color color = 13;
  Inner inner = 14;
  repeated int32 ri = 15;
  repeated string rs = 16;
  repeated Inner rinner = 17;
  repeated Color rcolor = 18;
  repeated int64 ri64 = 19;
  repeated double rd = 20;
  repeated bool rb = 21;
  map<string, int32> ms = 22;
  map<string, Inner> mm = 23;
  map<int64, string> mi = 24;
  map<bool, Color> mb = 25;
  oneof choice {
    int32 oa = 26;
    string ob = 27;
    Inner oc = 28;
  }
  optional int32 opt = 29;
}
`;

const root = protobuf.parse(SCHEMA, { keepCase: true }).root;
const All = root.lookupType("test.All");

function parse(text: string): Record<string, unknown> {
  return parseTextFormat(text, All, { filename: "config.pbtxt" });
}

function errorOf(text: string, type: protobuf.Type = All): TextFormatError {
  try {
    parseTextFormat(text, type, { filename: "config.pbtxt" });
  } catch (err) {
    if (err instanceof TextFormatError) return err;
    throw err;
  }
  throw new Error(`Expected a TextFormatError for: ${text}`);
}

/** Asserts that each text fails with exactly the paired message. */
function assertErrors(cases: [text: string, message: string][]): void {
  for (const [text, message] of cases) {
    assert.equal(errorOf(text).message, message, `for input ${JSON.stringify(text)}`);
  }
}

const AT = "Cannot parse 'config.pbtxt' at";

// ---------------------------------------------------------------------------------------------------------
// Values

Deno.test("text format parses one field of every scalar type into plain JS values", () => {
  const text = `
    i32: -12
    i64: 1234567890123
    u32: 4000000000
    u64: 42
    s32: -5
    sf64: -7
    fx32: 9
    f: 1.5
    d: -2.25e-3
    b: true
    s: "hello"
    by: "\\x00\\xff"
    color: GREEN
    opt: 0
  `;
  assert.deepEqual(parse(text), {
    i32: -12,
    i64: 1234567890123,
    u32: 4000000000,
    u64: 42,
    s32: -5,
    sf64: -7,
    fx32: 9,
    f: 1.5,
    d: -2.25e-3,
    b: true,
    s: "hello",
    by: new Uint8Array([0, 255]),
    color: "GREEN",
    opt: 0,
  });
});

Deno.test("text format returns an empty object for empty input, blank lines and comments only", () => {
  assert.deepEqual(parse(""), {});
  assert.deepEqual(parse("\n\n   \t\n"), {});
  assert.deepEqual(parse("# just a comment\n  # another one"), {});
  assert.deepEqual(parse("\uFEFFi32: 1"), { i32: 1 });
});

Deno.test("text format writes only the fields that are set and fills no defaults", () => {
  assert.deepEqual(parse("inner {}"), { inner: {} });
  assert.deepEqual(parse("i32: 0 s: ''"), { i32: 0, s: "" });
});

Deno.test("text format accepts ',' and ';' between fields and '#' comments to the end of a line", () => {
  const text = `i32: 1, u32: 2; # trailing comment, with: "quotes" and { braces
s: "a # not a comment" ; inner { a: 3, s: "x"; }`;
  assert.deepEqual(parse(text), { i32: 1, u32: 2, s: "a # not a comment", inner: { a: 3, s: "x" } });
});

Deno.test("text format parses nested messages written with '{}', ': {}' and '<>'", () => {
  assert.deepEqual(parse("inner { a: 1 }"), { inner: { a: 1 } });
  assert.deepEqual(parse("inner: { a: 1 }"), { inner: { a: 1 } });
  assert.deepEqual(parse("inner < a: 1 >"), { inner: { a: 1 } });
  assert.deepEqual(parse("inner: < s: 'x' children { a: 2 children < a: 3 > } >"), {
    inner: { s: "x", children: [{ a: 2, children: [{ a: 3 }] }] },
  });
});

Deno.test("text format accumulates repeated scalars given one by one and as lists", () => {
  assert.deepEqual(parse("ri: 1 ri: 2 ri: [3, 4] ri: []"), { ri: [1, 2, 3, 4] });
  assert.deepEqual(parse('rs: ["a", \'b\'] rs: "c"'), { rs: ["a", "b", "c"] });
  assert.deepEqual(parse("rcolor: [RED, 2, DARK]"), { rcolor: ["RED", "GREEN", "DARK"] });
  assert.deepEqual(parse("rb: [true, f, 1, 0]"), { rb: [true, false, true, false] });
  assert.deepEqual(parse("rd: [1, -inf, 2.5e3]"), { rd: [1, -Infinity, 2500] });
});

Deno.test("text format leaves a repeated field out when it is only given an empty list", () => {
  assert.deepEqual(parse("ri: [] rinner: [] rinner []"), {});
});

Deno.test("text format accumulates repeated messages given as blocks and as lists with or without ':'", () => {
  const text = `
    rinner { a: 1 }
    rinner: { a: 2 }
    rinner [ { a: 3 }, < a: 4 > ]
    rinner: [ { a: 5 } ]
  `;
  assert.deepEqual(parse(text), { rinner: [{ a: 1 }, { a: 2 }, { a: 3 }, { a: 4 }, { a: 5 }] });
});

Deno.test("text format parses map entries into plain objects, the later of two equal keys winning", () => {
  const text = `
    ms { key: "one" value: 1 }
    ms: { key: "two", value: 2 }
    ms [ { key: "one" value: 11 } ]
    mm { key: "k" value { a: 7 } }
    mm { value: < s: "no key" > }
    mi { key: -9007199254740993 value: "big" }
    mi { key: 5 value: "five" }
    mb { key: true value: RED }
    mb { key: false }
  `;
  assert.deepEqual(parse(text), {
    ms: { one: 11, two: 2 },
    mm: { k: { a: 7 }, "": { s: "no key" } },
    mi: { "-9007199254740993": "big", "5": "five" },
    mb: { true: "RED", false: "COLOR_UNSPECIFIED" },
  });
});

Deno.test("text format stores a map key '__proto__' as an ordinary own property", () => {
  const result = parse('ms { key: "__proto__" value: 3 }');
  const ms = result.ms as Record<string, unknown>;
  assert.equal(Object.getPrototypeOf(ms), Object.prototype);
  assert.deepEqual(Object.entries(ms), [["__proto__", 3]]);
});

Deno.test("text format keeps 64-bit integers as numbers up to 2^53-1 and as decimal strings beyond", () => {
  assert.deepEqual(parse("i64: 9007199254740991"), { i64: 9007199254740991 });
  assert.deepEqual(parse("i64: -9007199254740991"), { i64: -9007199254740991 });
  assert.deepEqual(parse("i64: 9007199254740992"), { i64: "9007199254740992" });
  assert.deepEqual(parse("i64: -9007199254740993"), { i64: "-9007199254740993" });
  assert.deepEqual(parse("u64: 0xFFFFFFFFFFFFFFFF"), { u64: "18446744073709551615" });
  assert.deepEqual(parse("ri64: [1, 9223372036854775807]"), { ri64: [1, "9223372036854775807"] });
});

Deno.test("text format accepts the exact limits of int32, uint32, int64 and uint64", () => {
  assert.deepEqual(parse("i32: 2147483647"), { i32: 2147483647 });
  assert.deepEqual(parse("i32: -2147483648"), { i32: -2147483648 });
  assert.deepEqual(parse("u32: 4294967295"), { u32: 4294967295 });
  assert.deepEqual(parse("u32: -0"), { u32: 0 });
  assert.deepEqual(parse("i64: 9223372036854775807"), { i64: "9223372036854775807" });
  assert.deepEqual(parse("i64: -9223372036854775808"), { i64: "-9223372036854775808" });
  assert.deepEqual(parse("u64: 18446744073709551615"), { u64: "18446744073709551615" });
  assert.deepEqual(parse("sf64: -0x8000000000000000"), { sf64: "-9223372036854775808" });
});

Deno.test("text format reads integers written in decimal, hex, octal and with a minus sign", () => {
  assert.deepEqual(parse("ri: [0, 10, 0x1F, 0XaB, 017, -0x10, -010, - 3]"), {
    ri: [0, 10, 31, 171, 15, -16, -8, -3],
  });
});

Deno.test("text format reads floats with exponents, 'f' suffixes, inf, infinity and nan in any case", () => {
  const result = parse(`rd: [1.5, .5, 5., 1e3, 2E-2, 1.5e+2, 3f, 2.5F, 0x10, 012,
    inf, -inf, INF, Infinity, -INFINITY, nan, NaN, -0]`);
  assert.deepEqual(result, {
    rd: [
      1.5,
      0.5,
      5,
      1000,
      0.02,
      150,
      3,
      2.5,
      16,
      10,
      Infinity,
      -Infinity,
      Infinity,
      Infinity,
      -Infinity,
      NaN,
      NaN,
      -0,
    ],
  });
  assert.deepEqual(parse("f: -1.25f d: 1e308"), { f: -1.25, d: 1e308 });
});

Deno.test("text format reads booleans as true, false, True, False, t, f, 1 and 0", () => {
  assert.deepEqual(parse("rb: [true, True, t, 1, false, False, f, 0, 0x1]"), {
    rb: [true, true, true, true, false, false, false, false, true],
  });
});

Deno.test("text format reads enums by name and by number and always returns the name", () => {
  assert.deepEqual(parse("color: RED"), { color: "RED" });
  assert.deepEqual(parse("color: 2"), { color: "GREEN" });
  assert.deepEqual(parse("color: -1"), { color: "DARK" });
  assert.deepEqual(parse("color: 0"), { color: "COLOR_UNSPECIFIED" });
});

Deno.test("text format decodes every C escape in strings", () => {
  const text = String.raw`s: "\n\t\r\\\'\"\a\b\f\v\?|\101\60\0|\x41\x7|\u00e9\U0001F600|\uD83D\uDE00"`;
  assert.deepEqual(parse(text), { s: "\n\t\r\\'\"\x07\b\f\v?|A0\0|A\x07|é😀|😀" });
  assert.deepEqual(parse(String.raw`s: '\1234'`), { s: "S4" });
  assert.deepEqual(parse(`s: "it's" rs: 'say "hi"'`), { s: "it's", rs: ['say "hi"'] });
});

Deno.test("text format keeps non-ASCII source characters of strings as they are", () => {
  assert.deepEqual(parse('s: "naïve 😀 ü"'), { s: "naïve 😀 ü" });
  assert.deepEqual(parse('by: "é"'), { by: new Uint8Array([0xc3, 0xa9]) });
});

Deno.test("text format concatenates adjacent strings, also across lines and quote styles", () => {
  assert.deepEqual(parse(`s: "a" 'b'\n  "c" # comment\n "\\x64"`), { s: "abcd" });
  assert.deepEqual(parse('by: "\\x01" "\\xfe"'), { by: new Uint8Array([1, 254]) });
});

Deno.test("text format reads bytes fields as Uint8Array, keeping bytes that are not UTF-8", () => {
  assert.deepEqual(parse(String.raw`by: "\000\377\x80abc"`), {
    by: new Uint8Array([0, 255, 128, 97, 98, 99]),
  });
  assert.deepEqual(parse('by: ""'), { by: new Uint8Array() });
});

Deno.test("text format sets one member of a oneof, message members included", () => {
  assert.deepEqual(parse("oa: 1"), { oa: 1 });
  assert.deepEqual(parse("ob: 'x'"), { ob: "x" });
  assert.deepEqual(parse("oc { a: 1 } i32: 2"), { oc: { a: 1 }, i32: 2 });
});

Deno.test("text format output goes through type.fromObject and toObject unchanged", () => {
  const text = `
    i32: 1 i64: 5 u64: 18446744073709551615 s: "x" color: RED b: true d: 0.25
    inner { a: 1 children { a: 2 } }
    ri: [1, 2] rs: "a" rinner { s: "r" } rcolor: [GREEN]
    ms { key: "k" value: 3 } mm { key: "m" value { a: 4 } } mi { key: 7 value: "seven" }
    oc { s: "o" }
  `;
  const parsed = parse(text);
  const back = All.toObject(All.fromObject(parsed), { enums: String, longs: String });
  assert.deepEqual(back, {
    ...parsed,
    i64: "5",
    mi: { "7": "seven" },
  });
});

Deno.test("text format reports the file name, 1-based line and column, and the reason as fields", () => {
  const err = errorOf("i32: 1\n  nope: 2");
  assert.ok(err instanceof Error);
  assert.equal(err.name, "TextFormatError");
  assert.equal(err.filename, "config.pbtxt");
  assert.equal(err.line, 2);
  assert.equal(err.column, 3);
  assert.equal(err.reason, "unknown field 'nope' in test.All");
  assert.equal(err.message, `${AT} 2:3: unknown field 'nope' in test.All`);
});

Deno.test("text format names the input '<input>' when no file name is given", () => {
  assert.throws(() => parseTextFormat("x: 1", All), {
    name: "TextFormatError",
    message: "Cannot parse '<input>' at 1:1: unknown field 'x' in test.All",
  });
});

// ---------------------------------------------------------------------------------------------------------
// Errors

Deno.test("text format rejects unknown fields, naming the message type they were looked up in", () => {
  assertErrors([
    ["max_batch: 8", `${AT} 1:1: unknown field 'max_batch' in test.All`],
    ["inner {\n  a: 1\n  b: 2\n}", `${AT} 3:3: unknown field 'b' in test.Inner`],
    ["I32: 1", `${AT} 1:1: unknown field 'I32' in test.All`],
    ["constructor: 1", `${AT} 1:1: unknown field 'constructor' in test.All`],
    ["ms { key: 'a' val: 1 }", `${AT} 1:15: unknown field 'val' in the map entry of field 'ms'`],
  ]);
});

Deno.test("text format rejects unknown enum names and numbers without listing the valid ones", () => {
  assertErrors([
    ["color: BLUE", `${AT} 1:8: unknown enum value 'BLUE' for field 'color' (test.Color)`],
    ["color: red", `${AT} 1:8: unknown enum value 'red' for field 'color' (test.Color)`],
    ["rcolor: [RED, 7]", `${AT} 1:15: unknown enum number 7 for field 'rcolor' (test.Color)`],
    ["color: -2", `${AT} 1:8: unknown enum number -2 for field 'color' (test.Color)`],
    ["mb { key: true value: PINK }", `${AT} 1:23: unknown enum value 'PINK' for field 'value' (test.Color)`],
    [
      "color: 'RED'",
      `${AT} 1:8: expected an enum value name or number for field 'color' (test.Color), got string 'RED'`,
    ],
    [
      "color: 1.0",
      `${AT} 1:8: expected an enum value name or number for field 'color' (test.Color), got '1.0'`,
    ],
  ]);
});

Deno.test("text format rejects values of the wrong type for integer fields", () => {
  assertErrors([
    ['i32: "8"', `${AT} 1:6: expected an integer for int32 field 'i32', got string "8"`],
    ["i32: 1.5", `${AT} 1:6: expected an integer for int32 field 'i32', got '1.5'`],
    ["i32: 1e3", `${AT} 1:6: expected an integer for int32 field 'i32', got '1e3'`],
    ["i32: 3f", `${AT} 1:6: expected an integer for int32 field 'i32', got '3f'`],
    ["i64: -2.5", `${AT} 1:6: expected an integer for int64 field 'i64', got '-2.5'`],
    ["u64: abc", `${AT} 1:6: expected an integer for uint64 field 'u64', got 'abc'`],
    ["i32: true", `${AT} 1:6: expected an integer for int32 field 'i32', got 'true'`],
    ["i32: - 'x'", `${AT} 1:6: expected an integer for int32 field 'i32', got '-' followed by string 'x'`],
    ["ri: [1, 'two']", `${AT} 1:9: expected an integer for int32 field 'ri', got string 'two'`],
  ]);
});

Deno.test("text format rejects values of the wrong type for float, bool, string and bytes fields", () => {
  assertErrors([
    ["d: 'x'", `${AT} 1:4: expected a number for double field 'd', got string 'x'`],
    ["f: infinite", `${AT} 1:4: expected a number for float field 'f', got 'infinite'`],
    ["f: -true", `${AT} 1:4: expected a number for float field 'f', got '-true'`],
    ["b: yes", `${AT} 1:4: expected a boolean for bool field 'b', got 'yes'`],
    ["b: 2", `${AT} 1:4: expected a boolean for bool field 'b', got '2'`],
    ["b: 'true'", `${AT} 1:4: expected a boolean for bool field 'b', got string 'true'`],
    ["b: -1", `${AT} 1:4: expected a boolean for bool field 'b', got '-'`],
    ["s: 5", `${AT} 1:4: expected a string for string field 's', got '5'`],
    ["s: hello", `${AT} 1:4: expected a string for string field 's', got 'hello'`],
    ["by: 0", `${AT} 1:5: expected a string for bytes field 'by', got '0'`],
    ["ms { key: 1 }", `${AT} 1:11: expected a string for string field 'key', got '1'`],
  ]);
});

Deno.test("text format rejects integers out of range for int32, uint32, int64 and uint64", () => {
  assertErrors([
    ["i32: 2147483648", `${AT} 1:6: integer 2147483648 is out of range for int32 field 'i32'`],
    ["i32: -2147483649", `${AT} 1:6: integer -2147483649 is out of range for int32 field 'i32'`],
    ["s32: 0x80000000", `${AT} 1:6: integer 0x80000000 is out of range for sint32 field 's32'`],
    ["u32: 4294967296", `${AT} 1:6: integer 4294967296 is out of range for uint32 field 'u32'`],
    ["fx32: 0x100000000", `${AT} 1:7: integer 0x100000000 is out of range for fixed32 field 'fx32'`],
    [
      "i64: 9223372036854775808",
      `${AT} 1:6: integer 9223372036854775808 is out of range for int64 field 'i64'`,
    ],
    [
      "i64: -9223372036854775809",
      `${AT} 1:6: integer -9223372036854775809 is out of range for int64 field 'i64'`,
    ],
    [
      "u64: 18446744073709551616",
      `${AT} 1:6: integer 18446744073709551616 is out of range for uint64 field 'u64'`,
    ],
    [
      "ri64: [0, 99999999999999999999]",
      `${AT} 1:11: integer 99999999999999999999 is out of range for int64 field 'ri64'`,
    ],
    [
      "mi { key: 9223372036854775808 }",
      `${AT} 1:11: integer 9223372036854775808 is out of range for int64 field 'key'`,
    ],
  ]);
});

Deno.test("text format rejects negative values for unsigned fields", () => {
  assertErrors([
    ["u32: -1", `${AT} 1:6: negative value -1 for uint32 field 'u32'`],
    ["u64: -0x10", `${AT} 1:6: negative value -0x10 for uint64 field 'u64'`],
    ["fx32: - 5", `${AT} 1:7: negative value -5 for fixed32 field 'fx32'`],
  ]);
});

Deno.test("text format rejects a non-repeated field given twice, message fields included", () => {
  assertErrors([
    ["i32: 1\ni32: 2", `${AT} 2:1: non-repeated field 'i32' is given twice`],
    ["inner { a: 1 } inner { a: 2 }", `${AT} 1:16: non-repeated field 'inner' is given twice`],
    ["inner { a: 1 a: 1 }", `${AT} 1:14: non-repeated field 'a' is given twice`],
    ["opt: 1 opt: 1", `${AT} 1:8: non-repeated field 'opt' is given twice`],
    ["ms { key: 'k' key: 'j' }", `${AT} 1:15: non-repeated field 'key' is given twice`],
  ]);
});

Deno.test("text format rejects setting two members of one oneof", () => {
  assertErrors([
    ["oa: 1\nob: 'x'", `${AT} 2:1: field 'ob' and field 'oa' are both set in oneof 'choice'`],
    ["oc {} i32: 1 oa: 2", `${AT} 1:14: field 'oa' and field 'oc' are both set in oneof 'choice'`],
  ]);
});

Deno.test("text format rejects a list for a non-repeated field", () => {
  assertErrors([
    ["i32: [1]", `${AT} 1:6: non-repeated field 'i32' cannot take a list`],
    ["inner [ { a: 1 } ]", `${AT} 1:7: non-repeated field 'inner' cannot take a list`],
    ["inner: []", `${AT} 1:8: non-repeated field 'inner' cannot take a list`],
  ]);
});

Deno.test("text format rejects unterminated strings at the opening quote", () => {
  assertErrors([
    ['s: "abc', `${AT} 1:4: unterminated string`],
    ["i32: 1\ns: 'abc\n'", `${AT} 2:4: unterminated string`],
    ['s: "abc\\', `${AT} 1:4: unterminated string`],
    ['s: "abc\\\n"', `${AT} 1:4: unterminated string`],
    ["s: 'it\"s", `${AT} 1:4: unterminated string`],
  ]);
});

Deno.test("text format rejects bad escapes at the backslash", () => {
  assertErrors([
    [String.raw`s: "ab\q"`, `${AT} 1:7: invalid escape sequence '\\q'`],
    [String.raw`s: "\xZZ"`, `${AT} 1:5: invalid escape sequence '\\x': expected hex digits`],
    [String.raw`s: "\u12"`, `${AT} 1:5: invalid escape sequence '\\u': expected 4 hex digits`],
    [String.raw`s: "\U0001F60"`, `${AT} 1:5: invalid escape sequence '\\U': expected 8 hex digits`],
    [
      String.raw`s: "\U00110000"`,
      `${AT} 1:5: invalid escape sequence '\\U00110000': not a Unicode code point`,
    ],
    [String.raw`s: "\uD800x"`, `${AT} 1:5: invalid escape sequence '\\uD800': not a Unicode code point`],
    [String.raw`s: "\uDC00"`, `${AT} 1:5: invalid escape sequence '\\uDC00': not a Unicode code point`],
    [String.raw`s: "\400"`, `${AT} 1:5: octal escape '\\400' is out of range (above \\377)`],
    [String.raw`s: "\é"`, `${AT} 1:5: invalid escape sequence '\\é'`],
  ]);
});

Deno.test("text format rejects string fields whose escaped bytes are not UTF-8", () => {
  assertErrors([
    [String.raw`s: "ok" "\xff"`, `${AT} 1:4: invalid UTF-8 in string field 's'`],
    [String.raw`rs: ["a", "\300\200"]`, `${AT} 1:11: invalid UTF-8 in string field 'rs'`],
  ]);
});

Deno.test("text format rejects a missing ':' before a scalar value", () => {
  assertErrors([
    ["i32 1", `${AT} 1:5: expected ':' after field 'i32', got '1'`],
    ['s "x"', `${AT} 1:3: expected ':' after field 's', got string "x"`],
    ["ri [1, 2]", `${AT} 1:4: expected ':' after field 'ri', got '['`],
    ["b { }", `${AT} 1:3: expected ':' after field 'b', got '{'`],
    ["i32", `${AT} 1:4: expected ':' after field 'i32', got end of input`],
  ]);
});

Deno.test("text format rejects a scalar given for a message field", () => {
  assertErrors([
    ["inner: 5", `${AT} 1:8: expected '{' or '<' to start message field 'inner' (test.Inner), got '5'`],
    [
      "rinner: [ { a: 1 }, 'x' ]",
      `${AT} 1:21: expected '{' or '<' to start message field 'rinner' (test.Inner), got string 'x'`,
    ],
    ["inner", `${AT} 1:6: expected '{' or '<' to start message field 'inner' (test.Inner), got end of input`],
    [
      "ms: 'k'",
      `${AT} 1:5: expected '{' or '<' to start message field 'ms' (map<string, int32>), got string 'k'`,
    ],
    [
      "mm { key: 'k' value: 1 }",
      `${AT} 1:22: expected '{' or '<' to start message field 'value' (test.Inner), got '1'`,
    ],
  ]);
});

Deno.test("text format rejects a missing or mismatched '}' or '>'", () => {
  assertErrors([
    ["inner {\n  a: 1\n", `${AT} 3:1: missing '}' to close field 'inner' opened at 1:7`],
    ["inner < a: 1", `${AT} 1:13: missing '>' to close field 'inner' opened at 1:7`],
    ["inner { a: 1 >", `${AT} 1:14: expected '}' to close field 'inner' opened at 1:7, got '>'`],
    ["inner < a: 1 }", `${AT} 1:14: expected '>' to close field 'inner' opened at 1:7, got '}'`],
    ["inner { children { a: 1 }", `${AT} 1:26: missing '}' to close field 'inner' opened at 1:7`],
    ["inner { a: 1 ]", `${AT} 1:14: expected '}' to close field 'inner' opened at 1:7, got ']'`],
  ]);
});

Deno.test("text format rejects a missing ']' or a missing ',' in lists", () => {
  assertErrors([
    ["ri: [1, 2", `${AT} 1:10: missing ']' to close the list of field 'ri' opened at 1:5`],
    ["ri: [1 2]", `${AT} 1:8: expected ',' or ']' in the list of field 'ri', got '2'`],
    ["ri: [1; 2]", `${AT} 1:7: expected ',' or ']' in the list of field 'ri', got ';'`],
    [
      "rinner [ { a: 1 } { a: 2 } ]",
      `${AT} 1:19: expected ',' or ']' in the list of field 'rinner', got '{'`,
    ],
    ["rinner [ { a: 1 }", `${AT} 1:18: missing ']' to close the list of field 'rinner' opened at 1:8`],
    ["ri: [1, ]", `${AT} 1:9: expected an integer for int32 field 'ri', got ']'`],
    ["ri: [, 1]", `${AT} 1:6: expected an integer for int32 field 'ri', got ','`],
  ]);
});

Deno.test("text format rejects unexpected tokens and a premature end of input", () => {
  assertErrors([
    ["i32: 1 }", `${AT} 1:8: unexpected '}' outside of any message`],
    ["]", `${AT} 1:1: unexpected ']' outside of any message`],
    [": 5", `${AT} 1:1: expected a field name, got ':'`],
    ["5: 5", `${AT} 1:1: expected a field name, got '5'`],
    ["'s': 5", `${AT} 1:1: expected a field name, got string 's'`],
    ["i32: 1,, i64: 2", `${AT} 1:8: expected a field name, got ','`],
    ["inner { - }", `${AT} 1:9: expected a field name, got '-'`],
    ["i32:", `${AT} 1:5: expected an integer for int32 field 'i32', got end of input`],
    ["i32: -", `${AT} 1:6: expected an integer for int32 field 'i32', got '-' followed by end of input`],
    ["s:", `${AT} 1:3: expected a string for string field 's', got end of input`],
    [
      "color:\n",
      `${AT} 2:1: expected an enum value name or number for field 'color' (test.Color), got end of input`,
    ],
    ["i32: }", `${AT} 1:6: expected an integer for int32 field 'i32', got '}'`],
  ]);
});

Deno.test("text format rejects malformed numbers and characters outside the grammar", () => {
  assertErrors([
    ["i32: 12abc", `${AT} 1:6: invalid number '12abc'`],
    ["i32: 09", `${AT} 1:6: invalid number '09'`],
    ["i32: 0x", `${AT} 1:6: invalid number '0x'`],
    ["d: 1.2.3", `${AT} 1:4: invalid number '1.2.3'`],
    ["d: 1e", `${AT} 1:4: invalid number '1e'`],
    ["d: 1e+", `${AT} 1:4: invalid number '1e+'`],
    ["d: 01.5", `${AT} 1:4: invalid number '01.5'`],
    ["i32: 1 @", `${AT} 1:8: unexpected character '@'`],
    ["i32: +1", `${AT} 1:6: unexpected character '+'`],
    ["i32: 1 // c", `${AT} 1:8: unexpected character '/'`],
    ["i32: 1\n\x01", `${AT} 2:1: unexpected character '\\x01'`],
    ["\uFEFFi32: 1 @", `${AT} 1:8: unexpected character '@'`],
    ["s: .", `${AT} 1:4: unexpected character '.'`],
  ]);
});

Deno.test("text format rejects extensions and Any expansions as unsupported", () => {
  assertErrors([
    ["[test.ext]: 1", `${AT} 1:1: extensions are not supported`],
    ["inner {\n  [type.googleapis.com/test.Inner] { a: 1 }\n}", `${AT} 2:3: extensions are not supported`],
  ]);
});

// ---------------------------------------------------------------------------------------------------------
// Printer

Deno.test("text format printer writes fields in declaration order, indented by two spaces", () => {
  const text = formatTextFormat({
    rs: ["a", "b"],
    i32: -1,
    inner: { a: 1, children: [{ a: 2 }, {}] },
    ms: { k: 3 },
    mm: { m: { s: "v" } },
    color: "RED",
    rcolor: [1, "GREEN"],
    b: false,
    d: -Infinity,
    i64: "-9223372036854775808",
  }, All);
  assert.equal(
    text,
    `i32: -1
i64: -9223372036854775808
d: -inf
b: false
color: RED
inner {
  a: 1
  children {
    a: 2
  }
  children {}
}
rs: ["a", "b"]
rcolor: [RED, GREEN]
ms {
  key: "k"
  value: 3
}
mm {
  key: "m"
  value {
    s: "v"
  }
}
`,
  );
  assert.equal(formatTextFormat({}, All), "");
});

Deno.test("text format printer escapes strings and bytes so that they parse back", () => {
  assert.equal(
    formatTextFormat({ s: 'a"b\\c\nd\te\x01 é', by: new Uint8Array([0, 34, 65, 255, 10]) }, All),
    String.raw`s: "a\"b\\c\nd\te\001 é"` + "\n" + String.raw`by: "\000\"A\377\n"` + "\n",
  );
});

Deno.test("text format printer rejects a field the type does not have", () => {
  assert.throws(() => formatTextFormat({ nope: 1 }, All), {
    message: "Cannot format text: unknown field 'nope' in test.All",
  });
});

Deno.test("text format round trip: parse(format(x)) equals x for every kind of field", () => {
  const x = {
    i32: -2147483648,
    i64: "-9223372036854775808",
    u32: 4294967295,
    u64: "18446744073709551615",
    s32: 7,
    sf64: 9007199254740991,
    fx32: 0,
    f: 1.5,
    d: -0,
    b: true,
    s: 'quote " backslash \\ newline \n tab \t bell \x07 unicode é 😀',
    by: new Uint8Array([0, 1, 127, 128, 255, 92, 34, 39]),
    color: "DARK",
    inner: { a: 1, s: "x", children: [{ a: 2, children: [{}] }] },
    ri: [0, -1, 2147483647],
    rs: ["", "a'b"],
    rinner: [{}, { a: 3 }],
    rcolor: ["RED", "COLOR_UNSPECIFIED"],
    ri64: [1, "-9007199254740993"],
    rd: [0.1, 1e-300, 1.7976931348623157e308, 5e-324, NaN, Infinity, -Infinity, -0, 123456789.125],
    rb: [true, false],
    ms: { "": 0, "with space": -5, "__proto__": 1 },
    mm: { a: { a: 1 }, b: {} },
    mi: { "-9223372036854775808": "min", "0": "zero" },
    mb: { true: "GREEN", false: "DARK" },
    ob: "only one",
    opt: 0,
  };
  const printed = formatTextFormat(x, All);
  assert.deepEqual(parse(printed), x);
  assert.equal(formatTextFormat(parse(printed), All), printed);
});

Deno.test("text format parses a 200-line config with every entry", () => {
  const lines: string[] = [];
  for (let i = 0; lines.length < 200; i++) {
    lines.push(
      `rinner {`,
      `  a: ${i} # comment ${i}`,
      `  s: "item ${i}"`,
      `  children: [ { a: 1 }, { a: 2 } ]`,
      `}`,
      `ri: [${i}, -${i}, 0x${i.toString(16)}]`,
      `ms { key: "k${i}" value: ${i} }`,
      `rd: ${i}.5e-3`,
    );
  }
  const parsed = parse(lines.join("\n"));
  assert.equal((parsed.rinner as unknown[]).length, 25);
  assert.equal((parsed.ri as unknown[]).length, 75);
  assert.equal(Object.keys(parsed.ms as Record<string, unknown>).length, 25);
});

// ---------------------------------------------------------------------------------------------------------
// Triton's ModelConfig (protos/model_config.proto)

const TRITON_DYNAMIC = `
# A realistic config.pbtxt
name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
version_policy: { specific: { versions: [1, 3] } }
input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ -1, 16 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_INT64
    format: FORMAT_NONE
    dims: [ 16 ]
    reshape: { shape: [ 4, 4 ] }
    optional: true
  }
]
output {
  name: "OUTPUT0"
  data_type: TYPE_FP32
  dims: [ -1, 16 ]
  label_filename: "labels.txt"
}
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching {
  preferred_batch_size: [4, 8]
  max_queue_delay_microseconds: 100
}
parameters { key: "intra_op_thread_count" value: { string_value: "1" } }
parameters: { key: "execution_mode", value { string_value: "sequential" } }
`;

const TRITON_SEQUENCE = `
name: "accumulate"
backend: "onnxruntime"
max_batch_size: 4
version_policy { latest { num_versions: 2 } }
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    {
      name: "START"
      control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "READY"
      control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ]
    },
    {
      name: "CORRID"
      control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ]
    }
  ]
  oldest { max_candidate_sequences: 4 preferred_batch_size: [ 2, 4 ] }
}
instance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]
`;

const TRITON_ENSEMBLE = `
name: "pipeline"
platform: "ensemble"
max_batch_size: 0
input [ { name: "RAW" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "SCORES" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "IN" value: "RAW" }
      output_map { key: "OUT" value: "pixels" }
    },
    {
      model_name: "classifier"
      model_version: 3
      input_map { key: "INPUT0" value: "pixels" }
      output_map { key: "OUTPUT0" value: "SCORES" }
    }
  ]
}
`;

/**
 * Parses a Triton config and checks that `fromObject` -> `toObject` gives it back, less the scalars listed in
 * `zeroPaths` (dotted paths): proto3 keeps no presence for scalars, so those set to their zero value drop out.
 */
function parseTriton(text: string, zeroPaths: string[] = []): Record<string, unknown> {
  const type = modelConfigType();
  const parsed = parseTextFormat(text, type, { filename: "config.pbtxt" });
  const expected = structuredClone(parsed);
  for (const path of zeroPaths) {
    const keys = path.split(".");
    const last = keys.pop() ?? "";
    let obj = expected;
    for (const key of keys) obj = obj[key] as Record<string, unknown>;
    assert.ok(Object.hasOwn(obj, last), `no '${path}' in the parsed config`);
    delete obj[last];
  }
  assert.deepEqual(type.toObject(type.fromObject(parsed), { enums: String, longs: Number }), expected);
  return parsed;
}

Deno.test("text format parses a Triton config with dynamic batching and parameters exactly", () => {
  assert.deepEqual(parseTriton(TRITON_DYNAMIC, ["input.1.format"]), {
    name: "simple",
    platform: "onnxruntime_onnx",
    max_batch_size: 8,
    version_policy: { specific: { versions: [1, 3] } },
    input: [
      { name: "INPUT0", data_type: "TYPE_FP32", dims: [-1, 16] },
      {
        name: "INPUT1",
        data_type: "TYPE_INT64",
        format: "FORMAT_NONE",
        dims: [16],
        reshape: { shape: [4, 4] },
        optional: true,
      },
    ],
    output: [{ name: "OUTPUT0", data_type: "TYPE_FP32", dims: [-1, 16], label_filename: "labels.txt" }],
    instance_group: [{ count: 2, kind: "KIND_CPU" }],
    dynamic_batching: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: 100 },
    parameters: {
      intra_op_thread_count: { string_value: "1" },
      execution_mode: { string_value: "sequential" },
    },
  });
});

Deno.test("text format parses a Triton config with sequence batching control inputs exactly", () => {
  const zeroPaths = [
    "sequence_batching.control_input.0.control.0.kind",
  ];
  assert.deepEqual(parseTriton(TRITON_SEQUENCE, zeroPaths), {
    name: "accumulate",
    backend: "onnxruntime",
    max_batch_size: 4,
    version_policy: { latest: { num_versions: 2 } },
    input: [{ name: "INPUT", data_type: "TYPE_INT32", dims: [1] }],
    output: [{ name: "OUTPUT", data_type: "TYPE_INT32", dims: [1] }],
    sequence_batching: {
      max_sequence_idle_microseconds: 5000000,
      control_input: [
        { name: "START", control: [{ kind: "CONTROL_SEQUENCE_START", fp32_false_true: [0, 1] }] },
        { name: "READY", control: [{ kind: "CONTROL_SEQUENCE_READY", int32_false_true: [0, 1] }] },
        { name: "CORRID", control: [{ kind: "CONTROL_SEQUENCE_CORRID", data_type: "TYPE_UINT64" }] },
      ],
      oldest: { max_candidate_sequences: 4, preferred_batch_size: [2, 4] },
    },
    instance_group: [{ count: 1, kind: "KIND_GPU", gpus: [0] }],
  });
});

Deno.test("text format parses a Triton ensemble config with input and output maps exactly", () => {
  assert.deepEqual(parseTriton(TRITON_ENSEMBLE, ["max_batch_size"]), {
    name: "pipeline",
    platform: "ensemble",
    max_batch_size: 0,
    input: [{ name: "RAW", data_type: "TYPE_UINT8", dims: [-1] }],
    output: [{ name: "SCORES", data_type: "TYPE_FP32", dims: [10] }],
    ensemble_scheduling: {
      step: [
        {
          model_name: "preprocess",
          model_version: -1,
          input_map: { IN: "RAW" },
          output_map: { OUT: "pixels" },
        },
        {
          model_name: "classifier",
          model_version: 3,
          input_map: { INPUT0: "pixels" },
          output_map: { OUTPUT0: "SCORES" },
        },
      ],
    },
  });
});

Deno.test("text format round trip keeps realistic Triton configs unchanged", () => {
  const type = modelConfigType();
  for (const text of [TRITON_DYNAMIC, TRITON_SEQUENCE, TRITON_ENSEMBLE]) {
    const parsed = parseTextFormat(text, type);
    assert.deepEqual(parseTextFormat(formatTextFormat(parsed, type), type), parsed);
  }
});

Deno.test("text format rejects Triton config mistakes with the position and the ModelConfig type names", () => {
  const type = modelConfigType();
  const cases: [string, string][] = [
    ['name: "x"\nmax_batch: 8', `${AT} 2:1: unknown field 'max_batch' in inference.ModelConfig`],
    [
      "instance_group [ { count: 2 kind: KIND_TPU } ]",
      `${AT} 1:35: unknown enum value 'KIND_TPU' for field 'kind' (inference.ModelInstanceGroup.Kind)`,
    ],
    [
      'max_batch_size: "8"',
      `${AT} 1:17: expected an integer for int32 field 'max_batch_size', got string "8"`,
    ],
    [
      "dynamic_batching {}\nsequence_batching {}",
      `${AT} 2:1: field 'sequence_batching' and field 'dynamic_batching' are both set in oneof 'scheduling_choice'`,
    ],
    [
      "input [ { name: 'a' dims: [ -1, 16 }",
      `${AT} 1:36: expected ',' or ']' in the list of field 'dims', got '}'`,
    ],
  ];
  for (const [text, message] of cases) {
    assert.equal(errorOf(text, type).message, message, `for input ${JSON.stringify(text)}`);
  }
});
