/**
 * The shared-memory side of one inference request, for system and CUDA regions alike: the inference pipeline
 * opens one per request and calls it in order (read inputs while decoding, `begin`, `copyIn`, `write` for each
 * response, `end`). It never runs the request itself.
 * @module
 */

import { BytesTensor } from "../core/bytes_tensor.ts";
import { type Datatype, elementCount, type TensorData } from "../core/dtypes.ts";
import { invalidArg } from "../core/errors.ts";
import type { InferRequest, InferResponse, ParamValue } from "../core/types.ts";
import type { CudaSharedMemory } from "./cuda_shm.ts";
import { type ShmLocation, shmLocation } from "./regions.ts";
import type { SystemSharedMemory } from "./system_shm.ts";

/** Reads an input's contents from shared memory (what the frontends' decoders call). */
export type ShmReader = (loc: ShmLocation, datatype: Datatype, shape: number[], what: string) => TensorData;

/**
 * Reads an input that names shared memory with the request's reader, refusing it where the request has none
 * (an endpoint or server without shared memory): what both inference codecs call.
 * @param reader the request's reader, if any
 * @param loc where the contents are
 * @param datatype the tensor datatype
 * @param shape the tensor shape
 * @param where names the request in error messages
 * @param what names the input in error messages
 */
export function readShmInput(
  reader: ShmReader | undefined,
  loc: ShmLocation,
  datatype: Datatype,
  shape: number[],
  where: string,
  what: string,
): TensorData {
  if (!reader) {
    throw invalidArg(`Cannot read ${where}: ${what} names shared memory, which this endpoint does not read`);
  }
  return reader(loc, datatype, shape, `${where}, ${what}`);
}

/** The parameters of the outputs written to shared memory, by output name (what the encoders report). */
export type ShmWritten = Map<string, Record<string, ParamValue>>;

/** An input whose contents a CUDA region holds: copied in before the request runs. */
interface PendingCopy {
  loc: ShmLocation;
  datatype: Datatype;
  shape: number[];
  what: string;
}

/** An output the request asks to be written to a region, its parameters read once. */
interface OutputLocation {
  name: string;
  what: string;
  loc: ShmLocation;
  cuda: boolean;
}

/** The shared-memory side of one request. */
export class ShmSession {
  readonly #shm: SystemSharedMemory;
  readonly #cuda: CudaSharedMemory | undefined;
  /** The regions the request names, inputs and outputs (none for most requests: made when needed). */
  #regions: string[] | undefined;
  /** Placeholder contents of inputs in CUDA regions, replaced by the copies in copyIn. */
  #pending: Map<TensorData, PendingCopy> | undefined;
  #outputs: OutputLocation[] | undefined;
  #release: (() => void) | undefined;

  /**
   * Starts the shared-memory side of a request.
   * @param shm the server's system regions
   * @param cuda the server's CUDA regions, if any
   */
  constructor(shm: SystemSharedMemory, cuda: CudaSharedMemory | undefined) {
    this.#shm = shm;
    this.#cuda = cuda;
  }

  /**
   * Reads an input from its region while the request is decoded. A CUDA region's contents are copied later
   * (copyIn): the tensor holds a placeholder until then.
   */
  readonly reader: ShmReader = (loc, datatype, shape, what) => {
    (this.#regions ??= []).push(loc.region);
    const cuda = this.#cuda;
    if (cuda?.has(loc.region)) {
      cuda.checkRead(loc, what);
      const placeholder = new Uint8Array(0);
      (this.#pending ??= new Map()).set(placeholder, { loc, datatype, shape, what });
      return placeholder;
    }
    return this.#shm.readTensor(loc, datatype, shape, what);
  };

  /**
   * Reads the shared-memory parameters of the requested outputs (once), checks that each location is inside
   * its region, and marks every region the request names as in use until `end`.
   * @param request the decoded request
   * @returns whether the request uses shared memory at all
   */
  begin(request: InferRequest): boolean {
    for (const o of request.outputs) {
      if (o.parameters.shared_memory_region === undefined) continue;
      const what = `output '${o.name}'`;
      const loc = shmLocation(o.parameters, what)!;
      const cuda = this.#cuda?.has(loc.region) === true;
      if (cuda) this.#cuda!.checkWrite(loc, what);
      else this.#shm.checkWrite(loc, what);
      (this.#outputs ??= []).push({ name: o.name, what, loc, cuda });
      (this.#regions ??= []).push(loc.region);
    }
    const regions = this.#regions;
    if (regions === undefined) return false;
    const system = this.#shm.use(regions);
    const cuda = this.#cuda?.use(regions);
    this.#release = () => {
      system();
      cuda?.();
    };
    return true;
  }

  /**
   * Copies the inputs that CUDA regions hold into the request (nothing when there are none).
   * @param request the request begun
   */
  async copyIn(request: InferRequest): Promise<void> {
    const pending = this.#pending;
    if (pending === undefined) return;
    for (const t of request.inputs) {
      const p = pending.get(t.data);
      if (!p) continue;
      const bytes = await this.#cuda!.read(p.loc, p.what);
      t.data = p.datatype === "BYTES" ? BytesTensor.fromWire(bytes, elementCount(p.shape), p.what) : bytes;
    }
  }

  /**
   * Writes a response's outputs that the request asked for in shared memory.
   * @param response the response
   * @returns their parameters by output name, or undefined when none is asked for
   * @throws ServerError INVALID_ARG for an output larger than the room the client gave
   */
  async write(response: InferResponse): Promise<ShmWritten | undefined> {
    const outputs = this.#outputs;
    if (outputs === undefined) return undefined;
    const written: ShmWritten = new Map();
    for (const o of outputs) {
      const t = response.outputs.find((x) => x.name === o.name);
      if (!t) continue;
      const bytes = t.data instanceof BytesTensor ? t.data.data : t.data;
      if (bytes.byteLength > o.loc.byteSize) {
        throw invalidArg(
          `Cannot write ${o.what}: it has ${bytes.byteLength} bytes, more than shared_memory_byte_size ${o.loc.byteSize}`,
        );
      }
      if (o.cuda) await this.#cuda!.write(o.loc, bytes, o.what);
      else this.#shm.write(o.loc, bytes, o.what);
      const params: Record<string, ParamValue> = {
        shared_memory_region: o.loc.region,
        shared_memory_byte_size: bytes.byteLength,
      };
      if (o.loc.offset) params.shared_memory_offset = o.loc.offset;
      written.set(o.name, params);
    }
    return written;
  }

  /** Ends the request's use of its regions (once; nothing when it used none). */
  end(): void {
    this.#release?.();
    this.#release = undefined;
  }
}
