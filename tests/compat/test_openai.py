"""The official `openai` Python client against dinfer's OpenAI-compatible API.

Run by tests/compat/openai_test.ts against a server that serves examples/genai_models; the base URL comes from
DINFER_OPENAI_URL (`http://host:port/v1`).
"""

import os

import openai
import pytest

GREEDY = '. the " finally "'


@pytest.fixture(scope="module")
def client():
    return openai.OpenAI(base_url=os.environ["DINFER_OPENAI_URL"], api_key="unused", max_retries=0)


def test_models_list_and_retrieve(client):
    assert [m.id for m in client.models.list()] == ["embed", "textgen"]
    model = client.models.retrieve("textgen")
    assert (model.id, model.object, model.owned_by) == ("textgen", "model", "dinfer")


def test_completion(client):
    r = client.completions.create(model="textgen", prompt="the if statement", max_tokens=5, temperature=0)
    assert r.object == "text_completion"
    assert r.model == "textgen"
    assert len(r.choices) == 1
    assert (r.choices[0].text, r.choices[0].finish_reason) == (GREEDY, "length")
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (3, 5, 8)


def test_completion_stream(client):
    stream = client.completions.create(
        model="textgen",
        prompt="the if statement",
        max_tokens=5,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert texts == [".", " the", ' "', " finally", ' "', ""]
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert chunks[-1].choices == []
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (3, 5)


def test_completion_stop(client):
    r = client.completions.create(model="textgen", prompt="the if statement", max_tokens=5, temperature=0, stop='"')
    assert (r.choices[0].text, r.choices[0].finish_reason) == (". the ", "stop")


def test_chat_completion(client):
    messages = [{"role": "user", "content": "the if statement"}]
    r = client.chat.completions.create(model="textgen", messages=messages, max_tokens=3, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (7, 3)
    streamed = client.chat.completions.create(
        model="textgen", messages=messages, max_tokens=3, temperature=0, stream=True
    )
    chunks = list(streamed)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_seeded_sampling_is_repeatable(client):
    args = dict(model="textgen", prompt="a list", max_tokens=12, temperature=0.8, top_p=0.9, seed=7)
    a = client.completions.create(**args).choices[0].text
    b = client.completions.create(**args).choices[0].text
    assert a == b
    assert "".join(c.choices[0].text for c in client.completions.create(stream=True, **args)) == a


def test_embeddings(client):
    # The client asks for base64 by default and decodes it.
    r = client.embeddings.create(model="embed", input=["a list of integers", "zzzz"])
    assert [(d.index, len(d.embedding)) for d in r.data] == [(0, 32), (1, 32)]
    assert abs(sum(x * x for x in r.data[0].embedding) - 1) < 1e-3
    assert r.data[1].embedding == [0.0] * 32
    assert (r.usage.prompt_tokens, r.usage.total_tokens) == (5, 5)
    floats = client.embeddings.create(model="embed", input="a list of integers", encoding_format="float")
    assert floats.data[0].embedding == r.data[0].embedding


def test_errors(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="nope", prompt="x")
    assert e.value.status_code == 404
    assert e.value.body == {
        "message": "The model 'nope' does not exist",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="textgen", messages=[{"role": "user", "content": "x"}], n=2)
    assert e.value.body["message"] == "'n' must be 1: one choice per request is supported"
