/**
 * Finds blocks of lines repeated in the source: every run of at least `--min` lines (6 unless told) that
 * appears in two places or more, compared with surrounding whitespace removed; blank lines, comments and import
 * declarations are skipped. Windows mostly of punctuation (closing braces and the like) do not count.
 *
 *   ./dinfer deno run -A tools/duplicates.ts [--min=6] [folder or file ...]   (default: server/)
 *
 * Prints each repeated block once with every place it occurs, and exits with status 1 when there is any.
 * @module
 */

import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";

/** One line of a file as compared: its text without surrounding whitespace, and where it is. */
interface Line {
  text: string;
  file: string;
  /** 1-based line number in the file. */
  number: number;
}

/** A block of lines found in several places. */
export interface Repeat {
  /** How many (non-blank) lines the block has. */
  lines: number;
  /** Where it occurs: file, first and last line (1-based, inclusive). */
  places: { file: string; from: number; to: number }[];
  /** The block's first line, to recognise it by. */
  first: string;
}

/** Whether a line carries code or text rather than only punctuation. */
function substantial(text: string): boolean {
  return /[A-Za-z0-9]/.test(text);
}

/**
 * The lines of a text that are compared, trimmed: code lines, without blank lines, comments and import
 * declarations (which repeat by nature).
 * @param file the name to report
 * @param text the contents
 */
export function linesOf(file: string, text: string): Line[] {
  const out: Line[] = [];
  let inImport = false;
  text.split("\n").forEach((raw, i) => {
    const line = raw.trim();
    if (inImport || /^import\b/.test(line)) {
      inImport = !line.endsWith(";");
      return;
    }
    if (line === "" || line.startsWith("//") || line.startsWith("/*") || line.startsWith("*")) return;
    out.push({ text: line, file, number: i + 1 });
  });
  return out;
}

/**
 * The blocks of at least `min` lines that occur in more than one place, longest first.
 * @param files each file's lines (from linesOf)
 * @param min the fewest lines a reported block has
 */
export function repeats(files: readonly Line[][], min: number): Repeat[] {
  // Every window of `min` lines, by its text; a window of punctuation alone is not a candidate.
  const windows = new Map<string, { file: number; start: number }[]>();
  files.forEach((lines, f) => {
    for (let i = 0; i + min <= lines.length; i++) {
      const window = lines.slice(i, i + min);
      if (window.filter((l) => substantial(l.text)).length < Math.ceil(min / 2)) continue;
      const key = window.map((l) => l.text).join("\n");
      const list = windows.get(key) ?? [];
      list.push({ file: f, start: i });
      windows.set(key, list);
    }
  });
  // A window that occurs twice starts a repeat; the repeat grows while the next lines match in every place.
  const covered = files.map((lines) => new Array<boolean>(lines.length).fill(false));
  const found: Repeat[] = [];
  const starts = [...windows.values()].filter((list) => list.length > 1)
    .sort((a, b) => a[0]!.file - b[0]!.file || a[0]!.start - b[0]!.start);
  for (const list of starts) {
    const first = list[0]!;
    if (list.every((p) => covered[p.file]![p.start])) continue;
    let length = min;
    const at = (p: { file: number; start: number }, k: number) => files[p.file]![p.start + k]?.text;
    const overlaps = (p: { file: number; start: number }, q: { file: number; start: number }, n: number) =>
      p.file === q.file && p.start < q.start + n && q.start < p.start + n;
    while (
      list.every((p) => at(p, length) !== undefined && at(p, length) === at(first, length)) &&
      !list.some((p, i) => list.some((q, j) => i < j && overlaps(p, q, length + 1)))
    ) length++;
    for (const p of list) for (let k = 0; k < length; k++) covered[p.file]![p.start + k] = true;
    found.push({
      lines: length,
      places: list.map((p) => ({
        file: files[p.file]![p.start]!.file,
        from: files[p.file]![p.start]!.number,
        to: files[p.file]![p.start + length - 1]!.number,
      })),
      first: files[first.file]![first.start]!.text,
    });
  }
  return found.sort((a, b) => b.lines - a.lines || a.places[0]!.file.localeCompare(b.places[0]!.file));
}

/**
 * The TypeScript files under a folder (or the file itself), sorted.
 * @param path a folder or a file
 */
async function sources(path: string): Promise<string[]> {
  const info = await Deno.stat(path);
  if (info.isFile) return [path];
  const out: string[] = [];
  for await (const e of Deno.readDir(path)) {
    const child = join(path, e.name);
    if (e.isDirectory) out.push(...await sources(child));
    else if (e.isFile && e.name.endsWith(".ts")) out.push(child);
  }
  return out.sort();
}

if (import.meta.main) {
  const root = fileURLToPath(new URL("..", import.meta.url));
  const minArg = Deno.args.find((a) => a.startsWith("--min="));
  const min = minArg ? Number(minArg.slice("--min=".length)) : 6;
  if (!Number.isInteger(min) || min < 2) {
    console.error(`Bad --min '${minArg}': expected an integer of 2 or more`);
    Deno.exit(2);
  }
  const paths = Deno.args.filter((a) => !a.startsWith("--"));
  const files: Line[][] = [];
  for (const path of paths.length > 0 ? paths : [join(root, "server")]) {
    for (const file of await sources(path)) {
      files.push(linesOf(relative(root, file), await Deno.readTextFile(file)));
    }
  }
  const found = repeats(files, min);
  for (const r of found) {
    const places = r.places.map((p) => `${p.file}:${p.from}-${p.to}`).join(", ");
    console.log(`${r.lines} lines repeated at ${places}: ${r.first}`);
  }
  console.log(`${found.length} blocks of ${min} or more lines repeated in ${files.length} files`);
  if (found.length > 0) Deno.exit(1);
}
