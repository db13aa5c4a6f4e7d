/**
 * The floor under the Python backend's messages: a minimal Python process that echoes length-prefixed frames
 * over a Unix socket, driven from Deno with the same socket calls as the backend (one write, reads until the
 * frame is back), one frame in flight. A frame of the size of an add_sub execute message. Prints round trips
 * per second, the mean, and the CPU time per round trip of this process and of the Python process.
 *
 * `deno run -A bench/python_ipc_floor.ts [python] [seconds]`
 * @module
 */

import { cpuSeconds } from "./cpu_usage.ts";
import { ECHO } from "./python_echo.ts";

const python = Deno.args[0] ?? Deno.env.get("DINFER_PYTHON") ?? "python3";
const seconds = Number(Deno.args[1] ?? 3);
const dir = await Deno.makeTempDir({ prefix: "dinfer-ipc-floor-" });
const listener = Deno.listen({ transport: "unix", path: `${dir}/s.sock` });
const child = new Deno.Command(python, { args: ["-c", ECHO, `${dir}/s.sock`], stdin: "null" }).spawn();
const conn = await listener.accept();
const SIZE = 512;
const frame = new Uint8Array(SIZE);
new DataView(frame.buffer).setUint32(0, SIZE - 4, true);
const chunk = new Uint8Array(1 << 16);

for (let round = 0; round < 3; round++) {
  const d0 = cpuSeconds("self"), p0 = cpuSeconds(child.pid);
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  let n = 0;
  while (performance.now() < end) {
    await conn.write(frame);
    let got = 0;
    while (got < SIZE) {
      const k = await conn.read(chunk);
      if (k === null) throw new Error("Cannot read the echo: the Python process closed the socket");
      got += k;
    }
    n++;
  }
  const wall = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({
    roundTripsPerS: Math.round(n / wall),
    meanUs: Math.round((wall * 1e6) / n),
    denoCpuUs: Math.round(((cpuSeconds("self") - d0) * 1e6) / n),
    pythonCpuUs: Math.round(((cpuSeconds(child.pid) - p0) * 1e6) / n),
  }));
}
conn.close();
listener.close();
await child.status;
await Deno.remove(dir, { recursive: true });
