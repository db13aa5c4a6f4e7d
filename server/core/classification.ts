/**
 * The classification extension: an output turned into its top-N classes as "value:index[:label]" strings.
 * @module
 */

import { BytesTensor } from "./bytes_tensor.ts";
import { bf16ToNumber as bfOf, halfToNumber as halfOf, typedView, utf8Encode } from "./dtypes.ts";
import { invalidArg } from "./errors.ts";
import type { Tensor } from "./types.ts";

function formatValue(v: number | bigint, float: boolean): string {
  return float ? Number(v).toFixed(6) : String(v);
}

/**
 * Replaces an output by its top `count` classes, per batch item where the model batches.
 * @param tensor the numeric output
 * @param count how many classes to report (capped at the number of classes)
 * @param batched whether the first dim is the batch dim
 * @param labels labels by class index, if the output has a labels file
 * @returns a BYTES tensor of shape [batch, n] (or [n])
 */
export function classify(
  tensor: Tensor,
  count: number,
  batched: boolean,
  labels: readonly string[] | undefined,
): Tensor {
  if (tensor.datatype === "BYTES" || tensor.datatype === "BOOL") {
    throw invalidArg(`Cannot classify output '${tensor.name}': datatype ${tensor.datatype} is not numeric`);
  }
  const float = tensor.datatype.startsWith("FP") || tensor.datatype === "BF16";
  const view = typedView(tensor.datatype, tensor.data as Uint8Array);
  const raw = tensor.datatype === "FP16" || tensor.datatype === "BF16"
    ? Array.from(view as Uint16Array, (h) => (tensor.datatype === "FP16" ? halfOf(h) : bfOf(h)))
    : Array.from(view as ArrayLike<number | bigint>);
  const batch = batched ? (tensor.shape[0] ?? 1) : 1;
  const per = batch === 0 ? 0 : raw.length / batch;
  const n = Math.min(count, per);
  const out: Uint8Array[] = [];
  for (let b = 0; b < batch; b++) {
    const idx = Array.from({ length: per }, (_, i) => i);
    const base = b * per;
    idx.sort((x, y) => {
      const vx = raw[base + x]!, vy = raw[base + y]!;
      return vx < vy ? 1 : vx > vy ? -1 : x - y;
    });
    for (let k = 0; k < n; k++) {
      const i = idx[k]!;
      const label = labels?.[i];
      const text = `${formatValue(raw[base + i]!, float)}:${i}${label !== undefined ? `:${label}` : ""}`;
      out.push(utf8Encode(text));
    }
  }
  return {
    name: tensor.name,
    datatype: "BYTES",
    shape: batched ? [batch, n] : [n],
    data: BytesTensor.of(out),
  };
}
