/**
 * The TypeScript view of a normalized ModelConfig (protos/model_config.proto): field names as in the proto,
 * enums as names, 64-bit integers as numbers. Only the fields the server reads are typed; the rest pass through.
 * @module
 */

/** A model input as configured. */
export interface ModelInputConfig {
  name: string;
  data_type: string;
  format?: string;
  dims: number[];
  reshape?: { shape: number[] };
  is_shape_tensor?: boolean;
  allow_ragged_batch?: boolean;
  optional?: boolean;
  [k: string]: unknown;
}

/** A model output as configured. */
export interface ModelOutputConfig {
  name: string;
  data_type: string;
  dims: number[];
  reshape?: { shape: number[] };
  label_filename?: string;
  is_shape_tensor?: boolean;
  [k: string]: unknown;
}

/** An instance group as configured. */
export interface InstanceGroupConfig {
  name: string;
  kind: string;
  count: number;
  gpus?: number[];
  [k: string]: unknown;
}

/** The version policy oneof. */
export interface VersionPolicyConfig {
  latest?: { num_versions: number };
  all?: Record<string, never>;
  specific?: { versions: number[] };
}

/** A model parameter value. */
export interface ModelParameterConfig {
  string_value: string;
}

/** A normalized model configuration. */
export interface ModelConfig {
  name: string;
  platform: string;
  backend: string;
  runtime?: string;
  version_policy?: VersionPolicyConfig;
  max_batch_size: number;
  input: ModelInputConfig[];
  output: ModelOutputConfig[];
  instance_group: InstanceGroupConfig[];
  default_model_filename: string;
  cc_model_filenames?: Record<string, string>;
  parameters?: Record<string, ModelParameterConfig>;
  dynamic_batching?: Record<string, unknown>;
  sequence_batching?: Record<string, unknown>;
  ensemble_scheduling?: Record<string, unknown>;
  [k: string]: unknown;
}

/**
 * Names the sequence batcher's control and state tensors of a config (`sequence_batching.control_input` and
 * `state`), which auto-complete and validation leave alone.
 * @param config the model config
 */
export function sequenceTensorNames(config: ModelConfig): Set<string> {
  const sb = config.sequence_batching as
    | { control_input?: { name: string }[]; state?: { input_name: string; output_name: string }[] }
    | undefined;
  const names = new Set<string>();
  for (const c of sb?.control_input ?? []) names.add(c.name);
  for (const s of sb?.state ?? []) {
    names.add(s.input_name);
    names.add(s.output_name);
  }
  return names;
}

/**
 * Sets the max_batch_size that auto-complete found in a model and, unless the config chose a scheduler,
 * turns on dynamic batching, as Triton does for models whose first dimension is dynamic.
 * @param config the config being completed, changed in place
 * @param maxBatchSize the max_batch_size
 */
export function completeBatching(config: ModelConfig, maxBatchSize: number): void {
  config.max_batch_size = maxBatchSize;
  if (!config.dynamic_batching && !config.sequence_batching && !config.ensemble_scheduling) {
    config.dynamic_batching = {};
  }
}
