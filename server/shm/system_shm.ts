/**
 * The system shared-memory extension: clients register POSIX shared-memory objects (`shm_open` names, which
 * Linux keeps under /dev/shm) as named regions; inputs are read from and outputs written straight into them.
 * Every access is checked against the region's bounds; a region used by a running request cannot be
 * unregistered. A request's side of it (for system and CUDA regions alike) is its `ShmSession` (session.ts).
 * @module
 */

import { BytesTensor } from "../core/bytes_tensor.ts";
import fs from "node:fs";
import { join } from "node:path";
import { type Datatype, elementCount, elementSize, type TensorData } from "../core/dtypes.ts";
import { invalidArg, ServerError } from "../core/errors.ts";
import { type ShmLocation, ShmRegistry } from "./regions.ts";

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
export class SystemSharedMemory extends ShmRegistry<Region> {
  #dir: string;

  /**
   * Creates an empty registry.
   * @param allowed whether clients may register regions (`--allow-client-shm`)
   * @param dir where shm_open names live (tests may point elsewhere)
   */
  constructor(allowed: boolean, dir = SHM_DIR) {
    super("shared memory", allowed);
    this.#dir = dir;
  }

  /** Whether a name is a region of another kind (CUDA): region names are one namespace. */
  otherKind: (name: string) => boolean = () => false;

  /**
   * Registers a region.
   * @param name the region name clients use in requests
   * @param key the shm_open name of the object ("/name" or "name")
   * @param offset where the region starts in the object
   * @param byteSize the region's size
   */
  async register(name: string, key: string, offset: number, byteSize: number): Promise<void> {
    this.checkAllowed();
    const where = `Cannot register shared memory region '${name}'`;
    if (!name) throw invalidArg(`${where}: the region needs a name`);
    if (this.regions.has(name) || this.otherKind(name)) {
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
    // The name is held while the object is opened: a second registration of it meanwhile is refused, where it
    // replaced the first and left its file open for good.
    this.regions.reserve(name, where);
    let file: Deno.FsFile | undefined;
    try {
      file = await openRegularFile(
        join(this.#dir, base),
        `${where}: cannot open shared-memory object '${key}'`,
      );
      const size = (await file.stat()).size;
      if (offset + byteSize > size) {
        throw invalidArg(
          `${where}: offset ${offset} + byte_size ${byteSize} is beyond the end of '${key}' (${size} bytes)`,
        );
      }
    } catch (err) {
      file?.close();
      this.regions.release(name);
      throw err;
    }
    this.regions.add({ name, key, offset, byte_size: byteSize, file, inUse: 0 });
  }

  /**
   * Unregisters one region, or every region when `name` is "".
   * @param name the region name
   */
  unregister(name: string): void {
    this.regions.unregister(name, (r) => r.file.close());
  }

  /**
   * The status of one region or of all of them.
   * @param name the region name, "" for all
   */
  status(name: string): RegionStatus[] {
    return this.regions.select(name).map((r) => ({
      name: r.name,
      key: r.key,
      offset: r.offset,
      byte_size: r.byte_size,
    }));
  }

  /**
   * Reads an input tensor's contents from its region.
   * @param loc where the contents are
   * @param datatype the tensor datatype
   * @param shape the tensor shape
   * @param what names the tensor in error messages
   */
  readTensor(loc: ShmLocation, datatype: Datatype, shape: number[], what: string): TensorData {
    const r = this.locate(loc, what, loc.byteSize, "read");
    if (datatype !== "BYTES" && loc.byteSize !== elementCount(shape) * elementSize(datatype)) {
      // Validation refuses this size, with Triton's wording: nothing is read for it (a client could otherwise
      // have the server copy a whole large region for every such request). The buffer is never written, so
      // its pages are not taken.
      try {
        return new Uint8Array(loc.byteSize);
      } catch {
        throw invalidArg(
          `Cannot read ${what}: shared_memory_byte_size ${loc.byteSize} does not fit its shape`,
        );
      }
    }
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
    // The byte size of fixed-size tensors is validation's to check, against the model's signature.
    return datatype === "BYTES" ? BytesTensor.fromWire(bytes, elementCount(shape), what) : bytes;
  }

  /**
   * Writes bytes into a region.
   * @param loc where to write (`byteSize` is the room the client gave)
   * @param bytes the contents
   * @param what names the tensor in error messages
   */
  write(loc: ShmLocation, bytes: Uint8Array, what: string): void {
    const r = this.locate(loc, what, bytes.byteLength, "write");
    r.file.seekSync(r.offset + loc.offset, Deno.SeekMode.Start);
    let off = 0;
    while (off < bytes.byteLength) off += r.file.writeSync(bytes.subarray(off));
  }

  /** Closes every region. */
  close(): void {
    this.regions.clear((r) => r.file.close());
  }
}
