/**
 * The CUDA shared-memory extension: clients register device allocations of their own process by CUDA IPC
 * handle (`cudaIpcGetMemHandle`), the server opens them through libtrtshim (`trtshim_ipc_open`) and copies
 * inputs out of them and outputs into them on a stream of the region's device. Every access is checked against
 * the region's bounds; a region used by a running request cannot be unregistered.
 *
 * Where the shim cannot be opened or sees no GPU, registration answers UNAVAILABLE saying which is missing.
 * @module
 */

import { invalidArg, ServerError, unavailable } from "../core/errors.ts";
import { type IpcMapping, openTrtShim, type Stream, type TrtShim, TrtShimError } from "../../ffi/trtshim.ts";
import { type ShmLocation, ShmRegistry } from "./regions.ts";

/** The size of a CUDA IPC memory handle (`cudaIpcMemHandle_t`). */
export const CUDA_IPC_HANDLE_SIZE = 64;

/** A registered CUDA region as the status endpoints report it. */
export interface CudaRegionStatus {
  name: string;
  device_id: number;
  byte_size: number;
}

interface CudaRegion extends CudaRegionStatus {
  mapping: IpcMapping;
  stream: Stream;
  inUse: number;
}

/** The registry of CUDA shared-memory regions. */
export class CudaSharedMemory extends ShmRegistry<CudaRegion> {
  #shimPath: string;
  #taken: (name: string) => boolean;

  /**
   * Creates an empty registry.
   * @param allowed whether clients may register regions (`--allow-client-shm`)
   * @param shimPath where libtrtshim is (opened on the first registration)
   * @param taken whether a name is already a region of another kind (system shared memory)
   */
  constructor(allowed: boolean, shimPath: string, taken: (name: string) => boolean = () => false) {
    super("CUDA shared memory", allowed);
    this.#shimPath = shimPath;
    this.#taken = taken;
  }

  #shim(where: string): TrtShim {
    let shim: TrtShim;
    try {
      shim = openTrtShim(this.#shimPath);
    } catch (err) {
      throw unavailable(`${where}: CUDA is not available in this server: ${(err as Error).message}`);
    }
    return shim;
  }

  /**
   * Registers a region.
   * @param name the region name clients use in requests
   * @param rawHandle the CUDA IPC memory handle (64 bytes)
   * @param deviceId the GPU the allocation lives on
   * @param byteSize the region's size
   */
  register(name: string, rawHandle: Uint8Array, deviceId: number, byteSize: number): void {
    this.checkAllowed();
    const where = `Cannot register CUDA shared memory region '${name}'`;
    if (!name) throw invalidArg(`${where}: the region needs a name`);
    if (this.regions.has(name) || this.#taken(name)) {
      throw new ServerError("ALREADY_EXISTS", `${where}: a region of that name is already registered`);
    }
    if (rawHandle.byteLength !== CUDA_IPC_HANDLE_SIZE) {
      throw invalidArg(
        `${where}: raw_handle has ${rawHandle.byteLength} bytes, a CUDA IPC handle has ${CUDA_IPC_HANDLE_SIZE}`,
      );
    }
    if (!Number.isSafeInteger(deviceId) || deviceId < 0) {
      throw invalidArg(`${where}: device_id must be a non-negative integer`);
    }
    if (!Number.isSafeInteger(byteSize) || byteSize < 0) {
      throw invalidArg(`${where}: byte_size must be a non-negative integer`);
    }
    const shim = this.#shim(where);
    const count = shim.deviceCount();
    if (count === 0) throw unavailable(`${where}: CUDA is not available in this server: no GPU is visible`);
    if (deviceId >= count) {
      throw invalidArg(`${where}: device_id ${deviceId} is not a GPU of this server (it has ${count})`);
    }
    // The registration does not wait, so nothing else can take the name meanwhile: only the count is checked.
    this.regions.checkRoom(where);
    let mapping: IpcMapping;
    try {
      mapping = shim.ipcOpen(deviceId, rawHandle);
    } catch (err) {
      const message = (err as Error).message;
      if (shim.buildKind() === "mock") {
        // The mock's "GPU" is this process's memory: it opens only handles it exported itself.
        throw unavailable(
          `${where}: CUDA is not available in this server: libtrtshim is the mock build (no CUDA), which cannot open this handle (${message})`,
        );
      }
      throw invalidArg(`${where}: cannot open the IPC handle: ${message}`);
    }
    let stream: Stream;
    try {
      stream = shim.createStream(deviceId);
    } catch (err) {
      mapping.close();
      throw unavailable(`${where}: cannot create a stream on GPU ${deviceId}: ${(err as Error).message}`);
    }
    this.regions.add({ name, device_id: deviceId, byte_size: byteSize, mapping, stream, inUse: 0 });
  }

  /**
   * Unregisters one region, or every region when `name` is "".
   * @param name the region name
   */
  unregister(name: string): void {
    this.regions.unregister(name, (r) => this.#release(r));
  }

  #release(r: CudaRegion): void {
    try {
      r.stream.close();
    } catch {
      // Closed already; the mapping is closed below either way.
    }
    try {
      r.mapping.close();
    } catch {
      // Closed already.
    }
  }

  /**
   * The status of one region or of all of them.
   * @param name the region name, "" for all
   */
  status(name: string): CudaRegionStatus[] {
    return this.regions.select(name).map((r) => ({
      name: r.name,
      device_id: r.device_id,
      byte_size: r.byte_size,
    }));
  }

  /**
   * Checks that a read is inside its region (at decode time, before any copy).
   * @param loc where the contents are
   * @param what names the tensor in error messages
   */
  checkRead(loc: ShmLocation, what: string): void {
    this.locate(loc, what, loc.byteSize, "read");
  }

  /**
   * Copies bytes out of a region (device to pinned host memory, then into a new array).
   * @param loc where the contents are
   * @param what names the tensor in error messages
   */
  async read(loc: ShmLocation, what: string): Promise<Uint8Array> {
    const r = this.locate(loc, what, loc.byteSize, "read");
    if (loc.byteSize === 0) return new Uint8Array(0);
    const shim = this.#shim(`Cannot read ${what}`);
    const host = shim.mallocHost(loc.byteSize);
    try {
      r.stream.copyToHost(host, Deno.UnsafePointer.offset(r.mapping.pointer!, loc.offset), loc.byteSize);
      await r.stream.synchronize();
      return host.bytes.slice();
    } catch (err) {
      if (err instanceof ServerError && !(err instanceof TrtShimError)) throw err;
      throw invalidArg(
        `Cannot read ${what} from CUDA shared memory region '${loc.region}': ${(err as Error).message}`,
      );
    } finally {
      host.close();
    }
  }

  /**
   * Copies bytes into a region.
   * @param loc where to write (`byteSize` is the room the client gave)
   * @param bytes the contents
   * @param what names the tensor in error messages
   */
  async write(loc: ShmLocation, bytes: Uint8Array, what: string): Promise<void> {
    const r = this.locate(loc, what, bytes.byteLength, "write");
    if (bytes.byteLength === 0) return;
    const shim = this.#shim(`Cannot write ${what}`);
    const host = shim.mallocHost(bytes.byteLength);
    try {
      host.bytes.set(bytes);
      r.stream.copyToDevice(
        Deno.UnsafePointer.offset(r.mapping.pointer!, loc.offset),
        host,
        bytes.byteLength,
      );
      await r.stream.synchronize();
    } catch (err) {
      if (err instanceof ServerError && !(err instanceof TrtShimError)) throw err;
      throw internalCopy(what, loc.region, err);
    } finally {
      host.close();
    }
  }

  /** Closes every region no running request uses (at shutdown those are left to the process's exit). */
  close(): void {
    this.regions.clear((r) => this.#release(r), (r) => r.inUse > 0);
  }
}

function internalCopy(what: string, region: string, err: unknown): ServerError {
  return new ServerError(
    "INTERNAL",
    `Cannot write ${what} to CUDA shared memory region '${region}': ${(err as Error).message}`,
  );
}
