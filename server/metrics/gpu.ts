/**
 * The GPUs the metrics report, read through libtrtshim (ffi/trtshim.ts): per device its UUID, utilization,
 * memory, power draw, power limit and energy. A reading a device cannot give (no NVML, a mock device not
 * given one) is left out rather than faked.
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
  /** The power drawn, in watts. */
  powerUsageWatts?: number;
  /** The enforced power limit, in watts. */
  powerLimitWatts?: number;
  /**
   * The energy consumed since the reader was made (the server started), in joules, as Triton counts
   * `nv_energy_consumption`: the growth of the device's energy counter, which only grows.
   */
  energyJoules?: number;
}

/** Reads every GPU once; the device list is fixed when the reader is made. */
export type GpuReader = () => GpuSample[];

/** Where the GPUs come from: the shim's path as the TensorRT backend finds it, and whether it was chosen. */
export interface GpuReaderOptions {
  /** The `--backend-config=tensorrt,...` entries (`shim-path`). */
  tensorrtConfig?: Record<string, string>;
}

/** What the reader keeps per device. */
interface Device {
  index: number;
  uuid: string;
  utilization: boolean;
  /** With a power reading: the energy counter at the last reading and its growth since the first (mJ). */
  power?: { lastMj: number; consumedMj: number };
}

/** A device's power reading, its energy counter in whole millijoules (as the shim reads it), or undefined. */
function readPower(
  shim: TrtShim,
  index: number,
): { usageW: number; limitW: number; energyMj: number } | undefined {
  const p = shim.power(index);
  return p && { usageW: p.usageW, limitW: p.limitW, energyMj: Math.round(p.energyJ * 1000) };
}

/**
 * Makes a reader over a shim's devices. Whether a device reports utilization and power is decided here,
 * once: a device whose first reading is UNSUPPORTED (or fails) never reports it. Energy counts from the
 * first reading.
 * @param shim the opened shim
 * @returns the reader, or undefined when the shim sees no device
 */
export function shimGpuReader(shim: TrtShim): GpuReader | undefined {
  const count = shim.deviceCount();
  if (count <= 0) return undefined;
  const devices = Array.from({ length: count }, (_, i): Device => {
    let utilization = true;
    try {
      shim.utilization(i);
    } catch {
      // UNSUPPORTED without NVML: this device reports no utilization.
      utilization = false;
    }
    const device: Device = { index: i, uuid: shim.deviceProperties(i).uuid, utilization };
    try {
      const p = readPower(shim, i);
      if (p) device.power = { lastMj: p.energyMj, consumedMj: 0 };
    } catch {
      // A device that cannot read power now reports none of the three.
    }
    return device;
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
      if (d.power) {
        try {
          const p = readPower(shim, d.index);
          if (p) {
            sample.powerUsageWatts = p.usageW;
            sample.powerLimitWatts = p.limitW;
            // The counter restarts at 0 when the driver reloads: then all of it is new.
            d.power.consumedMj += p.energyMj >= d.power.lastMj ? p.energyMj - d.power.lastMj : p.energyMj;
            d.power.lastMj = p.energyMj;
          }
        } catch {
          // As above for power; the energy counted so far is still reported.
        }
        sample.energyJoules = d.power.consumedMj / 1000;
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
