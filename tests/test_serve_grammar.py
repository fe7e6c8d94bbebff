"""`specee serve`'s structured output and logprobs (issue 26, items 2 and 3): response_format json_object
and json_schema enforced by a grammar in llama.cpp's sampler chain (the openai client's parse() gets a
valid object even from the tiny default model), and OpenAI's logprobs, chat and completions, streamed
and not, computed from the model's own logits. Both run in the vanilla decoder whatever the server's
mode: this server runs ngram mode, and the answers say they came from vanilla.

One server (ngram mode, 1024-token context) runs for the module.
"""

from __future__ import annotations

import http.client
import json
import math
from pathlib import Path
from typing import Literal

import openai
import pytest
from pydantic import BaseModel, Field

from engine import protocol as p
from engine.serve.errors import ApiError
from engine.serve.launcher import ServerProcess
from engine.serve.structured import grammar_for
from tests.test_serve_strict import assert_openai_error

KEY = "grammar-key-5e1d"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def served(model_path: Path):
    server = ServerProcess(model=model_path, mode="ngram", api_key=KEY, extra_args=["--ctx", "1024"])
    server.start(timeout=180)
    yield server
    server.stop()


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=120)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


class Colour(BaseModel):
    name: str
    red: int
    green: int
    blue: int
    warm: bool


class Pet(BaseModel):
    kind: Literal["cat", "dog", "fish"]
    name: str
    age: int | None
    toys: list[str] = Field(max_length=3)  # the tiny model, greedy, would list toys until max_tokens


# -- structured output ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [Colour, Pet])
def test_parse_returns_a_valid_object_of_the_pydantic_model(served: ServerProcess, model: type[BaseModel]) -> None:
    reply = client(served).chat.completions.parse(
        model=MODEL_ID,
        messages=ask(f"Describe a {model.__name__.lower()} as JSON."),
        response_format=model,
        temperature=0,
        max_tokens=200,
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "stop", choice
    assert isinstance(choice.message.parsed, model)
    assert model.model_validate_json(choice.message.content) == choice.message.parsed


def test_parse_at_a_temperature_and_the_mode_header(served: ServerProcess) -> None:
    raw = client(served).chat.completions.with_raw_response.parse(
        model=MODEL_ID, messages=ask("A colour, please."), response_format=Colour, temperature=1.0, seed=7, max_tokens=200
    )
    assert raw.headers["x-specee-mode"] == "vanilla (grammar)"
    assert isinstance(raw.parse().choices[0].message.parsed, Colour)
    # a plain request is answered by the server's mode, with no such header
    plain = client(served).chat.completions.with_raw_response.create(model=MODEL_ID, messages=ask("Hi."), max_tokens=4)
    assert "x-specee-mode" not in plain.headers


def test_the_mode_answers_as_before_after_a_vanilla_request_and_the_log_says_so(served: ServerProcess) -> None:
    plain = {"model": MODEL_ID, "messages": ask("Write a haiku about rain."), "temperature": 0, "max_tokens": 40}
    before = client(served).chat.completions.create(**plain).choices[0].message.content
    client(served).chat.completions.parse(
        model=MODEL_ID, messages=ask("A colour."), response_format=Colour, temperature=0, max_tokens=200
    )  # greedy: unseeded, the tiny model rambled inside "name" past max_tokens on 3 seeds of 40
    # the vanilla decoder prefilled the shared context from scratch; ngram mode then prefills again
    assert client(served).chat.completions.create(**plain).choices[0].message.content == before
    assert "json_schema Colour: answered by the vanilla decoder (mode ngram)" in served.last_lines(20)


def test_json_object_streamed_and_not(served: ServerProcess) -> None:
    kw = {"model": MODEL_ID, "messages": ask("Give a JSON object with one fruit."), "response_format": {"type": "json_object"}}
    reply = client(served).chat.completions.create(temperature=0, max_tokens=300, **kw)
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)
    chunks = client(served).chat.completions.create(temperature=0, max_tokens=300, stream=True, **kw)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == reply.choices[0].message.content


def test_json_schema_strict_with_references_enums_and_arrays(served: ServerProcess) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "size": {"$ref": "#/$defs/size"},
            "districts": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
            "founded": {"type": "string", "format": "date"},
        },
        "required": ["city", "size", "districts", "founded"],
        "additionalProperties": False,
        "$defs": {"size": {"enum": ["small", "medium", "large"]}},
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}
    reply = client(served).chat.completions.create(
        model=MODEL_ID, messages=ask("Tell me about Paris."), response_format=fmt, temperature=0, max_tokens=200
    )
    data = json.loads(reply.choices[0].message.content)
    assert set(data) == {"city", "size", "districts", "founded"} and data["size"] in ("small", "medium", "large")
    assert len(data["city"]) <= 20 and 1 <= len(data["districts"]) <= 3
    year, month, day = data["founded"].split("-")
    assert len(year) == 4 and 1 <= int(month) <= 12 and 1 <= int(day) <= 31


def test_a_length_cut_says_length_and_the_grammar_never_ends_early(served: ServerProcess) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "c", "schema": Colour.model_json_schema()}}
    reply = client(served).chat.completions.create(
        model=MODEL_ID, messages=ask("A colour."), response_format=fmt, temperature=0, max_tokens=5
    )
    assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 5
    with pytest.raises(openai.LengthFinishReasonError):
        client(served).chat.completions.parse(model=MODEL_ID, messages=ask("A colour."), response_format=Colour, max_tokens=5)


def schema_format(schema: object) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


BAD_FORMATS = {
    "schema not an object": ({"type": "json_schema", "json_schema": {"name": "x", "schema": ["type", "object"]}}, "schema"),
    "a string schema": ({"type": "json_schema", "json_schema": {"name": "x", "schema": "object"}}, "schema"),
    "minimum": (schema_format({"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}}}), "'minimum'"),
    "an unknown format": (
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "format": "email"}}},
        "'email'",
    ),
    "a remote reference": (
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "https://example.com/s.json"}}},
        "example.com",
    ),
    "an unknown type": ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "decimal"}}}, "decimal"),
    "a pattern the converter refuses": (
        {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "abc"}}},
        "cannot be enforced",
    ),
    "an unknown type of format": ({"type": "xml"}, "xml"),
    "no json_schema": ({"type": "json_schema"}, "json_schema"),
    "not an object": ("json", "response_format"),
}  # fmt: skip


@pytest.mark.parametrize("case", BAD_FORMATS)
def test_bad_response_formats_are_400(served: ServerProcess, case: str) -> None:
    fmt, says = BAD_FORMATS[case]
    with pytest.raises(openai.BadRequestError) as err:
        client(served).chat.completions.create(model=MODEL_ID, messages=ask("Hi."), response_format=fmt, max_tokens=4)
    error = assert_openai_error(400, err.value.response.json())
    assert error["type"] == "invalid_request_error" and error["param"] == "response_format", error
    assert says in error["message"], error
    # the same, checked before any request is made
    with pytest.raises(Exception, match="response_format"):
        grammar_for(fmt)


def test_a_grammar_cannot_continue_an_answer(served: ServerProcess) -> None:
    messages = [*ask("A colour?"), {"role": "assistant", "content": '{"name": "'}]
    with pytest.raises(openai.BadRequestError, match="continue"):
        client(served).chat.completions.create(
            model=MODEL_ID, messages=messages, response_format={"type": "json_object"}, max_tokens=4
        )


# -- logprobs ----------------------------------------------------------------------------------------


def _check_entries(content: list, n_top: int, greedy: bool = True) -> None:
    assert content
    for entry in content:
        assert entry.logprob <= 0 and math.isfinite(entry.logprob)
        assert bytes(entry.bytes).decode("utf-8", errors="backslashreplace") == entry.token
        tops = entry.top_logprobs
        assert len(tops) == n_top
        assert [t.logprob for t in tops] == sorted((t.logprob for t in tops), reverse=True)
        assert all(t.logprob <= 0 for t in tops) and sum(math.exp(t.logprob) for t in tops) <= 1 + 1e-6
        if greedy and tops:  # temperature 0: the chosen token is the most likely one
            assert entry.logprob == pytest.approx(tops[0].logprob, abs=1e-6)
            assert entry.logprob >= max(t.logprob for t in tops) - 1e-6


def test_chat_logprobs_streamed_and_not(served: ServerProcess) -> None:
    kw = {"model": MODEL_ID, "messages": ask("Name three colours."), "temperature": 0, "max_tokens": 16}
    raw = client(served).chat.completions.with_raw_response.create(logprobs=True, top_logprobs=5, **kw)
    assert raw.headers["x-specee-mode"] == "vanilla (logprobs)"
    reply = raw.parse()
    content = reply.choices[0].logprobs.content
    _check_entries(content, 5)
    assert len(content) == reply.usage.completion_tokens
    assert "".join(e.token for e in content) == reply.choices[0].message.content
    # the same answer, and the same numbers, chunk by chunk
    chunks = list(client(served).chat.completions.create(logprobs=True, top_logprobs=5, stream=True, **kw))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content], abs=1e-4)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply.choices[0].message.content
    # logprobs without alternatives; and none at all when not asked
    bare = client(served).chat.completions.create(logprobs=True, **kw)
    _check_entries(bare.choices[0].logprobs.content, 0)
    assert client(served).chat.completions.create(**kw).choices[0].logprobs is None


def test_logprobs_at_a_temperature_and_with_a_grammar(served: ServerProcess) -> None:
    reply = client(served).chat.completions.create(
        model=MODEL_ID, messages=ask("A colour?"), temperature=1.2, seed=3, max_tokens=12, logprobs=True, top_logprobs=20
    )
    _check_entries(reply.choices[0].logprobs.content, 20, greedy=False)
    raw = client(served).chat.completions.with_raw_response.create(
        model=MODEL_ID, messages=ask("A colour?"), temperature=0, max_tokens=300, logprobs=True, top_logprobs=2,
        response_format={"type": "json_object"},
    )  # fmt: skip
    assert raw.headers["x-specee-mode"] == "vanilla (grammar, logprobs)"
    shaped = raw.parse()
    json.loads(shaped.choices[0].message.content)
    # the model's own distribution: the grammar's choice need not be the model's favourite
    _check_entries(shaped.choices[0].logprobs.content, 2, greedy=False)


@pytest.mark.parametrize("stream", [False, True])
def test_completions_logprobs(served: ServerProcess, stream: bool) -> None:
    kw = {"model": MODEL_ID, "prompt": "The capital of France is", "temperature": 0, "max_tokens": 8, "logprobs": 3}
    if not stream:
        choice = client(served).completions.create(**kw).choices[0]
        lp = choice.logprobs
        tokens, token_logprobs, tops, offsets, text = lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset, choice.text
    else:
        tokens, token_logprobs, tops, offsets, text = [], [], [], [], ""
        for chunk in client(served).completions.create(stream=True, **kw):
            c = chunk.choices[0]
            text += c.text
            if c.logprobs:
                tokens += c.logprobs.tokens
                token_logprobs += c.logprobs.token_logprobs
                tops += c.logprobs.top_logprobs
                offsets += c.logprobs.text_offset
    assert len(tokens) == len(token_logprobs) == len(tops) == len(offsets) == 8
    assert "".join(tokens) == text
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    for token, logprob, top in zip(tokens, token_logprobs, tops, strict=True):
        assert 3 <= len(top) <= 4 and token in top and all(v <= 0 for v in top.values())
        assert logprob == pytest.approx(max(top.values()), abs=1e-6) and sum(math.exp(v) for v in top.values()) <= 1 + 1e-6


BAD_LOGPROBS = {
    "top_logprobs 21": ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    "top_logprobs -1": ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    "top_logprobs without logprobs": ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    "logprobs a number in chat": ("/v1/chat/completions", {"logprobs": 3}, "logprobs"),
    "completions logprobs 6": ("/v1/completions", {"logprobs": 6}, "logprobs"),
    "completions logprobs true": ("/v1/completions", {"logprobs": True}, "logprobs"),
}


@pytest.mark.parametrize("case", BAD_LOGPROBS)
def test_bad_logprobs_are_400(served: ServerProcess, case: str) -> None:
    path, extra, param = BAD_LOGPROBS[case]
    body = {"model": MODEL_ID, "max_tokens": 2, **extra}  # type: ignore[dict-item]
    body.update({"messages": ask("Hi.")} if "chat" in path else {"prompt": "Hi"})
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    status, reply = resp.status, json.loads(resp.read())
    conn.close()
    error = assert_openai_error(status, reply)
    assert error["param"] == param and error["type"] == "invalid_request_error", error


def test_tools_and_n_are_still_refused(served: ServerProcess) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    for extra in ({"tools": [tool]}, {"n": 17}, {"tool_choice": "auto"}):
        with pytest.raises(openai.BadRequestError):
            client(served).chat.completions.create(model=MODEL_ID, messages=ask("Hi."), max_tokens=2, **extra)


@pytest.mark.slow  # json_schema's grammar comes from llama-cpp-python's converter
def test_llama_cpp_servers_own_grammar_parameters_are_honoured_or_refused() -> None:
    from engine.serve.schema import parse_chat

    ask_ = {"messages": [{"role": "user", "content": "hi"}]}
    req = parse_chat({**ask_, "grammar": 'root ::= "a"'}, MODEL_ID, 512)
    assert (req.grammar, req.grammar_for, req.vanilla_because) == ('root ::= "a"', "grammar", "grammar")
    assert parse_chat({**ask_, "json_schema": {"const": "42"}}, MODEL_ID, 512).grammar
    schema_in_object = parse_chat({**ask_, "response_format": {"type": "json_object", "schema": {"const": "42"}}}, MODEL_ID, 512)
    assert schema_in_object.grammar_for == "json_schema"
    assert parse_chat({**ask_, "n_predict": 7}, MODEL_ID, 512).sampling.max_tokens == 7
    assert parse_chat({**ask_, "n_predict": -1}, MODEL_ID, 512).sampling.max_tokens == p.Sampling().max_tokens
    for bad in ({"grammar": "x", "json_schema": {}}, {"grammar": ""}, {"grammar": 5}, {"json_schema": 123}):
        with pytest.raises(ApiError):
            parse_chat({**ask_, **bad}, MODEL_ID, 512)
