import { assertEquals } from "../assert.ts";
import { linesOf, repeats } from "../../tools/duplicates.ts";

const BLOCK = ["const a = 1;", "const b = 2;", "if (a < b) {", "  log(a);", "}", "return b;"];

Deno.test("comments, blank lines and import declarations are not compared", () => {
  const text = [
    "import {",
    "  a,",
    "} from './a.ts';",
    "import { b } from './b.ts';",
    "",
    "/**",
    " * Doc.",
    " */",
    "// note",
    "  const x = a;  ",
  ].join("\n");
  assertEquals(linesOf("f.ts", text), [{ text: "const x = a;", file: "f.ts", number: 10 }]);
});

Deno.test("a block repeated in two files is reported once with both places, grown to its full length", () => {
  const one = linesOf("one.ts", ["function f() {", ...BLOCK, "const tail = 1;", "}"].join("\n"));
  const two = linesOf("two.ts", ["// other", "function g() {", ...BLOCK, "const tail = 1;", "}"].join("\n"));
  assertEquals(repeats([one, two], 6), [{
    lines: 8,
    places: [{ file: "one.ts", from: 2, to: 9 }, { file: "two.ts", from: 3, to: 10 }],
    first: "const a = 1;",
  }]);
  // Eight lines are fewer than a minimum of nine.
  assertEquals(repeats([one, two], 9), []);
});

Deno.test("repeats inside one file count; blocks mostly of punctuation and shorter blocks do not", () => {
  const same = linesOf("same.ts", [...BLOCK, "x();", ...BLOCK].join("\n"));
  assertEquals(repeats([same], 6), [{
    lines: 6,
    places: [{ file: "same.ts", from: 1, to: 6 }, { file: "same.ts", from: 8, to: 13 }],
    first: "const a = 1;",
  }]);
  const braces = ["}", "});", "}", ")", "];", "a;"];
  assertEquals(repeats([linesOf("p.ts", [...braces, "b;", ...braces].join("\n"))], 6), []);
  assertEquals(
    repeats([linesOf("s.ts", [...BLOCK.slice(0, 5), "y();", ...BLOCK.slice(0, 5)].join("\n"))], 6),
    [],
  );
});
