import { assertEquals } from "../assert.ts";
import { SpinBackoff, spinUntilReadable, unixSocketFd } from "../../server/core/fd_poll.ts";

/** A listener on a fresh path, a client connected to it, and the accepted end. */
async function connected(): Promise<
  { dir: string; path: string; listener: Deno.Listener; client: Deno.Conn; server: Deno.Conn }
> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-fd-poll-" });
  const path = `${dir}/s.sock`;
  const listener = Deno.listen({ transport: "unix", path });
  const client = await Deno.connect({ transport: "unix", path });
  const server = await listener.accept();
  return { dir, path, listener, client, server };
}

Deno.test("unixSocketFd finds the accepted end once the listener is closed, and spinning sees its bytes without reading them", async () => {
  const { dir, path, listener, client, server } = await connected();
  try {
    // The listener and the accepted connection have the same name: not told apart.
    assertEquals(unixSocketFd(path), -1);
    listener.close();
    const fd = unixSocketFd(path);
    assertEquals(fd >= 0, true);
    // Nothing sent yet: a 2 ms spin ends without bytes.
    assertEquals(spinUntilReadable(fd, 2000), -1);
    const buf = new Uint8Array(16);
    const reading = server.read(buf);
    await client.write(new Uint8Array([1, 2, 3, 4, 5]));
    assertEquals(spinUntilReadable(fd, 5_000_000) >= 0, true);
    // The runtime's read, waiting since before the spin, still gets every byte.
    assertEquals(await reading, 5);
    assertEquals([...buf.subarray(0, 5)], [1, 2, 3, 4, 5]);
    // Read: nothing left to see.
    assertEquals(spinUntilReadable(fd, 2000), -1);
    // The other end closed: readable (end of file), the spin ends.
    client.close();
    assertEquals(spinUntilReadable(fd, 5_000_000) >= 0, true);
  } finally {
    server.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("unixSocketFd is -1 for a path no socket of the process has, and spinUntilReadable for fd -1", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-fd-poll-" });
  try {
    assertEquals(unixSocketFd(`${dir}/none.sock`), -1);
    assertEquals(spinUntilReadable(-1, 1000), -1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("SpinBackoff spins while spins find their answer, and skips 1, 2, 4 ... up to its limit after misses", () => {
  const b = new SpinBackoff(4);
  /** The decisions of the next `n` waits, each spin ending as `found` says. */
  const next = (n: number, found: boolean) =>
    Array.from({ length: n }, () => {
      const spin = b.take();
      if (spin) b.spun(found);
      return spin;
    });
  assertEquals(next(3, true), [true, true, true]);
  assertEquals(next(12, false), [
    true,
    false,
    true,
    false,
    false,
    true,
    false,
    false,
    false,
    false,
    true,
    false,
  ]);
  // At the limit: four skipped after each miss.
  assertEquals(next(6, false), [false, false, false, true, false, false]);
  // A spin that finds its answer ends the skipping at once.
  assertEquals(next(4, true), [false, false, true, true]);
  assertEquals(next(3, false), [true, false, true]);
});

/**
 * Runs a script that finds an accepted socket's descriptor and spins for the client's bytes, under the given
 * permissions (the container image's and the release launcher's are listed, not `-A`); returns its output.
 */
async function findUnder(permissions: string[]): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-fd-poll-" });
  try {
    const module = new URL("../../server/core/fd_poll.ts", import.meta.url).href;
    await Deno.writeTextFile(
      `${dir}/find.ts`,
      `import { spinUntilReadable, unixSocketFd } from ${JSON.stringify(module)};
const path = ${JSON.stringify(`${dir}/s.sock`)};
const listener = Deno.listen({ transport: "unix", path });
const client = await Deno.connect({ transport: "unix", path });
const server = await listener.accept();
listener.close();
const fd = unixSocketFd(path);
await client.write(new Uint8Array([7]));
console.log(JSON.stringify({ found: fd >= 0, readable: spinUntilReadable(fd, 5_000_000) >= 0 }));
client.close();
server.close();
`,
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--quiet", "--no-prompt", ...permissions, `${dir}/find.ts`],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const err = new TextDecoder().decode(out.stderr);
    assertEquals(out.code, 0, err);
    return new TextDecoder().decode(out.stdout).trim();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("the descriptor is found with the container image's permissions, and nothing spins without FFI", async () => {
  const image = [
    "--allow-net",
    "--allow-read",
    "--allow-write",
    "--allow-env",
    "--allow-sys",
    "--allow-ffi",
    "--allow-run",
  ];
  assertEquals(await findUnder(image), JSON.stringify({ found: true, readable: true }));
  const noFfi = image.filter((p) => p !== "--allow-ffi");
  assertEquals(await findUnder(noFfi), JSON.stringify({ found: false, readable: false }));
});
