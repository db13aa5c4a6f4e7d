/**
 * A minimal Python process that echoes length-prefixed frames (a little-endian u32 length, then that many bytes)
 * over a Unix socket: the least any server that hands each request to a Python process pays for the exchange.
 * Used by the IPC floor (`bench/python_ipc_floor.ts`) and by the transport floor server's `--python` mode.
 * @module
 */

import net from "node:net";
import { Buffer } from "node:buffer";

/**
 * The echo loop, run with `python -c`; its argument is the socket path. Before each read it looks for the next
 * frame for up to SPIN_S (800 µs) before it sleeps, while the machine's ready tasks exceed the cores by at most one, as dinfer's
 * stub does by default (`wait_spin_us`), so that the floor keeps the technique and drops only the work.
 */
export const ECHO = `
import os, select, socket, struct, sys, time
SPIN_S = 800e-6
LOADAVG = os.open("/proc/loadavg", os.O_RDONLY)
CORES = len(os.sched_getaffinity(0))
def core_free():
    return int(os.pread(LOADAVG, 64, 0).split()[3].split(b"/")[0]) <= CORES + 1
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
ready = select.poll()
ready.register(s, select.POLLIN)
buf = bytearray()
while True:
    while len(buf) < 4 or len(buf) < 4 + struct.unpack_from("<I", buf)[0]:
        deadline = time.perf_counter() + SPIN_S
        if core_free():
            while not ready.poll(0) and time.perf_counter() < deadline:
                pass
        d = s.recv(65536)
        if not d:
            sys.exit(0)
        buf += d
    n = struct.unpack_from("<I", buf)[0]
    frame = bytes(buf[: 4 + n])
    del buf[: 4 + n]
    s.sendall(frame)
`;

/** A running echo process. */
export interface PythonEcho {
  /** The Python process's id. */
  pid: number;
  /**
   * Sends one frame of `size` bytes and resolves when it is back; calls may overlap (frames are answered in
   * order, one at a time, by the one Python process).
   */
  roundTrip(): Promise<void>;
  /** Ends the process. */
  close(): Promise<void>;
}

/**
 * Starts the echo process and connects to it.
 * @param python the interpreter
 * @param size the frame size in bytes, length prefix included (at least 4)
 * @returns the running echo
 */
export async function startPythonEcho(python: string, size = 512): Promise<PythonEcho> {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-echo-" });
  const path = `${dir}/s.sock`;
  const server = net.createServer();
  const accepted = new Promise<net.Socket>((resolve) => server.once("connection", resolve));
  await new Promise<void>((resolve) => server.listen(path, resolve));
  const child = new Deno.Command(python, { args: ["-c", ECHO, path], stdin: "null" }).spawn();
  const socket = await accepted;
  server.close();
  // The connection is made: the socket's folder is not needed any more, and a process stopped by a signal (the
  // floor server is) leaves nothing behind.
  await Deno.remove(dir, { recursive: true });
  const frame = Buffer.alloc(size);
  frame.writeUInt32LE(size - 4, 0);
  const waiting: (() => void)[] = [];
  let head = 0;
  let received = 0;
  socket.on("data", (chunk: Buffer) => {
    received += chunk.byteLength;
    while (received >= size) {
      received -= size;
      waiting[head++]!();
      if (head === waiting.length) {
        waiting.length = 0;
        head = 0;
      }
    }
  });
  return {
    pid: child.pid,
    roundTrip: () =>
      new Promise<void>((resolve) => {
        waiting.push(resolve);
        socket.write(frame);
      }),
    async close() {
      socket.destroy();
      await child.status;
    },
  };
}
