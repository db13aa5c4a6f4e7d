/**
 * Spinning on a socket of this process until it has bytes to read, through libc's `poll` (FFI): for a wait that
 * is about to be answered within microseconds, a thread that sleeps in the event loop pays a wake-up that
 * costs more than the wait itself on a virtual machine. The socket stays the runtime's: this only looks at it
 * (poll reads nothing), so the runtime's own read, already waiting on it, finds the bytes at the event loop's
 * next look without sleeping.
 * @module
 */

/** The libc calls used here, or null where they cannot be bound (no glibc, no FFI permission). */
interface Libc {
  poll(fds: Uint8Array, nfds: bigint, timeout: number): number;
  getsockname(fd: number, addr: Uint8Array, len: Uint8Array): number;
}

let libc: Libc | null | undefined;

function bind(): Libc | null {
  if (libc !== undefined) return libc;
  libc = null;
  try {
    const lib = Deno.dlopen("libc.so.6", {
      poll: { parameters: ["buffer", "u64", "i32"], result: "i32" },
      getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
    });
    libc = lib.symbols;
  } catch { /* musl, or no --allow-ffi: no spinning, the event loop waits as usual */ }
  return libc;
}

const AF_UNIX = 1;
/** sockaddr_un: a 2-byte family, then a path of up to 108 bytes. */
const SOCKADDR_UN_BYTES = 110;
const decoder = new TextDecoder();

/**
 * The descriptor of this process's Unix socket bound (or accepted) on `path`, or -1 where there is none or it
 * cannot be told. Each of the server's stubs connects to a socket of its own private folder, and the listener
 * is closed once it accepted: the accepted connection is then the only descriptor with that name.
 * @param path the socket's path
 */
export function unixSocketFd(path: string): number {
  const c = bind();
  if (!c) return -1;
  const addr = new Uint8Array(SOCKADDR_UN_BYTES);
  const len = new Uint32Array(1);
  const lenBytes = new Uint8Array(len.buffer);
  let found = -1;
  try {
    for (const entry of Deno.readDirSync("/proc/self/fd")) {
      const fd = Number(entry.name);
      if (!Number.isInteger(fd)) continue;
      let link: string;
      try {
        link = Deno.readLinkSync(`/proc/self/fd/${fd}`);
      } catch {
        continue; // Closed meanwhile.
      }
      if (!link.startsWith("socket:")) continue;
      len[0] = SOCKADDR_UN_BYTES;
      if (c.getsockname(fd, addr, lenBytes) !== 0) continue;
      if ((addr[0]! | (addr[1]! << 8)) !== AF_UNIX) continue;
      const end = addr.indexOf(0, 2);
      const name = decoder.decode(
        addr.subarray(2, end < 0 || end > len[0]! ? Math.min(len[0]!, SOCKADDR_UN_BYTES) : end),
      );
      if (name !== path) continue;
      // Two descriptors of one name (the listener still open): not ours to tell apart.
      if (found >= 0) return -1;
      found = fd;
    }
  } catch {
    return -1; // No /proc: no spinning.
  }
  return found;
}

/** One pollfd (fd, events, revents), reused: the thread is the only one that spins. */
const pollfd = new Uint8Array(8);
const pollView = new DataView(pollfd.buffer);
const POLLIN = 1;

/**
 * Looks at `fd` until it has bytes to read (or is closed, or in error), for at most `maxUs` µs.
 * @param fd the descriptor (unixSocketFd)
 * @param maxUs the longest spin
 * @returns the µs it took, or -1 where the spin ended without bytes to read (or could not run)
 */
export function spinUntilReadable(fd: number, maxUs: number): number {
  const c = libc;
  if (!c || fd < 0) return -1;
  pollView.setInt32(0, fd, true);
  pollView.setInt16(4, POLLIN, true);
  const start = performance.now();
  const end = start + maxUs / 1000;
  while (true) {
    pollView.setInt16(6, 0, true);
    if (c.poll(pollfd, 1n, 0) !== 0) return (performance.now() - start) * 1000;
    if (performance.now() >= end) return -1;
  }
}

/**
 * When to spin for a wait that is usually short: always while the spins find what they wait for; after a spin
 * that ends without it, the next waits go without a spin, twice as many after each such spin in a row (up to
 * `maxSkip`), so that waits that have become long pay a fraction of a spin each.
 */
export class SpinBackoff {
  readonly #maxSkip: number;
  #skip = 0;
  #backoff = 0;

  /** @param maxSkip the most waits in a row that go without a spin */
  constructor(maxSkip: number) {
    this.#maxSkip = maxSkip;
  }

  /** Whether this wait spins (else it counts as one that goes without). */
  take(): boolean {
    if (this.#skip === 0) return true;
    this.#skip--;
    return false;
  }

  /** What the spin of a wait that took one found: whether it ended with what it waited for. */
  spun(found: boolean): void {
    this.#backoff = found ? 0 : Math.min(2 * this.#backoff || 1, this.#maxSkip);
    this.#skip = this.#backoff;
  }
}
