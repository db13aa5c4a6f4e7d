/**
 * Deno.dlopen bindings of libortshim (shim/include/ortshim.h): ONNX Runtime's C API for runs on the calling
 * thread, a few direct calls per run and no JavaScript objects made by native code.
 *
 * @example
 * ```ts
 * const shim = openOrtShim();
 * if (shim) {
 *   using session = shim.open("model.onnx", { intraOpThreads: 1 });
 *   const [out] = session.run([{ index: 0, type: 6, data: bytes, dims: [1, 16] }], [0]);
 * }
 * ```
 * @module
 */

import { fileURLToPath } from "node:url";
import { existsSync } from "node:fs";
import { ffiGranted } from "../server/core/ffi_permission.ts";

/** The ABI version these bindings were written for (ORTSHIM_ABI_VERSION). */
export const ABI_VERSION = 1;
/** The most dims of a tensor (ORTSHIM_MAX_DIMS). */
export const MAX_DIMS = 16;

/** The symbol table of libortshim, with each C signature. */
export const SYMBOLS = {
  // int32_t ortshim_abi_version(void)
  ortshim_abi_version: { parameters: [], result: "i32" },
  // int32_t ortshim_init(const char* lib_path)
  ortshim_init: { parameters: ["buffer"], result: "i32" },
  // void ortshim_error(const ortshim_session* session, char* buf, size_t len)
  ortshim_error: { parameters: ["pointer", "buffer", "usize"], result: "void" },
  // ortshim_session* ortshim_session_create(void)
  ortshim_session_create: { parameters: [], result: "pointer" },
  // int32_t ortshim_option_int(ortshim_session* session, int32_t option, int32_t value)
  ortshim_option_int: { parameters: ["pointer", "i32", "i32"], result: "i32" },
  // int32_t ortshim_option_entry(ortshim_session* session, const char* key, const char* value)
  ortshim_option_entry: { parameters: ["pointer", "buffer", "buffer"], result: "i32" },
  // int32_t ortshim_session_load(ortshim_session* session, const char* model_path)
  ortshim_session_load: { parameters: ["pointer", "buffer"], result: "i32" },
  // int32_t ortshim_session_count(ortshim_session* session, int32_t outputs)
  ortshim_session_count: { parameters: ["pointer", "i32"], result: "i32" },
  // int32_t ortshim_session_value(ortshim_session* s, int32_t outputs, int32_t index, char* name, size_t len,
  //                               double* info)
  ortshim_session_value: {
    parameters: ["pointer", "i32", "i32", "buffer", "usize", "buffer"],
    result: "i32",
  },
  // void ortshim_session_destroy(ortshim_session* session)
  ortshim_session_destroy: { parameters: ["pointer"], result: "void" },
  // int32_t ortshim_feed(ortshim_session* s, int32_t input, int32_t elem_type, const uint8_t* data,
  //                      double byte_len, const double* dims, int32_t ndims)
  ortshim_feed: { parameters: ["pointer", "i32", "i32", "buffer", "f64", "buffer", "i32"], result: "i32" },
  // int32_t ortshim_fetch(ortshim_session* session, int32_t output)
  ortshim_fetch: { parameters: ["pointer", "i32"], result: "i32" },
  // int32_t ortshim_run(ortshim_session* session)
  ortshim_run: { parameters: ["pointer"], result: "i32" },
  // int32_t ortshim_output(ortshim_session* session, int32_t k, double* info)
  ortshim_output: { parameters: ["pointer", "i32", "buffer"], result: "i32" },
  // int32_t ortshim_output_copy(ortshim_session* session, int32_t k, uint8_t* dst, double byte_len)
  ortshim_output_copy: { parameters: ["pointer", "i32", "buffer", "f64"], result: "i32" },
  // void ortshim_clear(ortshim_session* session)
  ortshim_clear: { parameters: ["pointer"], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

/** ortshim_option. */
const OPTION = {
  intraOpThreads: 1,
  interOpThreads: 2,
  executionMode: 3,
  cpuMemArena: 4,
  graphOptimization: 5,
  logSeverity: 6,
} as const;

/** The session options a runner sets (ONNX Runtime's defaults where left out). */
export interface OrtShimOptions {
  intraOpThreads?: number;
  interOpThreads?: number;
  /** 0 sequential, 1 parallel. */
  executionMode?: number;
  cpuMemArena?: boolean;
  /** 0 disabled, 1 basic, 2 extended, 99 all. */
  graphOptimization?: number;
  /** 0 verbose .. 4 fatal. */
  logSeverity?: number;
  /** Session configuration entries ("session.*" keys). */
  entries?: Record<string, string>;
}

/** A model input or output as the model declares it: its ONNX element type, and -1 for a dynamic dim. */
export interface OrtShimValue {
  name: string;
  isTensor: boolean;
  type: number;
  shape: number[];
}

/** An input of a run: the index of a model input, its ONNX element type, its bytes and dims. */
export interface OrtShimFeed {
  index: number;
  type: number;
  data: ArrayBufferView;
  dims: readonly number[];
}

/** An output of a run: its ONNX element type, bytes and dims. */
export interface OrtShimOutput {
  type: number;
  data: Uint8Array;
  dims: number[];
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function cString(s: string): Uint8Array<ArrayBuffer> {
  const bytes = encoder.encode(s);
  const out = new Uint8Array(bytes.byteLength + 1);
  out.set(bytes);
  return out;
}

function errorOf(lib: Lib, session: Deno.PointerValue): string {
  const buf = new Uint8Array(4096);
  lib.ortshim_error(session, buf, BigInt(buf.byteLength));
  const end = buf.indexOf(0);
  return decoder.decode(buf.subarray(0, end < 0 ? buf.byteLength : end));
}

/** A loaded model: runs on the calling thread, one at a time. */
export class OrtShimSession {
  #lib: Lib;
  #ptr: Deno.PointerValue;
  /** The model's inputs, in its order (runs refer to them by index). */
  readonly inputs: readonly OrtShimValue[];
  /** The model's outputs, in its order (runs refer to them by index). */
  readonly outputs: readonly OrtShimValue[];
  /** A run's dims, and the outputs' descriptions. */
  #dims = new Float64Array(MAX_DIMS);
  #info = new Float64Array(3 + MAX_DIMS);
  constructor(lib: Lib, ptr: Deno.PointerValue) {
    this.#lib = lib;
    this.#ptr = ptr;
    this.inputs = this.#values(0);
    this.outputs = this.#values(1);
  }

  #values(outputs: 0 | 1): OrtShimValue[] {
    const lib = this.#lib;
    const name = new Uint8Array(4096);
    const info = this.#info;
    const list: OrtShimValue[] = [];
    const n = lib.ortshim_session_count(this.#ptr, outputs);
    for (let i = 0; i < n; i++) {
      if (lib.ortshim_session_value(this.#ptr, outputs, i, name, BigInt(name.byteLength), info) !== 0) {
        this.#fail("cannot read the model's inputs and outputs");
      }
      const shape: number[] = [];
      for (let d = 0; d < info[2]!; d++) shape.push(info[3 + d]!);
      list.push({
        name: decoder.decode(name.subarray(0, name.indexOf(0))),
        isTensor: info[0] === 1,
        type: info[1]!,
        shape,
      });
    }
    return list;
  }

  /** Throws the session's last error: ONNX Runtime's message alone for a failed run. */
  #fail(what: string | undefined): never {
    const msg = errorOf(this.#lib, this.#ptr);
    throw new Error(what === undefined ? msg : `${what}: ${msg}`);
  }

  /**
   * Runs the model.
   * @param feeds the inputs
   * @param fetches the indexes of the declared outputs to compute
   * @returns the outputs, in the order of `fetches`
   * @throws Error with ONNX Runtime's message
   */
  run(feeds: readonly OrtShimFeed[], fetches: readonly number[]): OrtShimOutput[] {
    const ptr = this.#ptr;
    if (ptr === null) throw new Error("the session is closed");
    try {
      return this.#run(ptr, feeds, fetches);
    } finally {
      // Whatever happened, the next run starts from nothing fed, fetched or kept.
      this.#lib.ortshim_clear(ptr);
    }
  }

  #run(ptr: Deno.PointerObject, feeds: readonly OrtShimFeed[], fetches: readonly number[]): OrtShimOutput[] {
    const lib = this.#lib;
    const dims = this.#dims;
    for (let i = 0; i < feeds.length; i++) {
      const f = feeds[i]!;
      const n = f.dims.length;
      if (n > MAX_DIMS) throw new Error(`input ${f.index} has ${n} dims, more than ${MAX_DIMS}`);
      for (let d = 0; d < n; d++) dims[d] = f.dims[d]!;
      if (lib.ortshim_feed(ptr, f.index, f.type, f.data, f.data.byteLength, dims, n) !== 0) {
        this.#fail("cannot feed the input");
      }
    }
    for (let i = 0; i < fetches.length; i++) {
      if (lib.ortshim_fetch(ptr, fetches[i]!) !== 0) this.#fail("cannot fetch the output");
    }
    if (lib.ortshim_run(ptr) !== 0) this.#fail(undefined);
    const info = this.#info;
    const out: OrtShimOutput[] = new Array(fetches.length);
    for (let k = 0; k < fetches.length; k++) {
      if (lib.ortshim_output(ptr, k, info) !== 0) this.#fail("cannot read the output");
      const bytes = info[1]!;
      const n = info[2]!;
      const shape: number[] = new Array(n);
      for (let d = 0; d < n; d++) shape[d] = info[3 + d]!;
      // A buffer of its own (never a small array in the moving heap): the copy lands where the caller reads.
      const data = new Uint8Array(new ArrayBuffer(bytes));
      if (lib.ortshim_output_copy(ptr, k, data, bytes) !== 0) this.#fail("cannot copy the output");
      out[k] = { type: info[0]!, data, dims: shape };
    }
    return out;
  }

  /** Releases the model. */
  close(): void {
    if (this.#ptr === null) return;
    this.#lib.ortshim_session_destroy(this.#ptr);
    this.#ptr = null;
  }

  [Symbol.dispose](): void {
    this.close();
  }
}

/** libortshim, loaded, with ONNX Runtime behind it. */
export class OrtShim {
  #lib: Lib;
  constructor(lib: Lib) {
    this.#lib = lib;
  }

  /**
   * Opens a model.
   * @param path the model file
   * @param options session options
   * @throws Error with ONNX Runtime's message (alone) when the model does not load
   */
  open(path: string, options: OrtShimOptions): OrtShimSession {
    const lib = this.#lib;
    const ptr = lib.ortshim_session_create();
    if (ptr === null) throw new Error(`cannot create an ONNX Runtime session: ${errorOf(lib, null)}`);
    const fail = (what: string | undefined): never => {
      const msg = errorOf(lib, ptr);
      lib.ortshim_session_destroy(ptr);
      throw new Error(what === undefined ? msg : `${what}: ${msg}`);
    };
    for (const [key, value] of Object.entries(options)) {
      if (key === "entries" || value === undefined) continue;
      const option = OPTION[key as keyof typeof OPTION];
      const v = typeof value === "boolean" ? (value ? 1 : 0) : value as number;
      if (lib.ortshim_option_int(ptr, option, v) !== 0) fail(`cannot set ${key}`);
    }
    for (const [key, value] of Object.entries(options.entries ?? {})) {
      if (lib.ortshim_option_entry(ptr, cString(key), cString(value)) !== 0) fail(`cannot set '${key}'`);
    }
    // ONNX Runtime's own message names the file and what is wrong with it.
    if (lib.ortshim_session_load(ptr, cString(path)) !== 0) fail(undefined);
    try {
      return new OrtShimSession(lib, ptr);
    } catch (err) {
      lib.ortshim_session_destroy(ptr);
      throw err;
    }
  }
}

/**
 * Where libortshim is: `DINFER_ORTSHIM`, else the launcher's build (build/shim/libortshim.so).
 * @param env the environment
 */
export function ortShimPath(env: Record<string, string | undefined> = Deno.env.toObject()): string {
  return env.DINFER_ORTSHIM || fileURLToPath(new URL("../build/shim/libortshim.so", import.meta.url));
}

/** Where onnxruntime-node's ONNX Runtime library is (the file its binding loads). */
export function onnxRuntimeLibraryPath(): string | undefined {
  try {
    const main = fileURLToPath(import.meta.resolve("onnxruntime-node"));
    const root = main.slice(0, main.lastIndexOf("/dist/"));
    const arch = Deno.build.arch === "aarch64" ? "arm64" : "x64";
    const os = Deno.build.os === "darwin" ? "darwin" : Deno.build.os;
    for (const napi of ["napi-v6", "napi-v3"]) {
      const lib = `${root}/bin/${napi}/${os}/${arch}/libonnxruntime.so.1`;
      if (existsSync(lib)) return lib;
    }
  } catch {
    // Not resolvable here: no library.
  }
  return undefined;
}

let opened: { shim: OrtShim | undefined } | undefined;

/**
 * libortshim with ONNX Runtime loaded, once per thread; undefined where either is missing or does not load, or
 * where the FFI permission does not cover it (callers then run ONNX Runtime through onnxruntime-node's binding).
 * `DINFER_ORTSHIM=off` turns it off.
 */
export function openOrtShim(): OrtShim | undefined {
  opened ??= { shim: load() };
  return opened.shim;
}

/** Loads libortshim and ONNX Runtime behind it (see openOrtShim). */
function load(): OrtShim | undefined {
  const env = Deno.env.toObject();
  if (env.DINFER_ORTSHIM === "off") return undefined;
  const path = ortShimPath(env);
  const runtime = onnxRuntimeLibraryPath();
  if (!runtime || !existsSync(path) || !ffiGranted(path)) return undefined;
  let lib: Deno.DynamicLibrary<typeof SYMBOLS>;
  try {
    lib = Deno.dlopen(path, SYMBOLS);
  } catch {
    return undefined;
  }
  if (
    lib.symbols.ortshim_abi_version() !== ABI_VERSION || lib.symbols.ortshim_init(cString(runtime)) !== 0
  ) {
    lib.close();
    return undefined;
  }
  return new OrtShim(lib.symbols);
}
