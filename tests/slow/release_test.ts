/**
 * The self-contained release file (`./dinfer release`, release/build.ts and release/launcher.c): it is built,
 * needs only glibc, and serves the bundled models from an empty folder with a fresh HOME and no network
 * (inside a network namespace of its own where `unshare -rn` works); it unpacks once into the cache folder and
 * refuses a damaged or truncated file without leaving anything behind. Takes about a minute (building and
 * unpacking ~190 MB).
 * @module
 */

import { join } from "node:path";
import { buildRelease } from "../../release/build.ts";
import { assert, assertEquals } from "../assert.ts";
import { ROOT } from "../helpers.ts";

const decoder = new TextDecoder();

async function exec(cmd: string, args: string[], env?: Record<string, string>) {
  const out = await new Deno.Command(cmd, {
    args,
    cwd: ROOT,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    ...(env ? { clearEnv: true, env } : {}),
  }).output();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

/** Whether this machine lets an unprivileged process have a network namespace with only loopback in it. */
async function networkNamespace(): Promise<boolean> {
  try {
    return (await exec("unshare", ["-rn", "sh", "-c", "ip link set lo up"])).code === 0;
  } catch {
    return false;
  }
}

function list(dir: string): string[] {
  try {
    return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw err;
  }
}

Deno.test("release file: built, needs only glibc, serves offline from an empty folder, unpacks once", async (t) => {
  const work = Deno.makeTempDirSync({ prefix: "dinfer-release-test-" });
  try {
    const file = join(work, "dinfer");
    const built = await buildRelease({ output: file });
    assertEquals(built.output, file);
    assertEquals(built.size, Deno.statSync(file).size);
    // The carried Deno alone is ~91 MiB; compressed with the rest the file stays well under it.
    assert(built.size > 40 * 2 ** 20 && built.size < 90 * 2 ** 20, `unexpected size ${built.size}`);
    assert(/^0\.1\.0-[0-9a-f]{16}$/.test(built.id), built.id);

    await t.step("links nothing but glibc", async () => {
      const out = await exec("ldd", [file]);
      assertEquals(out.code, 0, out.stderr);
      const glibc = /^(linux-vdso\.so\.1|libc\.so\.6|\/lib64\/ld-linux-x86-64\.so\.2)$/;
      const libs = out.stdout.split("\n").map((l) => l.trim().split(/\s+/)[0] ?? "").filter((l) => l);
      assertEquals(libs.filter((l) => !glibc.test(l)), []);
    });

    const home = join(work, "home");
    const cache = join(home, ".cache", "dinfer");
    await t.step("serves /v2/health/ready and an inference on 'simple' from an empty folder", async () => {
      const cwd = join(work, "empty");
      Deno.mkdirSync(cwd);
      Deno.mkdirSync(home);
      const probe = [
        Deno.execPath(),
        "run",
        "-A",
        join(ROOT, "tests/deploy/_release_probe.ts"),
        file,
        cwd,
        home,
      ];
      const isolated = await networkNamespace();
      if (!isolated) console.log("  (no network namespace here: the release ran with the machine's network)");
      const out = isolated
        ? await exec("unshare", ["-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", ...probe])
        : await exec(probe[0]!, probe.slice(1));
      assertEquals(out.code, 0, out.stderr);
      const seen = JSON.parse(out.stdout.trim().split("\n").at(-1)!);
      assertEquals(seen.ready, 200, seen.stderr);
      assertEquals(seen.infer, {
        status: 200,
        body: {
          model_name: "simple",
          model_version: "1",
          outputs: [
            {
              name: "OUTPUT0",
              datatype: "INT32",
              shape: [1, 16],
              data: Array.from({ length: 16 }, (_, i) => i + 3),
            },
            {
              name: "OUTPUT1",
              datatype: "INT32",
              shape: [1, 16],
              data: Array.from({ length: 16 }, (_, i) => i - 3),
            },
          ],
        },
      });
      assertEquals([seen.code, seen.signal], [0, null], seen.stderr);
      assertEquals(list(cwd), [], "the release wrote into the folder it was started from");
      // One complete copy in the cache, nothing half-unpacked beside it.
      assertEquals(list(cache), [built.id]);
      assertEquals(Deno.readTextFileSync(join(cache, built.id, ".dinfer-complete")), `${built.id}\n`);
    });

    await t.step("a second start uses the unpacked copy", async () => {
      const stamp = join(cache, built.id, ".dinfer-complete");
      const before = Deno.statSync(stamp).mtime?.getTime();
      const out = await exec(file, ["--help"], { PATH: "/usr/bin:/bin", HOME: home });
      assertEquals(out.code, 0, out.stderr);
      assert(out.stdout.includes("--model-repository"), out.stdout);
      assertEquals(list(cache), [built.id]);
      assertEquals(Deno.statSync(stamp).mtime?.getTime(), before);
    });

    await t.step("two first starts at once both run and leave one copy", async () => {
      const home4 = join(work, "home4");
      const env = { PATH: "/usr/bin:/bin", HOME: home4 };
      const [a, b] = await Promise.all([exec(file, ["--help"], env), exec(file, ["--help"], env)]);
      assertEquals([a.code, b.code], [0, 0], a.stderr + b.stderr);
      assert(a.stdout.includes("--model-repository") && b.stdout.includes("--model-repository"));
      assertEquals(list(join(home4, ".cache", "dinfer")), [built.id]);
    });

    await t.step("a damaged payload is refused and leaves no folder behind", async () => {
      const bytes = Deno.readFileSync(file);
      const trailer = new DataView(bytes.buffer, bytes.length - 64);
      const offset = Number(trailer.getBigUint64(8, true));
      bytes[offset + 200_000]! ^= 0xff;
      const damaged = join(work, "damaged");
      Deno.writeFileSync(damaged, bytes, { mode: 0o755 });
      const home2 = join(work, "home2");
      const out = await exec(damaged, ["--help"], { PATH: "/usr/bin:/bin", HOME: home2 });
      assertEquals(out.code, 127);
      assert(
        out.stderr.startsWith(
          `dinfer: Cannot unpack '${damaged}' into '${
            join(home2, ".cache/dinfer")
          }': the payload is damaged (`,
        ),
        out.stderr,
      );
      assertEquals(list(join(home2, ".cache", "dinfer")), []);
    });

    await t.step("a truncated file is refused before anything is unpacked", async () => {
      const bytes = Deno.readFileSync(file);
      const truncated = join(work, "truncated");
      Deno.writeFileSync(truncated, bytes.subarray(0, bytes.length - 1000), { mode: 0o755 });
      const home3 = join(work, "home3");
      const out = await exec(truncated, ["--help"], { PATH: "/usr/bin:/bin", HOME: home3 });
      assertEquals(out.code, 127);
      assertEquals(out.stderr, `dinfer: Cannot start '${truncated}': it carries no dinfer payload\n`);
      assertEquals(list(home3), []);
    });
  } finally {
    Deno.removeSync(work, { recursive: true });
  }
});
