"""Whole characters only: an answer cut by max_tokens inside a multi-byte UTF-8 character drops the
partial character rather than ending in U+FFFD, on the one-at-a-time path (EngineSession.generate)
and the batched one (engine/worker/answer.py), streamed and not; `specee serve` driven by the openai
client on the default model, whose byte-fallback tokens split emoji and CJK characters."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from engine import protocol as p
from engine.serve.launcher import ServerProcess
from engine.worker.answer import AnswerStream

MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"
EMOJI = "🍎🍌🍇🍒🍓🥝🍍🥭🍑🍋"
REPEAT = [{"role": "user", "content": f"Repeat exactly: {EMOJI}"}]
# max_tokens that end this answer between the bytes of one character on the default model (greedy):
# found by sweeping 1..40 (each emoji is three byte tokens here); both ended in U+FFFD before the fix
CUT_AT = (4, 20)


class Bytes:
    """Token t is the byte t of a UTF-8 text; token 0 ends the answer (no real model needed)."""

    def is_end(self, token: int) -> bool:
        return token == 0

    def piece(self, token: int, special: bool = False) -> bytes:
        return bytes([token])


@pytest.mark.parametrize("stream", [True, False])
def test_the_batched_path_drops_a_character_cut_by_max_tokens(stream: bool) -> None:
    text = "ok 🍎"
    raw = text.encode()
    for max_tokens in range(1, len(raw)):
        req = p.Generate("r", [], p.Sampling(max_tokens=max_tokens), stream=stream)
        events: list[p.Message] = []
        answer = AnswerStream(req, 4, 0, Bytes(), events.append, 0.0, emit_every_s=0.0, stats_every_s=1e9, n_threads=1)
        ended = [answer.add(b, False) for b in raw[:max_tokens]]
        assert ended[-1] and answer.finish == p.FinishReason.LENGTH
        answer.close()
        whole = raw[:max_tokens].decode("utf-8", errors="ignore")  # the whole characters among those bytes
        sent = "".join(m.text for m in events if isinstance(m, p.Token))
        (done,) = [m for m in events if isinstance(m, p.Done)]
        assert sent == done.text == whole, max_tokens


def _client(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=120)


def _answers(server: ServerProcess, max_tokens: int) -> tuple[str, str, str]:
    """(non-streamed, streamed, /v1/completions) texts of the repeat request cut at max_tokens."""
    c = _client(server)
    whole = c.chat.completions.create(model=MODEL_ID, messages=REPEAT, max_tokens=max_tokens, temperature=0)
    chunks = c.chat.completions.create(model=MODEL_ID, messages=REPEAT, max_tokens=max_tokens, temperature=0, stream=True)
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    raw = c.completions.create(model=MODEL_ID, prompt=f"Fruit emoji: {EMOJI}", max_tokens=max_tokens, temperature=0)
    assert whole.choices[0].finish_reason == "length"
    return whole.choices[0].message.content or "", streamed, raw.choices[0].text


@pytest.fixture(scope="module", params=["1", "2"], ids=["one-at-a-time", "batched"])
def server(request: pytest.FixtureRequest, model_path: Path) -> Iterator[ServerProcess]:
    with ServerProcess(model=model_path, mode="vanilla", extra_args=["--parallel", request.param, "--ctx", "1024"]) as s:
        yield s


@pytest.mark.parametrize("max_tokens", CUT_AT)
def test_a_reply_cut_inside_a_character_holds_whole_characters(server: ServerProcess, max_tokens: int) -> None:
    whole, streamed, raw = _answers(server, max_tokens)
    for text in (whole, streamed, raw):
        assert "\ufffd" not in text, (max_tokens, text)
    assert streamed == whole
    assert any(ch in whole for ch in EMOJI)  # the answer reached the emoji: a cut there was possible
