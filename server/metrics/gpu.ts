/**
 * The GPUs the metrics report, read through libtrtshim (ffi/trtshim.ts): per device its UUID, utilization and
 * memory. Only what the shim's ABI offers is read; power, power limit and energy are not in it, so their
 * gauges are left out rather than faked.
 * @module
 */

import { openTrtShim, type TrtShim, trtShimPath } from "../../ffi/trtshim.ts";

/** One reading of one GPU; a value the device cannot report is left out. */
export interface GpuSample {
  /** The device UUID as nvidia-smi writes it (`GPU-...`), the `gpu_uuid` label. */
  uuid: string;
  /** Utilization, 0 to 1. */
  utilization?: number;
  /** Total memory in bytes. */
  memoryTotalBytes?: number;
  /** Used memory in bytes. */
  memoryUsedBytes?: number;
}

/** Reads every GPU once; the device list is fixed when the reader is made. */
export type GpuReader = () => GpuSample[];

/** Where the GPUs come from: the shim's path as the TensorRT backend finds it, and whether it was chosen. */
export interface GpuReaderOptions {
  /** The `--backend-config=tensorrt,...` entries (`shim-path`). */
  tensorrtConfig?: Record<string, string>;
}

/**
 * Makes a reader over a shim's devices.
 * @param shim the opened shim
 * @returns the reader, or undefined when the shim sees no device
 */
export function shimGpuReader(shim: TrtShim): GpuReader | undefined {
  const count = shim.deviceCount();
  if (count <= 0) return undefined;
  const devices = Array.from({ length: count }, (_, i) => {
    let utilization = true;
    try {
      shim.utilization(i);
    } catch {
      // UNSUPPORTED without NVML: this device reports no utilization.
      utilization = false;
    }
    return { index: i, uuid: shim.deviceProperties(i).uuid, utilization };
  });
  return () =>
    devices.map((d) => {
      const sample: GpuSample = { uuid: d.uuid };
      try {
        if (d.utilization) sample.utilization = shim.utilization(d.index) / 100;
      } catch {
        // A failed reading leaves the value out of this sample.
      }
      try {
        const m = shim.memoryInfo(d.index);
        sample.memoryTotalBytes = m.total;
        sample.memoryUsedBytes = m.total - m.free;
      } catch {
        // As above.
      }
      return sample;
    });
}

/**
 * Opens the GPU reader the server reports from: the shim the TensorRT backend uses (`shim-path`,
 * `DINFER_TRTSHIM`, else `build/shim/libtrtshim.so`). A MOCK build counts only when it was chosen
 * explicitly (`shim-path` or `DINFER_TRTSHIM`), so that a machine without a GPU does not report the mock's
 * device; no library, a library that cannot be opened, or no device gives no reader.
 * @param options where the shim is
 * @returns the reader, or undefined when there is no GPU to report
 */
export function openGpuReader(options: GpuReaderOptions = {}): GpuReader | undefined {
  const config = options.tensorrtConfig ?? {};
  try {
    const explicit = Boolean(config["shim-path"] || Deno.env.get("DINFER_TRTSHIM"));
    const path = trtShimPath(config);
    if (!Deno.statSync(path).isFile) return undefined;
    const shim = openTrtShim(path);
    if (shim.buildKind() === "mock" && !explicit) return undefined;
    return shimGpuReader(shim);
  } catch {
    return undefined;
  }
}
