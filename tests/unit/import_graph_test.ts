import { assertEquals } from "../assert.ts";
import { check, circles, type Edge, layerOf, LAYERS } from "../../tools/import_graph.ts";

const edge = (from: string, to: string, typeOnly = false): Edge => ({ from, to, typeOnly });

const LAYERS_ABC = [
  { name: "low", paths: ["a/"] },
  { name: "middle", paths: ["b/", "a/up.ts"] },
  { name: "high", paths: ["c.ts"] },
];

Deno.test("a file belongs to the layer of the longest path that names it; unnamed files to none", () => {
  assertEquals(layerOf("a/x.ts", LAYERS_ABC), 0);
  assertEquals(layerOf("a/up.ts", LAYERS_ABC), 1);
  assertEquals(layerOf("c.ts", LAYERS_ABC), 2);
  assertEquals(layerOf("c.tsx", LAYERS_ABC), -1);
  assertEquals(layerOf("d/x.ts", LAYERS_ABC), -1);
});

Deno.test("the project's layers place statistics low and the Prometheus endpoint with the frontends", () => {
  const name = (path: string) => LAYERS[layerOf(path)]?.name;
  assertEquals(name("server/core/types.ts"), "core");
  assertEquals(name("server/metrics/stats.ts"), "request services");
  assertEquals(name("server/metrics/prometheus.ts"), "frontends");
  assertEquals(name("server/backends/onnx_proto.ts"), "backends");
  assertEquals(name("main.ts"), "server");
});

Deno.test("circles are found with all their files and one closed path; a self import is a circle", () => {
  assertEquals(
    circles([
      edge("a/1.ts", "a/2.ts"),
      edge("a/2.ts", "a/3.ts", true),
      edge("a/3.ts", "a/1.ts"),
      edge("a/3.ts", "a/4.ts"),
      edge("b/x.ts", "b/x.ts"),
    ]),
    [
      { files: ["a/1.ts", "a/2.ts", "a/3.ts"], path: ["a/1.ts", "a/2.ts", "a/3.ts", "a/1.ts"] },
      { files: ["b/x.ts"], path: ["b/x.ts", "b/x.ts"] },
    ],
  );
  assertEquals(circles([edge("a/1.ts", "a/2.ts"), edge("a/2.ts", "a/3.ts"), edge("a/1.ts", "a/3.ts")]), []);
});

Deno.test("check reports imports into a higher layer, type-only ones too, and files without a layer", () => {
  const found = check(
    [
      edge("b/x.ts", "a/x.ts"),
      edge("a/x.ts", "a/up.ts", true),
      edge("c.ts", "b/x.ts"),
      edge("b/x.ts", "b/y.ts"),
      edge("b/y.ts", "d/z.ts"),
    ],
    LAYERS_ABC,
  );
  assertEquals(found, {
    circles: [],
    upward: [edge("a/x.ts", "a/up.ts", true)],
    unplaced: ["d/z.ts"],
  });
});
