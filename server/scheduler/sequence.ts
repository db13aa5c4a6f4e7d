/**
 * The sequence batcher (`sequence_batching`): requests carry a correlation id (`sequence_id`, uint64 or
 * string) and `sequence_start` / `sequence_end` flags; the requests of one sequence run one at a time and in
 * order, batched with other sequences' requests, with control inputs (START, END, READY, CORRID) filled per
 * request and implicit state (`state`) carried from one request of a sequence to the next.
 *
 * Strategies: `direct` binds each sequence to a slot of one instance (max_batch_size slots per instance) and
 * batches only that instance's sequences; `oldest` lets up to `max_candidate_sequences` sequences hold a slot
 * and batches the oldest requests on any free instance, with `preferred_batch_size` and
 * `max_queue_delay_microseconds`. Sequences beyond the slots wait in a backlog.
 *
 * Iterative sequences (`iterative_sequence: true`): a request the model gives back (RescheduledRequest, a Python
 * model's TRITONSERVER_REQUEST_RELEASE_RESCHEDULE) runs again next in its sequence, no longer a first request,
 * until a run releases it; a request without a correlation id is a sequence of its own (START and END on its
 * first run, END on the runs after).
 * @module
 */

import { BytesTensor } from "../core/bytes_tensor.ts";
import { join } from "node:path";
import {
  bytesOf,
  checkMadeTensor,
  type Datatype,
  elementCount,
  elementSize,
  fromConfigType,
  utf8Encode,
} from "../core/dtypes.ts";
import { invalidArg, toServerError, unavailable } from "../core/errors.ts";
import type { ModelConfig } from "../core/model_config.ts";
import type { InferResponse, ParamValue, Tensor } from "../core/types.ts";
import type { ValidatedRequest } from "../core/validate.ts";
import { type BackendInstance, RescheduledRequest } from "../backends/backend.ts";
import { nowNs } from "../core/clock.ts";
import type { VersionStats } from "../metrics/stats.ts";
import { batchCompatible, type BatchModel, executeBatch, isModelError } from "./batch.ts";
import type { Scheduler } from "./scheduler.ts";
import { type PendingRequest, QueueingScheduler, recordFailedExecution } from "./pending.ts";

type ControlKind =
  | "CONTROL_SEQUENCE_START"
  | "CONTROL_SEQUENCE_READY"
  | "CONTROL_SEQUENCE_END"
  | "CONTROL_SEQUENCE_CORRID";

interface ControlConfig {
  kind: ControlKind;
  int32_false_true?: number[];
  fp32_false_true?: number[];
  bool_false_true?: boolean[];
  data_type?: string;
}

interface InitialStateConfig {
  data_type: string;
  dims: number[];
  zero_data?: boolean;
  data_file?: string;
  name?: string;
}

interface StateConfig {
  input_name: string;
  output_name: string;
  data_type: string;
  dims: number[];
  initial_state?: InitialStateConfig[];
}

interface SequenceBatchingConfig {
  max_sequence_idle_microseconds?: number;
  iterative_sequence?: boolean;
  control_input?: { name: string; control: ControlConfig[] }[];
  state?: StateConfig[];
  direct?: { max_queue_delay_microseconds?: number };
  oldest?: {
    max_candidate_sequences?: number;
    preferred_batch_size?: number[];
    max_queue_delay_microseconds?: number;
  };
}

/** A control input: how to fill one tensor per request. */
interface Control {
  name: string;
  kind: ControlKind;
  datatype: Datatype;
  values: [number | boolean, number | boolean] | undefined;
}

/** An implicit state tensor. */
interface StateSpec {
  input: string;
  output: string;
  datatype: Datatype;
  initial: Tensor["data"];
  initialShape: number[];
}

type SequenceId = number | bigint | string;

interface Pending extends PendingRequest {
  start: boolean;
  end: boolean;
}

interface Sequence {
  id: SequenceId;
  queue: Pending[];
  executing: boolean;
  state: Map<string, Tensor> | undefined;
  lastActive: number;
  /** The instance the sequence is bound to (direct), or -1; undefined while in the backlog. */
  slot: number | undefined;
  /**
   * Whether its last request queued ends it: as in Triton, which forgets the correlation id when an END request
   * is queued, a later request without START is refused (it would have run on the ended sequence's state).
   */
  ended: boolean;
}

/** The key of the sequence of the `n`th request without a correlation id to a model with iterative sequences. */
function ownSeqKey(n: number): string {
  return `i:${n}`;
}

function seqKey(id: SequenceId): string {
  return typeof id === "string" ? `s:${id}` : `n:${id}`;
}

function seqText(id: SequenceId): string {
  return typeof id === "string" ? `'${id}'` : String(id);
}

/** The sequence batcher. */
export class SequenceScheduler extends QueueingScheduler implements Scheduler {
  #model: BatchModel;
  #name: string;
  #instances: BackendInstance[];
  #free: Set<number>;
  #maxBatch: number;
  #controls: Control[];
  #states: StateSpec[];
  #idleMs: number;
  #direct: boolean;
  #slotsPerInstance: number;
  #candidates: number;
  #preferred: number[];
  #delayMs: number;
  /** Whether the model runs iterative sequences (`iterative_sequence`): requests the model gives back run again. */
  #iterative: boolean;
  /** Requests without a correlation id to such a model, each a sequence of its own, counted for their keys. */
  #ownSequences = 0;
  #sequences = new Map<string, Sequence>();
  #backlog: Sequence[] = [];
  #slotUse: number[];
  #timedOut = new Map<string, number>();
  #stats: VersionStats | undefined;
  #idleTimer: ReturnType<typeof setInterval> | undefined;
  #delayTimer: ReturnType<typeof setTimeout> | undefined;

  private constructor(
    model: BatchModel,
    config: ModelConfig,
    instances: BackendInstance[],
    controls: Control[],
    states: StateSpec[],
    stats: VersionStats | undefined,
  ) {
    super();
    const sb = config.sequence_batching as SequenceBatchingConfig;
    this.#model = model;
    this.#name = config.name;
    this.#instances = instances;
    this.#free = new Set(instances.map((_, i) => i));
    this.#maxBatch = Math.max(1, config.max_batch_size);
    this.#controls = controls;
    this.#states = states;
    this.#idleMs = (sb.max_sequence_idle_microseconds || 1_000_000) / 1000;
    this.#direct = !sb.oldest;
    this.#slotsPerInstance = this.#maxBatch;
    this.#candidates = sb.oldest?.max_candidate_sequences || this.#maxBatch * instances.length;
    this.#preferred = [...(sb.oldest?.preferred_batch_size ?? [])].sort((a, b) => a - b);
    this.#delayMs = ((sb.oldest ?? sb.direct)?.max_queue_delay_microseconds ?? 0) / 1000;
    this.#slotUse = instances.map(() => 0);
    this.#stats = stats;
    this.#iterative = sb.iterative_sequence === true;
  }

  /**
   * Creates the sequence batcher of a model version: reads control inputs and initial states.
   * @param model the model's batch facts
   * @param config the model config (with `sequence_batching`)
   * @param instances the instances
   * @param modelDir the model folder (initial state files live in its `initial_state/` folder)
   * @param stats where to record statistics
   */
  static async create(
    model: BatchModel,
    config: ModelConfig,
    instances: BackendInstance[],
    modelDir: string,
    stats?: VersionStats,
  ): Promise<SequenceScheduler> {
    const sb = config.sequence_batching as SequenceBatchingConfig;
    const fail = (reason: string): never => {
      throw invalidArg(`Cannot load '${config.name}': sequence_batching ${reason}`);
    };
    const controls: Control[] = [];
    for (const ci of sb.control_input ?? []) {
      for (const c of ci.control ?? []) {
        if (c.kind === "CONTROL_SEQUENCE_CORRID") {
          const dt = fromConfigType(c.data_type ?? "");
          if (!dt || !["UINT64", "INT64", "UINT32", "INT32", "BYTES"].includes(dt)) {
            fail(
              `control '${ci.name}' (CORRID) needs data_type TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING`,
            );
          }
          controls.push({ name: ci.name, kind: c.kind, datatype: dt!, values: undefined });
          continue;
        }
        let datatype: Datatype;
        let values: [number | boolean, number | boolean];
        if ((c.int32_false_true ?? []).length > 0) {
          datatype = "INT32";
          values = c.int32_false_true as [number, number];
        } else if ((c.fp32_false_true ?? []).length > 0) {
          datatype = "FP32";
          values = c.fp32_false_true as [number, number];
        } else if ((c.bool_false_true ?? []).length > 0) {
          datatype = "BOOL";
          values = c.bool_false_true as [boolean, boolean];
        } else {
          return fail(
            `control '${ci.name}' (${c.kind}) needs int32_false_true, fp32_false_true or bool_false_true`,
          );
        }
        if (values.length !== 2) fail(`control '${ci.name}' must list exactly two values, false then true`);
        controls.push({ name: ci.name, kind: c.kind, datatype, values });
      }
    }
    const states: StateSpec[] = [];
    for (const s of sb.state ?? []) {
      const datatype = fromConfigType(s.data_type);
      if (!datatype) return fail(`state '${s.input_name}' has no valid data_type`);
      const init = s.initial_state?.[0];
      const shape = init?.dims?.length ? init.dims : s.dims;
      if (shape.some((d) => d < 0)) {
        fail(`state '${s.input_name}' has variable dims and no initial_state dims`);
      }
      const count = elementCount(shape);
      try {
        checkMadeTensor(datatype, count, `state '${s.input_name}'`);
      } catch (err) {
        fail((err as Error).message);
      }
      let initial: Tensor["data"];
      if (init?.data_file) {
        const path = join(modelDir, "initial_state", init.data_file);
        const bytes = await Deno.readFile(path).catch((err) =>
          fail(`cannot read '${path}': ${(err as Error).message}`)
        );
        initial = datatype === "BYTES"
          ? BytesTensor.fromWire(bytes, count, `state '${s.input_name}'`)
          : bytes;
        if (datatype !== "BYTES" && bytes.byteLength !== count * elementSize(datatype)) {
          fail(
            `initial state file '${init.data_file}' has ${bytes.byteLength} bytes, expected ${
              count * elementSize(datatype)
            }`,
          );
        }
      } else {
        initial = datatype === "BYTES"
          ? BytesTensor.of(Array.from({ length: count }, () => new Uint8Array(0)))
          : new Uint8Array(count * elementSize(datatype));
      }
      states.push({ input: s.input_name, output: s.output_name, datatype, initial, initialShape: shape });
    }
    return new SequenceScheduler(model, config, instances, controls, states, stats);
  }

  enqueue(request: ValidatedRequest, received: number = nowNs()): Promise<InferResponse> {
    const fail = (err: unknown) => {
      this.#stats?.recordFailure(received, "REJECTED");
      return Promise.reject(err);
    };
    if (this.stopping) {
      return fail(unavailable(`Cannot infer '${this.#name}': the model version is unloading`));
    }
    const p = request.request.parameters;
    const id = p.sequence_id;
    // A model with iterative sequences takes a request without a correlation id as a sequence of its own.
    const own = id === undefined || id === 0 || id === "" || id === 0n;
    if (own && !this.#iterative) {
      return fail(
        invalidArg(
          `Cannot infer '${this.#name}': inference request to model '${this.#name}' must specify a non-zero or non-empty correlation ID (sequence_id)`,
        ),
      );
    }
    // A number beyond 2^53 is not exact (an integer literal that long is a bigint), and a uint64 ends at 2^64.
    if (
      typeof id === "boolean" || (typeof id === "number" && (!Number.isSafeInteger(id) || id < 0)) ||
      (typeof id === "bigint" && (id < 0n || id >= 1n << 64n))
    ) {
      return fail(
        invalidArg(`Cannot infer '${this.#name}': sequence_id must be an unsigned integer or a string`),
      );
    }
    const flag = (name: string, v: ParamValue | undefined): boolean => {
      if (v === undefined) return false;
      if (typeof v !== "boolean") {
        throw invalidArg(`Cannot infer '${this.#name}': parameter '${name}' must be a boolean`);
      }
      return v;
    };
    let start: boolean, end: boolean;
    try {
      start = flag("sequence_start", p.sequence_start) || own;
      end = flag("sequence_end", p.sequence_end) || own;
    } catch (err) {
      return fail(err);
    }
    if (request.batchSize !== 1 && this.#model.batched) {
      return fail(
        invalidArg(
          `Cannot infer '${this.#name}': sequence requests must have batch size 1, got ${request.batchSize}`,
        ),
      );
    }
    // Refused here, not at execution: a sequence must not take a slot, nor fail the batch it would join.
    if (
      !own && typeof id === "string" &&
      this.#controls.some((c) => c.kind === "CONTROL_SEQUENCE_CORRID" && c.datatype !== "BYTES")
    ) {
      return fail(this.#stringCorrIdError(id));
    }
    const sid = (own ? 0 : id) as SequenceId;
    const key = own ? ownSeqKey(++this.#ownSequences) : seqKey(sid);
    let seq = this.#sequences.get(key);
    if (!seq || (seq.ended && !start)) {
      if (!start) {
        const timedOut = this.#timedOut.has(key);
        return fail(
          invalidArg(
            timedOut
              ? `Cannot infer '${this.#name}': sequence ${
                seqText(sid)
              } was released after being idle for more than max_sequence_idle_microseconds (${
                this.#idleMs * 1000
              }); start it again with sequence_start`
              : `Cannot infer '${this.#name}': sequence ${
                seqText(sid)
              } is not active; its first request must set sequence_start`,
          ),
        );
      }
      this.#timedOut.delete(key);
      seq = {
        id: sid,
        queue: [],
        executing: false,
        state: undefined,
        lastActive: performance.now(),
        slot: undefined,
        ended: false,
      };
      this.#sequences.set(key, seq);
      this.#assignSlot(seq);
      this.#armIdle();
    }
    const s = seq;
    request.request.trace?.mark("QUEUE_START");
    return new Promise((resolve, reject) => {
      s.queue.push({ request, resolve, reject, enqueuedAt: performance.now(), received, start, end });
      s.ended = end;
      s.lastActive = performance.now();
      this.queued++;
      this.#pump();
    });
  }

  override stop(): Promise<void> {
    const stopped = super.stop();
    if (this.inflightCount() === 0) this.#clearTimers();
    return stopped;
  }

  #clearTimers(): void {
    if (this.#idleTimer !== undefined) clearInterval(this.#idleTimer);
    if (this.#delayTimer !== undefined) clearTimeout(this.#delayTimer);
    this.#idleTimer = undefined;
    this.#delayTimer = undefined;
  }

  /** Gives a sequence a slot if one is free, else puts it in the backlog. */
  #assignSlot(seq: Sequence): void {
    if (this.#direct) {
      let best = -1;
      for (let i = 0; i < this.#slotUse.length; i++) {
        if (
          this.#slotUse[i]! < this.#slotsPerInstance &&
          (best === -1 || this.#slotUse[i]! < this.#slotUse[best]!)
        ) best = i;
      }
      if (best >= 0) {
        this.#slotUse[best]!++;
        seq.slot = best;
        return;
      }
    } else {
      const used = this.#slotUse[0]!;
      if (used < this.#candidates) {
        this.#slotUse[0] = used + 1;
        seq.slot = -1;
        return;
      }
    }
    seq.slot = undefined;
    this.#backlog.push(seq);
  }

  #release(seq: Sequence): void {
    this.#sequences.delete(seqKey(seq.id));
    if (seq.slot === undefined) {
      this.#backlog = this.#backlog.filter((s) => s !== seq);
    } else {
      this.#slotUse[Math.max(0, seq.slot)]!--;
      const next = this.#backlog.shift();
      if (next) this.#assignSlot(next);
    }
    if (this.#sequences.size === 0 && this.#idleTimer !== undefined) {
      clearInterval(this.#idleTimer);
      this.#idleTimer = undefined;
    }
  }

  #armIdle(): void {
    if (this.#idleTimer !== undefined) return;
    this.#idleTimer = setInterval(() => this.#sweepIdle(), Math.max(10, Math.min(1000, this.#idleMs / 2)));
  }

  #sweepIdle(): void {
    const now = performance.now();
    for (const seq of [...this.#sequences.values()]) {
      if (seq.executing || seq.queue.length > 0) continue;
      if (now - seq.lastActive > this.#idleMs) {
        this.#timedOut.set(seqKey(seq.id), now);
        this.#release(seq);
      }
    }
    // Remember released ids for a while, for the error message.
    for (const [k, t] of this.#timedOut) if (now - t > 60_000) this.#timedOut.delete(k);
    this.#pump();
  }

  #pump(): void {
    for (const i of [...this.#free]) {
      const batch = this.#take(i);
      if (!batch) continue;
      this.#free.delete(i);
      this.#run(i, batch);
    }
    if (this.settle()) this.#clearTimers();
  }

  /** The next batch for instance `i`: the oldest waiting request of each eligible sequence. */
  #take(i: number): { seq: Sequence; pending: Pending }[] | undefined {
    const ready: Sequence[] = [];
    for (const seq of this.#sequences.values()) {
      if (seq.executing || seq.queue.length === 0 || seq.slot === undefined) continue;
      if (this.#direct && seq.slot !== i) continue;
      ready.push(seq);
    }
    if (ready.length === 0) return undefined;
    ready.sort((a, b) => a.queue[0]!.enqueuedAt - b.queue[0]!.enqueuedAt);
    const first = ready[0]!;
    const batch = [{ seq: first, pending: first.queue[0]! }];
    for (const seq of ready.slice(1)) {
      if (batch.length >= this.#maxBatch) break;
      if (!this.#model.batched) break;
      if (!batchCompatible(first.queue[0]!.request, seq.queue[0]!.request)) continue;
      batch.push({ seq, pending: seq.queue[0]! });
    }
    const full = batch.length >= this.#maxBatch;
    const preferred = this.#preferred.length > 0 && this.#preferred.includes(batch.length);
    const waited = performance.now() - first.queue[0]!.enqueuedAt;
    if (!full && !preferred && this.#delayMs > 0 && waited < this.#delayMs) {
      if (this.#delayTimer === undefined) {
        this.#delayTimer = setTimeout(() => {
          this.#delayTimer = undefined;
          this.#pump();
        }, this.#delayMs - waited);
      }
      return undefined;
    }
    if (this.#preferred.length > 0 && !full) {
      const cut = [...this.#preferred].reverse().find((p) => p <= batch.length);
      if (cut !== undefined) batch.length = cut;
    }
    return batch;
  }

  #stringCorrIdError(id: string): Error {
    return invalidArg(
      `Cannot infer '${this.#name}': the model takes numeric correlation ids, got string '${id}'`,
    );
  }

  #controlTensor(c: Control, pending: Pending, seq: Sequence): Tensor {
    const shape = this.#model.batched ? [1, 1] : [1];
    if (c.kind === "CONTROL_SEQUENCE_CORRID") {
      const id = seq.id;
      let data: Tensor["data"];
      if (c.datatype === "BYTES") data = BytesTensor.of([utf8Encode(String(id))]);
      else if (typeof id === "string") throw this.#stringCorrIdError(id);
      else if (c.datatype === "UINT64") data = bytesOf(new BigUint64Array([BigInt(id)]));
      else if (c.datatype === "INT64") data = bytesOf(new BigInt64Array([BigInt(id)]));
      else if (c.datatype === "UINT32") data = bytesOf(new Uint32Array([Number(id)]));
      else data = bytesOf(new Int32Array([Number(id)]));
      return { name: c.name, datatype: c.datatype, shape, data };
    }
    const on = c.kind === "CONTROL_SEQUENCE_START"
      ? pending.start
      : c.kind === "CONTROL_SEQUENCE_END"
      ? pending.end
      : true; // READY: every request in a batch is ready
    const v = c.values![on ? 1 : 0]!;
    const data = c.datatype === "INT32"
      ? bytesOf(new Int32Array([v as number]))
      : c.datatype === "FP32"
      ? bytesOf(new Float32Array([v as number]))
      : new Uint8Array([v ? 1 : 0]);
    return { name: c.name, datatype: c.datatype, shape, data };
  }

  #augment(seq: Sequence, pending: Pending): ValidatedRequest {
    const inputs = new Map(pending.request.inputs);
    for (const c of this.#controls) inputs.set(c.name, this.#controlTensor(c, pending, seq));
    if (pending.start || !seq.state) seq.state = undefined;
    for (const st of this.#states) {
      const prior = seq.state?.get(st.output);
      const shape = prior ? prior.shape : (this.#model.batched ? [1, ...st.initialShape] : st.initialShape);
      inputs.set(st.input, {
        name: st.input,
        datatype: st.datatype,
        shape,
        data: prior ? prior.data : st.initial,
      });
    }
    const outputs = [...pending.request.outputs];
    for (const st of this.#states) {
      if (!outputs.some((o) => o.name === st.output)) {
        outputs.push({ name: st.output, classification: 0, parameters: {} });
      }
    }
    return { request: pending.request.request, batchSize: pending.request.batchSize, inputs, outputs };
  }

  async #run(i: number, batch: { seq: Sequence; pending: Pending }[]): Promise<void> {
    for (const { seq } of batch) {
      seq.executing = true;
      seq.queue.shift();
    }
    this.queued -= batch.length;
    this.executing += batch.length;
    const started = nowNs();
    try {
      const augmented = batch.map(({ seq, pending }) => this.#augment(seq, pending));
      const { responses, times } = await executeBatch(this.#model, this.#instances[i]!, augmented);
      this.#stats?.recordExecution(times);
      batch.forEach(({ seq, pending }, k) => {
        const res = responses[k]!;
        if (res instanceof RescheduledRequest && this.#iterative) {
          // The model gave the request back: it runs again next in its sequence, on the state it left, no longer
          // a first request. Each run counts, as in Triton's statistics.
          this.#stats?.recordSuccess(pending.request.batchSize, pending.received, times);
          seq.queue.unshift({ ...pending, start: false, enqueuedAt: performance.now() });
          this.queued++;
          return;
        }
        if (res instanceof Error) {
          if (isModelError(res)) {
            this.#stats?.recordSuccess(pending.request.batchSize, pending.received, times);
          } else this.#stats?.recordFailure(pending.received, "BACKEND");
          pending.reject(res);
          return;
        }
        const stateNames = new Set(this.#states.map((s) => s.output));
        const wanted = new Set(pending.request.outputs.map((o) => o.name));
        seq.state = new Map(res.outputs.filter((t) => stateNames.has(t.name)).map((t) => [t.name, t]));
        res.outputs = res.outputs.filter((t) => !stateNames.has(t.name) || wanted.has(t.name));
        this.#stats?.recordSuccess(pending.request.batchSize, pending.received, times);
        pending.resolve(res);
      });
    } catch (err) {
      const e = toServerError(err);
      recordFailedExecution(this.#stats, batch.map(({ pending }) => pending), started);
      for (const { pending } of batch) pending.reject(e);
    } finally {
      this.executing -= batch.length;
      for (const { seq, pending } of batch) {
        seq.executing = false;
        seq.lastActive = performance.now();
        if (pending.end && seq.queue.length === 0) this.#release(seq);
      }
      this.#free.add(i);
      this.#pump();
    }
  }
}
