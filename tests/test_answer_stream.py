"""engine/worker/answer.py's AnswerStream (the batched path's answer) on a scripted clock: what its
Stats say of an answer, with no model."""

from __future__ import annotations

import pytest

from engine import protocol as p
from engine.worker import answer as answer_module
from engine.worker.answer import AnswerStream

END = 0


class Letters:
    """Token t is the letter chr(96 + t); token 0 ends the answer."""

    def is_end(self, token: int) -> bool:
        return token == END

    def piece(self, token: int, special: bool = False) -> bytes:
        return chr(96 + token).encode()


def _answer(monkeypatch: pytest.MonkeyPatch, arrivals: list[tuple[float, int]]) -> tuple[AnswerStream, list[p.Message]]:
    clock = iter(t for t, _tok in arrivals)
    monkeypatch.setattr(answer_module.time, "perf_counter", lambda: next(clock))
    events: list[p.Message] = []
    req = p.Generate(request_id="r", messages=[{"role": "user", "content": "hi"}], sampling=p.Sampling.greedy(100))
    stream = AnswerStream(req, 10, 0, Letters(), events.append, 0.0, emit_every_s=0.0, stats_every_s=1e9, n_threads=2)
    for _t, tok in arrivals:
        if stream.add(tok, False):
            break
    return stream, events


def test_the_end_of_generation_token_counts_as_the_decode_step_it_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Four letters one second apart, then the end token a second later: four decode steps after
    the first token in four seconds, 1.0 tok/s (llama-server's count); leaving the end token out
    read 0.75."""
    stream, events = _answer(monkeypatch, [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4), (5.0, END)])
    assert stream.finish == p.FinishReason.STOP and stream.text == "abcd"
    monkeypatch.setattr(answer_module.time, "perf_counter", lambda: 9.0)
    stats = stream.stats()
    assert stats.n_generated == 4 and stats.decode_tok_s == pytest.approx(1.0)
    assert "".join(e.text for e in events if isinstance(e, p.Token)) == "abcd"


def test_an_answer_cut_by_max_tokens_counts_its_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    stream, _events = _answer(monkeypatch, [(float(i), i) for i in range(1, 6)])  # a..e, no end token
    monkeypatch.setattr(answer_module.time, "perf_counter", lambda: 9.0)
    assert stream.stats().decode_tok_s == pytest.approx(1.0)


def test_recent_speed_is_the_last_seconds_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """One answer loop for both paths (issue 47): the batched path's Stats said recent_tok_s = the
    whole answer's average, so its meter never showed a slowdown or a speed-up as it happened."""
    slow = [(float(i), i) for i in range(1, 5)]  # a..d at 1 tok/s
    fast = [(4.0 + 0.1 * i, 4 + i) for i in range(1, 11)]  # e..n at 10 tok/s
    stream, _events = _answer(monkeypatch, [*slow, *fast])
    monkeypatch.setattr(answer_module.time, "perf_counter", lambda: 9.0)
    stats = stream.stats()
    assert stats.recent_tok_s == pytest.approx(10.0) and stats.decode_tok_s == pytest.approx(13 / 4)


def test_an_answer_stopped_before_its_first_token_claims_no_first_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45, tried again: Stop while the prompt was read left the meter saying "first token
    2795 ms" (the time to the Stop) and a prompt speed for a prompt not read."""
    stream, _events = _answer(monkeypatch, [])
    stream.cancel()
    monkeypatch.setattr(answer_module.time, "perf_counter", lambda: 3.0)
    stats = stream.stats()
    assert stats.n_generated == 0 and stats.ttft_ms == 0 and stats.prefill_tok_s == 0
