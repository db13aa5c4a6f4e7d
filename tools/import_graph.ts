/**
 * Checks the import graph of the server: no circles, and no module importing from a layer above its own.
 * Type-only imports count like any other. The graph is Deno's own (`deno info --json` from each entry point),
 * so what it sees is what Deno loads, dynamic imports included.
 *
 *   ./dinfer deno run -A tools/import_graph.ts          check; exit status 1 on any circle or upward edge
 *   ./dinfer deno run -A tools/import_graph.ts --edges  also print every edge with the layers it joins
 *
 * The layers, lowest first: a module may import from its own layer and the ones below it. A file belongs to
 * the layer of the longest path prefix that names it; a file no layer names is an error too, so that a new
 * folder is placed on purpose.
 * @module
 */

import { relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The layers, lowest first. */
export const LAYERS: readonly { name: string; paths: readonly string[] }[] = [
  // Tensors, dtypes, errors, the request and response types, validation, the clock, the log.
  { name: "core", paths: ["server/core/", "server/logging.ts", "server/cleanup.ts"] },
  // The Deno.dlopen binding of libtrtshim.
  { name: "ffi", paths: ["ffi/"] },
  // What a request carries along and records into: shared-memory regions, traces, statistics, the response
  // cache.
  {
    name: "request services",
    paths: ["server/shm/", "server/trace/", "server/metrics/stats.ts", "server/cache/"],
  },
  // The model repository: scan, text format, config validation, polling.
  { name: "repository", paths: ["server/repository/"] },
  // The runtimes behind the Backend interface.
  { name: "backends", paths: ["server/backends/"] },
  // Queues and batches in front of the backends.
  { name: "scheduler", paths: ["server/scheduler/"] },
  // Model versions and the registry that loads them.
  { name: "models", paths: ["server/models/"] },
  // The one inference path: resolve once, shared memory, trace, run, answer.
  { name: "pipeline", paths: ["server/pipeline/"] },
  // What clients talk to: HTTP, gRPC, the Prometheus endpoint (and the GPU readings it shows).
  { name: "frontends", paths: ["server/frontends/", "server/metrics/"] },
  // Start-up: flags, wiring, the entry points.
  { name: "server", paths: ["server/config.ts", "server/cli.ts", "server/server.ts", "main.ts", "mod.ts"] },
];

/** The modules the graph starts from: the entry points and the workers started by URL. */
export const ROOTS = [
  "main.ts",
  "mod.ts",
  "server/backends/onnxruntime_worker.ts",
  "server/frontends/http/http_worker.ts",
];

/** One import between two files of the project. */
export interface Edge {
  from: string;
  to: string;
  /** Whether only types are imported. */
  typeOnly: boolean;
}

interface InfoModule {
  specifier: string;
  dependencies?: { code?: { specifier?: string }; type?: { specifier?: string } }[];
}

/**
 * The imports between the project's files, from `deno info --json` of each root.
 * @param root the project folder
 * @param roots the entry points, relative to it
 */
export async function projectEdges(root: string, roots: readonly string[]): Promise<Edge[]> {
  const edges = new Map<string, Edge>();
  const local = (specifier: string | undefined) => {
    if (!specifier?.startsWith("file:")) return undefined;
    const path = relative(root, fileURLToPath(specifier));
    return path.startsWith("..") ? undefined : path;
  };
  for (const entry of roots) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["info", "--json", entry],
      cwd: root,
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!out.success) {
      throw new Error(`Cannot read the import graph of '${entry}': ${new TextDecoder().decode(out.stderr)}`);
    }
    const info = JSON.parse(new TextDecoder().decode(out.stdout)) as { modules: InfoModule[] };
    for (const m of info.modules) {
      const from = local(m.specifier);
      if (from === undefined) continue;
      for (const d of m.dependencies ?? []) {
        const code = local(d.code?.specifier);
        const type = local(d.type?.specifier);
        for (const to of new Set([code, type])) {
          if (to === undefined) continue;
          const key = `${from}\0${to}`;
          const typeOnly = to !== code;
          const seen = edges.get(key);
          if (seen) seen.typeOnly &&= typeOnly;
          else edges.set(key, { from, to, typeOnly });
        }
      }
    }
  }
  return [...edges.values()].sort((a, b) => a.from.localeCompare(b.from) || a.to.localeCompare(b.to));
}

/**
 * The index in LAYERS of a file's layer, or -1 when no layer names it.
 * @param path the file, relative to the project folder
 * @param layers the layers, lowest first
 */
export function layerOf(path: string, layers: typeof LAYERS = LAYERS): number {
  let best = -1;
  let bestLength = -1;
  layers.forEach((layer, i) => {
    for (const p of layer.paths) {
      const matches = p.endsWith("/") ? path.startsWith(p) : path === p;
      if (matches && p.length > bestLength) [best, bestLength] = [i, p.length];
    }
  });
  return best;
}

/** Files that import each other, directly or through one another. */
export interface Circle {
  /** Every file of the circle (a strongly connected component), in name order. */
  files: string[];
  /** One closed path through it, from its first file back to it. */
  path: string[];
}

/**
 * The circles of a graph: each strongly connected component of more than one file, or a file importing itself.
 * @param edges the graph
 */
export function circles(edges: readonly Edge[]): Circle[] {
  const next = new Map<string, string[]>();
  for (const e of edges) next.set(e.from, [...(next.get(e.from) ?? []), e.to]);
  const nodes = [...new Set(edges.flatMap((e) => [e.from, e.to]))].sort();
  // Tarjan's strongly connected components.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  let counter = 0;
  const visit = (v: string) => {
    index.set(v, counter);
    low.set(v, counter++);
    stack.push(v);
    onStack.add(v);
    for (const w of next.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (next.get(v) ?? []).includes(v)) components.push(component.sort());
    }
  };
  for (const v of nodes) if (!index.has(v)) visit(v);
  // One closed path per component: breadth-first from its first file back to it, inside the component.
  return components.map((component) => {
    const inside = new Set(component);
    const start = component[0]!;
    const parent = new Map<string, string>();
    const queue = [start];
    while (queue.length > 0) {
      const v = queue.shift()!;
      for (const w of next.get(v) ?? []) {
        if (!inside.has(w)) continue;
        if (w === start) {
          const path = [start];
          for (let u: string | undefined = v; u !== undefined && u !== start; u = parent.get(u)) path.push(u);
          return { files: component, path: [start, ...path.slice(1).reverse(), start] };
        }
        if (!parent.has(w)) {
          parent.set(w, v);
          queue.push(w);
        }
      }
    }
    return { files: component, path: [...component, start] };
  }).sort((a, b) => a.files[0]!.localeCompare(b.files[0]!));
}

/** What the check found. */
export interface Findings {
  circles: Circle[];
  upward: Edge[];
  unplaced: string[];
}

/**
 * Checks a graph against the layers.
 * @param edges the graph
 * @param layers the layers, lowest first
 */
export function check(edges: readonly Edge[], layers: typeof LAYERS = LAYERS): Findings {
  const files = [...new Set(edges.flatMap((e) => [e.from, e.to]))].sort();
  return {
    circles: circles(edges),
    upward: edges.filter((e) => {
      const from = layerOf(e.from, layers);
      const to = layerOf(e.to, layers);
      return from >= 0 && to > from;
    }),
    unplaced: files.filter((f) => layerOf(f, layers) < 0),
  };
}

if (import.meta.main) {
  const root = resolve(fileURLToPath(new URL("..", import.meta.url)));
  const edges = await projectEdges(root, ROOTS);
  const name = (path: string) => LAYERS[layerOf(path)]?.name ?? "no layer";
  if (Deno.args.includes("--edges")) {
    for (const e of edges) {
      console.log(`${e.from} (${name(e.from)}) -> ${e.to} (${name(e.to)})${e.typeOnly ? " [types]" : ""}`);
    }
  }
  const found = check(edges);
  for (const c of found.circles) {
    console.log(`circle of ${c.files.length} files (${c.files.join(", ")}), for one: ${c.path.join(" -> ")}`);
  }
  for (const e of found.upward) {
    console.log(
      `upward: ${e.from} (${name(e.from)}) imports ${e.to} (${name(e.to)})${e.typeOnly ? " [types]" : ""}`,
    );
  }
  for (const f of found.unplaced) console.log(`no layer: ${f}`);
  const files = new Set(edges.flatMap((e) => [e.from, e.to])).size;
  const problems = found.circles.length + found.upward.length + found.unplaced.length;
  console.log(
    `import graph: ${files} files, ${edges.length} imports, ${found.circles.length} circles, ` +
      `${found.upward.length} upward imports, ${found.unplaced.length} files without a layer`,
  );
  if (problems > 0) Deno.exit(1);
}
