/**
 * The system shared-memory extension: clients register POSIX shared-memory objects (`shm_open` names, which
 * Linux keeps under /dev/shm) as named regions; inputs are read from and outputs written straight into them.
 * Every access is checked against the region's bounds; a region used by a running request cannot be
 * unregistered. CUDA regions (server/shm/cuda_shm.ts) share the request side (`ShmRequest`).
 * @module
 */

import { BytesTensor } from "../core/bytes_tensor.ts";
import fs from "node:fs";
import { join } from "node:path";
import { type Datatype, elementCount, elementSize, type TensorData } from "../core/dtypes.ts";
import { invalidArg, ServerError, toServerError, unavailable } from "../core/errors.ts";
import type {
  InferRequest,
  InferResponse,
  ParamValue,
  RequestedOutput,
  ResponseSink,
} from "../core/types.ts";
import type { CudaSharedMemory } from "./cuda_shm.ts";
import { RegionTable, type ShmLocation, shmLocation, shmOutputs, writtenParameters } from "./regions.ts";

export { type ShmLocation, shmLocation } from "./regions.ts";

/** A registered region as the status endpoints report it. */
export interface RegionStatus {
  name: string;
  key: string;
  offset: number;
  byte_size: number;
}

interface Region extends RegionStatus {
  file: Deno.FsFile;
  inUse: number;
}

/** Where shared-memory objects live on Linux. */
const SHM_DIR = "/dev/shm";

/** The prefix of the shared-memory objects the server and its Python stubs create; clients may not register them. */
export const SERVER_OBJECT_PREFIX = "dinfer-";

/**
 * Opens a shared-memory object for reading and writing only when it is a regular file and not a symbolic link:
 * it is opened with O_NOFOLLOW and checked to be a regular file, then opened again for Deno and checked to be
 * the same file (so that a link swapped in between is refused too).
 * @param path the object's path
 * @param where the action that failed, for messages
 */
async function openRegularFile(path: string, where: string): Promise<Deno.FsFile> {
  let fd: number;
  try {
    fd = fs.openSync(path, fs.constants.O_RDWR | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === "ELOOP") throw invalidArg(`${where}: it is a symbolic link`);
    if (code === "ENOENT") throw invalidArg(`${where}: no such object`);
    if (code === "EISDIR") throw invalidArg(`${where}: it is not a regular file`);
    if (code === "EACCES" || code === "EPERM") throw invalidArg(`${where}: permission denied`);
    throw invalidArg(`${where}: ${code ?? (err as Error).message}`);
  }
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw invalidArg(`${where}: it is not a regular file`);
    let file: Deno.FsFile;
    try {
      file = await Deno.open(path, { read: true, write: true });
    } catch (err) {
      throw invalidArg(`${where}: ${(err as Error).message}`);
    }
    const again = await file.stat();
    if (!again.isFile || again.ino !== st.ino || again.dev !== st.dev) {
      file.close();
      throw invalidArg(`${where}: it changed while it was being opened`);
    }
    return file;
  } finally {
    fs.closeSync(fd);
  }
}

/** The registry of system shared-memory regions. */
export class SystemSharedMemory {
  #regions = new RegionTable<Region>("shared memory");
  #allowed: boolean;
  #dir: string;

  /**
   * Creates an empty registry.
   * @param allowed whether clients may register regions (`--allow-client-shm`)
   * @param dir where shm_open names live (tests may point elsewhere)
   */
  constructor(allowed: boolean, dir = SHM_DIR) {
    this.#allowed = allowed;
    this.#dir = dir;
  }

  /** Whether a name is a region of another kind (CUDA): region names are one namespace. */
  otherKind: (name: string) => boolean = () => false;

  /** Whether a system region of that name is registered. */
  has(name: string): boolean {
    return this.#regions.has(name);
  }

  #checkAllowed(): void {
    if (!this.#allowed) {
      throw unavailable("Shared memory is disabled: start the server with --allow-client-shm=true to use it");
    }
  }

  /**
   * Registers a region.
   * @param name the region name clients use in requests
   * @param key the shm_open name of the object ("/name" or "name")
   * @param offset where the region starts in the object
   * @param byteSize the region's size
   */
  async register(name: string, key: string, offset: number, byteSize: number): Promise<void> {
    this.#checkAllowed();
    const where = `Cannot register shared memory region '${name}'`;
    if (!name) throw invalidArg(`${where}: the region needs a name`);
    if (this.#regions.has(name) || this.otherKind(name)) {
      throw new ServerError("ALREADY_EXISTS", `${where}: a region of that name is already registered`);
    }
    const base = key.startsWith("/") ? key.slice(1) : key;
    if (!base || base.includes("/") || base === "." || base === "..") {
      throw invalidArg(`${where}: key '${key}' is not a shared-memory object name`);
    }
    if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(byteSize) || byteSize < 0) {
      throw invalidArg(`${where}: offset and byte_size must be non-negative integers`);
    }
    if (base.startsWith(SERVER_OBJECT_PREFIX)) {
      throw invalidArg(`${where}: key '${key}' names one of the server's own shared-memory objects`);
    }
    const file = await openRegularFile(
      join(this.#dir, base),
      `${where}: cannot open shared-memory object '${key}'`,
    );
    const size = (await file.stat()).size;
    if (offset + byteSize > size) {
      file.close();
      throw invalidArg(
        `${where}: offset ${offset} + byte_size ${byteSize} is beyond the end of '${key}' (${size} bytes)`,
      );
    }
    this.#regions.add({ name, key, offset, byte_size: byteSize, file, inUse: 0 });
  }

  /**
   * Unregisters one region, or every region when `name` is "".
   * @param name the region name
   */
  unregister(name: string): void {
    this.#regions.unregister(name, (r) => r.file.close());
  }

  /**
   * The status of one region or of all of them.
   * @param name the region name, "" for all
   */
  status(name: string): RegionStatus[] {
    return this.#regions.select(name).map((r) => ({
      name: r.name,
      key: r.key,
      offset: r.offset,
      byte_size: r.byte_size,
    }));
  }

  #region(loc: ShmLocation, what: string, size: number, action: "read" | "write"): Region {
    this.#checkAllowed();
    return this.#regions.locate(loc, what, size, action);
  }

  /**
   * Checks, when a request arrives, that an output's location is inside a registered region.
   * @param loc where the output goes (`byteSize` is the room the client gave)
   * @param what names the output in error messages
   */
  checkWrite(loc: ShmLocation, what: string): void {
    this.#region(loc, what, loc.byteSize, "write");
  }

  /**
   * Marks regions as used by a running request.
   * @param names region names
   * @returns a function that ends the use
   */
  use(names: Iterable<string>): () => void {
    return this.#regions.use(names);
  }

  /**
   * Reads an input tensor's contents from its region.
   * @param loc where the contents are
   * @param datatype the tensor datatype
   * @param shape the tensor shape
   * @param what names the tensor in error messages
   */
  readTensor(loc: ShmLocation, datatype: Datatype, shape: number[], what: string): TensorData {
    const r = this.#region(loc, what, loc.byteSize, "read");
    const bytes = new Uint8Array(loc.byteSize);
    let got = 0;
    try {
      r.file.seekSync(r.offset + loc.offset, Deno.SeekMode.Start);
      while (got < bytes.length) {
        const n = r.file.readSync(bytes.subarray(got));
        if (n === null || n === 0) break;
        got += n;
      }
    } catch (err) {
      throw invalidArg(
        `Cannot read ${what} from shared memory region '${loc.region}': ${(err as Error).message}`,
      );
    }
    if (got !== bytes.length) {
      throw invalidArg(
        `Cannot read ${what}: shared memory region '${loc.region}' has only ${got} of ${bytes.length} bytes`,
      );
    }
    const count = elementCount(shape);
    if (datatype === "BYTES") return BytesTensor.fromWire(bytes, count, what);
    const want = count * elementSize(datatype);
    if (want !== bytes.length) {
      throw invalidArg(
        `Cannot read ${what}: shared_memory_byte_size is ${bytes.length}, expected ${want} for shape [${shape}] of ${datatype}`,
      );
    }
    return bytes;
  }

  /**
   * Writes the outputs that asked for shared memory into their regions, and returns their parameters
   * (`shared_memory_region`, `shared_memory_byte_size`, `shared_memory_offset`) by output name.
   * @param response the response
   * @param requested the requested outputs with their parameters
   */
  writeOutputs(
    response: InferResponse,
    requested: readonly RequestedOutput[],
  ): Map<string, Record<string, ParamValue>> {
    const written = new Map<string, Record<string, ParamValue>>();
    for (const o of shmOutputs(response, requested)) {
      const r = this.#region(o.loc, o.what, o.bytes.byteLength, "write");
      r.file.seekSync(r.offset + o.loc.offset, Deno.SeekMode.Start);
      let off = 0;
      while (off < o.bytes.byteLength) off += r.file.writeSync(o.bytes.subarray(off));
      written.set(o.name, writtenParameters(o));
    }
    return written;
  }

  /** Closes every region. */
  close(): void {
    this.#regions.clear((r) => r.file.close());
  }
}

/** Reads an input's contents from shared memory (what the frontends' decoders call). */
export type ShmReader = (loc: ShmLocation, datatype: Datatype, shape: number[], what: string) => TensorData;

/** An input whose contents a CUDA region holds: copied in before the request runs. */
interface PendingCopy {
  loc: ShmLocation;
  datatype: Datatype;
  shape: number[];
  what: string;
}

type Written = Map<string, Record<string, ParamValue>>;

/**
 * The shared-memory side of one inference request, the same for every frontend: the reader its decoder uses,
 * then `run`, which keeps every region the request names in use while it runs, copies inputs out of CUDA
 * regions before it runs and writes its outputs into their regions after.
 */
export class ShmRequest {
  #shm: SystemSharedMemory | undefined;
  #cuda: CudaSharedMemory | undefined;
  #regions: string[] = [];
  /** Placeholder contents of inputs in CUDA regions, replaced by the copies before the request runs. */
  #pending = new Map<TensorData, PendingCopy>();
  /** The reader for the decoder; undefined where the server has no shared memory. */
  readonly reader: ShmReader | undefined;

  /**
   * Starts the shared-memory side of a request.
   * @param shm the server's system regions, if any
   * @param cuda the server's CUDA regions, if any
   */
  constructor(shm: SystemSharedMemory | undefined, cuda?: CudaSharedMemory) {
    this.#shm = shm;
    this.#cuda = cuda;
    this.reader = shm
      ? (loc, datatype, shape, what) => {
        this.#regions.push(loc.region);
        if (cuda?.has(loc.region)) {
          cuda.checkRead(loc, what);
          if (datatype !== "BYTES") checkByteSize(loc.byteSize, datatype, shape, what);
          const placeholder = new Uint8Array(0);
          this.#pending.set(placeholder, { loc, datatype, shape, what });
          return placeholder;
        }
        return shm.readTensor(loc, datatype, shape, what);
      }
      : undefined;
  }

  /** Notes the regions the outputs name, and checks them before the request runs. */
  #outputRegions(request: InferRequest): void {
    for (const o of request.outputs) {
      if (o.parameters.shared_memory_region === undefined) continue;
      const what = `output '${o.name}'`;
      const loc = shmLocation(o.parameters, what)!;
      if (!this.#shm) throw invalidArg(`Cannot write ${what}: shared memory is not available`);
      if (this.#cuda?.has(loc.region)) this.#cuda.checkWrite(loc, what);
      else this.#shm.checkWrite(loc, what);
      this.#regions.push(loc.region);
    }
  }

  #use(): () => void {
    const a = this.#shm!.use(this.#regions);
    const b = this.#cuda?.use(this.#regions);
    return () => {
      a();
      b?.();
    };
  }

  /** Copies the inputs that CUDA regions hold into the request. */
  async #copyIn(request: InferRequest): Promise<void> {
    if (this.#pending.size === 0) return;
    for (const t of request.inputs) {
      const p = this.#pending.get(t.data);
      if (!p) continue;
      const bytes = await this.#cuda!.read(p.loc, p.what);
      t.data = p.datatype === "BYTES" ? BytesTensor.fromWire(bytes, elementCount(p.shape), p.what) : bytes;
    }
  }

  /** Writes a response's outputs that name a region; returns their parameters by output name. */
  async #write(response: InferResponse, request: InferRequest): Promise<Written> {
    const cuda = this.#cuda;
    const inCuda = (o: RequestedOutput) => {
      const r = o.parameters.shared_memory_region;
      return typeof r === "string" && cuda !== undefined && cuda.has(r);
    };
    const written = this.#shm!.writeOutputs(response, request.outputs.filter((o) => !inCuda(o)));
    for (const o of shmOutputs(response, request.outputs.filter(inCuda))) {
      await cuda!.write(o.loc, o.bytes, o.what);
      written.set(o.name, writtenParameters(o));
    }
    return written;
  }

  /**
   * Runs the decoded request with its regions in use and writes the outputs that name a region.
   * @param request the decoded request
   * @param infer runs it
   * @returns the response and the parameters of the outputs written to shared memory
   */
  async run(
    request: InferRequest,
    infer: (r: InferRequest) => Promise<InferResponse>,
  ): Promise<{ response: InferResponse; shmOutputs: Written | undefined }> {
    this.#outputRegions(request);
    if (!this.#shm || this.#regions.length === 0) {
      return { response: await infer(request), shmOutputs: undefined };
    }
    const release = this.#use();
    try {
      await this.#copyIn(request);
      const response = await infer(request);
      return { response, shmOutputs: await this.#write(response, request) };
    } finally {
      release();
    }
  }

  /**
   * Like `run` for a request whose responses stream (a decoupled model): each response's outputs that name a
   * region are written there before the response goes to `sink`, one response after the other.
   * @param request the decoded request
   * @param infer runs it, streaming its responses
   * @param sink receives each response (or error), the outputs written to shared memory, and the final flag
   */
  async runStream(
    request: InferRequest,
    infer: (r: InferRequest, sink: ResponseSink) => Promise<void>,
    sink: (
      response: InferResponse | ServerError | undefined,
      shmOutputs: Written | undefined,
      final: boolean,
    ) => void,
  ): Promise<void> {
    this.#outputRegions(request);
    if (!this.#shm || this.#regions.length === 0) {
      return await infer(request, (response, final) => sink(response, undefined, final));
    }
    const release = this.#use();
    let delivered: Promise<void> = Promise.resolve();
    try {
      await this.#copyIn(request);
      await infer(request, (response, final) => {
        delivered = delivered.then(async () => {
          if (response === undefined || response instanceof Error) return sink(response, undefined, final);
          let written: Written;
          try {
            written = await this.#write(response, request);
          } catch (err) {
            return sink(toServerError(err), undefined, final);
          }
          sink(response, written, final);
        }).catch(() => {}); // a failing sink must not leave a rejection behind
      });
    } finally {
      // Responses still being written to their regions finish before the regions are released.
      await delivered;
      release();
    }
  }
}

/** Checks that a region's byte size fits a tensor of fixed-size elements. */
function checkByteSize(byteSize: number, datatype: Datatype, shape: number[], what: string): void {
  const want = elementCount(shape) * elementSize(datatype);
  if (want !== byteSize) {
    throw invalidArg(
      `Cannot read ${what}: shared_memory_byte_size is ${byteSize}, expected ${want} for shape [${shape}] of ${datatype}`,
    );
  }
}
