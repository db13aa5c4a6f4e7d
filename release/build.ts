/**
 * Builds dinfer's self-contained release file: `release/launcher.c` (compiled here, zlib linked in
 * statically, so the file needs only glibc) followed by a gzip payload that carries the pinned Deno, the
 * server's code, `node_modules` with ONNX Runtime's native libraries for linux-x64, the Python backend's
 * stub and the bundled example models, and a trailer. The payload's format is described in the launcher.
 *
 * `./dinfer release [--output=PATH]` (default `build/dinfer-<version>-linux-x86_64`).
 * @module
 */

import { createHash } from "node:crypto";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../", import.meta.url));

/** What the release carries from the repository, under `app/`. */
export const APP_PATHS = [
  "main.ts",
  "mod.ts",
  "deno.json",
  "deno.lock",
  "server",
  "ffi",
  "protos",
  "examples/models",
  "node_modules",
];

/** Left out of `app/`: other platforms' ONNX Runtime builds, test data inside npm packages, bytecode. */
const ORT_BIN = "node_modules/.deno/onnxruntime-node@1.30.0/node_modules/onnxruntime-node/bin/napi-v6";
export const EXCLUDED = [
  `${ORT_BIN}/darwin`,
  `${ORT_BIN}/win32`,
  `${ORT_BIN}/linux/arm64`,
  "node_modules/.deno/bintrees@1.0.2/node_modules/bintrees/test",
];

/** The launcher's trailer magic and size (see launcher.c). */
const MAGIC = "DINFERPK";
const TRAILER_SIZE = 64;

/** Options of {@linkcode buildRelease}. */
export interface BuildOptions {
  /** Where to write the file (default `build/dinfer-<version>-linux-x86_64`). */
  output?: string;
  /** The Deno binary to carry (default: the one running this script). */
  deno?: string;
  /** The C compiler (default `cc`). */
  cc?: string;
}

/** What {@linkcode buildRelease} wrote. */
export interface BuildResult {
  output: string;
  /** The file's size in bytes. */
  size: number;
  /** The cache folder's name: the version and the start of the payload's SHA-256. */
  id: string;
  entries: number;
}

interface Entry {
  type: "d" | "f" | "l";
  /** The path inside the release. */
  path: string;
  /** The path on this machine (files). */
  source?: string;
  mode: number;
  size: number;
  target?: string;
}

/**
 * Deno's lock files in node_modules/.deno (`.deno.lock`, and `.deno.lock.poll`, which comes and goes while
 * another Deno process holds the lock): they belong to the Deno processes of this checkout, not to the release.
 */
const DENO_LOCKS = "node_modules/.deno/.deno.lock";

function isExcluded(rel: string): boolean {
  return EXCLUDED.some((e) => rel === e || rel.startsWith(e + "/")) || rel.endsWith(".pyc") ||
    rel.split("/").includes("__pycache__") || rel.startsWith(DENO_LOCKS);
}

/** Lists a path under the repository root (directories before their contents, in a stable order). */
function walk(rel: string, out: Entry[]): void {
  if (isExcluded(rel)) return;
  const source = `${ROOT}${rel}`;
  const info = Deno.lstatSync(source);
  const path = `app/${rel}`;
  if (info.isSymlink) {
    const target = Deno.readLinkSync(source);
    if (target.startsWith("/")) {
      throw new Error(`Cannot package '${rel}': the link points to an absolute path ('${target}')`);
    }
    out.push({ type: "l", path, mode: 0o777, size: 0, target });
  } else if (info.isDirectory) {
    out.push({ type: "d", path, mode: (info.mode ?? 0o755) & 0o7777, size: 0 });
    const names = [...Deno.readDirSync(source)].map((e) => e.name).sort();
    for (const name of names) walk(`${rel}/${name}`, out);
  } else if (info.isFile) {
    out.push({ type: "f", path, source, mode: (info.mode ?? 0o644) & 0o7777, size: info.size });
  } else {
    throw new Error(`Cannot package '${rel}': not a file, folder or link`);
  }
}

function header(entry: Entry, pathBytes: Uint8Array, dataLength: number): Uint8Array<ArrayBuffer> {
  const h = new Uint8Array(17);
  const v = new DataView(h.buffer);
  h[0] = entry.type.charCodeAt(0);
  v.setUint32(1, entry.mode, true);
  v.setUint32(5, pathBytes.length, true);
  v.setBigUint64(9, BigInt(dataLength), true);
  return h;
}

async function run(cmd: string, args: string[]): Promise<void> {
  let out;
  try {
    out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) throw new Error(`Cannot run '${cmd}': not installed`);
    throw err;
  }
  if (!out.success) {
    const text = new TextDecoder().decode(out.stderr).trim();
    throw new Error(`Cannot run '${cmd} ${args.join(" ")}': exit code ${out.code}\n${text}`);
  }
}

async function writeAll(file: Deno.FsFile, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await file.write(bytes.subarray(off));
}

/**
 * Builds the release file.
 * @param options output path, the Deno binary to carry, the C compiler
 * @returns the file's path, size, cache id and entry count
 */
export async function buildRelease(options: BuildOptions = {}): Promise<BuildResult> {
  const version: string = JSON.parse(Deno.readTextFileSync(`${ROOT}deno.json`)).version;
  const output = options.output ?? `${ROOT}build/dinfer-${version}-linux-x86_64`;
  const deno = options.deno ?? Deno.execPath();
  for (const p of ["node_modules/.deno", "node_modules/onnxruntime-node"]) {
    try {
      Deno.statSync(`${ROOT}${p}`);
    } catch {
      throw new Error(`Cannot build the release: '${p}' is missing (run './dinfer setup' first)`);
    }
  }

  const entries: Entry[] = [];
  const denoInfo = Deno.statSync(deno);
  entries.push({ type: "f", path: "deno", source: deno, mode: 0o755, size: denoInfo.size });
  entries.push({ type: "d", path: "app", mode: 0o755, size: 0 });
  const dirs = new Set<string>();
  for (const rel of APP_PATHS) {
    // Parent folders of nested paths (examples/ for examples/models) come first.
    const parts = rel.split("/");
    for (let i = 1; i < parts.length; i++) {
      const dir = parts.slice(0, i).join("/");
      if (!dirs.has(dir)) entries.push({ type: "d", path: `app/${dir}`, mode: 0o755, size: 0 });
      dirs.add(dir);
    }
    walk(rel, entries);
  }

  const outDir = output.slice(0, output.lastIndexOf("/")) || ".";
  Deno.mkdirSync(outDir, { recursive: true });
  const work = Deno.makeTempDirSync({ dir: outDir, prefix: ".release-" });
  const partial = `${work}/release`;
  try {
    const launcher = `${work}/launcher`;
    await run(options.cc ?? "cc", [
      "-O2",
      "-Wall",
      "-Wextra",
      "-Werror",
      "-o",
      launcher,
      `${ROOT}release/launcher.c`,
      "-l:libz.a",
    ]);
    const file = Deno.openSync(partial, { write: true, create: true, truncate: true, mode: 0o755 });
    let offset = 0, size = 0;
    const hash = createHash("sha256");
    try {
      const launcherBytes = Deno.readFileSync(launcher);
      await writeAll(file, launcherBytes);
      offset = launcherBytes.length;

      const gzip = new CompressionStream("gzip");
      const writer = gzip.writable.getWriter();
      const drain = (async () => {
        for await (const chunk of gzip.readable) {
          hash.update(chunk);
          size += chunk.length;
          await writeAll(file, chunk);
        }
      })();
      const encoder = new TextEncoder();
      for (const entry of entries) {
        const pathBytes = encoder.encode(entry.path);
        // The launcher's limit (PATH_MAX, with the cache folder in front).
        if (pathBytes.length > 3000) throw new Error(`Cannot package '${entry.path}': path too long`);
        if (entry.type === "f") {
          using src = Deno.openSync(entry.source!);
          const actual = src.statSync().size;
          if (actual !== entry.size) {
            throw new Error(`Cannot package '${entry.source}': it changed while read`);
          }
          await writer.write(header(entry, pathBytes, actual));
          await writer.write(pathBytes);
          for await (const chunk of src.readable) await writer.write(chunk);
        } else {
          const data = entry.type === "l" ? encoder.encode(entry.target) : new Uint8Array(0);
          await writer.write(header(entry, pathBytes, data.length));
          await writer.write(pathBytes);
          if (data.length) await writer.write(data);
        }
      }
      await writer.close();
      await drain;

      const id = `${version}-${hash.digest("hex").slice(0, 16)}`;
      const trailer = new Uint8Array(TRAILER_SIZE);
      const v = new DataView(trailer.buffer);
      trailer.set(encoder.encode(MAGIC), 0);
      v.setBigUint64(8, BigInt(offset), true);
      v.setBigUint64(16, BigInt(size), true);
      v.setBigUint64(24, BigInt(entries.length), true);
      trailer.set(encoder.encode(id), 32);
      await writeAll(file, trailer);
      file.close();
      Deno.renameSync(partial, output);
      return { output, size: Deno.statSync(output).size, id, entries: entries.length };
    } catch (err) {
      try {
        file.close();
      } catch { /* already closed */ }
      throw err;
    }
  } finally {
    Deno.removeSync(work, { recursive: true });
  }
}

if (import.meta.main) {
  const outputArg = Deno.args.find((a) => a.startsWith("--output="));
  const unknown = Deno.args.filter((a) => !a.startsWith("--output="));
  if (unknown.length > 0) {
    console.error(
      `dinfer release: unknown argument '${unknown[0]}' (usage: ./dinfer release [--output=PATH])`,
    );
    Deno.exit(2);
  }
  try {
    const r = await buildRelease(outputArg ? { output: outputArg.slice("--output=".length) } : {});
    const mib = (r.size / 2 ** 20).toFixed(1);
    console.log(`${r.output}: ${r.size} bytes (${mib} MiB), ${r.entries} entries, cache folder '${r.id}'`);
  } catch (err) {
    console.error(`dinfer release: ${err instanceof Error ? err.message : err}`);
    Deno.exit(1);
  }
}
