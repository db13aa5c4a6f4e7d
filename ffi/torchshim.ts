/**
 * Deno.dlopen bindings of libtorchshim (torchshim/include/torchshim.h): TorchScript modules loaded and run by
 * libtorch inside the server's process. Every failing call becomes a ServerError with the library's reason;
 * modules are freed with `close()`.
 * @module
 */

import { fileURLToPath } from "node:url";
import type { Datatype } from "../server/core/dtypes.ts";
import { internal, ServerError } from "../server/core/errors.ts";
import { ffiGranted } from "../server/core/ffi_permission.ts";
import type { Tensor } from "../server/core/types.ts";

/** The ABI version these bindings were written for (TORCHSHIM_ABI_VERSION). */
export const ABI_VERSION = 1;
/** The most dims of a shape (TORCHSHIM_MAX_DIMS). */
export const MAX_DIMS = 8;
const ERR_LEN = 2048;

/** The symbol table of libtorchshim, with each C signature. */
export const SYMBOLS = {
  // uint32_t torchshim_abi_version(void)
  torchshim_abi_version: { parameters: [], result: "u32" },
  // int32_t torchshim_configure(int32_t jit_executor, int32_t jit_profiling, int32_t texpr_fuser,
  //   int32_t inter_threads, char* err, size_t err_len)
  torchshim_configure: { parameters: ["i32", "i32", "i32", "i32", "buffer", "usize"], result: "i32" },
  // int32_t torchshim_load(const char* path, const char* device, int32_t optimized, int32_t intra_threads,
  //   torchshim_module** out, char* err, size_t err_len)
  torchshim_load: {
    parameters: ["buffer", "buffer", "i32", "i32", "buffer", "buffer", "usize"],
    result: "i32",
  },
  // int32_t torchshim_signature(const torchshim_module*, char* buf, size_t buf_len, char* err, size_t)
  torchshim_signature: { parameters: ["pointer", "buffer", "usize", "buffer", "usize"], result: "i32" },
  // int32_t torchshim_forward(torchshim_module*, int32_t count, const int32_t* dtypes, const int32_t* ranks,
  //   const int64_t* shapes, const uint64_t* data, const char* names, int32_t dict_input,
  //   int32_t inference_mode, torchshim_result** out, char* err, size_t err_len)
  torchshim_forward: {
    parameters: [
      "pointer",
      "i32",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "buffer",
      "i32",
      "i32",
      "buffer",
      "buffer",
      "usize",
    ],
    result: "i32",
    nonblocking: true,
  },
  // int32_t torchshim_result_count(const torchshim_result*)
  torchshim_result_count: { parameters: ["pointer"], result: "i32" },
  // int32_t torchshim_result_describe(const torchshim_result*, int32_t index, int32_t* dtype, int32_t* rank,
  //   int64_t* shape, uint64_t* nbytes, char* err, size_t err_len)
  torchshim_result_describe: {
    parameters: ["pointer", "i32", "buffer", "buffer", "buffer", "buffer", "buffer", "usize"],
    result: "i32",
  },
  // int32_t torchshim_result_copy(const torchshim_result*, int32_t index, void* dst, uint64_t nbytes, char* err,
  //   size_t err_len)
  torchshim_result_copy: {
    parameters: ["pointer", "i32", "buffer", "u64", "buffer", "usize"],
    result: "i32",
  },
  // void torchshim_result_free(torchshim_result*)
  torchshim_result_free: { parameters: ["pointer"], result: "void" },
  // void torchshim_module_free(torchshim_module*)
  torchshim_module_free: { parameters: ["pointer"], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

type Lib = Deno.DynamicLibrary<typeof SYMBOLS>;

/** Datatype codes of the ABI, by index. */
const CODES: readonly Datatype[] = [
  "BOOL",
  "UINT8",
  "INT8",
  "INT16",
  "INT32",
  "INT64",
  "FP16",
  "FP32",
  "FP64",
];

/** The library the build puts under build/torchshim, or the one `--backend-config=pytorch,shim-path=` names. */
export function torchShimPath(backendConfig: Record<string, string>): string {
  return backendConfig["shim-path"] || Deno.env.get("DINFER_TORCHSHIM") ||
    fileURLToPath(new URL("../build/torchshim/libtorchshim.so", import.meta.url));
}

function cstring(s: string): Uint8Array {
  return new TextEncoder().encode(s + "\0");
}

function errText(err: Uint8Array): string {
  const end = err.indexOf(0);
  return new TextDecoder().decode(err.subarray(0, end < 0 ? err.length : end));
}

/** Process-wide TorchScript settings; undefined leaves one as it is. */
export interface TorchSettings {
  jitExecutor?: boolean | undefined;
  jitProfiling?: boolean | undefined;
  texprFuser?: boolean | undefined;
  interThreads?: number | undefined;
}

/** A module's own settings (torch keeps them per thread; each forward call applies them). */
export interface ModuleSettings {
  /** The graph executor's optimizations; undefined for torch's default. */
  optimized?: boolean | undefined;
  /** The intra-op thread count; undefined for torch's default. */
  intraThreads?: number | undefined;
}

/** One argument of forward (self left out). */
export interface ForwardArgument {
  name: string;
  kind: "tensor" | "dict" | "other";
  type: string;
}

const opened = new Map<string, TorchShim>();

/** An open libtorchshim. */
export class TorchShim {
  readonly #lib: Lib;

  private constructor(lib: Lib) {
    this.#lib = lib;
  }

  /**
   * Opens the library once per path (libtorch stays loaded for the process's life).
   * @param path the library
   * @returns the bindings
   * @throws ServerError (UNAVAILABLE) when the library cannot be opened or has another ABI
   */
  static open(path: string): TorchShim {
    const known = opened.get(path);
    if (known) return known;
    if (!ffiGranted(path)) {
      throw new ServerError(
        "UNAVAILABLE",
        `Cannot open libtorchshim '${path}': the FFI permission does not cover it (run with --allow-ffi)`,
      );
    }
    let lib: Lib;
    try {
      lib = Deno.dlopen(path, SYMBOLS);
    } catch (err) {
      throw new ServerError("UNAVAILABLE", `Cannot open libtorchshim '${path}': ${(err as Error).message}`);
    }
    const abi = lib.symbols.torchshim_abi_version();
    if (abi !== ABI_VERSION) {
      lib.close();
      throw new ServerError(
        "UNAVAILABLE",
        `Cannot open libtorchshim '${path}': ABI ${abi}, expected ${ABI_VERSION}`,
      );
    }
    const shim = new TorchShim(lib);
    opened.set(path, shim);
    return shim;
  }

  /**
   * Applies process-wide settings.
   * @param s the settings
   */
  configure(s: TorchSettings): void {
    const flag = (b: boolean | undefined) => (b === undefined ? -1 : b ? 1 : 0);
    const err = new Uint8Array(ERR_LEN);
    const rc = this.#lib.symbols.torchshim_configure(
      flag(s.jitExecutor),
      flag(s.jitProfiling),
      flag(s.texprFuser),
      s.interThreads ?? -1,
      err,
      BigInt(ERR_LEN),
    );
    if (rc !== 0) throw internal(`Cannot configure torch: ${errText(err)}`);
  }

  /**
   * Loads a TorchScript file.
   * @param path the file
   * @param device "cpu", "cuda:<n>", or "" for the devices the file names
   * @param settings the module's own settings
   * @returns the module
   * @throws Error with the reason when the file is not TorchScript
   */
  load(path: string, device: string, settings: ModuleSettings = {}): TorchModule {
    const out = new BigUint64Array(1);
    const err = new Uint8Array(ERR_LEN);
    const optimized = settings.optimized === undefined ? -1 : settings.optimized ? 1 : 0;
    const rc = this.#lib.symbols.torchshim_load(
      cstring(path),
      cstring(device),
      optimized,
      settings.intraThreads ?? 0,
      out,
      err,
      BigInt(ERR_LEN),
    );
    if (rc !== 0) throw new Error(errText(err));
    return new TorchModule(this.#lib, Deno.UnsafePointer.create(out[0]!)!);
  }
}

/** One output of a forward call, copied out of libtorch. */
export interface TorchOutput {
  /** The datatype, or undefined for one the ABI has no code for (its torch name is then unknown here). */
  datatype: Datatype | undefined;
  shape: number[];
  data: Uint8Array;
}

/** A loaded TorchScript module. */
export class TorchModule {
  readonly #lib: Lib;
  #ptr: Deno.PointerObject | null;
  /** Forward calls running on worker threads; the module is freed only after the last returns. */
  #inflight = 0;
  #closing = false;

  constructor(lib: Lib, ptr: Deno.PointerObject) {
    this.#lib = lib;
    this.#ptr = ptr;
  }

  #handle(): Deno.PointerObject {
    if (!this.#ptr || this.#closing) throw internal("Cannot use a TorchScript module: it is closed");
    return this.#ptr;
  }

  /** Forward's arguments, without self. */
  signature(): ForwardArgument[] {
    const buf = new Uint8Array(1 << 16);
    const err = new Uint8Array(ERR_LEN);
    const rc = this.#lib.symbols.torchshim_signature(
      this.#handle(),
      buf,
      BigInt(buf.length),
      err,
      BigInt(ERR_LEN),
    );
    if (rc !== 0) throw new Error(errText(err));
    return JSON.parse(errText(buf)) as ForwardArgument[];
  }

  /**
   * Runs forward on a worker thread (nonblocking), then copies the outputs out.
   * @param tensors the inputs in argument order (or the dictionary's entries)
   * @param dictNames the dictionary keys when forward takes one Dict[str, Tensor]
   * @param inferenceMode InferenceMode (true) or NoGradMode (false)
   * @returns the outputs: a tensor, or each element of a returned tuple
   * @throws Error with libtorch's reason
   */
  async forward(
    tensors: readonly Tensor[],
    dictNames: readonly string[] | undefined,
    inferenceMode: boolean,
  ) {
    const n = tensors.length;
    const dtypes = new Int32Array(n);
    const ranks = new Int32Array(n);
    const shapes = new BigInt64Array(n * MAX_DIMS);
    const data = new BigUint64Array(n);
    // A zero-length tensor still needs a valid address.
    const empty = new Uint8Array(8);
    tensors.forEach((t, i) => {
      const code = CODES.indexOf(t.datatype);
      if (code < 0) throw internal(`Cannot run a TorchScript module on a ${t.datatype} tensor`);
      if (t.shape.length > MAX_DIMS) throw internal(`Cannot run a TorchScript module on more than 8 dims`);
      dtypes[i] = code;
      ranks[i] = t.shape.length;
      t.shape.forEach((d, k) => (shapes[i * MAX_DIMS + k] = BigInt(d)));
      const bytes = t.data as Uint8Array;
      const ptr = Deno.UnsafePointer.of(bytes.byteLength > 0 ? bytes : empty);
      data[i] = BigInt(Deno.UnsafePointer.value(ptr));
    });
    const names = cstring((dictNames ?? []).join("\0"));
    const out = new BigUint64Array(1);
    const err = new Uint8Array(ERR_LEN);
    const handle = this.#handle();
    this.#inflight++;
    let rc: number;
    try {
      rc = await this.#lib.symbols.torchshim_forward(
        handle,
        n,
        dtypes,
        ranks,
        shapes,
        data,
        names,
        dictNames ? 1 : 0,
        inferenceMode ? 1 : 0,
        out,
        err,
        BigInt(ERR_LEN),
      );
    } finally {
      this.#inflight--;
      if (this.#closing && this.#inflight === 0) this.#free();
    }
    // The inputs' bytes must live until the call returns.
    void tensors;
    if (rc !== 0) throw new Error(errText(err));
    const result = Deno.UnsafePointer.create(out[0]!)!;
    try {
      const count = this.#lib.symbols.torchshim_result_count(result);
      const outputs: TorchOutput[] = [];
      for (let i = 0; i < count; i++) {
        const dtype = new Int32Array(1);
        const rank = new Int32Array(1);
        const shape = new BigInt64Array(MAX_DIMS);
        const nbytes = new BigUint64Array(1);
        if (
          this.#lib.symbols.torchshim_result_describe(
            result,
            i,
            dtype,
            rank,
            shape,
            nbytes,
            err,
            BigInt(ERR_LEN),
          ) !==
            0
        ) {
          throw new Error(errText(err));
        }
        const bytes = new Uint8Array(Number(nbytes[0]!));
        if (
          this.#lib.symbols.torchshim_result_copy(result, i, bytes, nbytes[0]!, err, BigInt(ERR_LEN)) !== 0
        ) {
          throw new Error(errText(err));
        }
        outputs.push({
          datatype: dtype[0]! >= 0 ? CODES[dtype[0]!] : undefined,
          shape: Array.from(shape.subarray(0, rank[0]!), Number),
          data: bytes,
        });
      }
      return outputs;
    } finally {
      this.#lib.symbols.torchshim_result_free(result);
    }
  }

  /** Frees the module, once the forward calls in flight have returned. */
  close(): void {
    this.#closing = true;
    if (this.#inflight === 0) this.#free();
  }

  #free(): void {
    if (this.#ptr) this.#lib.symbols.torchshim_module_free(this.#ptr);
    this.#ptr = null;
  }
}
