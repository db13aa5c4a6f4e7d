/**
 * Model warmup (`model_warmup`): each sample runs `count` times on every instance before the version is
 * READY; a failure makes the version UNAVAILABLE with the reason.
 * @module
 */

import { BytesTensor } from "../core/bytes_tensor.ts";
import { join } from "node:path";
import { checkMadeTensor, elementCount, elementSize, fromConfigType, utf8Encode } from "../core/dtypes.ts";
import { invalidArg } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { Tensor } from "../core/types.ts";
import type { BackendInstance } from "../backends/backend.ts";

interface WarmupInput {
  data_type: string;
  dims: number[];
  zero_data?: boolean;
  random_data?: boolean;
  input_data_file?: string;
}

interface WarmupSample {
  name: string;
  batch_size: number;
  inputs: Record<string, WarmupInput>;
  count: number;
}

async function tensorFor(
  config: ModelConfig,
  modelDir: string,
  sample: WarmupSample,
  name: string,
  input: WarmupInput,
): Promise<Tensor> {
  const where = `Cannot warm up '${config.name}' with sample '${sample.name}'`;
  const datatype = fromConfigType(input.data_type);
  if (!datatype) throw invalidArg(`${where}: input '${name}' has no valid data_type`);
  const batch = config.max_batch_size > 0 ? [Math.max(1, sample.batch_size)] : [];
  const shape = [...batch, ...input.dims];
  const count = elementCount(shape);
  checkMadeTensor(datatype, count, `${where}: input '${name}'`);
  if (input.input_data_file) {
    const bytes = await Deno.readFile(join(modelDir, "warmup", input.input_data_file)).catch((err) => {
      throw invalidArg(`${where}: cannot read 'warmup/${input.input_data_file}': ${(err as Error).message}`);
    });
    if (datatype === "BYTES") {
      return { name, datatype, shape, data: BytesTensor.fromWire(bytes, count, `input '${name}'`) };
    }
    const want = count * elementSize(datatype);
    if (bytes.byteLength < want) {
      throw invalidArg(
        `${where}: 'warmup/${input.input_data_file}' has ${bytes.byteLength} bytes, expected ${want}`,
      );
    }
    return { name, datatype, shape, data: bytes.subarray(0, want) };
  }
  if (datatype === "BYTES") {
    const make =
      () => (input.random_data ? utf8Encode(String(Math.floor(Math.random() * 10))) : new Uint8Array(0));
    return { name, datatype, shape, data: BytesTensor.of(Array.from({ length: count }, make)) };
  }
  const data = new Uint8Array(count * elementSize(datatype));
  if (input.random_data) {
    if (datatype === "FP32" || datatype === "FP64") {
      const view = datatype === "FP32" ? new Float32Array(data.buffer) : new Float64Array(data.buffer);
      for (let i = 0; i < view.length; i++) view[i] = Math.random();
    } else if (datatype === "BOOL") {
      for (let i = 0; i < data.length; i++) data[i] = Math.random() < 0.5 ? 0 : 1;
    } else if (datatype === "FP16" || datatype === "BF16") {
      // Small positive values: exponent bits kept low so that no sample is Inf or NaN.
      const view = new Uint16Array(data.buffer);
      for (let i = 0; i < view.length; i++) {
        view[i] = datatype === "FP16" ? 0x3000 + (i % 0x400) : 0x3e00 + (i % 0x80);
      }
    } else {
      crypto.getRandomValues(data);
    }
  }
  return { name, datatype, shape, data };
}

/**
 * Runs the config's warmup samples on every instance.
 * @param config the model config
 * @param modelDir the model folder (input_data_file is read from its `warmup/` folder)
 * @param instances the instances to warm up
 * @param signal the load's cancellation (an unload while it loads): checked before each run
 * @throws ServerError naming the sample and what failed; the signal's reason once it is aborted
 */
export async function warmup(
  config: ModelConfig,
  modelDir: string,
  instances: BackendInstance[],
  signal?: AbortSignal,
): Promise<void> {
  const samples = (config.model_warmup ?? []) as WarmupSample[];
  const outputs = config.output.map((o) => o.name);
  for (const sample of samples) {
    const inputs = new Map<string, Tensor>();
    for (const [name, input] of Object.entries(sample.inputs ?? {})) {
      inputs.set(name, await tensorFor(config, modelDir, sample, name, input));
    }
    const runs = Math.max(1, sample.count ?? 1);
    for (const instance of instances) {
      for (let i = 0; i < runs; i++) {
        signal?.throwIfAborted();
        try {
          await instance.execute(inputs, outputs);
        } catch (err) {
          throw invalidArg(
            `Cannot warm up '${config.name}' with sample '${sample.name}': ${(err as Error).message}`,
          );
        }
      }
    }
  }
}
