/**
 * Spinning on a socket of this process until it has bytes to read, through libc's `poll` (FFI): for a wait that
 * is about to be answered within microseconds, a thread that sleeps in the event loop pays a wake-up that
 * costs more than the wait itself on a virtual machine. The socket stays the runtime's: this only looks at it
 * (poll reads nothing), so the runtime's own read, already waiting on it, finds the bytes at the event loop's
 * next look without sleeping.
 * @module
 */

import { glibc } from "./libc.ts";

/** The libc calls used here, or null where they cannot be bound (no glibc, no FFI permission). */
interface Libc {
  poll(fds: Uint8Array, nfds: bigint, timeout: number): number;
  getsockname(fd: number, addr: Uint8Array, len: Uint8Array): number;
}

let libc: Libc | null | undefined;

/** Where libc cannot be bound, nothing spins: the event loop waits as usual. */
function bind(): Libc | null {
  return libc !== undefined ? libc : (libc = glibc({
    poll: { parameters: ["buffer", "u64", "i32"], result: "i32" },
    getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  }));
}

const AF_UNIX = 1;
/** sockaddr_un: a 2-byte family, then a path of up to 108 bytes. */
const SOCKADDR_UN_BYTES = 110;
const POLLIN = 1;
/** poll's answer for a descriptor that is not open. */
const POLLNVAL = 0x20;
/** Descriptors looked at per poll call while searching (see unixSocketFd). */
const FD_BLOCK = 256;
/** Blocks in a row with no open descriptor after which the search ends. */
const EMPTY_BLOCKS = 4;
const decoder = new TextDecoder();

/**
 * The descriptor of this process's Unix socket bound (or accepted) on `path`, or -1 where there is none or it
 * cannot be told. Each of the server's stubs connects to a socket of its own private folder, and the listener
 * is closed once it accepted: the accepted connection is then the only descriptor with that name.
 *
 * The open descriptors are found with `poll` (one call per FD_BLOCK descriptors: a closed one answers
 * POLLNVAL), and each is asked its name with `getsockname`: FFI alone, as `/proc/self/fd` needs every
 * permission. The kernel gives a new descriptor the lowest number free, so the search ends after
 * EMPTY_BLOCKS × FD_BLOCK closed ones in a row.
 * @param path the socket's path
 */
export function unixSocketFd(path: string): number {
  const c = bind();
  if (!c) return -1;
  const fds = new Uint8Array(8 * FD_BLOCK);
  const view = new DataView(fds.buffer);
  const addr = new Uint8Array(SOCKADDR_UN_BYTES);
  const len = new Uint32Array(1);
  const lenBytes = new Uint8Array(len.buffer);
  let found = -1;
  for (let base = 0, empty = 0; empty < EMPTY_BLOCKS; base += FD_BLOCK) {
    for (let i = 0; i < FD_BLOCK; i++) {
      view.setInt32(8 * i, base + i, true);
      view.setInt16(8 * i + 4, 0, true); // no events: poll still answers POLLNVAL for a closed one
      view.setInt16(8 * i + 6, 0, true);
    }
    if (c.poll(fds, BigInt(FD_BLOCK), 0) < 0) return -1;
    let open = 0;
    for (let i = 0; i < FD_BLOCK; i++) {
      if ((view.getInt16(8 * i + 6, true) & POLLNVAL) !== 0) continue;
      open++;
      addr.fill(0);
      len[0] = SOCKADDR_UN_BYTES;
      if (c.getsockname(base + i, addr, lenBytes) !== 0) continue; // not a socket
      if ((addr[0]! | (addr[1]! << 8)) !== AF_UNIX || len[0]! <= 2) continue;
      const end = addr.indexOf(0, 2);
      const name = decoder.decode(addr.subarray(2, end < 0 ? Math.min(len[0]!, SOCKADDR_UN_BYTES) : end));
      if (name !== path) continue;
      // Two descriptors of one name (the listener still open): not ours to tell apart.
      if (found >= 0) return -1;
      found = base + i;
    }
    empty = open === 0 ? empty + 1 : 0;
  }
  return found;
}

/** One pollfd (fd, events, revents), reused: the thread is the only one that spins. */
const pollfd = new Uint8Array(8);
const pollView = new DataView(pollfd.buffer);

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
