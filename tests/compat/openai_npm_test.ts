/**
 * Compatibility: the official `openai` npm client drives the OpenAI-compatible API of a real server serving
 * examples/genai_models, streaming and not, chat, completions and embeddings.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import OpenAI from "openai";
import { pythonPath, startTestServer } from "../helpers.ts";

const GENAI = fileURLToPath(new URL("../../examples/genai_models", import.meta.url));

Deno.test("the openai npm client against a real server", async (t) => {
  await using srv = await startTestServer([
    `--model-repository=${GENAI}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
  ]);
  const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: "unused", maxRetries: 0 });

  await t.step("models.list", async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, ["embed", "textgen"]);
  });

  await t.step("completions, whole and streamed", async () => {
    const r = await client.completions.create({
      model: "textgen",
      prompt: "the if statement",
      max_tokens: 5,
      temperature: 0,
    });
    assert.deepEqual([r.choices[0]!.text, r.choices[0]!.finish_reason], ['. the " finally "', "length"]);
    assert.deepEqual(r.usage, { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 });
    const stream = await client.completions.create({
      model: "textgen",
      prompt: "the if statement",
      max_tokens: 5,
      temperature: 0,
      stream: true,
    });
    const texts: string[] = [];
    for await (const chunk of stream) texts.push(chunk.choices[0]!.text);
    assert.deepEqual(texts, [".", " the", ' "', " finally", ' "', ""]);
  });

  await t.step("chat completions, whole and streamed", async () => {
    const messages = [{ role: "user" as const, content: "the if statement" }];
    const r = await client.chat.completions.create({
      model: "textgen",
      messages,
      max_tokens: 3,
      temperature: 0,
    });
    assert.equal(r.choices[0]!.message.role, "assistant");
    assert.deepEqual([r.usage?.prompt_tokens, r.usage?.completion_tokens], [7, 3]);
    const stream = await client.chat.completions.create({
      model: "textgen",
      messages,
      max_tokens: 3,
      temperature: 0,
      stream: true,
    });
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, r.choices[0]!.message.content);
    assert.equal(finish, "length");
  });

  await t.step("embeddings (the client asks for base64 and decodes it)", async () => {
    const r = await client.embeddings.create({ model: "embed", input: ["a list of integers", "zzzz"] });
    assert.deepEqual(r.data.map((d) => [d.index, d.embedding.length]), [[0, 32], [1, 32]]);
    assert.deepEqual(r.data[1]!.embedding, new Array(32).fill(0));
    const floats = await client.embeddings.create({
      model: "embed",
      input: "a list of integers",
      encoding_format: "float",
    });
    assert.deepEqual(floats.data[0]!.embedding, r.data[0]!.embedding);
  });

  await t.step("errors arrive as the client's typed errors", async () => {
    await assert.rejects(
      client.completions.create({ model: "nope", prompt: "x" }),
      (err: unknown) => {
        assert.ok(err instanceof OpenAI.NotFoundError);
        assert.equal(err.status, 404);
        assert.equal(err.code, "model_not_found");
        assert.equal(err.message, "404 The model 'nope' does not exist");
        return true;
      },
    );
  });
});
