/**
 * Ensembles (`platform: "ensemble"`): the step graph is checked at load, and each request flows through the
 * steps as a data-flow graph: a step runs as soon as all its inputs exist, independent steps run at once.
 * @module
 */

import { classify } from "../core/classification.ts";
import { fromConfigType } from "../core/dtypes.ts";
import { internal, invalidArg, toServerError, unavailable } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { InferRequest, InferResponse, Tensor, TensorSpec } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import { nowNs } from "../core/clock.ts";
import type { VersionStats } from "../metrics/stats.ts";
import type { Scheduler } from "./scheduler.ts";

/** One step of an ensemble as configured. */
export interface EnsembleStep {
  model_name: string;
  model_version: number;
  input_map: Record<string, string>;
  output_map: Record<string, string>;
}

/** What the ensemble checks need to know of a composing model. */
export interface StepModel {
  maxBatchSize: number;
  /** Whether the model is decoupled (its responses stream; an ensemble step needs exactly one). */
  decoupled?: boolean;
  inputs: TensorSpec[];
  outputs: TensorSpec[];
}

/** The steps of an ensemble config. */
export function ensembleSteps(config: ModelConfig): EnsembleStep[] {
  const sched = config.ensemble_scheduling as { step?: EnsembleStep[] } | undefined;
  return sched?.step ?? [];
}

function dimsCompatible(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === -1 || b[i] === -1 || d === b[i]);
}

/**
 * Checks an ensemble's graph: known step models, each tensor produced once, every step input and ensemble
 * output produced, no cycles, datatypes and dims that agree, batching that the steps support.
 * @param config the ensemble config
 * @param lookup the composing model's signature, or undefined when it is not loaded
 * @returns the steps in an order where each step's producers come first
 * @throws ServerError INVALID_ARG naming the problem
 */
export function checkEnsemble(
  config: ModelConfig,
  lookup: (name: string, version: number) => StepModel | undefined,
): EnsembleStep[] {
  const fail = (reason: string): never => {
    throw invalidArg(`Cannot load ensemble '${config.name}': ${reason}`);
  };
  // Its steps give one response each, so an ensemble answers once: one declared decoupled would leave a
  // stream's client waiting for responses and a final flag that never come.
  if ((config.model_transaction_policy as { decoupled?: boolean } | undefined)?.decoupled === true) {
    fail("a decoupled ensemble (model_transaction_policy { decoupled: true }) is not supported");
  }
  const steps = ensembleSteps(config);
  if (steps.length === 0) fail("ensemble_scheduling has no steps");
  interface Source {
    datatype: string;
    dims: number[];
    producer: number; // -1 for ensemble inputs
  }
  const tensors = new Map<string, Source>();
  for (const input of config.input) {
    tensors.set(input.name, {
      datatype: fromConfigType(input.data_type) ?? "",
      dims: input.dims,
      producer: -1,
    });
  }
  const models = steps.map((s, i) => {
    const m = lookup(s.model_name, s.model_version);
    if (!m) fail(`step ${i} uses model '${s.model_name}', which is not loaded`);
    if (m!.decoupled) {
      fail(
        `step ${i} uses model '${s.model_name}', which is decoupled; ensemble steps need one response per request`,
      );
    }
    if (config.max_batch_size > 0 && m!.maxBatchSize < config.max_batch_size) {
      fail(
        `step ${i} model '${s.model_name}' has max_batch_size ${
          m!.maxBatchSize
        }, less than the ensemble's ${config.max_batch_size}`,
      );
    }
    return m!;
  });
  steps.forEach((s, i) => {
    const m = models[i]!;
    for (const [own, ens] of Object.entries(s.output_map)) {
      const spec = m.outputs.find((o) => o.name === own);
      if (!spec) fail(`step ${i} maps output '${own}', which model '${s.model_name}' does not have`);
      const prior = tensors.get(ens);
      if (prior) {
        fail(
          `tensor '${ens}' is produced by step ${i} and by ${
            prior.producer === -1 ? "the ensemble inputs" : `step ${prior.producer}`
          }`,
        );
      }
      tensors.set(ens, { datatype: spec!.datatype, dims: spec!.dims, producer: i });
    }
  });
  const deps: number[][] = steps.map(() => []);
  steps.forEach((s, i) => {
    const m = models[i]!;
    for (const [own, ens] of Object.entries(s.input_map)) {
      const spec = m.inputs.find((t) => t.name === own);
      if (!spec) fail(`step ${i} maps input '${own}', which model '${s.model_name}' does not have`);
      const src = tensors.get(ens);
      if (!src) {
        fail(
          `step ${i} input '${own}' reads tensor '${ens}', which no step produces and is not an ensemble input`,
        );
      }
      if (src!.datatype !== spec!.datatype) {
        fail(
          `tensor '${ens}' has datatype ${src!.datatype} but step ${i} input '${own}' takes ${
            spec!.datatype
          }`,
        );
      }
      if (!dimsCompatible(src!.dims, spec!.dims)) {
        fail(`tensor '${ens}' has dims [${src!.dims}] but step ${i} input '${own}' takes [${spec!.dims}]`);
      }
      if (src!.producer >= 0) deps[i]!.push(src!.producer);
    }
    for (const spec of m.inputs) {
      if (!spec.optional && !(spec.name in s.input_map)) {
        fail(`step ${i} leaves input '${spec.name}' of '${s.model_name}' unmapped`);
      }
    }
  });
  for (const out of config.output) {
    const src = tensors.get(out.name);
    if (!src || src.producer === -1) fail(`ensemble output '${out.name}' is not produced by any step`);
    const dt = fromConfigType(out.data_type);
    if (src!.datatype !== dt) {
      fail(`ensemble output '${out.name}' is ${dt} but its step produces ${src!.datatype}`);
    }
    if (!dimsCompatible(src!.dims, out.dims)) {
      fail(`ensemble output '${out.name}' has dims [${out.dims}] but its step produces [${src!.dims}]`);
    }
  }
  // Topological order; a cycle leaves steps behind.
  const order: number[] = [];
  const state = steps.map(() => 0);
  const visit = (i: number, path: number[]) => {
    if (state[i] === 2) return;
    if (state[i] === 1) fail(`the steps form a cycle (${[...path, i].map((k) => `step ${k}`).join(" -> ")})`);
    state[i] = 1;
    for (const d of deps[i]!) visit(d, [...path, i]);
    state[i] = 2;
    order.push(i);
  };
  steps.forEach((_, i) => visit(i, []));
  return order.map((i) => steps[i]!);
}

/** Runs a request on another model (the registry's infer). */
export type InferFn = (request: InferRequest) => Promise<InferResponse>;

/** The scheduler of an ensemble version. */
export class EnsembleScheduler implements Scheduler {
  #config: ModelConfig;
  #version: string;
  #steps: EnsembleStep[];
  #infer: InferFn;
  #stats: VersionStats | undefined;
  #outputs: Map<string, TensorSpec>;
  #inflight = 0;
  #stopping = false;
  #drained: (() => void) | undefined;

  /**
   * Creates the scheduler.
   * @param config the ensemble config
   * @param version the version string for responses
   * @param steps the checked steps (checkEnsemble)
   * @param infer runs a request on a composing model
   * @param outputs the ensemble's output specs (labels for classification)
   * @param stats where to record statistics
   */
  constructor(
    config: ModelConfig,
    version: string,
    steps: EnsembleStep[],
    infer: InferFn,
    outputs: TensorSpec[],
    stats?: VersionStats,
  ) {
    this.#config = config;
    this.#version = version;
    this.#steps = steps;
    this.#infer = infer;
    this.#stats = stats;
    this.#outputs = new Map(outputs.map((o) => [o.name, o]));
  }

  async enqueue(request: ValidatedRequest, received: number = nowNs()): Promise<InferResponse> {
    if (this.#stopping) {
      throw unavailable(`Cannot infer '${this.#config.name}': the model version is unloading`);
    }
    this.#inflight++;
    const start = nowNs();
    try {
      const response = await this.#run(request);
      const end = nowNs();
      const times = { batchSize: request.batchSize, start, inputEnd: start, inferEnd: end, outputEnd: end };
      this.#stats?.recordExecution(times);
      this.#stats?.recordSuccess(request.batchSize, received, times);
      return response;
    } catch (err) {
      this.#stats?.recordFailure(received, "BACKEND");
      throw toServerError(err);
    } finally {
      this.#inflight--;
      if (this.#stopping && this.#inflight === 0) this.#drained?.();
    }
  }

  async #run(request: ValidatedRequest): Promise<InferResponse> {
    const tensors = new Map<string, Tensor>(request.inputs);
    const pending = new Set(this.#steps.map((_, i) => i));
    const running = new Map<number, Promise<void>>();
    const wanted = new Set(request.outputs.map((o) => o.name));
    const req = request.request;
    while (pending.size > 0 || running.size > 0) {
      for (const i of [...pending]) {
        const step = this.#steps[i]!;
        const ready = Object.values(step.input_map).every((t) => tensors.has(t));
        if (!ready) continue;
        pending.delete(i);
        const inputs: Tensor[] = Object.entries(step.input_map).map(([own, ens]) => ({
          ...tensors.get(ens)!,
          name: own,
        }));
        const p = this.#infer({
          model: step.model_name,
          version: step.model_version > 0 ? String(step.model_version) : "",
          id: req.id,
          inputs,
          outputs: Object.keys(step.output_map).map((name) => ({ name, classification: 0, parameters: {} })),
          parameters: req.parameters,
        }).then((res) => {
          for (const t of res.outputs) {
            const ens = step.output_map[t.name];
            if (ens !== undefined) tensors.set(ens, { ...t, name: ens });
          }
          running.delete(i);
        });
        p.catch(() => {}); // a failure is seen through the race below; later ones must not go unhandled
        running.set(i, p);
      }
      if (running.size === 0) {
        if (pending.size > 0) {
          throw internal(
            `Cannot run ensemble '${this.#config.name}': steps are waiting on tensors nobody produces`,
          );
        }
        break;
      }
      await Promise.race(running.values());
      if ([...wanted].every((w) => tensors.has(w)) && running.size === 0) break;
    }
    const batched = this.#config.max_batch_size > 0;
    const outputs = request.outputs.map((o) => {
      const t = tensors.get(o.name);
      if (!t) throw internal(`Cannot run ensemble '${this.#config.name}': no step produced '${o.name}'`);
      return o.classification > 0
        ? classify(t, o.classification, batched, this.#outputs.get(o.name)?.labels)
        : t;
    });
    // As Triton: an ensemble's response carries the request's sequence parameters.
    const p = req.parameters;
    const parameters = {
      sequence_id: p.sequence_id ?? 0,
      sequence_start: p.sequence_start === true,
      sequence_end: p.sequence_end === true,
    };
    return { model: this.#config.name, version: this.#version, id: req.id, outputs, parameters };
  }

  inflightCount(): number {
    return this.#inflight;
  }

  queuedCount(): number {
    return 0;
  }

  stop(): Promise<void> {
    this.#stopping = true;
    if (this.#inflight === 0) return Promise.resolve();
    return new Promise((resolve) => (this.#drained = resolve));
  }
}
