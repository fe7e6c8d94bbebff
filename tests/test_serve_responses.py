"""`POST /v1/responses` (OpenAI's Responses API, text) with the official openai client against a real
`specee serve`, and the refusals around it (stored responses, tools, images)."""

from __future__ import annotations

import json
from pathlib import Path

import openai
import pytest
from pydantic import BaseModel

from engine.serve.errors import ApiError
from engine.serve.launcher import ServerProcess
from engine.serve.responses import parse_responses
from tests.test_serve import raw_request
from tests.test_serve_strict import assert_openai_error

KEY = "test-key-3f9a"  # raw_request (tests.test_serve) sends this one
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
QUESTION = "What is the capital of France? Answer in one word."


@pytest.fixture(scope="module")
def served(model_path: Path):
    server = ServerProcess(model=model_path, mode="vanilla", api_key=KEY, extra_args=["--ctx", "1024"])
    server.start(timeout=180)
    yield server
    server.stop()


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0, timeout=120)


def test_a_response_is_the_chat_completions_answer(served: ServerProcess) -> None:
    resp = client(served).responses.create(model=MODEL_ID, input=QUESTION, max_output_tokens=16, temperature=0)
    chat = client(served).chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}], max_tokens=16, temperature=0
    )
    assert resp.object == "response" and resp.status == "completed" and resp.model == MODEL_ID
    assert resp.output_text == chat.choices[0].message.content and "Paris" in resp.output_text
    assert resp.output[0].type == "message" and resp.output[0].role == "assistant"
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.usage.output_tokens == chat.usage.completion_tokens
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens


def test_instructions_and_message_items_reach_the_prompt(served: ServerProcess) -> None:
    c = client(served)
    resp = c.responses.create(
        model=MODEL_ID,
        instructions="You answer in French only.",
        input=[
            {"role": "user", "content": "Hello!"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Hi! How can I help?"}]},  # type: ignore[list-item, misc]
            {"role": "user", "content": [{"type": "input_text", "text": QUESTION}]},
        ],
        max_output_tokens=8,
        temperature=0,
    )
    chat = c.chat.completions.create(
        model=MODEL_ID,
        messages=[
            {"role": "system", "content": "You answer in French only."},
            {"role": "user", "content": "Hello!"},
            {"role": "assistant", "content": "Hi! How can I help?"},
            {"role": "user", "content": QUESTION},
        ],
        max_tokens=8,
        temperature=0,
    )
    assert resp.instructions == "You answer in French only."
    assert resp.usage.input_tokens == chat.usage.prompt_tokens and resp.output_text == chat.choices[0].message.content


def test_streamed_events_add_up_to_the_answer(served: ServerProcess) -> None:
    c = client(served)
    whole = c.responses.create(model=MODEL_ID, input="Name three colours.", max_output_tokens=24, temperature=0)
    events = list(c.responses.create(model=MODEL_ID, input="Name three colours.", max_output_tokens=24, temperature=0,
                                     stream=True))  # fmt: skip
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"
    ]  # fmt: skip
    assert kinds[-4:-1] == ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert deltas == final.output_text == whole.output_text and kinds.count("response.output_text.delta") >= 1
    assert kinds[-1] == ("response.completed" if whole.status == "completed" else "response.incomplete")


def test_a_length_cut_is_incomplete(served: ServerProcess) -> None:
    resp = client(served).responses.create(model=MODEL_ID, input="Count from 1 to 100.", max_output_tokens=5, temperature=0)
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 5


class City(BaseModel):
    name: str
    country: str


def test_parse_with_a_pydantic_model(served: ServerProcess) -> None:
    resp = client(served).responses.parse(
        model=MODEL_ID, input="Give me a city as JSON.", text_format=City, max_output_tokens=80, temperature=0
    )
    assert isinstance(resp.output_parsed, City)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "hi", "previous_response_id": "resp_1"}, "previous_response_id"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0].content"),
        ({"input": ""}, "input"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "input[0]"),
        ({"input": "hi", "max_output_tokens": -1}, "max_output_tokens"),
        ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format"),
    ],
)
def test_what_cannot_be_honoured_is_refused(served: ServerProcess, body: dict, param: str) -> None:
    status, reply = raw_request(served, "POST", "/v1/responses", json.dumps({"model": MODEL_ID, **body}).encode())
    assert assert_openai_error(status, reply)["param"] == param


def test_the_parser_alone() -> None:
    req = parse_responses({"input": "hi", "instructions": "Be brief.", "max_output_tokens": 7}, MODEL_ID, 1024)
    assert req.messages == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert req.sampling.max_tokens == 7
    with pytest.raises(ApiError, match="last input message must be the user's"):
        parse_responses({"input": [{"role": "assistant", "content": "x"}]}, MODEL_ID, 1024)
