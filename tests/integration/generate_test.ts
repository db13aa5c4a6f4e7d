/**
 * Triton's generate extension against a real server (tests/fixtures/generate_models): top-level fields become
 * inputs or parameters, outputs come back as top-level fields, a decoupled model streams one SSE event per
 * response as it sends it, errors are worded as Triton words them, and a client that goes away is told to
 * the model (`request.is_cancelled()`), over HTTP and over a cancelled gRPC stream.
 * @module
 */

import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { fileLogger, pythonPath, startTestServer, type TestServer } from "../helpers.ts";
import type { Logger } from "../../server/logging.ts";
import { pythonJson } from "./_python.ts";
import { copyDir } from "./_http.ts";
import http2 from "node:http2";
import { lookupType } from "../../server/core/protos.ts";

const MODELS = fileURLToPath(new URL("../fixtures/generate_models", import.meta.url));

function startGenerateServer(flags: string[] = [], log?: Logger): Promise<TestServer> {
  return startTestServer([
    `--model-repository=${MODELS}`,
    `--backend-config=python,python-executable=${pythonPath()}`,
    ...flags,
  ], log);
}

async function post(url: string, body: string): Promise<{ status: number; type: string; text: string }> {
  const r = await fetch(url, { method: "POST", body });
  return { status: r.status, type: r.headers.get("content-type") ?? "", text: await r.text() };
}

/** The JSON objects of an SSE body's `data:` events, in order. */
function events(text: string): unknown[] {
  assert.ok(text === "" || text.endsWith("\n\n"), `the stream does not end with a blank line: ${text}`);
  return text.split("\n\n").filter((e) => e !== "").map((e) => {
    assert.ok(e.startsWith("data: "), `not a data event: ${e}`);
    return JSON.parse(e.slice(6));
  });
}

/** Waits for a line of the log file that contains `what`. */
async function logLine(file: string, what: string): Promise<string> {
  for (let i = 0; i < 400; i++) {
    const line = (await Deno.readTextFile(file)).split("\n").find((l) => l.includes(what));
    if (line) return line;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`no line with '${what}' in the server log`);
}

Deno.test("generate maps top-level fields to inputs and parameters, and outputs to top-level fields", async (t) => {
  await using s = await startGenerateServer();
  const echo = `${s.url}/v2/models/echo_py/generate`;

  await t.step("scalars, lists and strings take the model's datatypes and shapes", async () => {
    const r = await post(
      echo,
      JSON.stringify({
        text_input: "hi",
        values: [1, 2.5],
        grid: [1, 2, 3, 4, 5, 6],
        flag: true,
        temperature: 0.5,
        parameters: { max_tokens: 3, stream: false, s: "x" },
      }),
    );
    assert.equal(r.status, 200, r.text);
    assert.equal(r.type, "application/json");
    assert.equal(
      r.text,
      JSON.stringify({
        grid_shape: [2, 3],
        model_name: "echo_py",
        model_version: "1",
        params: '{"max_tokens": 3, "s": "x", "stream": false, "temperature": 0.5}',
        text_output: "hi",
        values: [1, 2.5],
      }),
    );
  });

  await t.step(
    "a one-element output is a plain value; the id comes back and is a parameter too",
    async () => {
      const r = await post(
        `${s.url}/v2/models/echo_py/versions/1/generate`,
        '{"text_input":"hi","values":5,"id":"r1"}',
      );
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(JSON.parse(r.text), {
        grid_shape: [],
        id: "r1",
        model_name: "echo_py",
        model_version: "1",
        params: '{"id": "r1"}',
        text_output: "hi",
        values: 5,
      });
    },
  );

  await t.step("an input in 'parameters' is an input", async () => {
    const r = await post(echo, '{"parameters":{"text_input":"inside"}}');
    assert.equal(r.status, 200, r.text);
    assert.equal((JSON.parse(r.text) as { text_output: string }).text_output, "inside");
  });

  await t.step("errors before inference are JSON errors, worded as Triton words them", async () => {
    const cases: [string, string, number, string][] = [
      [
        echo,
        '{"text_input":"hi","grid":[1,2,3]}',
        400,
        "The schema can not convert input 'grid' to tensor with proper shape",
      ],
      [
        echo,
        '{"text_input":["a","b"]}',
        400,
        "The schema can not convert input 'text_input' to tensor with proper shape",
      ],
      [
        echo,
        '{"text_input":"hi","bar":[1]}',
        400,
        "parameter 'bar' has invalid type. It should be either 'int', 'bool', or 'string'.",
      ],
      [
        echo,
        '{"text_input":"hi","values":[1,true]}',
        400,
        "Cannot read input 'values' of the generate request for 'echo_py': element 1 is true, expected a number for FP32",
      ],
      [
        echo,
        '{"values":[1]}',
        400,
        "Cannot infer 'echo_py': expected number of inputs between 1 and 4 but got 1 inputs for model 'echo_py'. " +
        "Got input(s) ['values'], but missing required input(s) ['text_input']. Please provide all required input(s).",
      ],
      [
        echo,
        '{"text_input":"hi","parameters":3}',
        400,
        "Cannot read the generate request for 'echo_py': 'parameters' must be a JSON object",
      ],
      [
        echo,
        '{"text_input":"hi","id":5}',
        400,
        "Cannot read the generate request for 'echo_py': 'id' must be a string",
      ],
      [
        echo,
        '{"text_input":"a","parameters":{"text_input":"b"}}',
        400,
        "Cannot read the generate request for 'echo_py': input 'text_input' is given twice (at the top level and in 'parameters')",
      ],
      [echo, "[1]", 400, "Cannot read the generate request for 'echo_py': the body must be a JSON object"],
      [`${s.url}/v2/models/nope/generate`, "{}", 404, "Request for unknown model: 'nope' is not found"],
      [
        `${s.url}/v2/models/echo_py/versions/7/generate_stream`,
        "{}",
        404,
        "Request for unknown model: 'echo_py' version 7 is not found",
      ],
    ];
    for (const [url, body, status, error] of cases) {
      const r = await post(url, body);
      assert.deepEqual([r.status, r.type, JSON.parse(r.text)], [status, "application/json", { error }], body);
    }
  });

  await t.step("generate_stream answers an ordinary model with one event", async () => {
    const r = await post(`${s.url}/v2/models/echo_py/generate_stream`, '{"text_input":"hi"}');
    assert.equal(r.status, 200);
    assert.equal(r.type, "text/event-stream; charset=utf-8");
    assert.equal(
      r.text,
      'data: {"grid_shape":[],"model_name":"echo_py","model_version":"1","params":"{}","text_output":"hi","values":[]}\n\n',
    );
  });
});

Deno.test("generate_stream sends one event per response of a decoupled model, errors as error events", async (t) => {
  await using s = await startGenerateServer();
  const url = (action: string) => `${s.url}/v2/models/words_py/${action}`;
  const word = (i: number, w: string) => ({
    INDEX: i,
    model_name: "words_py",
    model_version: "1",
    text_output: w,
  });

  await t.step("each response is an event; an error response in the middle is an error event", async () => {
    const r = await post(url("generate_stream"), '{"text_input":"a b fail c"}');
    assert.equal(r.status, 200);
    assert.equal(r.type, "text/event-stream; charset=utf-8");
    assert.deepEqual(events(r.text), [
      word(0, "a"),
      word(1, "b"),
      { error: "word 2 is 'fail'" },
      word(3, "c"),
    ]);
  });

  await t.step("the first response sets the status: an error first makes it the error's", async () => {
    const r = await post(url("generate_stream"), '{"text_input":"fail b"}');
    assert.equal(r.status, 500);
    assert.deepEqual(events(r.text), [{ error: "word 0 is 'fail'" }, word(1, "b")]);
  });

  await t.step("a stream with only the final flag is empty", async () => {
    const r = await post(url("generate_stream"), '{"text_input":""}');
    assert.deepEqual([r.status, r.text], [200, ""]);
  });

  await t.step("events arrive as the model sends them, the first before the model finishes", async () => {
    const response = await fetch(url("generate_stream"), {
      method: "POST",
      body: '{"text_input":"x y","parameters":{"delay_ms":400}}',
    });
    const reader = response.body!.getReader();
    const first = await reader.read();
    const text = new TextDecoder().decode(first.value);
    // The second word comes 400 ms later: the first read holds the first event alone.
    assert.deepEqual(events(text), [word(0, "x")]);
    let rest = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    assert.deepEqual(events(rest), [word(1, "y")]);
  });

  await t.step("generate takes exactly one response", async () => {
    const one = await post(url("generate"), '{"text_input":"one"}');
    assert.deepEqual([one.status, one.type, JSON.parse(one.text)], [200, "application/json", word(0, "one")]);
    const two = await post(url("generate"), '{"text_input":"one two"}');
    assert.deepEqual([two.status, JSON.parse(two.text)], [200, {
      error:
        "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses",
    }]);
    const error = await post(url("generate"), '{"text_input":"fail"}');
    assert.deepEqual([error.status, JSON.parse(error.text)], [500, { error: "word 0 is 'fail'" }]);
  });
});

Deno.test("a client that leaves a stream is told to the model: HTTP disconnect and gRPC cancel", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-generate-" });
  const logFile = `${dir}/server.log`;
  const logger = fileLogger(logFile);
  try {
    await using s = await startGenerateServer(["--allow-grpc=true"], logger);

    await t.step("closing an SSE stream after two events stops the model before its third", async () => {
      const controller = new AbortController();
      const response = await fetch(`${s.url}/v2/models/words_py/generate_stream`, {
        method: "POST",
        body: '{"text_input":"a b c d e f","parameters":{"delay_ms":300}}',
        signal: controller.signal,
      });
      const reader = response.body!.getReader();
      let text = "";
      while (text.split("\n\n").length < 3) text += new TextDecoder().decode((await reader.read()).value);
      assert.equal(events(text).length, 2);
      controller.abort();
      await reader.closed.catch(() => {});
      const line = await logLine(logFile, "words_py stopped");
      assert.match(line, / words_py: words_py stopped after 2 responses: cancelled$/);
    });

    await t.step(
      "cancelling a gRPC stream after two responses stops the model before its third",
      async () => {
        const got = await pythonJson(
          `
import json, os, queue, numpy as np, tritonclient.grpc as g
c = g.InferenceServerClient(os.environ["URL"])
q = queue.Queue()
c.start_stream(callback=lambda result, error: q.put((result, error)))
t = g.InferInput("text_input", [1], "BYTES"); t.set_data_from_numpy(np.array([b"g h i j k l"], dtype=np.object_))
c.async_stream_infer("words_py", [t], parameters={"delay_ms": 300})
words = []
for _ in range(2):
    result, error = q.get(timeout=30)
    words.append(result.as_numpy("text_output")[0].decode())
c.stop_stream(cancel_requests=True)
print(json.dumps(words))
`,
          { URL: `127.0.0.1:${s.server.grpcPort}` },
        );
        assert.deepEqual(got, ["g", "h"]);
        const lines = (await Deno.readTextFile(logFile)).split("\n").filter((l) =>
          l.includes("words_py stopped")
        );
        // The HTTP step's line, then this one.
        for (let i = 0; i < 400 && lines.length < 2; i++) {
          await new Promise((r) => setTimeout(r, 25));
          lines.splice(
            0,
            lines.length,
            ...(await Deno.readTextFile(logFile)).split("\n").filter((l) => l.includes("words_py stopped")),
          );
        }
        assert.equal(lines.length, 2);
        assert.match(lines[1]!, / words_py: words_py stopped after 2 responses: cancelled$/);
      },
    );
  } finally {
    logger.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("metrics: time to first response, the gaps between responses and the response count", async () => {
  await using s = await startGenerateServer(["--metrics-config=histogram_latencies=true"]);
  // Three words 120 ms apart: one first response, two gaps of at least 120 ms, three responses.
  const r = await post(
    `${s.url}/v2/models/words_py/generate_stream`,
    '{"text_input":"a b c","parameters":{"delay_ms":120}}',
  );
  assert.equal(events(r.text).length, 3);
  await post(`${s.url}/v2/models/echo_py/generate`, '{"text_input":"hi"}');
  const text = await fetch(`http://127.0.0.1:${s.server.metricsAddr!.port}/metrics`).then((r) => r.text());
  const value = (series: string) => {
    const line = text.split("\n").find((l) => l.startsWith(series + " "));
    assert.ok(line, `no series ${series}`);
    return Number(line.split(" ")[1]);
  };
  const words = 'model="words_py",version="1"';
  assert.equal(value(`nv_inference_first_response_histogram_ms_count{${words}}`), 1);
  assert.equal(value(`nv_inference_response_interval_histogram_ms_count{${words}}`), 2);
  assert.equal(value(`nv_inference_response_interval_histogram_ms_bucket{le="100",${words}}`), 0);
  assert.equal(value(`nv_inference_response_count{${words}}`), 3);
  // An ordinary model's one response is its request's end.
  const echo = 'model="echo_py",version="1"';
  assert.equal(value(`nv_inference_first_response_histogram_ms_count{${echo}}`), 1);
  assert.equal(value(`nv_inference_response_count{${echo}}`), 0);
});

Deno.test("the OpenAI API tells the model when a stream's client leaves or a stop sequence ends it", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "dinfer-generate-" });
  const logFile = `${dir}/server.log`;
  const logger = fileLogger(logFile);
  try {
    // words_py and async_words_py with a default delay of 300 ms between words (the OpenAI API passes no
    // delay_ms).
    for (const model of ["words_py", "async_words_py"]) {
      await copyDir(`${MODELS}/${model}`, `${dir}/models/${model}`);
      const config = `${dir}/models/${model}/config.pbtxt`;
      await Deno.writeTextFile(
        config,
        (await Deno.readTextFile(config)) + 'parameters { key: "delay_ms" value: { string_value: "300" } }\n',
      );
    }
    await using s = await startTestServer([
      `--model-repository=${dir}/models`,
      `--backend-config=python,python-executable=${pythonPath()}`,
    ], logger);
    const stopped = async () => {
      const lines = (await Deno.readTextFile(logFile)).split("\n").filter((l) =>
        l.includes("words_py stopped")
      );
      return lines;
    };

    await t.step(
      "closing a streamed completion after two tokens stops the model before its third",
      async () => {
        const controller = new AbortController();
        const response = await fetch(`${s.url}/v1/completions`, {
          method: "POST",
          body: JSON.stringify({ model: "words_py", prompt: "a b c d e f", stream: true }),
          signal: controller.signal,
        });
        const reader = response.body!.getReader();
        let text = "";
        while (text.split("\n\n").length < 3) text += new TextDecoder().decode((await reader.read()).value);
        const texts = events(text).map((e) => (e as { choices: { text: string }[] }).choices[0]!.text);
        assert.deepEqual(texts, ["a", "b"]);
        controller.abort();
        await reader.closed.catch(() => {});
        assert.match(
          await logLine(logFile, "words_py stopped"),
          / words_py stopped after 2 responses: cancelled$/,
        );
      },
    );

    await t.step("a stop sequence ends the model's request too", async () => {
      const r = await fetch(`${s.url}/v1/completions`, {
        method: "POST",
        body: JSON.stringify({ model: "words_py", prompt: "a b c d e f", stop: "c" }),
      }).then((r) => r.json());
      assert.deepEqual(r.choices, [{ index: 0, text: "ab", logprobs: null, finish_reason: "stop" }]);
      for (let i = 0; i < 400 && (await stopped()).length < 2; i++) {
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.match((await stopped())[1]!, / words_py stopped after 3 responses: cancelled$/);
    });

    await t.step(
      "the answer ends at the stop sequence, before a model that does not listen has finished",
      async () => {
        const r = await fetch(`${s.url}/v1/completions`, {
          method: "POST",
          body: JSON.stringify({ model: "async_words_py", prompt: "a b c d e f", stop: "c" }),
        }).then((r) => r.json());
        assert.deepEqual(r.choices, [{ index: 0, text: "ab", logprobs: null, finish_reason: "stop" }]);
        // The model had sent a, b and c; d comes 300 ms later, f 900 ms later (the answer waited for f before).
        const sent = (await Deno.readTextFile(logFile)).split("\n").filter((l) =>
          l.includes("async_words_py sends")
        ).map((l) => l.slice(l.lastIndexOf(" ") + 1));
        assert.deepEqual(sent.slice(0, 3), ["'a'", "'b'", "'c'"]);
        assert.ok(!sent.includes("'f'"), sent.join(" "));
      },
    );

    await t.step("text held back for a stop sequence never splits a character in two", async () => {
      // "x😀" is three UTF-16 units: holding back one (the stop sequence's length less one) must not leave
      // the emoji's first half in one event and its second in the next, which a client decodes as two
      // lone surrogates (Python's json gives '\ud83d' and '\ude00').
      const r = await fetch(`${s.url}/v1/completions`, {
        method: "POST",
        body: JSON.stringify({ model: "words_py", prompt: "x\u{1F600} y", stop: "zz", stream: true }),
      });
      const texts = (await r.text()).split("\n\n").filter((e) => e.startsWith("data: {")).map((e) =>
        (JSON.parse(e.slice(6)) as { choices: { text: string }[] }).choices[0]!.text
      );
      assert.deepEqual(texts, ["x", "\u{1F600}", "y", ""]);
    });
  } finally {
    logger.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test(
  "with two HTTP threads, a stream reaches its client event by event and a client that leaves stops the model, on either thread",
  { ignore: navigator.hardwareConcurrency < 2 },
  async () => {
    const dir = await Deno.makeTempDir({ prefix: "dinfer-generate-" });
    const logFile = `${dir}/server.log`;
    const logger = fileLogger(logFile);
    try {
      await using s = await startGenerateServer(["--http-thread-count=2"], logger);
      // Each stream on a connection of its own: the kernel gives it to the main thread or the listener thread
      // (8 rounds: all on the main thread once in 256). A listener thread handed the whole answer over only when
      // the model had finished, and a client that left did not stop the model.
      const rounds = 8;
      for (let round = 0; round < rounds; round++) {
        const client = Deno.createHttpClient({ poolMaxIdlePerHost: 0 });
        const controller = new AbortController();
        try {
          const response = await fetch(`${s.url}/v2/models/words_py/generate_stream`, {
            method: "POST",
            body: '{"text_input":"a b c d e f","parameters":{"delay_ms":300}}',
            signal: controller.signal,
            client,
          });
          const reader = response.body!.getReader();
          let text = "";
          while (text.split("\n\n").length < 3) text += new TextDecoder().decode((await reader.read()).value);
          // Two events, while the model is still making the rest (a buffered answer brings all six at once).
          assert.equal(events(text).length, 2, `round ${round + 1}`);
          controller.abort();
          await reader.closed.catch(() => {});
        } finally {
          client.close();
        }
      }
      // Every stream's model was told, after 2 responses each.
      let lines: string[] = [];
      for (let i = 0; i < 400; i++) {
        lines = (await Deno.readTextFile(logFile)).split("\n").filter((l) => l.includes("words_py stopped"));
        if (lines.length >= rounds) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.equal(lines.length, rounds);
      for (const line of lines) {
        assert.match(line, / words_py: words_py stopped after 2 responses: cancelled$/);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
);

/** Opens a connection, sends a generate_stream request on it and reads nothing back: a client that stopped reading. */
async function unreadStream(port: number, body: string): Promise<Deno.TcpConn> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  const bytes = new TextEncoder().encode(body);
  await conn.write(
    new TextEncoder().encode(
      `POST /v2/models/words_py/generate_stream HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n` +
        `content-length: ${bytes.byteLength}\r\n\r\n`,
    ),
  );
  await conn.write(bytes);
  return conn;
}

/** Opens a ModelStreamInfer stream, sends one request on it and reads nothing back (the stream paused). */
function unreadGrpcStream(
  port: number,
  message: Uint8Array,
): { session: http2.ClientHttp2Session; stream: http2.ClientHttp2Stream } {
  const frame = new Uint8Array(5 + message.byteLength);
  new DataView(frame.buffer).setUint32(1, message.byteLength);
  frame.set(message, 5);
  const session = http2.connect(`http://127.0.0.1:${port}`);
  const stream = session.request({
    ":method": "POST",
    ":path": "/inference.GRPCInferenceService/ModelStreamInfer",
    "content-type": "application/grpc",
    te: "trailers",
  });
  stream.write(frame);
  stream.pause();
  return { session, stream };
}

Deno.test(
  "a stream's client that stops reading is cut once 16 MiB of answers wait for it, and its model is told: HTTP and gRPC",
  async (t) => {
    const dir = await Deno.makeTempDir({ prefix: "dinfer-generate-" });
    const logFile = `${dir}/server.log`;
    const logger = fileLogger(logFile);
    // Responses of 64 KiB (one word), 2000 of them (125 MiB) unless the model is told to stop.
    const word = "x".repeat(65536);
    const body = JSON.stringify({ text_input: word, parameters: { repeat: 2000 } });
    const stopped = async (n: number) => {
      for (let i = 0; i < 1200; i++) {
        const lines = (await Deno.readTextFile(logFile)).split("\n").filter((l) =>
          l.includes("words_py stopped")
        );
        if (lines.length >= n) return lines;
        await new Promise((r) => setTimeout(r, 25));
      }
      throw new Error(`fewer than ${n} 'words_py stopped' lines in the server log`);
    };
    // At least the responses that pass 16 MiB as the server counts them (255 or 256 of 64 KiB and a little;
    // the model may stop right after the last of them), less than the whole generation.
    const cutAfter = (line: string) => {
      const n = Number(/ stopped after (\d+) responses: cancelled$/.exec(line)?.[1]);
      assert.ok(n >= 255 && n < 2000, `stopped after ${n} responses: ${line}`);
    };
    try {
      await using s = await startGenerateServer(
        ["--http-thread-count=2", "--allow-grpc=true", "--grpc-thread-count=2"],
        logger,
      );
      await t.step("each of 4 HTTP clients that read nothing (on either thread) is cut", async () => {
        const conns: Deno.TcpConn[] = [];
        try {
          for (let i = 0; i < 4; i++) conns.push(await unreadStream(s.server.httpAddr!.port, body));
          (await stopped(4)).forEach(cutAfter);
        } finally {
          for (const c of conns) c.close();
        }
      });
      await t.step(
        "each of 4 gRPC streams that read nothing (on either thread) is cut, RESOURCE_EXHAUSTED",
        async () => {
          const type = lookupType("ModelInferRequest");
          const text = new TextEncoder().encode(word);
          const element = new Uint8Array(4 + text.byteLength);
          new DataView(element.buffer).setUint32(0, text.byteLength, true);
          element.set(text, 4);
          const message = type.encode(type.fromObject({
            model_name: "words_py",
            inputs: [{ name: "text_input", datatype: "BYTES", shape: [1] }],
            parameters: { repeat: { int64_param: 2000 } },
            raw_input_contents: [element],
          })).finish();
          const clients = Array.from({ length: 4 }, () => unreadGrpcStream(s.server.grpcPort!, message));
          try {
            (await stopped(8)).slice(4).forEach(cutAfter);
            // A client that reads again gets what was held, then the status.
            const { stream } = clients[0]!;
            const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) =>
              stream.once("trailers", resolve)
            );
            let bytes = 0;
            stream.on("data", (d: Uint8Array) => (bytes += d.byteLength));
            const ended = new Promise((resolve) => stream.once("end", resolve));
            stream.resume();
            // The trailers come as they arrive; the data before them may still be on its way to 'data'.
            const status = await trailers;
            await ended;
            assert.equal(status["grpc-status"], "8");
            assert.match(
              decodeURIComponent(String(status["grpc-message"])),
              /^The client read none of the last 16777216 bytes of this stream's responses: the stream was cut$/,
            );
            // The responses held when the bound was passed: 16 MiB give or take one (65,645 bytes each; the
            // main thread counts them by their tensors, a little more than they take).
            const bound = 16 * 1024 * 1024;
            assert.ok(bytes > bound - 65645 && bytes <= bound + 65645, `${bytes} bytes`);
            // A client that reads again only after the grace (5 s) finds the responses held dropped: what was
            // already with the connection (a response or two), and no status.
            await new Promise((r) => setTimeout(r, 5500));
            const late = clients[1]!.stream;
            let lateBytes = 0;
            late.on("data", (d: Uint8Array) => (lateBytes += d.byteLength));
            late.resume();
            await new Promise((r) => setTimeout(r, 1000));
            assert.ok(lateBytes > 0 && lateBytes < 1024 * 1024, `${lateBytes} bytes after the grace`);
          } finally {
            for (const c of clients) c.session.destroy();
          }
        },
      );
      await t.step("the server answers as before", async () => {
        const r = await post(`${s.url}/v2/models/words_py/generate_stream`, '{"text_input":"a b"}');
        assert.equal(r.status, 200);
        assert.deepEqual(events(r.text).map((e) => (e as { text_output: string }).text_output), ["a", "b"]);
      });
    } finally {
      logger.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
);

Deno.test("a decoupled model's async execute runs in the background: its requests stream at the same time", async (t) => {
  await using s = await startGenerateServer();
  await t.step("the second request's first word comes before the first request's second", async () => {
    const order: string[] = [];
    const stream = async (text: string) => {
      const response = await fetch(`${s.url}/v2/models/async_words_py/generate_stream`, {
        method: "POST",
        body: JSON.stringify({ text_input: text, parameters: { delay_ms: 800 } }),
      });
      const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
      let buffered = "";
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        buffered += value;
        const parts = buffered.split("\n\n");
        buffered = parts.pop()!;
        for (const p of parts) order.push((JSON.parse(p.slice(6)) as { text_output: string }).text_output);
      }
    };
    const first = stream("a1 a2");
    await new Promise((r) => setTimeout(r, 100));
    await Promise.all([first, stream("b1 b2")]);
    // One after the other, the order would be a1 a2 b1 b2.
    assert.deepEqual(order, ["a1", "b1", "a2", "b2"]);
  });
  await t.step("a coroutine that raises ends its request with an error event", async () => {
    const r = await post(`${s.url}/v2/models/async_words_py/generate_stream`, '{"text_input":"x raise y"}');
    assert.equal(r.status, 200);
    assert.deepEqual(events(r.text), [
      { model_name: "async_words_py", model_version: "1", text_output: "x" },
      { error: "ValueError: word 1 is 'raise'" },
    ]);
  });
});

Deno.test("unloading a decoupled model waits for the streams its async execute still sends", async () => {
  await using s = await startGenerateServer(["--model-control-mode=explicit", "--load-model=async_words_py"]);
  const response = await fetch(`${s.url}/v2/models/async_words_py/generate_stream`, {
    method: "POST",
    body: '{"text_input":"a b c d","parameters":{"delay_ms":300}}',
  });
  const reader = response.body!.getReader();
  let text = new TextDecoder().decode((await reader.read()).value);
  // The first word is out; the unload starts while the coroutine sends the other three.
  const unload = fetch(`${s.url}/v2/repository/models/async_words_py/unload`, { method: "POST" });
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += new TextDecoder().decode(value);
  }
  assert.deepEqual(events(text).map((e) => (e as { text_output?: string }).text_output ?? e), [
    "a",
    "b",
    "c",
    "d",
  ]);
  assert.equal((await unload).status, 200);
});
