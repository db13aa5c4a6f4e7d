/**
 * The OpenAI-compatible API (`/v1`) against a real server serving examples/genai_models: the model list,
 * completions and chat completions (whole and streamed over SSE, with usage counts, stop sequences and chat
 * templates), embeddings, and OpenAI's error object.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { pythonPath, startTestServer, type TestServer } from "../helpers.ts";
import { copyDir } from "./_http.ts";

const GENAI = fileURLToPath(new URL("../../examples/genai_models", import.meta.url));

function startGenaiServer(repository = GENAI): Promise<TestServer> {
  return startTestServer([
    `--model-repository=${repository}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
  ]);
}

async function postJson(
  url: string,
  body: unknown,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const r = await fetch(url, { method: "POST", body: JSON.stringify(body) });
  return { status: r.status, json: await r.json() };
}

/** The `data:` payloads of an SSE body; `[DONE]` stays a string. */
async function sseEvents(r: Response): Promise<unknown[]> {
  assert.equal(r.headers.get("content-type"), "text/event-stream; charset=utf-8");
  const text = await r.text();
  assert.ok(text.endsWith("\n\n"));
  return text.split("\n\n").filter((e) => e !== "").map((e) => {
    assert.ok(e.startsWith("data: "), e);
    const data = e.slice(6);
    return data === "[DONE]" ? data : JSON.parse(data);
  });
}

type Chunk = {
  id: string;
  object: string;
  model: string;
  choices: Record<string, unknown>[];
  usage?: unknown;
};

Deno.test("the OpenAI API serves completions, chat completions and embeddings from the example models", async (t) => {
  await using s = await startGenaiServer();
  const v1 = `${s.url}/v1`;
  // The greedy continuation of "the if statement" (temperature 0) by the trigram model, and its tokens.
  const greedy = '. the " finally "';

  await t.step("GET /v1/models lists the text generation and embedding models", async () => {
    const r = await fetch(`${v1}/models`).then((r) => r.json());
    assert.equal(r.object, "list");
    assert.deepEqual(
      r.data.map((m: { id: string; object: string; owned_by: string }) => [m.id, m.object, m.owned_by]),
      [
        ["embed", "model", "dinfer"],
        ["textgen", "model", "dinfer"],
      ],
    );
    const one = await fetch(`${v1}/models/textgen`).then((r) => r.json());
    assert.equal(one.id, "textgen");
  });

  await t.step("a completion answers the model's text with usage counts", async () => {
    const r = await postJson(`${v1}/completions`, {
      model: "textgen",
      prompt: "the if statement",
      max_tokens: 5,
      temperature: 0,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.match(r.json.id as string, /^cmpl-[0-9a-f]{32}$/);
    assert.equal(r.json.object, "text_completion");
    assert.equal(r.json.model, "textgen");
    assert.deepEqual(r.json.choices, [{ index: 0, text: greedy, logprobs: null, finish_reason: "length" }]);
    assert.deepEqual(r.json.usage, { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
    // The same text as the generate extension gives for the same inputs.
    const g = await postJson(`${s.url}/v2/models/textgen/generate`, {
      text_input: "the if statement",
      max_tokens: 5,
      temperature: 0,
    });
    assert.equal(g.json.text_output, greedy);
  });

  await t.step("a stop sequence cuts the text there and finishes with 'stop'", async () => {
    const r = await postJson(`${v1}/completions`, {
      model: "textgen",
      prompt: "the if statement",
      max_tokens: 5,
      temperature: 0,
      stop: ['"'],
    });
    assert.deepEqual(r.json.choices, [{ index: 0, text: ". the ", logprobs: null, finish_reason: "stop" }]);
  });

  await t.step(
    "a streamed completion sends one chunk per token, then the finish, usage and [DONE]",
    async () => {
      const r = await fetch(`${v1}/completions`, {
        method: "POST",
        body: JSON.stringify({
          model: "textgen",
          prompt: "the if statement",
          max_tokens: 5,
          temperature: 0,
          stream: true,
          stream_options: { include_usage: true },
        }),
      });
      assert.equal(r.status, 200);
      const events = await sseEvents(r);
      assert.equal(events.at(-1), "[DONE]");
      const chunks = events.slice(0, -1) as Chunk[];
      assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
      assert.ok(chunks.every((c) => c.object === "text_completion" && c.model === "textgen"));
      assert.deepEqual(chunks.map((c) => c.choices[0]?.text), [
        ".",
        " the",
        ' "',
        " finally",
        ' "',
        "",
        undefined,
      ]);
      assert.deepEqual(chunks.map((c) => c.choices[0]?.finish_reason), [
        null,
        null,
        null,
        null,
        null,
        "length",
        undefined,
      ]);
      assert.deepEqual(chunks.at(-1)!.usage, { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
    },
  );

  await t.step("a seeded sample is the same whole and streamed", async () => {
    const body = {
      model: "textgen",
      prompt: "a list",
      max_tokens: 12,
      temperature: 0.8,
      top_p: 0.9,
      seed: 7,
    };
    const whole = await postJson(`${v1}/completions`, body);
    const r = await fetch(`${v1}/completions`, {
      method: "POST",
      body: JSON.stringify({ ...body, stream: true }),
    });
    const chunks = (await sseEvents(r)).slice(0, -1) as Chunk[];
    const text = chunks.map((c) => c.choices[0]?.text ?? "").join("");
    assert.equal(text, (whole.json.choices as { text: string }[])[0]!.text);
    assert.equal((whole.json.usage as { completion_tokens: number }).completion_tokens, 12);
  });

  await t.step("a chat completion takes the default template, whole and streamed", async () => {
    const messages = [{ role: "user", content: "the if statement" }];
    const r = await postJson(`${v1}/chat/completions`, {
      model: "textgen",
      messages,
      max_tokens: 3,
      temperature: 0,
    });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.equal(r.json.object, "chat.completion");
    const choice =
      (r.json.choices as { message: { role: string; content: string }; finish_reason: string }[])[0]!;
    assert.equal(choice.message.role, "assistant");
    assert.equal(choice.finish_reason, "length");
    // "user: the if statement\nassistant:" is 7 tokens.
    assert.deepEqual(r.json.usage, { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
    const streamed = await fetch(`${v1}/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "textgen", messages, max_tokens: 3, temperature: 0, stream: true }),
    });
    const chunks = (await sseEvents(streamed)).slice(0, -1) as Chunk[];
    assert.ok(chunks.every((c) => c.object === "chat.completion.chunk"));
    assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: "assistant", content: "" });
    const deltas = chunks.slice(1, -1).map((c) => (c.choices[0]!.delta as { content: string }).content);
    assert.equal(deltas.length, 3);
    assert.equal(deltas.join(""), choice.message.content);
    assert.deepEqual(chunks.at(-1)!.choices, [{
      index: 0,
      delta: {},
      logprobs: null,
      finish_reason: "length",
    }]);
  });

  await t.step("embeddings: one normalized vector per input, as floats or base64", async () => {
    const r = await postJson(`${v1}/embeddings`, { model: "embed", input: ["a list of integers", "zzzz"] });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    const data = r.json.data as { object: string; index: number; embedding: number[] }[];
    assert.deepEqual(data.map((d) => [d.object, d.index, d.embedding.length]), [["embedding", 0, 32], [
      "embedding",
      1,
      32,
    ]]);
    const norm = Math.hypot(...data[0]!.embedding);
    assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
    // No known word: all zeros.
    assert.deepEqual(data[1]!.embedding, new Array(32).fill(0));
    assert.deepEqual(r.json.usage, { prompt_tokens: 5, total_tokens: 5 });
    const b = await postJson(`${v1}/embeddings`, {
      model: "embed",
      input: "a list of integers",
      encoding_format: "base64",
    });
    const bytes = Uint8Array.from(
      atob((b.json.data as { embedding: string }[])[0]!.embedding),
      (c) => c.charCodeAt(0),
    );
    assert.deepEqual(Array.from(new Float32Array(bytes.buffer)), data[0]!.embedding);
  });

  await t.step("errors are OpenAI error objects", async () => {
    const cases: [string, unknown, number, Record<string, unknown>][] = [
      ["completions", { model: "nope", prompt: "x" }, 404, {
        message: "The model 'nope' does not exist",
        type: "invalid_request_error",
        param: "model",
        code: "model_not_found",
      }],
      ["completions", { model: "embed", prompt: "x" }, 400, {
        message:
          "Cannot use 'embed' for text generation: it needs a BYTES input 'text_input' and an output 'text_output'",
        type: "invalid_request_error",
        param: "model",
        code: null,
      }],
      ["completions", { model: "textgen", prompt: "x", n: 2 }, 400, {
        message: "'n' must be 1: one choice per request is supported",
        type: "invalid_request_error",
        param: "n",
        code: null,
      }],
      ["completions", { model: "textgen", prompt: "x", max_tokens: 5000 }, 400, {
        message: "max_tokens is 5000, expected 0 to 4096",
        type: "invalid_request_error",
        param: null,
        code: null,
      }],
      ["chat/completions", { model: "textgen", messages: [] }, 400, {
        message: "'messages' must be a non-empty array",
        type: "invalid_request_error",
        param: "messages",
        code: null,
      }],
      ["embeddings", { model: "embed", input: [1, 2] }, 400, {
        message: "'input' must be a string or a non-empty array of strings (token arrays are not supported)",
        type: "invalid_request_error",
        param: "input",
        code: null,
      }],
      // A sampling field must be a number, whether the model takes it as an input or as a parameter.
      ["completions", { model: "textgen", prompt: "x", temperature: "hot" }, 400, {
        message: "'temperature' must be a number",
        type: "invalid_request_error",
        param: "temperature",
        code: null,
      }],
      ["completions", { model: "textgen", prompt: "x", frequency_penalty: true }, 400, {
        message: "'frequency_penalty' must be a number",
        type: "invalid_request_error",
        param: "frequency_penalty",
        code: null,
      }],
    ];
    for (const [path, body, status, error] of cases) {
      const r = await postJson(`${v1}/${path}`, body);
      assert.deepEqual([r.status, r.json], [status, { error }], JSON.stringify(body));
    }
  });
});

Deno.test("a chat template in the model folder shapes the prompt", async () => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-openai-" });
  try {
    await copyDir(`${GENAI}/textgen`, `${dir}/textgen`);
    // The messages' contents alone, as a template in tokenizer_config.json (the Hugging Face layout).
    await Deno.writeTextFile(
      `${dir}/textgen/tokenizer_config.json`,
      JSON.stringify({
        bos_token: "<s>",
        chat_template: "{% for m in messages %}{{ m.content }}{% endfor %}",
      }),
    );
    {
      await using s = await startGenaiServer(dir);
      const r = await postJson(`${s.url}/v1/chat/completions`, {
        model: "textgen",
        messages: [{ role: "user", content: "the if statement" }],
        max_tokens: 5,
        temperature: 0,
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      // The prompt is the message alone: the same 3 tokens and text as the completion of "the if statement".
      assert.deepEqual(r.json.usage, { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
      const choice = (r.json.choices as { message: { content: string } }[])[0]!;
      assert.equal(choice.message.content, '. the " finally "');
    }
    // A chat_template.jinja file wins over tokenizer_config.json; it can use bos_token from there.
    await Deno.writeTextFile(`${dir}/textgen/chat_template.jinja`, "{{ bos_token }}");
    await using s2 = await startGenaiServer(dir);
    const r2 = await postJson(`${s2.url}/v1/chat/completions`, {
      model: "textgen",
      messages: [{ role: "user", content: "ignored" }],
      max_tokens: 1,
      temperature: 0,
    });
    // "<s>" is 3 tokens: "<", "s", ">".
    assert.equal((r2.json.usage as { prompt_tokens: number }).prompt_tokens, 3);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("embeddings of any width, as floats or base64; a model that answers no embedding is named", async (t) => {
  await using s = await startGenaiServer(
    fileURLToPath(new URL("../fixtures/embedding_models", import.meta.url)),
  );
  const v1 = `${s.url}/v1`;
  await t.step("rows of 40,000 floats", async () => {
    const r = await postJson(`${v1}/embeddings`, { model: "wide_embed", input: ["40000", "x"] });
    assert.equal(r.status, 200);
    const data = r.json.data as { index: number; embedding: number[] }[];
    assert.deepEqual(data.map((d) => [d.index, d.embedding.length]), [[0, 40000], [1, 40000]]);
    assert.ok(data[0]!.embedding.every((v) => v === 0.5) && data[1]!.embedding.every((v) => v === 1.5));
    assert.deepEqual(r.json.usage, { prompt_tokens: 2, total_tokens: 2 });
  });
  await t.step("the same rows in base64", async () => {
    const r = await postJson(`${v1}/embeddings`, {
      model: "wide_embed",
      input: ["40000", "x"],
      encoding_format: "base64",
    });
    assert.equal(r.status, 200);
    const rows = (r.json.data as { embedding: string }[]).map((d) => {
      const bytes = Uint8Array.from(atob(d.embedding), (c) => c.charCodeAt(0));
      return new Float32Array(bytes.buffer);
    });
    assert.deepEqual(rows.map((row) => row.length), [40000, 40000]);
    assert.ok(rows[0]!.every((v) => v === 0.5) && rows[1]!.every((v) => v === 1.5));
  });
  await t.step("an answer without the embedding output is a server error that says so", async () => {
    const r = await postJson(`${v1}/embeddings`, { model: "wide_embed", input: "none" });
    assert.deepEqual([r.status, r.json], [500, {
      error: {
        message: "Cannot use 'wide_embed': it answered without its output 'embedding'",
        type: "server_error",
        param: null,
        code: null,
      },
    }]);
  });
});
