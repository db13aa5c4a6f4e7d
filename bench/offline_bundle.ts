/**
 * Packs what the benchmarks need to run on a machine with no network and no Deno (a bigger machine lent for a
 * scaling run, say): the pinned Deno binary, `node_modules` as the launcher installed it, and the shims that
 * `./dinfer` built, into one folder of compressed files. The cloud-storage SDKs, the OpenAI client and the
 * OpenTelemetry exporters keep only their `package.json` files (Deno checks that every package of the lock file
 * is there; the benchmarks never load them), and ONNX Runtime keeps only its Linux x86-64 libraries.
 *
 * It packs Deno's copies of the registry documents of the import map's packages too: Deno reads them before it
 * uses node_modules, and without them it waits for the registry; and h2load, the gRPC load generator, with the
 * libraries it links that a bare machine may lack.
 *
 * Usage: `deno run -A bench/offline_bundle.ts [--out=.dev]` (the folder is relative to the repository root), then
 * on the other machine, in a copy of the repository with that folder, `bench/offline_run.sh` unpacks what is
 * missing and runs a script, for example:
 *
 * ```sh
 * bench/offline_run.sh bench/scaling.ts --json="$OUT/scaling.json" --no-write --commit=<sha>
 * ```
 *
 * Tried on a bare clone under `unshare -n` (with the loopback interface up: `ip link set lo up`).
 * @module
 */

import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { findH2load } from "./h2load.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const DENO_STORE = "node_modules/.deno";
/** Packages whose files are left out (their package.json files stay). */
const SKELETONS = [
  /^openai@/,
  /^apache-arrow@/,
  /^web-streams-polyfill@/,
  /^@azure\+/,
  /^@aws-sdk\+/,
  /^@smithy\+/,
  /^@google-cloud\+/,
  /^@typespec\+/,
  /^@types\+node@/,
  /^@opentelemetry\+(?!api@)/,
];
/** ONNX Runtime's libraries for other systems. */
const OTHER_SYSTEMS = /\/onnxruntime-node\/bin\/napi-v\d+\/(darwin|win32|linux\/arm64)\//;

function run(cmd: string, args: string[], stdin?: Uint8Array): Promise<void> {
  return (async () => {
    const child = new Deno.Command(cmd, { args, cwd: ROOT, stdin: stdin ? "piped" : "null", stderr: "piped" })
      .spawn();
    if (stdin) {
      const w = child.stdin.getWriter();
      await w.write(stdin);
      await w.close();
    }
    const out = await child.output();
    if (!out.success) {
      throw new Error(`${cmd} ${args.join(" ")} failed: ${new TextDecoder().decode(out.stderr)}`);
    }
  })();
}

/** The files (and links) under node_modules to pack, relative to the repository root. */
function nodeModulesFiles(): string[] {
  const files: string[] = [];
  const walk = (rel: string) => {
    for (const e of Deno.readDirSync(`${ROOT}${rel}`)) {
      const path = `${rel}/${e.name}`;
      if (e.isDirectory) walk(path);
      else files.push(path);
    }
  };
  walk("node_modules");
  return files.filter((f) => {
    if (OTHER_SYSTEMS.test(f) || f.startsWith(`${DENO_STORE}/.deno.lock`)) return false;
    const m = /^node_modules\/\.deno\/([^/]+)\/node_modules\/(.+)$/.exec(f);
    if (!m || !SKELETONS.some((s) => s.test(m[1]!))) return true;
    // In a skeleton package only the package.json files of its packages stay.
    return /^(@[^/]+\/)?[^/]+\/package\.json$/.test(m[2]!);
  });
}

/**
 * The registry documents (`registry.json`) in Deno's npm cache, as paths under the cache's parent (`npm/...`): one
 * per package folder, `<registry>/<name>/` or `<registry>/@<scope>/<name>/`.
 */
function registryDocuments(cache: string): string[] {
  const found: string[] = [];
  const dirs = (path: string) => [...Deno.readDirSync(path)].filter((e) => e.isDirectory).map((e) => e.name);
  const add = (rel: string) => {
    try {
      if (Deno.statSync(`${cache}/${rel}/registry.json`).isFile) found.push(`npm/${rel}/registry.json`);
    } catch {
      // None: a package Deno resolved without asking the registry for its document.
    }
  };
  for (const registry of dirs(cache)) {
    for (const name of dirs(`${cache}/${registry}`)) {
      if (!name.startsWith("@")) add(`${registry}/${name}`);
      else for (const scoped of dirs(`${cache}/${registry}/${name}`)) add(`${registry}/${name}/${scoped}`);
    }
  }
  return found;
}

/** Libraries h2load links that a bare machine may lack (the C and C++ runtimes are left to the machine). */
const H2LOAD_LIBS = /^(libnghttp2|libjemalloc|libev|libssl|libcrypto)\.so/;

/**
 * Packs h2load (the gRPC load generator) with the libraries it links that a bare machine may lack, as
 * `bin/h2load` (a wrapper that points the loader at `lib/`), `bin/h2load.bin` and `lib/`. Nothing when h2load is
 * not installed here.
 */
async function packH2load(out: string): Promise<void> {
  const h2load = findH2load();
  if (!h2load) {
    console.log("h2load is not installed here: the bundle has none (the gRPC workloads need it)");
    return;
  }
  const dir = await Deno.makeTempDir({ prefix: "dinfer-offline-h2load-" });
  try {
    await Deno.mkdir(`${dir}/bin`);
    await Deno.mkdir(`${dir}/lib`);
    await Deno.copyFile(h2load, `${dir}/bin/h2load.bin`);
    await Deno.writeTextFile(
      `${dir}/bin/h2load`,
      '#!/bin/sh\nhere=$(dirname "$0")\nLD_LIBRARY_PATH="$here/../lib" exec "$here/h2load.bin" "$@"\n',
      { mode: 0o755 },
    );
    const ldd = new TextDecoder().decode(
      new Deno.Command("ldd", { args: [h2load], stdout: "piped" }).outputSync().stdout,
    );
    for (const m of ldd.matchAll(/^\s*(\S+) => (\S+)/gm)) {
      if (H2LOAD_LIBS.test(m[1]!)) await Deno.copyFile(m[2]!, `${dir}/lib/${m[1]}`);
    }
    await run("sh", ["-c", `tar -c -C "$0" bin lib | xz -9 -T0 > "${out}/h2load.tar.xz"`, dir]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ args: Deno.args, options: { out: { type: "string", default: ".dev" } } });
  const out = values.out!;
  await Deno.mkdir(`${ROOT}${out}/shim`, { recursive: true });
  for (const so of ["libortshim.so", "libtrtshim.so", "libtrtshim_mock.so"]) {
    await Deno.copyFile(`${ROOT}build/shim/${so}`, `${ROOT}${out}/shim/${so}`);
  }
  await run("sh", ["-c", `xz -9 -T0 -c "$0" > "${out}/deno.xz"`, Deno.execPath()]);
  const list = new TextEncoder().encode(nodeModulesFiles().join("\n") + "\n");
  await run("sh", ["-c", `tar -c --no-recursion -T - | xz -9 -T0 > "${out}/node_modules.tar.xz"`], list);
  // Deno reads the registry's package documents of the import map's packages from its cache before it uses
  // node_modules: without them a machine with no network waits for the registry.
  const cache = JSON.parse(
    new TextDecoder().decode(
      new Deno.Command(Deno.execPath(), { args: ["info", "--json"], cwd: ROOT, stdout: "piped" }).outputSync()
        .stdout,
    ),
  ).npmCache as string;
  const documents = registryDocuments(cache).join("\n") + "\n";
  await run("sh", [
    "-c",
    `tar -c --no-recursion -C "$0/.." -T - | xz -9 -T0 > "${out}/deno_dir.tar.xz"`,
    cache,
  ], new TextEncoder().encode(documents));
  await packH2load(out);
  for (const e of Deno.readDirSync(`${ROOT}${out}`)) {
    if (e.isFile) {
      console.log(`${out}/${e.name}: ${(Deno.statSync(`${ROOT}${out}/${e.name}`).size / 1e6).toFixed(1)} MB`);
    }
  }
}

if (import.meta.main) await main();
