/**
 * gRPC against HTTP binary on dinfer and on the transport floor (`bench/transport_floor_server.ts`: fixed answers,
 * no decoding, no model), both through h2load at 16 requests in flight (gRPC: 16 streams on one connection;
 * HTTP/1.1: 16 connections), in alternating rounds. The floor's gRPC/HTTP ratio is the most any server on this
 * stack (Deno, node:http2, @grpc/grpc-js) can reach; dinfer's ratio is read against it.
 *
 * Usage: `deno run -A bench/grpc_floor.ts [--rounds=3] [--seconds=3] [--no-write] [--out=<path>]`; writes its
 * section of bench/RESULTS.md (or of `--out`). `./dinfer bench` runs it after the other HTTP points when h2load
 * (Debian package `nghttp2-client`) is installed.
 * @module
 */

import { startChildServer } from "./child_server.ts";
import { grpcFrame, simpleInferRequest } from "./grpc_simple.ts";
import { findH2load, grpcInferArgs, runH2load } from "./h2load.ts";
import { freePort } from "./loadgen.ts";
import { binaryBody, INPUT0, INPUT1 } from "./simple_requests.ts";
import { upperMedian as median } from "./stats.ts";

const ROOT = new URL("../", import.meta.url).pathname;
const RESULTS = Deno.args.find((a) => a.startsWith("--out="))?.slice("--out=".length) ??
  `${ROOT}bench/RESULTS.md`;
const START = "<!-- grpc_floor:start -->";
const END = "<!-- grpc_floor:end -->";

function arg(name: string, fallback: number): number {
  const v = Deno.args.find((a) => a.startsWith(`--${name}=`));
  return v ? Number(v.slice(name.length + 3)) : fallback;
}
const rounds = arg("rounds", 3);
const seconds = arg("seconds", 3);
const write = !Deno.args.includes("--no-write");

const h2load = findH2load();
if (!h2load) {
  console.error("h2load is not on PATH (apt-get install nghttp2-client): nothing measured");
  Deno.exit(1);
}

const { body: binary, headerLength } = binaryBody();

const dir = await Deno.makeTempDir({ prefix: "dinfer-bench-grpc-floor-" });
await Deno.writeFile(`${dir}/grpc.bin`, grpcFrame(simpleInferRequest(INPUT0, INPUT1)));
await Deno.writeFile(`${dir}/binary.bin`, binary);

type Protocol = "binary" | "grpc" | "grpc4";

function args(protocol: Protocol, ports: { http: number; grpc: number }, s: number): string[] {
  const duration = ["-D", `${Math.round(s * 1000)}ms`];
  if (protocol === "grpc4") {
    // 4 connections of 4 streams: the kernel spreads connections, not streams, over a server's threads.
    return [...duration, ...grpcInferArgs(ports.grpc, `${dir}/grpc.bin`, 4, 4)];
  }
  return protocol === "grpc" ? [...duration, ...grpcInferArgs(ports.grpc, `${dir}/grpc.bin`, 16)] : [
    ...duration,
    ...["--h1", "-c", "16", "-m", "1", "-d", `${dir}/binary.bin`],
    ...["-H", "content-type: application/octet-stream"],
    ...["-H", `inference-header-content-length: ${headerLength}`],
    `http://127.0.0.1:${ports.http}/v2/models/simple/infer`,
  ];
}

const fmt = (v: number) => Math.round(v).toLocaleString("en-US");

const grpcPorts = { dinfer: freePort(), "dinfer, 2 threads": freePort(), floor: freePort() };
const servers = {
  dinfer: await startChildServer([], [
    `--grpc-port=${grpcPorts.dinfer}`,
    "--http-thread-count=1",
    "--grpc-thread-count=1",
  ]),
  "dinfer, 2 threads": await startChildServer([], [
    `--grpc-port=${grpcPorts["dinfer, 2 threads"]}`,
    "--http-thread-count=2",
    "--grpc-thread-count=2",
  ]),
  floor: await startChildServer([], [`--grpc-port=${grpcPorts.floor}`], {
    script: "bench/transport_floor_server.ts",
  }),
};
const rates: Record<string, number[]> = {};
try {
  for (let r = 0; r < rounds; r++) {
    for (const name of ["dinfer", "dinfer, 2 threads", "floor"] as const) {
      for (const protocol of ["binary", "grpc", "grpc4"] as const) {
        const ports = { http: servers[name].port, grpc: grpcPorts[name] };
        await runH2load(args(protocol, ports, 0.5), { path: h2load });
        const run = await runH2load(args(protocol, ports, seconds), { path: h2load });
        if (run.succeeded !== run.total || run.total === 0) {
          throw new Error(`${name} ${protocol}: ${run.succeeded} of ${run.total} requests succeeded`);
        }
        (rates[`${name}/${protocol}`] ??= []).push(run.succeeded / run.seconds);
        console.log(`round ${r + 1} ${name} ${protocol}: ${fmt(run.succeeded / run.seconds)} req/s`);
      }
    }
  }
} finally {
  for (const s of Object.values(servers)) await s.stop();
  await Deno.remove(dir, { recursive: true });
}

const row = (name: string) => {
  const b = rates[`${name}/binary`]!, g = rates[`${name}/grpc`]!, g4 = rates[`${name}/grpc4`]!;
  const list = (v: number[]) => v.map(fmt).join(" ");
  return `| ${name} | ${fmt(median(b))} [${list(b)}] | ${fmt(median(g))} [${list(g)}] | ${fmt(median(g4))} [${
    list(g4)
  }] | **${(median(g) / median(b)).toFixed(2)}** | **${(median(g4) / median(b)).toFixed(2)}** |`;
};
const cpus = navigator.hardwareConcurrency;
const section = `${START}
## gRPC against HTTP binary, and the transport floor

Measured ${new Date().toISOString()} on ${cpus} CPUs by \`bench/grpc_floor.ts\`: h2load, 16 requests in flight
(gRPC: 16 streams on one HTTP/2 connection, and 4 connections of 4 streams; HTTP binary: 16 HTTP/1.1
connections), ${rounds} alternating rounds of ${seconds} s after 0.5 s of warm-up, medians (each round in
brackets). dinfer runs with one thread per protocol, and with two (\`--http-thread-count=2
--grpc-thread-count=2\`: the kernel spreads connections over the main thread and a listener thread). The floor
(\`bench/transport_floor_server.ts\`, one thread) answers the same requests with fixed bytes, reading nothing: its
gRPC/HTTP ratio is the most a one-thread server on Deno's node:http2 and @grpc/grpc-js can reach against
Deno.serve.

| server | HTTP binary req/s | gRPC 1×16 req/s | gRPC 4×4 req/s | gRPC 1×16 / HTTP | gRPC 4×4 / HTTP |
|---|---:|---:|---:|---:|---:|
${row("dinfer")}
${row("dinfer, 2 threads")}
${row("floor")}

The target "gRPC ≥ 1.0× HTTP binary" holds only if the floor's ratio is at least 1.0.
${END}`;
console.log(`\n${section}`);
if (write) {
  let text = "";
  try {
    text = await Deno.readTextFile(RESULTS);
  } catch {
    // a new file
  }
  const a = text.indexOf(START), b = text.indexOf(END);
  text = a >= 0 && b > a
    ? text.slice(0, a) + section + text.slice(b + END.length)
    : `${text.trimEnd()}\n\n${section}\n`;
  await Deno.writeTextFile(RESULTS, text);
}
