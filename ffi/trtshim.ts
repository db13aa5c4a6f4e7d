/**
 * Deno.dlopen bindings of libtrtshim (shim/include/trtshim.h) and typed wrappers: every status is checked and
 * turned into a ServerError carrying the shim's message; handles are closed with `using` / Symbol.dispose.
 *
 * @example
 * ```ts
 * const shim = openTrtShim(trtShimPath({}));
 * using stream = shim.createStream(0);
 * await stream.synchronize();
 * ```
 * @module
 */

import { fileURLToPath } from "node:url";
import type { Datatype } from "../server/core/dtypes.ts";
import { type ErrorCode, ServerError } from "../server/core/errors.ts";
import { ffiGranted } from "../server/core/ffi_permission.ts";

/** The ABI version these bindings were written for (TRTSHIM_ABI_VERSION). */
export const ABI_VERSION = 1;
/** The most dims of a shape (TRTSHIM_MAX_DIMS). */
export const MAX_DIMS = 8;
/** The size of an IPC handle (TRTSHIM_IPC_HANDLE_SIZE). */
export const IPC_HANDLE_SIZE = 64;

/** The symbol table of libtrtshim, with each C signature. */
export const SYMBOLS = {
  // uint32_t trtshim_abi_version(void)
  trtshim_abi_version: { parameters: [], result: "u32" },
  // const char* trtshim_build_kind(void)
  trtshim_build_kind: { parameters: [], result: "pointer" },
  // const char* trtshim_last_error(void)
  trtshim_last_error: { parameters: [], result: "pointer" },
  // trtshim_status trtshim_device_count(int32_t* count)
  trtshim_device_count: { parameters: ["buffer"], result: "i32" },
  // trtshim_status trtshim_device_get_properties(int32_t device, trtshim_device_properties* props)
  trtshim_device_get_properties: { parameters: ["i32", "buffer"], result: "i32" },
  // trtshim_status trtshim_device_memory_info(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes)
  trtshim_device_memory_info: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  // trtshim_status trtshim_device_utilization(int32_t device, uint32_t* percent)
  trtshim_device_utilization: { parameters: ["i32", "buffer"], result: "i32" },
  // trtshim_status trtshim_device_power(int32_t device, uint64_t* usage_mw, uint64_t* limit_mw, uint64_t* energy_mj)
  // Added to ABI version 1 after its first libraries: optional, null in a library built before.
  trtshim_device_power: { parameters: ["i32", "buffer", "buffer", "buffer"], result: "i32", optional: true },
  // trtshim_status trtshim_stream_create(int32_t device, trtshim_stream** out)
  trtshim_stream_create: { parameters: ["i32", "buffer"], result: "i32" },
  // trtshim_status trtshim_stream_destroy(trtshim_stream* stream)
  trtshim_stream_destroy: { parameters: ["pointer"], result: "i32" },
  // trtshim_status trtshim_stream_synchronize(trtshim_stream* stream, char* err, size_t err_len)
  trtshim_stream_synchronize: {
    parameters: ["pointer", "buffer", "usize"],
    result: "i32",
    nonblocking: true,
  },
  // trtshim_status trtshim_event_create(int32_t device, trtshim_event** out)
  trtshim_event_create: { parameters: ["i32", "buffer"], result: "i32" },
  // trtshim_status trtshim_event_destroy(trtshim_event* event)
  trtshim_event_destroy: { parameters: ["pointer"], result: "i32" },
  // trtshim_status trtshim_event_record(trtshim_event* event, trtshim_stream* stream)
  trtshim_event_record: { parameters: ["pointer", "pointer"], result: "i32" },
  // trtshim_status trtshim_event_query(trtshim_event* event, int32_t* done)
  trtshim_event_query: { parameters: ["pointer", "buffer"], result: "i32" },
  // trtshim_status trtshim_event_synchronize(trtshim_event* event, char* err, size_t err_len)
  trtshim_event_synchronize: { parameters: ["pointer", "buffer", "usize"], result: "i32", nonblocking: true },
  // trtshim_status trtshim_event_elapsed_ms(trtshim_event* start, trtshim_event* end, float* ms)
  trtshim_event_elapsed_ms: { parameters: ["pointer", "pointer", "buffer"], result: "i32" },
  // trtshim_status trtshim_malloc_device(int32_t device, uint64_t size, void** ptr)
  trtshim_malloc_device: { parameters: ["i32", "u64", "buffer"], result: "i32" },
  // trtshim_status trtshim_free_device(void* ptr)
  trtshim_free_device: { parameters: ["pointer"], result: "i32" },
  // trtshim_status trtshim_malloc_host(uint64_t size, void** ptr)
  trtshim_malloc_host: { parameters: ["u64", "buffer"], result: "i32" },
  // trtshim_status trtshim_free_host(void* ptr)
  trtshim_free_host: { parameters: ["pointer"], result: "i32" },
  // trtshim_status trtshim_memcpy_h2d_async(void* dst_device, const void* src_host, uint64_t size, trtshim_stream* s)
  trtshim_memcpy_h2d_async: { parameters: ["pointer", "pointer", "u64", "pointer"], result: "i32" },
  // trtshim_status trtshim_memcpy_d2h_async(void* dst_host, const void* src_device, uint64_t size, trtshim_stream* s)
  trtshim_memcpy_d2h_async: { parameters: ["pointer", "pointer", "u64", "pointer"], result: "i32" },
  // trtshim_status trtshim_memcpy_d2d_async(void* dst_device, const void* src_device, uint64_t size, trtshim_stream* s)
  trtshim_memcpy_d2d_async: { parameters: ["pointer", "pointer", "u64", "pointer"], result: "i32" },
  // trtshim_status trtshim_ipc_get_handle(void* dev_ptr, uint8_t* handle)
  trtshim_ipc_get_handle: { parameters: ["pointer", "buffer"], result: "i32" },
  // trtshim_status trtshim_ipc_open(int32_t device, const uint8_t* handle, void** ptr)
  trtshim_ipc_open: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  // trtshim_status trtshim_ipc_close(void* ptr)
  trtshim_ipc_close: { parameters: ["pointer"], result: "i32" },
  // trtshim_status trtshim_engine_deserialize(int32_t device, const void* data, uint64_t size,
  //                                           trtshim_engine** out, char* err, size_t err_len)
  trtshim_engine_deserialize: {
    parameters: ["i32", "buffer", "u64", "buffer", "buffer", "usize"],
    result: "i32",
    nonblocking: true,
  },
  // trtshim_status trtshim_engine_destroy(trtshim_engine* engine)
  trtshim_engine_destroy: { parameters: ["pointer"], result: "i32" },
  // trtshim_status trtshim_engine_io_count(trtshim_engine* engine, int32_t* count)
  trtshim_engine_io_count: { parameters: ["pointer", "buffer"], result: "i32" },
  // trtshim_status trtshim_engine_io_name(trtshim_engine* engine, int32_t index, char* name, size_t name_len)
  trtshim_engine_io_name: { parameters: ["pointer", "i32", "buffer", "usize"], result: "i32" },
  // trtshim_status trtshim_engine_io_desc(trtshim_engine* engine, const char* name, int32_t* mode,
  //                                       int32_t* dtype, int32_t* nb_dims, int64_t* dims)
  trtshim_engine_io_desc: {
    parameters: ["pointer", "buffer", "buffer", "buffer", "buffer", "buffer"],
    result: "i32",
  },
  // trtshim_status trtshim_engine_profile_count(trtshim_engine* engine, int32_t* count)
  trtshim_engine_profile_count: { parameters: ["pointer", "buffer"], result: "i32" },
  // trtshim_status trtshim_engine_profile_shape(trtshim_engine* engine, int32_t profile, const char* input,
  //                                             int32_t which, int32_t* nb_dims, int64_t* dims)
  trtshim_engine_profile_shape: {
    parameters: ["pointer", "i32", "buffer", "i32", "buffer", "buffer"],
    result: "i32",
  },
  // trtshim_status trtshim_context_create(trtshim_engine* engine, int32_t profile, trtshim_stream* stream,
  //                                       trtshim_context** out)
  trtshim_context_create: { parameters: ["pointer", "i32", "pointer", "buffer"], result: "i32" },
  // trtshim_status trtshim_context_destroy(trtshim_context* context)
  trtshim_context_destroy: { parameters: ["pointer"], result: "i32" },
  // trtshim_status trtshim_context_set_input_shape(trtshim_context* context, const char* name, int32_t nb_dims,
  //                                                const int64_t* dims)
  trtshim_context_set_input_shape: { parameters: ["pointer", "buffer", "i32", "buffer"], result: "i32" },
  // trtshim_status trtshim_context_set_tensor_address(trtshim_context* context, const char* name, void* ptr)
  trtshim_context_set_tensor_address: { parameters: ["pointer", "buffer", "pointer"], result: "i32" },
  // trtshim_status trtshim_context_tensor_shape(trtshim_context* context, const char* name, int32_t* nb_dims,
  //                                             int64_t* dims)
  trtshim_context_tensor_shape: { parameters: ["pointer", "buffer", "buffer", "buffer"], result: "i32" },
  // trtshim_status trtshim_context_enqueue(trtshim_context* context, char* err, size_t err_len)
  trtshim_context_enqueue: { parameters: ["pointer", "buffer", "usize"], result: "i32", nonblocking: true },
} as const satisfies Deno.ForeignLibraryInterface;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

/** The shim's status codes (trtshim_status). */
export const Status = {
  OK: 0,
  INVALID_ARGUMENT: 1,
  NOT_FOUND: 2,
  OUT_OF_RANGE: 3,
  OUT_OF_MEMORY: 4,
  UNSUPPORTED: 5,
  RUNTIME_ERROR: 6,
  INTERNAL: 7,
} as const;

const STATUS_CODE: Record<number, ErrorCode> = {
  [Status.INVALID_ARGUMENT]: "INVALID_ARG",
  [Status.NOT_FOUND]: "INVALID_ARG",
  [Status.OUT_OF_RANGE]: "INVALID_ARG",
  [Status.OUT_OF_MEMORY]: "UNAVAILABLE",
  [Status.UNSUPPORTED]: "UNSUPPORTED",
  [Status.RUNTIME_ERROR]: "INTERNAL",
  [Status.INTERNAL]: "INTERNAL",
};

/** A failed shim call: a ServerError that also carries the shim's status. */
export class TrtShimError extends ServerError {
  /** The trtshim_status of the failed call. */
  readonly status: number;

  /**
   * Creates the error of a failed call.
   * @param status the shim status
   * @param message the shim's message
   */
  constructor(status: number, message: string) {
    super(STATUS_CODE[status] ?? "INTERNAL", message);
    this.status = status;
  }
}

/** The shim's datatype numbers (TRTSHIM_DTYPE_*) as protocol datatypes. */
const DTYPES: Record<number, Datatype> = {
  1: "FP32",
  2: "FP16",
  3: "BF16",
  4: "INT8",
  5: "UINT8",
  6: "INT32",
  7: "INT64",
  8: "BOOL",
};

/** Whether a tensor is an input or an output of an engine. */
export type IoMode = "input" | "output" | "none";

/** An I/O tensor of an engine. */
export interface EngineTensor {
  /** The tensor name. */
  name: string;
  /** Input or output. */
  mode: IoMode;
  /** The protocol datatype; undefined for types the protocol lacks (FP8). */
  datatype: Datatype | undefined;
  /** The dims, -1 where dynamic. */
  dims: number[];
}

/** The shapes of one input in an optimisation profile. */
export interface ProfileShapes {
  min: number[];
  opt: number[];
  max: number[];
}

/** A device's power reading. */
export interface DevicePower {
  /** The power drawn now, in watts. */
  usageW: number;
  /** The enforced power limit, in watts. */
  limitW: number;
  /** The energy consumed since the driver was loaded, in joules. */
  energyJ: number;
}

/** What a device says about itself. */
export interface DeviceProperties {
  /** The device name. */
  name: string;
  /** The UUID, formatted as nvidia-smi does: `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`. */
  uuid: string;
  /** The memory in bytes. */
  totalMemory: number;
  /** The compute capability, e.g. `8.6`. */
  computeCapability: string;
  /** The multiprocessor count. */
  multiprocessorCount: number;
  /** The PCI bus id. */
  pciBusId: number;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function cstr(s: string): Uint8Array<ArrayBuffer> {
  return encoder.encode(`${s}\0`);
}

function readCString(buf: Uint8Array): string {
  const end = buf.indexOf(0);
  return decoder.decode(buf.subarray(0, end < 0 ? buf.length : end));
}

function pointerOut(): BigUint64Array<ArrayBuffer> {
  return new BigUint64Array(1);
}

function toPointer(out: BigUint64Array): Deno.PointerValue {
  return Deno.UnsafePointer.create(out[0]!);
}

function dimsBuffer(dims: readonly number[]): BigInt64Array<ArrayBuffer> {
  return BigInt64Array.from(dims, (d) => BigInt(d));
}

function readDims(nb: Int32Array, dims: BigInt64Array): number[] {
  return Array.from(dims.subarray(0, nb[0]!), Number);
}

/** Where to find libtrtshim: `shim-path` of `--backend-config=tensorrt,...`, `DINFER_TRTSHIM`, the build folder. */
export function trtShimPath(backendConfig: Record<string, string>): string {
  return backendConfig["shim-path"] || Deno.env.get("DINFER_TRTSHIM") ||
    fileURLToPath(new URL("../build/shim/libtrtshim.so", import.meta.url));
}

const opened = new Map<string, TrtShim>();

/**
 * Opens libtrtshim once per path (it stays loaded for the life of the process) and checks its ABI version.
 * @param path the library path
 * @throws ServerError UNAVAILABLE when the library cannot be opened or has another ABI version
 */
export function openTrtShim(path: string): TrtShim {
  const known = opened.get(path);
  if (known) return known;
  if (!ffiGranted(path)) {
    throw new ServerError(
      "UNAVAILABLE",
      `Cannot open the TensorRT shim '${path}': the FFI permission does not cover it (run with --allow-ffi)`,
    );
  }
  let lib: Deno.DynamicLibrary<typeof SYMBOLS>;
  try {
    lib = Deno.dlopen(path, SYMBOLS);
  } catch (err) {
    throw new ServerError(
      "UNAVAILABLE",
      `Cannot open the TensorRT shim '${path}': ${
        (err as Error).message
      } (build it with 'cmake -S shim -B build/shim && cmake --build build/shim', or set DINFER_TRTSHIM or --backend-config=tensorrt,shim-path=...)`,
    );
  }
  const version = lib.symbols.trtshim_abi_version();
  if (version !== ABI_VERSION) {
    lib.close();
    throw new ServerError(
      "UNAVAILABLE",
      `Cannot use the TensorRT shim '${path}': it has ABI version ${version}, expected ${ABI_VERSION}`,
    );
  }
  const shim = new TrtShim(lib.symbols, path);
  opened.set(path, shim);
  return shim;
}

/** The opened library: devices, memory, streams, events, IPC and engines. */
export class TrtShim {
  readonly #lib: Lib;
  /** The library path. */
  readonly path: string;

  /**
   * Wraps bound symbols (use openTrtShim).
   * @param lib the symbols
   * @param path the library path
   */
  constructor(lib: Lib, path: string) {
    this.#lib = lib;
    this.path = path;
  }

  /** Throws the shim's last error of this thread when a status is not OK. */
  check(status: number): void {
    if (status === Status.OK) return;
    const p = this.#lib.trtshim_last_error();
    const message = p ? Deno.UnsafePointerView.getCString(p) : "";
    throw new TrtShimError(status, message || `trtshim call failed with status ${status}`);
  }

  /** Throws the message a nonblocking call wrote into its error buffer when its status is not OK. */
  checkAsync(status: number, err: Uint8Array): void {
    if (status === Status.OK) return;
    throw new TrtShimError(status, readCString(err) || `trtshim call failed with status ${status}`);
  }

  /** The bound symbols, for the other wrappers of this module. */
  get symbols(): Lib {
    return this.#lib;
  }

  /** The ABI version of the library. */
  abiVersion(): number {
    return this.#lib.trtshim_abi_version();
  }

  /** What the library was built over: `mock`, `cuda` or `cuda+tensorrt`. */
  buildKind(): string {
    const p = this.#lib.trtshim_build_kind();
    return p ? Deno.UnsafePointerView.getCString(p) : "";
  }

  /** The number of devices. */
  deviceCount(): number {
    const out = new Int32Array(1);
    this.check(this.#lib.trtshim_device_count(out));
    return out[0]!;
  }

  /**
   * A device's properties.
   * @param device the device index
   */
  deviceProperties(device: number): DeviceProperties {
    const buf = new Uint8Array(296);
    this.check(this.#lib.trtshim_device_get_properties(device, buf));
    const view = new DataView(buf.buffer);
    const hex = Array.from(buf.subarray(256, 272), (b) => b.toString(16).padStart(2, "0")).join("");
    return {
      name: readCString(buf.subarray(0, 256)),
      uuid: `GPU-${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${
        hex.slice(20)
      }`,
      totalMemory: Number(view.getBigUint64(272, true)),
      computeCapability: `${view.getInt32(280, true)}.${view.getInt32(284, true)}`,
      multiprocessorCount: view.getInt32(288, true),
      pciBusId: view.getInt32(292, true),
    };
  }

  /**
   * Free and total memory of a device in bytes.
   * @param device the device index
   */
  memoryInfo(device: number): { free: number; total: number } {
    const free = new BigUint64Array(1);
    const total = new BigUint64Array(1);
    this.check(this.#lib.trtshim_device_memory_info(device, free, total));
    return { free: Number(free[0]), total: Number(total[0]) };
  }

  /**
   * A device's utilisation in percent.
   * @param device the device index
   */
  utilization(device: number): number {
    const out = new Uint32Array(1);
    this.check(this.#lib.trtshim_device_utilization(device, out));
    return out[0]!;
  }

  /**
   * A device's power draw, power limit and energy, or undefined where the device or the library has no
   * such reading (UNSUPPORTED: no NVML, a GPU without it, a mock device not given one, or a library built
   * before trtshim_device_power).
   * @param device the device index
   * @throws TrtShimError when the reading fails otherwise (an unknown device, a driver error)
   */
  power(device: number): DevicePower | undefined {
    const fn = this.#lib.trtshim_device_power;
    if (fn === null) return undefined;
    const usage = new BigUint64Array(1);
    const limit = new BigUint64Array(1);
    const energy = new BigUint64Array(1);
    const status = fn(device, usage, limit, energy);
    if (status === Status.UNSUPPORTED) return undefined;
    this.check(status);
    return {
      usageW: Number(usage[0]) / 1000,
      limitW: Number(limit[0]) / 1000,
      energyJ: Number(energy[0]) / 1000,
    };
  }

  /**
   * Creates a stream on a device.
   * @param device the device index
   */
  createStream(device: number): Stream {
    const out = pointerOut();
    this.check(this.#lib.trtshim_stream_create(device, out));
    return new Stream(this, toPointer(out), device);
  }

  /**
   * Creates an event on a device.
   * @param device the device index
   */
  createEvent(device: number): DeviceEvent {
    const out = pointerOut();
    this.check(this.#lib.trtshim_event_create(device, out));
    return new DeviceEvent(this, toPointer(out));
  }

  /**
   * Allocates device memory.
   * @param device the device index
   * @param size bytes
   */
  mallocDevice(device: number, size: number): DeviceBuffer {
    const out = pointerOut();
    this.check(this.#lib.trtshim_malloc_device(device, BigInt(size), out));
    return new DeviceBuffer(this, toPointer(out), size, device);
  }

  /**
   * Allocates pinned host memory, readable and writable from TypeScript through `bytes`.
   * @param size bytes
   */
  mallocHost(size: number): HostBuffer {
    const out = pointerOut();
    this.check(this.#lib.trtshim_malloc_host(BigInt(size), out));
    return new HostBuffer(this, toPointer(out), size);
  }

  /**
   * Exports an IPC handle for a device allocation.
   * @param buffer the allocation
   */
  ipcGetHandle(buffer: DeviceBuffer): Uint8Array {
    const handle = new Uint8Array(IPC_HANDLE_SIZE);
    this.check(this.#lib.trtshim_ipc_get_handle(buffer.pointer, handle));
    return handle;
  }

  /**
   * Opens an IPC handle on a device.
   * @param device the device index
   * @param handle the handle bytes
   */
  ipcOpen(device: number, handle: Uint8Array): IpcMapping {
    if (handle.byteLength !== IPC_HANDLE_SIZE) {
      throw new ServerError(
        "INVALID_ARG",
        `An IPC handle has ${IPC_HANDLE_SIZE} bytes, got ${handle.byteLength}`,
      );
    }
    const out = pointerOut();
    this.check(this.#lib.trtshim_ipc_open(device, handle.slice(), out));
    return new IpcMapping(this, toPointer(out));
  }

  /**
   * Deserializes a plan (off the event loop).
   * @param device the device index
   * @param plan the plan bytes
   */
  async deserialize(device: number, plan: Uint8Array): Promise<Engine> {
    const data = plan.slice();
    const out = pointerOut();
    const err = new Uint8Array(1024);
    const status = await this.#lib.trtshim_engine_deserialize(
      device,
      data,
      BigInt(data.byteLength),
      out,
      err,
      1024n,
    );
    this.checkAsync(status, err);
    return new Engine(this, toPointer(out));
  }
}

/** A handle with a destroy function, closed once. */
abstract class Handle {
  protected readonly shim: TrtShim;
  #pointer: Deno.PointerValue;

  constructor(shim: TrtShim, pointer: Deno.PointerValue) {
    this.shim = shim;
    this.#pointer = pointer;
  }

  /** The native pointer; throws once closed. */
  get pointer(): Deno.PointerValue {
    if (this.#pointer === null) {
      throw new ServerError("INTERNAL", `${this.constructor.name} is already closed`);
    }
    return this.#pointer;
  }

  /** Whether close() was called. */
  get closed(): boolean {
    return this.#pointer === null;
  }

  protected abstract destroy(pointer: Deno.PointerValue): number;

  /** Frees the native object; a second call does nothing. */
  close(): void {
    if (this.#pointer === null) return;
    const p = this.#pointer;
    this.#pointer = null;
    this.shim.check(this.destroy(p));
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** A device stream: copies and executions run on it in order. */
export class Stream extends Handle {
  /** The device index. */
  readonly device: number;

  constructor(shim: TrtShim, pointer: Deno.PointerValue, device: number) {
    super(shim, pointer);
    this.device = device;
  }

  protected destroy(p: Deno.PointerValue): number {
    return this.shim.symbols.trtshim_stream_destroy(p);
  }

  /** Waits (off the event loop) for the queued work; rejects with the first asynchronous failure. */
  async synchronize(): Promise<void> {
    const err = new Uint8Array(1024);
    this.shim.checkAsync(await this.shim.symbols.trtshim_stream_synchronize(this.pointer, err, 1024n), err);
  }

  /**
   * Queues a host-to-device copy.
   * @param dst the device buffer (or an address inside one)
   * @param src the pinned host buffer
   * @param size bytes
   */
  copyToDevice(dst: DeviceBuffer | Deno.PointerValue, src: HostBuffer, size: number): void {
    const d = dst instanceof DeviceBuffer ? dst.pointer : dst;
    this.shim.check(this.shim.symbols.trtshim_memcpy_h2d_async(d, src.pointer, BigInt(size), this.pointer));
  }

  /**
   * Queues a device-to-host copy.
   * @param dst the pinned host buffer
   * @param src the device buffer (or an address inside one)
   * @param size bytes
   */
  copyToHost(dst: HostBuffer, src: DeviceBuffer | Deno.PointerValue, size: number): void {
    const s = src instanceof DeviceBuffer ? src.pointer : src;
    this.shim.check(this.shim.symbols.trtshim_memcpy_d2h_async(dst.pointer, s, BigInt(size), this.pointer));
  }

  /**
   * Queues a device-to-device copy.
   * @param dst the destination
   * @param src the source
   * @param size bytes
   */
  copyOnDevice(dst: DeviceBuffer, src: DeviceBuffer, size: number): void {
    this.shim.check(
      this.shim.symbols.trtshim_memcpy_d2d_async(dst.pointer, src.pointer, BigInt(size), this.pointer),
    );
  }
}

/** A device event. */
export class DeviceEvent extends Handle {
  protected destroy(p: Deno.PointerValue): number {
    return this.shim.symbols.trtshim_event_destroy(p);
  }

  /**
   * Records the event on a stream.
   * @param stream the stream
   */
  record(stream: Stream): void {
    this.shim.check(this.shim.symbols.trtshim_event_record(this.pointer, stream.pointer));
  }

  /** Whether the event has completed. */
  query(): boolean {
    const out = new Int32Array(1);
    this.shim.check(this.shim.symbols.trtshim_event_query(this.pointer, out));
    return out[0] === 1;
  }

  /** Waits (off the event loop) for the event. */
  async synchronize(): Promise<void> {
    const err = new Uint8Array(1024);
    this.shim.checkAsync(await this.shim.symbols.trtshim_event_synchronize(this.pointer, err, 1024n), err);
  }

  /**
   * Milliseconds from another completed event to this one.
   * @param start the earlier event
   */
  elapsedSince(start: DeviceEvent): number {
    const out = new Float32Array(1);
    this.shim.check(this.shim.symbols.trtshim_event_elapsed_ms(start.pointer, this.pointer, out));
    return out[0]!;
  }
}

/** Device memory. */
export class DeviceBuffer extends Handle {
  /** Bytes. */
  readonly size: number;
  /** The device index. */
  readonly device: number;

  constructor(shim: TrtShim, pointer: Deno.PointerValue, size: number, device: number) {
    super(shim, pointer);
    this.size = size;
    this.device = device;
  }

  protected destroy(p: Deno.PointerValue): number {
    return this.shim.symbols.trtshim_free_device(p);
  }
}

/** Pinned host memory with a byte view over it. */
export class HostBuffer extends Handle {
  /** Bytes. */
  readonly size: number;
  #bytes: Uint8Array;

  constructor(shim: TrtShim, pointer: Deno.PointerValue, size: number) {
    super(shim, pointer);
    this.size = size;
    this.#bytes = size > 0 && pointer !== null
      ? new Uint8Array(Deno.UnsafePointerView.getArrayBuffer(pointer, size))
      : new Uint8Array(0);
  }

  /** The memory as bytes; invalid after close(). */
  get bytes(): Uint8Array {
    if (this.closed) throw new ServerError("INTERNAL", "HostBuffer is already closed");
    return this.#bytes;
  }

  protected destroy(p: Deno.PointerValue): number {
    this.#bytes = new Uint8Array(0);
    return this.shim.symbols.trtshim_free_host(p);
  }
}

/** A device allocation of another process, opened from an IPC handle. */
export class IpcMapping extends Handle {
  protected destroy(p: Deno.PointerValue): number {
    return this.shim.symbols.trtshim_ipc_close(p);
  }
}

/** A deserialized engine. */
export class Engine extends Handle {
  protected destroy(p: Deno.PointerValue): number {
    return this.shim.symbols.trtshim_engine_destroy(p);
  }

  /** The I/O tensors in the engine's order. */
  io(): EngineTensor[] {
    const s = this.shim.symbols;
    const count = new Int32Array(1);
    this.shim.check(s.trtshim_engine_io_count(this.pointer, count));
    const list: EngineTensor[] = [];
    for (let i = 0; i < count[0]!; i++) {
      const nameBuf = new Uint8Array(1024);
      this.shim.check(s.trtshim_engine_io_name(this.pointer, i, nameBuf, 1024n));
      list.push(this.describe(readCString(nameBuf)));
    }
    return list;
  }

  /**
   * One I/O tensor by name.
   * @param name the tensor name
   */
  describe(name: string): EngineTensor {
    const mode = new Int32Array(1);
    const dtype = new Int32Array(1);
    const nb = new Int32Array(1);
    const dims = new BigInt64Array(MAX_DIMS);
    this.shim.check(
      this.shim.symbols.trtshim_engine_io_desc(this.pointer, cstr(name), mode, dtype, nb, dims),
    );
    return {
      name,
      mode: mode[0] === 1 ? "input" : mode[0] === 2 ? "output" : "none",
      datatype: DTYPES[dtype[0]!],
      dims: readDims(nb, dims),
    };
  }

  /** The number of optimisation profiles. */
  profileCount(): number {
    const out = new Int32Array(1);
    this.shim.check(this.shim.symbols.trtshim_engine_profile_count(this.pointer, out));
    return out[0]!;
  }

  /**
   * The min, opt and max shapes of an input in a profile.
   * @param profile the profile index
   * @param input the input name
   */
  profileShapes(profile: number, input: string): ProfileShapes {
    const shape = (which: number) => {
      const nb = new Int32Array(1);
      const dims = new BigInt64Array(MAX_DIMS);
      this.shim.check(
        this.shim.symbols.trtshim_engine_profile_shape(this.pointer, profile, cstr(input), which, nb, dims),
      );
      return readDims(nb, dims);
    };
    return { min: shape(0), opt: shape(1), max: shape(2) };
  }

  /**
   * Creates an execution context with a profile, bound to a stream.
   * @param profile the profile index
   * @param stream the stream it enqueues on
   */
  createContext(profile: number, stream: Stream): ExecutionContext {
    const out = pointerOut();
    this.shim.check(this.shim.symbols.trtshim_context_create(this.pointer, profile, stream.pointer, out));
    return new ExecutionContext(this.shim, toPointer(out));
  }
}

/** An execution context on its stream. */
export class ExecutionContext extends Handle {
  protected destroy(p: Deno.PointerValue): number {
    return this.shim.symbols.trtshim_context_destroy(p);
  }

  /**
   * Sets an input's shape for the next enqueue.
   * @param name the input name
   * @param dims the shape
   */
  setInputShape(name: string, dims: readonly number[]): void {
    this.shim.check(
      this.shim.symbols.trtshim_context_set_input_shape(
        this.pointer,
        cstr(name),
        dims.length,
        dimsBuffer(dims),
      ),
    );
  }

  /**
   * Sets the device address of an I/O tensor.
   * @param name the tensor name
   * @param address the device memory
   */
  setTensorAddress(name: string, address: DeviceBuffer | Deno.PointerValue): void {
    const p = address instanceof DeviceBuffer ? address.pointer : address;
    this.shim.check(this.shim.symbols.trtshim_context_set_tensor_address(this.pointer, cstr(name), p));
  }

  /**
   * The shape of an I/O tensor given the input shapes set so far.
   * @param name the tensor name
   */
  tensorShape(name: string): number[] {
    const nb = new Int32Array(1);
    const dims = new BigInt64Array(MAX_DIMS);
    this.shim.check(this.shim.symbols.trtshim_context_tensor_shape(this.pointer, cstr(name), nb, dims));
    return readDims(nb, dims);
  }

  /** Queues an execution on the context's stream (off the event loop). */
  async enqueue(): Promise<void> {
    const err = new Uint8Array(1024);
    this.shim.checkAsync(await this.shim.symbols.trtshim_context_enqueue(this.pointer, err, 1024n), err);
  }
}
