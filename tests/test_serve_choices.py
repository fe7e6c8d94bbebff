"""`n` answers per request and usage.prompt_tokens_details.cached_tokens, with the openai client
against `specee serve` on the default model: one request at a time (the choices one after another)
and batched (--parallel: decoded together)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from engine.serve.launcher import ServerProcess
from engine.serve.schema import MAX_CHOICES

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
STORY = [{"role": "user", "content": "Write one sentence about the sea."}]


@pytest.fixture(scope="module", params=["1", "4"], ids=["one-at-a-time", "batched"])
def server(request: pytest.FixtureRequest, model_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(model=model_path, mode="vanilla", extra_args=["--parallel", request.param, "--ctx", "1024"]) as s:
        yield s


def client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120)


def test_n_choices_streamed_and_not(server: ServerProcess) -> None:
    c = client(server)
    kw = {"model": MODEL_ID, "messages": STORY, "max_tokens": 12, "temperature": 1.0, "seed": 11, "n": 3}
    reply = c.chat.completions.create(**kw)
    assert [ch.index for ch in reply.choices] == [0, 1, 2]
    texts = [ch.message.content for ch in reply.choices]
    assert len(set(texts)) > 1, texts  # seed + i: the choices differ
    assert 3 <= reply.usage.completion_tokens <= 3 * 12  # the answers' tokens together; the prompt once
    assert (
        reply.usage.prompt_tokens
        == client(server).chat.completions.create(model=MODEL_ID, messages=STORY, max_tokens=1).usage.prompt_tokens
    )
    assert [ch.message.content for ch in c.chat.completions.create(**kw).choices] == texts  # a seeded request repeats
    chunks = list(c.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    streamed = {i: "" for i in range(3)}
    finishes = {}
    for chunk in chunks:
        for ch in chunk.choices:
            streamed[ch.index] += ch.delta.content or ""
            if ch.finish_reason:
                finishes[ch.index] = ch.finish_reason
    assert [streamed[i] for i in range(3)] == texts and sorted(finishes) == [0, 1, 2]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == reply.usage.completion_tokens
    # greedy: every choice is the one answer
    greedy = c.chat.completions.create(model=MODEL_ID, messages=STORY, max_tokens=8, temperature=0, n=2)
    alone = c.chat.completions.create(model=MODEL_ID, messages=STORY, max_tokens=8, temperature=0)
    assert [ch.message.content for ch in greedy.choices] == [alone.choices[0].message.content] * 2


def test_n_completions(server: ServerProcess) -> None:
    c = client(server)
    kw = {"model": MODEL_ID, "prompt": "Once upon a time", "max_tokens": 10, "temperature": 1.0, "seed": 3, "n": 2}
    reply = c.completions.create(**kw)
    assert [ch.index for ch in reply.choices] == [0, 1] and reply.choices[0].text != reply.choices[1].text
    streamed = ["", ""]
    for chunk in c.completions.create(**kw, stream=True):
        for ch in chunk.choices:
            streamed[ch.index] += ch.text
    assert streamed == [ch.text for ch in reply.choices]


@pytest.mark.parametrize("n", [0, MAX_CHOICES + 1, 1000])
def test_absurd_n_is_a_clear_400(server: ServerProcess, n: int) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(server).chat.completions.create(model=MODEL_ID, messages=STORY, max_tokens=2, n=n)
    assert err.value.body["param"] == "n" and f"n must be 1..{MAX_CHOICES}" in err.value.body["message"]  # type: ignore[index]


def test_the_same_conversation_again_reports_its_cached_prompt(server: ServerProcess) -> None:
    c = client(server)
    chat = [{"role": "user", "content": "Tell me about the history of the bicycle in three sentences."}]
    first = c.chat.completions.create(model=MODEL_ID, messages=chat, max_tokens=6, temperature=0)
    again = c.chat.completions.create(model=MODEL_ID, messages=chat, max_tokens=6, temperature=0)
    assert again.usage.prompt_tokens_details is not None
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < again.usage.prompt_tokens and cached > first.usage.prompt_tokens_details.cached_tokens  # type: ignore[operator]
    chunks = list(
        c.chat.completions.create(
            model=MODEL_ID, messages=chat, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens > 0
