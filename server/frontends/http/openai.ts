/**
 * An OpenAI-compatible API on the HTTP port, under `/v1`: `GET /v1/models`, `POST /v1/completions`,
 * `POST /v1/chat/completions` (both streaming over Server-Sent Events that end with `data: [DONE]`) and
 * `POST /v1/embeddings`, with OpenAI's error object.
 *
 * Models are mapped by the conventions of Triton's LLM models. A text generation model has a BYTES input
 * `text_input` and a BYTES output `text_output`; the request's `max_tokens`, `stream` and sampling fields
 * (`temperature`, `top_p`, `top_k`, `seed`, `frequency_penalty`, `presence_penalty`) become inputs of the
 * same name where the model has them, request parameters otherwise. Usage counts come from the outputs
 * `num_input_tokens` and `num_output_tokens` where the model has them (summed over streamed responses).
 * An embedding model has a BYTES input `text_input` (one element per text) and an output `embedding`.
 *
 * Chat messages become the prompt through the model's chat template: `chat_template.jinja`, else the
 * `chat_template` of `tokenizer_config.json` (with its `bos_token` and `eos_token`), looked up in the model
 * folder, or in the folder inside it that the model config's `tokenizer` parameter names. Without one, each
 * message is a line `<role>: <content>` and the prompt ends with `assistant:`.
 * @module
 */

import { Buffer } from "node:buffer";
import { join, normalize } from "node:path";
import { Template } from "@huggingface/jinja";
import { type Datatype, fromJsonValues, parseJsonExact, toJsonValues, typedView } from "../../core/dtypes.ts";
import {
  type ErrorCode,
  httpStatus,
  invalidArg,
  notFound,
  ServerError,
  toServerError,
} from "../../core/errors.ts";
import type { InferRequest, InferResponse, ParamValue, Tensor } from "../../core/types.ts";
import { ENDPOINTS, type InferencePipeline } from "../../pipeline/pipeline.ts";
import type { ModelVersion } from "../../models/model_version.ts";
import { EventBody } from "./event_body.ts";
import { generateShape, readLimitedBody } from "./generate.ts";

/** Limits of the OpenAI-compatible endpoints. */
export interface OpenAiOptions {
  /** The largest request body accepted, in bytes (`--http-max-input-size`). */
  maxInputSize: number;
}

/** Handles a request whose path starts with `/v1/`. */
export type OpenAiHandler = (request: Request, path: string) => Promise<Response>;

const JSON_HEADERS = { "content-type": "application/json" };
const SSE_HEADERS = { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" };
/** The request fields that become model inputs of the same name, or request parameters. */
const SAMPLING = ["temperature", "top_p", "top_k", "seed", "frequency_penalty", "presence_penalty"];
const DEFAULT_MAX_TOKENS = 16;
const encoder = new TextEncoder();

/** An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`. */
class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
  ) {
    super(message);
  }
}

const TYPES: Partial<Record<ErrorCode, string>> = {
  INVALID_ARG: "invalid_request_error",
  NOT_FOUND: "not_found_error",
  UNAVAILABLE: "service_unavailable_error",
  UNSUPPORTED: "invalid_request_error",
};

function errorBody(err: unknown): { status: number; body: Record<string, unknown> } {
  if (err instanceof ApiError) {
    return {
      status: err.status,
      body: { error: { message: err.message, type: err.type, param: err.param, code: err.code } },
    };
  }
  const e = toServerError(err);
  return {
    status: httpStatus(e.code),
    body: { error: { message: e.message, type: TYPES[e.code] ?? "server_error", param: null, code: null } },
  };
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: JSON_HEADERS });
}

function bad(message: string, param: string | null = null): ApiError {
  return new ApiError(400, message, "invalid_request_error", param);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** What a model offers to the OpenAI API, read from its metadata. */
interface ModelKind {
  mv: ModelVersion;
  inputs: Map<string, { datatype: Datatype; shape: number[] }>;
  outputs: Set<string>;
}

/** A chat template and the tokens it may use. */
interface ChatTemplate {
  template: Template | undefined;
  bos: string;
  eos: string;
}

function tokenText(v: unknown): string {
  if (typeof v === "string") return v;
  if (isObject(v) && typeof v.content === "string") return v.content;
  return "";
}

/** The parts of a streamed or whole generation, gathered as responses come. */
interface Generation {
  text: string;
  promptTokens: number | undefined;
  completionTokens: number | undefined;
}

/** The value of a one-element (or first-element) output as a number. */
function firstNumber(t: Tensor): number | undefined {
  if (t.datatype === "BYTES" || t.datatype === "BOOL") return undefined;
  const values = toJsonValues(t.datatype, t.data);
  const v = values[0];
  return typeof v === "number" ? v : undefined;
}

function textOf(t: Tensor): string {
  if (t.datatype !== "BYTES") {
    throw invalidArg(`Cannot read output '${t.name}': expected BYTES, got ${t.datatype}`);
  }
  return (toJsonValues("BYTES", t.data) as string[]).join("");
}

/**
 * Creates the handler of the `/v1` endpoints over the inference pipeline.
 * @param pipeline the inference pipeline (and, through it, the models)
 * @param options limits
 */
export function createOpenAiHandler(pipeline: InferencePipeline, options: OpenAiOptions): OpenAiHandler {
  const registry = pipeline.registry;
  const created = Math.floor(Date.now() / 1000);
  const templates = new WeakMap<ModelVersion, Promise<ChatTemplate>>();

  function kindOf(mv: ModelVersion): ModelKind {
    const meta = mv.metadata();
    return {
      mv,
      inputs: new Map(meta.inputs.map((i) => [i.name, { datatype: i.datatype, shape: i.shape }])),
      outputs: new Set(meta.outputs.map((o) => o.name)),
    };
  }

  function isGenerator(k: ModelKind): boolean {
    return k.inputs.get("text_input")?.datatype === "BYTES" && k.outputs.has("text_output");
  }

  function isEmbedder(k: ModelKind): boolean {
    return k.inputs.get("text_input")?.datatype === "BYTES" && k.outputs.has("embedding");
  }

  /** The served models the API can use: text generation and embedding models, one entry per name. */
  function servedModels(): ModelKind[] {
    const best = new Map<string, ModelVersion>();
    for (const mv of registry.readyVersions()) {
      const prior = best.get(mv.name);
      if (!prior || mv.version > prior.version) best.set(mv.name, mv);
    }
    return [...best.values()].map(kindOf).filter((k) => isGenerator(k) || isEmbedder(k))
      .sort((a, b) => (a.mv.name < b.mv.name ? -1 : a.mv.name > b.mv.name ? 1 : 0));
  }

  function modelObject(name: string) {
    return { id: name, object: "model", created, owned_by: "dinfer" };
  }

  function resolveModel(body: Record<string, unknown>, want: "generate" | "embed"): ModelKind {
    const name = body.model;
    if (typeof name !== "string" || name === "") throw bad("'model' must be the name of a model", "model");
    let mv: ModelVersion;
    try {
      mv = pipeline.accept(
        name,
        "",
        want === "generate" ? ENDPOINTS.openAiCompletion : ENDPOINTS.openAiEmbedding,
      );
    } catch (err) {
      if (err instanceof ServerError && err.code === "NOT_FOUND") {
        throw modelNotFound(name);
      }
      throw err;
    }
    const k = kindOf(mv);
    if (want === "generate" && !isGenerator(k)) {
      throw bad(
        `Cannot use '${name}' for text generation: it needs a BYTES input 'text_input' and an output 'text_output'`,
        "model",
      );
    }
    if (want === "embed" && !isEmbedder(k)) {
      throw bad(
        `Cannot use '${name}' for embeddings: it needs a BYTES input 'text_input' and an output 'embedding'`,
        "model",
      );
    }
    return k;
  }

  async function readBody(request: Request, what: string): Promise<Record<string, unknown>> {
    const bytes = await readLimitedBody(request, options.maxInputSize, what);
    let v: unknown;
    try {
      // Integers beyond 2^53 stay exact (a uint64 `seed`).
      v = parseJsonExact(new TextDecoder().decode(bytes));
    } catch (err) {
      throw bad(`Cannot read ${what}: malformed JSON: ${(err as Error).message}`);
    }
    if (!isObject(v)) throw bad(`Cannot read ${what}: the body must be a JSON object`);
    return v;
  }

  /** A one-element input of the model from a request field, in the model's datatype and shape. */
  function scalarInput(k: ModelKind, name: string, value: unknown, param: string): Tensor {
    const spec = k.inputs.get(name)!;
    const shape = generateShape(spec.shape, 1);
    if (!shape) throw bad(`Cannot use '${k.mv.name}': its input '${name}' does not take one value`, param);
    try {
      return {
        name,
        datatype: spec.datatype,
        shape,
        data: fromJsonValues(spec.datatype, [value], `'${param}'`),
      };
    } catch (err) {
      throw bad(toServerError(err).message, param);
    }
  }

  /** The inference request of a completion: the prompt, max_tokens, stream and the sampling fields. */
  function generationRequest(
    k: ModelKind,
    body: Record<string, unknown>,
    prompt: string,
    stream: boolean,
  ): { request: InferRequest; maxTokens: number } {
    const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? DEFAULT_MAX_TOKENS;
    if (typeof maxTokens !== "number" || !Number.isInteger(maxTokens) || maxTokens < 0) {
      throw bad("'max_tokens' must be an integer >= 0", "max_tokens");
    }
    for (const [field, ok] of [["n", 1], ["best_of", 1]] as const) {
      if (body[field] !== undefined && body[field] !== null && body[field] !== ok) {
        throw bad(`'${field}' must be 1: one choice per request is supported`, field);
      }
    }
    for (const field of ["logprobs", "echo", "top_logprobs", "tools", "response_format", "suffix"]) {
      const v = body[field];
      if (v !== undefined && v !== null && v !== false && !(field === "response_format" && isText(v))) {
        throw new ApiError(501, `'${field}' is not supported`, "invalid_request_error", field);
      }
    }
    const inputs: Tensor[] = [scalarInput(k, "text_input", prompt, "prompt")];
    const parameters: Record<string, ParamValue> = {};
    const fields: [string, unknown][] = [["max_tokens", maxTokens], ["stream", stream]];
    for (const f of SAMPLING) if (body[f] !== undefined && body[f] !== null) fields.push([f, body[f]]);
    if (k.inputs.has("exclude_input_in_output")) fields.push(["exclude_input_in_output", true]);
    for (const [name, value] of fields) {
      // The sampling fields are numbers, whether they go to an input or to a parameter.
      if (SAMPLING.includes(name) && typeof value !== "number" && typeof value !== "bigint") {
        throw bad(`'${name}' must be a number`, name);
      }
      if (k.inputs.has(name)) inputs.push(scalarInput(k, name, value, name));
      else if (
        typeof value === "number" || typeof value === "boolean" || typeof value === "string" ||
        typeof value === "bigint"
      ) {
        parameters[name] = value;
      } else throw bad(`'${name}' must be a number`, name);
    }
    return {
      request: { model: k.mv.name, version: "", id: "", inputs, outputs: [], parameters },
      maxTokens,
    };
  }

  function isText(v: unknown): boolean {
    return isObject(v) && v.type === "text";
  }

  function stopsOf(body: Record<string, unknown>): string[] {
    const stop = body.stop;
    if (stop === undefined || stop === null) return [];
    const list = typeof stop === "string" ? [stop] : stop;
    if (!Array.isArray(list) || list.some((s) => typeof s !== "string") || list.length > 4) {
      throw bad("'stop' must be a string or an array of up to 4 strings", "stop");
    }
    return (list as string[]).filter((s) => s !== "");
  }

  /**
   * Runs a generation, handing each new piece of text to `onText` (held back while it may be the start of a
   * stop sequence); resolves with the whole generation and why it finished.
   */
  async function runGeneration(
    mv: ModelVersion,
    request: InferRequest,
    stops: string[],
    maxTokens: number,
    signal: AbortSignal,
    onText: (text: string) => void,
  ): Promise<Generation & { finish: "stop" | "length" }> {
    const controller = new AbortController();
    const abort = () => controller.abort();
    if (signal.aborted) controller.abort();
    signal.addEventListener("abort", abort, { once: true });
    request.signal = controller.signal;
    const gen: Generation = { text: "", promptTokens: undefined, completionTokens: undefined };
    let sent = 0;
    let stopped = false;
    let stopNow!: () => void;
    const stoppedEarly = new Promise<void>((resolve) => (stopNow = resolve));
    const hold = Math.max(0, ...stops.map((s) => s.length - 1));
    let failure: ServerError | undefined;
    const take = (response: InferResponse) => {
      for (const t of response.outputs) {
        if (t.name === "text_output") gen.text += textOf(t);
        else if (t.name === "num_input_tokens") gen.promptTokens ??= firstNumber(t);
        else if (t.name === "num_output_tokens") {
          const n = firstNumber(t);
          if (n !== undefined) gen.completionTokens = (gen.completionTokens ?? 0) + n;
        }
      }
      let end = gen.text.length - hold;
      // What is held back must not start in the middle of a character: a piece ending in the first half of a
      // surrogate pair reaches clients as two lone halves.
      if (end > 0 && end < gen.text.length && isHighSurrogate(gen.text.charCodeAt(end - 1))) end--;
      for (const s of stops) {
        const at = gen.text.indexOf(s);
        if (at >= 0) {
          gen.text = gen.text.slice(0, at);
          end = at;
          stopped = true;
        }
      }
      if (end > sent) {
        onText(gen.text.slice(sent, end));
        sent = end;
      }
      // A stop sequence ends the request: the model is told, as if the client had gone.
      if (stopped) {
        controller.abort();
        stopNow();
      }
    };
    try {
      const streaming = pipeline.stream(mv, request, { endpoint: ENDPOINTS.openAiCompletion }, (response) => {
        if (stopped || failure) return;
        if (response instanceof Error) failure = toServerError(response);
        else if (response !== undefined) take(response);
      });
      // The answer ends at the stop sequence, not when the model (told, but maybe not listening) sends its
      // final response; what fails after the stop is nobody's to see.
      streaming.catch(() => {});
      await Promise.race([streaming, stoppedEarly]);
    } finally {
      signal.removeEventListener("abort", abort);
    }
    if (failure) throw failure;
    if (sent < gen.text.length) onText(gen.text.slice(sent));
    const finish = !stopped && gen.completionTokens !== undefined && gen.completionTokens >= maxTokens
      ? "length"
      : "stop";
    return { ...gen, finish };
  }

  function usageOf(gen: Generation): Record<string, number> | null {
    if (gen.promptTokens === undefined && gen.completionTokens === undefined) return null;
    const prompt = gen.promptTokens ?? 0;
    const completion = gen.completionTokens ?? 0;
    return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
  }

  /** A streamed answer: `data:` events as the chunks come, `data: [DONE]` at the end, errors as events. */
  function sse(
    requestSignal: AbortSignal,
    run: (send: (chunk: unknown) => void, signal: AbortSignal) => Promise<void>,
  ): Response {
    const controller = new AbortController();
    // A client that goes away is told by the request's signal at once; the body's cancellation comes only
    // when a write fails.
    if (requestSignal.aborted) controller.abort();
    else requestSignal.addEventListener("abort", () => controller.abort(), { once: true });
    // The client went away or stopped reading: the model is told (request.is_cancelled()).
    const events = new EventBody(() => controller.abort());
    const send = (chunk: unknown) => {
      if (events.open) events.push(encoder.encode(`data: ${JSON.stringify(chunk)}\n\n`));
    };
    run(send, controller.signal).catch((err) => send(errorBody(err).body)).finally(() => {
      if (events.open) events.push(encoder.encode("data: [DONE]\n\n"));
      events.close();
    });
    return new Response(events.body, { status: 200, headers: SSE_HEADERS });
  }

  async function completions(request: Request, chat: boolean): Promise<Response> {
    const what = chat ? "the chat completion request" : "the completion request";
    const body = await readBody(request, what);
    const k = resolveModel(body, "generate");
    const prompt = chat ? await chatPrompt(k, body.messages) : promptOf(body.prompt);
    const stream = body.stream === true;
    if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean") {
      throw bad("'stream' must be a boolean", "stream");
    }
    const includeUsage = isObject(body.stream_options) && body.stream_options.include_usage === true;
    const stops = stopsOf(body);
    const { request: infer, maxTokens } = generationRequest(k, body, prompt, stream);
    const id = `${chat ? "chatcmpl" : "cmpl"}-${crypto.randomUUID().replaceAll("-", "")}`;
    const object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    const head = {
      id,
      object,
      created: Math.floor(Date.now() / 1000),
      model: k.mv.name,
      system_fingerprint: null,
    };
    const choice = (text: string, finish: string | null) =>
      chat
        ? stream
          ? {
            index: 0,
            delta: text === "" && finish !== null ? {} : { content: text },
            logprobs: null,
            finish_reason: finish,
          }
          : { index: 0, message: { role: "assistant", content: text }, logprobs: null, finish_reason: finish }
        : { index: 0, text, logprobs: null, finish_reason: finish };
    if (!stream) {
      const gen = await runGeneration(k.mv, infer, stops, maxTokens, request.signal, () => {});
      return json({ ...head, choices: [choice(gen.text, gen.finish)], usage: usageOf(gen) });
    }
    return sse(request.signal, async (send, signal) => {
      if (chat) {
        send({
          ...head,
          choices: [{
            index: 0,
            delta: { role: "assistant", content: "" },
            logprobs: null,
            finish_reason: null,
          }],
        });
      }
      const gen = await runGeneration(k.mv, infer, stops, maxTokens, signal, (text) => {
        send({ ...head, choices: [choice(text, null)] });
      });
      send({ ...head, choices: [choice("", gen.finish)] });
      if (includeUsage) send({ ...head, choices: [], usage: usageOf(gen) });
    });
  }

  function promptOf(prompt: unknown): string {
    if (typeof prompt === "string") return prompt;
    if (Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] === "string") return prompt[0];
    if (Array.isArray(prompt) && prompt.every((p) => typeof p === "string")) {
      throw bad("'prompt' must be one string: a batch of prompts is not supported", "prompt");
    }
    throw bad("'prompt' must be a string", "prompt");
  }

  async function chatPrompt(k: ModelKind, messages: unknown): Promise<string> {
    if (!Array.isArray(messages) || messages.length === 0) {
      throw bad("'messages' must be a non-empty array", "messages");
    }
    const list = messages.map((m, i) => {
      if (!isObject(m) || typeof m.role !== "string") {
        throw bad(`'messages[${i}]' must be an object with a 'role'`, "messages");
      }
      let content = m.content;
      if (Array.isArray(content)) {
        content = content.map((part, j) => {
          if (!isObject(part) || part.type !== "text" || typeof part.text !== "string") {
            throw bad(
              `'messages[${i}].content[${j}]' must be a text part: other content is not supported`,
              "messages",
            );
          }
          return part.text;
        }).join("");
      }
      if (content === undefined || content === null) content = "";
      if (typeof content !== "string") throw bad(`'messages[${i}].content' must be a string`, "messages");
      return { role: m.role, content };
    });
    let pending = templates.get(k.mv);
    if (!pending) {
      pending = loadTemplate(k.mv);
      templates.set(k.mv, pending);
    }
    const t = await pending;
    if (!t.template) return list.map((m) => `${m.role}: ${m.content}\n`).join("") + "assistant:";
    try {
      return t.template.render({
        messages: list,
        add_generation_prompt: true,
        bos_token: t.bos,
        eos_token: t.eos,
      });
    } catch (err) {
      throw bad(`Cannot apply the chat template of '${k.mv.name}': ${(err as Error).message}`, "messages");
    }
  }

  /** The chat template of a model: its folder's `chat_template.jinja` or `tokenizer_config.json`. */
  async function loadTemplate(mv: ModelVersion): Promise<ChatTemplate> {
    const dir = registry.entry(mv.name)?.location.dir;
    const none = { template: undefined, bos: "", eos: "" };
    if (!dir) return none;
    const sub = mv.config.parameters?.tokenizer?.string_value ?? "";
    const folder = normalize(join(dir, sub));
    if (sub.startsWith("/") || (folder !== dir && !folder.startsWith(dir + "/"))) {
      throw bad(
        `Cannot use '${mv.name}': its 'tokenizer' parameter '${sub}' must be a folder inside the model folder`,
      );
    }
    const read = (name: string) => Deno.readTextFile(join(folder, name)).catch(() => undefined);
    let source = await read("chat_template.jinja");
    let bos = "", eos = "";
    const config = await read("tokenizer_config.json");
    if (config !== undefined) {
      let tc: Record<string, unknown>;
      try {
        tc = JSON.parse(config);
      } catch (err) {
        throw bad(`Cannot read the tokenizer_config.json of '${mv.name}': ${(err as Error).message}`);
      }
      bos = tokenText(tc.bos_token);
      eos = tokenText(tc.eos_token);
      const ct = tc.chat_template;
      if (source === undefined && typeof ct === "string") source = ct;
      if (source === undefined && Array.isArray(ct)) {
        const named = ct.find((e) => isObject(e) && e.name === "default") as
          | { template?: unknown }
          | undefined;
        if (typeof named?.template === "string") source = named.template;
      }
    }
    if (source === undefined) return none;
    try {
      return { template: new Template(source), bos, eos };
    } catch (err) {
      throw bad(`Cannot parse the chat template of '${mv.name}': ${(err as Error).message}`);
    }
  }

  async function embeddings(request: Request): Promise<Response> {
    const body = await readBody(request, "the embedding request");
    const k = resolveModel(body, "embed");
    const input = body.input;
    const texts = typeof input === "string" ? [input] : input;
    if (!Array.isArray(texts) || texts.length === 0 || texts.some((t) => typeof t !== "string")) {
      throw bad(
        "'input' must be a string or a non-empty array of strings (token arrays are not supported)",
        "input",
      );
    }
    const format = body.encoding_format ?? "float";
    if (format !== "float" && format !== "base64") {
      throw bad("'encoding_format' must be 'float' or 'base64'", "encoding_format");
    }
    const spec = k.inputs.get("text_input")!;
    const shape = generateShape(spec.shape, texts.length);
    if (!shape) {
      throw bad(
        `Cannot use '${k.mv.name}': its input 'text_input' does not take ${texts.length} texts`,
        "input",
      );
    }
    const infer: InferRequest = {
      model: k.mv.name,
      version: "",
      id: "",
      inputs: [{
        name: "text_input",
        datatype: "BYTES",
        shape,
        data: fromJsonValues("BYTES", texts, "'input'"),
      }],
      outputs: [],
      parameters: {},
      signal: request.signal,
    };
    const response = await pipeline.run(k.mv, infer, { endpoint: ENDPOINTS.openAiEmbedding });
    const out = response.outputs.find((t) => t.name === "embedding");
    if (!out) {
      throw new ApiError(
        500,
        `Cannot use '${k.mv.name}': it answered without its output 'embedding'`,
        "server_error",
      );
    }
    if (out.datatype !== "FP32") {
      throw new ApiError(
        500,
        `Cannot use '${k.mv.name}': its output 'embedding' is ${out.datatype}, expected FP32`,
        "server_error",
      );
    }
    const all = typedView("FP32", out.data as Uint8Array) as Float32Array;
    const width = all.length / texts.length;
    if (!Number.isInteger(width)) {
      throw new ApiError(
        500,
        `Cannot use '${k.mv.name}': its 'embedding' does not split into ${texts.length} rows`,
        "server_error",
      );
    }
    const data = texts.map((_, i) => {
      const row = all.subarray(i * width, (i + 1) * width);
      const embedding = format === "float"
        ? Array.from(row)
        : Buffer.from(row.buffer, row.byteOffset, row.byteLength).toString("base64");
      return { object: "embedding", index: i, embedding };
    });
    const counts = response.outputs.find((t) => t.name === "num_input_tokens");
    const tokens = counts && counts.datatype !== "BYTES"
      ? (toJsonValues(counts.datatype, counts.data) as number[]).reduce((a, b) => a + Number(b), 0)
      : 0;
    return json({
      object: "list",
      data,
      model: k.mv.name,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
  }

  async function route(request: Request, path: string): Promise<Response> {
    const method = request.method;
    if (path === "/v1/models" && method === "GET") {
      return json({ object: "list", data: servedModels().map((k) => modelObject(k.mv.name)) });
    }
    if (path.startsWith("/v1/models/") && method === "GET") {
      const name = decodeURIComponent(path.slice("/v1/models/".length));
      if (!servedModels().some((k) => k.mv.name === name)) {
        throw modelNotFound(name);
      }
      return json(modelObject(name));
    }
    if (method === "POST") {
      if (path === "/v1/completions") return await completions(request, false);
      if (path === "/v1/chat/completions") return await completions(request, true);
      if (path === "/v1/embeddings") return await embeddings(request);
    }
    throw notFound(`Not found: ${method} '${path}'`);
  }

  return async function handle(request: Request, path: string): Promise<Response> {
    try {
      return await route(request, path);
    } catch (err) {
      const { status, body } = errorBody(err);
      return json(body, status);
    }
  };
}

/** The OpenAI API's answer to a model name it does not serve. */
function modelNotFound(name: string): ApiError {
  return new ApiError(
    404,
    `The model '${name}' does not exist`,
    "invalid_request_error",
    "model",
    "model_not_found",
  );
}

/** Whether a UTF-16 code unit is the first half of a surrogate pair. */
function isHighSurrogate(unit: number): boolean {
  return unit >= 0xd800 && unit <= 0xdbff;
}
