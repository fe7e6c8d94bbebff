"""A worker loaded with n_parallel > 1 decodes requests together (engine/worker/concurrent.py): the real
worker process on the real default model, each answer compared token for token with the answer a
one-at-a-time worker (n_parallel 1, today's path) gives the same request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import WorkerClient

QUESTIONS = ["Name a fruit.", "What is 2 plus 2?", "Say hello in French.", "Name a planet.", "Write a haiku about rain."]
COUNT = "Count from 1 to 1000, separated by commas."
N_CTX = 1024


def _chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def solo(model_path: Path) -> Iterator[WorkerClient]:
    client = WorkerClient()
    client.start()
    loaded = client.load(model_path, p.Placement(n_ctx=N_CTX), mode="vanilla")
    assert loaded.n_parallel == 1
    yield client
    client.stop()


@pytest.fixture(scope="module")
def together(model_path: Path) -> Iterator[WorkerClient]:
    client = WorkerClient()
    client.start()
    loaded = client.load(model_path, p.Placement(n_ctx=N_CTX), mode="vanilla", n_parallel=4)
    assert loaded.n_parallel == 4 and loaded.n_ctx == N_CTX  # each request keeps a whole context
    yield client
    client.stop()


def solo_answer(worker: WorkerClient, text: str, max_tokens: int) -> p.Done:
    done = list(worker.stream(_chat(text), p.Sampling.greedy(max_tokens)))[-1]
    assert isinstance(done, p.Done)
    return done


def collect(worker: WorkerClient, rids: list[str], on_event=None) -> dict[str, list[p.Message]]:
    """Every request's events up to its Done; on_event(event, events so far) may send more requests
    (returning their ids)."""
    events: dict[str, list[p.Message]] = {rid: [] for rid in rids}
    while any(not ev or not isinstance(ev[-1], p.Done) for ev in events.values()):
        msg = worker.next_event(120)
        assert not isinstance(msg, p.Error), msg
        rid = getattr(msg, "request_id", "")
        if rid in events:
            events[rid].append(msg)
            for new in (on_event(msg, events) if on_event else None) or []:
                events[new] = []
    return events


def test_requests_decoded_together_answer_as_they_do_alone(solo: WorkerClient, together: WorkerClient) -> None:
    want = [solo_answer(solo, q, 40) for q in QUESTIONS]
    # five requests at once for four places: the fifth joins when the first place frees
    rids = [together.generate(_chat(q), p.Sampling.greedy(40)) for q in QUESTIONS]
    events = collect(together, rids)
    for rid, done in zip(rids, want, strict=True):
        got = events[rid][-1]
        assert isinstance(got, p.Done)
        assert (got.tokens, got.text, got.finish_reason) == (done.tokens, done.text, done.finish_reason)
        pieces = [e for e in events[rid] if isinstance(e, p.Token)]
        assert "".join(t.text for t in pieces) == got.text
        stats = [e for e in events[rid] if isinstance(e, p.Stats)][-1]
        assert stats.n_generated == got.n_generated and stats.n_prompt == got.n_prompt


def test_requests_decoded_together_and_not_streamed_come_whole_at_their_end(solo: WorkerClient, together: WorkerClient) -> None:
    want = [solo_answer(solo, q, 40) for q in QUESTIONS[:3]]
    rids = [together.generate(_chat(q), p.Sampling.greedy(40), stream=False) for q in QUESTIONS[:3]]
    events = collect(together, rids)
    for rid, done in zip(rids, want, strict=True):
        got = [e for e in events[rid] if not isinstance(e, p.Notice)]
        assert [type(e) for e in got] == [p.Token, p.Stats, p.Done]
        token, _stats, last = got
        assert isinstance(token, p.Token) and isinstance(last, p.Done)
        assert token.text == last.text == done.text and last.tokens == done.tokens


def test_a_request_arriving_while_others_decode_joins_at_once(solo: WorkerClient, together: WorkerClient) -> None:
    """The long answer is still being written (it has hundreds of tokens to go) when the short one,
    sent after its first piece, has finished: it did not wait for its turn."""
    want_long = solo_answer(solo, COUNT, 300)
    want_short = solo_answer(solo, QUESTIONS[2], 12)
    long_rid = together.generate(_chat(COUNT), p.Sampling.greedy(300))
    sent: list[str] = []

    def on_event(msg: p.Message, events: dict[str, list[p.Message]]) -> list[str]:
        if isinstance(msg, p.Token) and msg.request_id == long_rid and not sent:
            sent.append(together.generate(_chat(QUESTIONS[2]), p.Sampling.greedy(12)))
            return sent
        if sent and isinstance(msg, p.Done) and msg.request_id == sent[0]:
            written = [e for e in events[long_rid] if isinstance(e, p.Token)][-1].index + 1
            assert not isinstance(events[long_rid][-1], p.Done) and written < 300 - 50
        return []

    events = collect(together, [long_rid], on_event)
    assert events[long_rid][-1].tokens == want_long.tokens  # type: ignore[attr-defined]
    assert events[sent[0]][-1].tokens == want_short.tokens  # type: ignore[attr-defined]


def test_cancelling_one_answer_leaves_the_others_intact(solo: WorkerClient, together: WorkerClient) -> None:
    want = {q: solo_answer(solo, q, 48).tokens for q in QUESTIONS[1:4]}
    victim = together.generate(_chat(COUNT), p.Sampling.greedy(400))
    rids = {together.generate(_chat(q), p.Sampling.greedy(48)): q for q in QUESTIONS[1:4]}

    def on_event(msg: p.Message, _events: dict) -> list[str]:
        if isinstance(msg, p.Token) and msg.request_id == victim and msg.index >= 4 and not on_event.done:  # type: ignore[attr-defined]
            together.cancel(victim)
            on_event.done = True  # type: ignore[attr-defined]
        return []

    on_event.done = False  # type: ignore[attr-defined]
    events = collect(together, [victim, *rids], on_event)
    cancelled = events[victim][-1]
    assert isinstance(cancelled, p.Done) and cancelled.finish_reason == "cancelled"
    assert 5 <= cancelled.n_generated < 400
    for rid, q in rids.items():
        assert events[rid][-1].tokens == want[q]  # type: ignore[attr-defined]
    # and the worker answers on
    assert solo_answer(together, QUESTIONS[0], 8).tokens == solo_answer(solo, QUESTIONS[0], 8).tokens


def test_a_grammar_request_waits_for_the_batch_then_answers_alone(together: WorkerClient) -> None:
    """Grammar and logprobs keep the one-at-a-time path: sent while answers decode together, it is
    answered once they are done, and the requests sent after it wait for it (arrival order)."""
    first = together.generate(_chat(QUESTIONS[0]), p.Sampling.greedy(24))
    grammar_rid = "grammar-1"
    together.send(p.Generate(grammar_rid, _chat("Is the sky blue?"), p.Sampling.greedy(8), grammar='root ::= ("yes" | "no") "!"'))
    after = together.generate(_chat(QUESTIONS[1]), p.Sampling.greedy(8))
    order: list[str] = []

    def on_event(msg: p.Message, _events: dict) -> list[str]:
        if isinstance(msg, p.Done):
            order.append(msg.request_id)
        return []

    events = collect(together, [first, grammar_rid, after], on_event)
    assert order == [first, grammar_rid, after]
    assert events[grammar_rid][-1].text in ("yes!", "no!")  # type: ignore[attr-defined]


def test_the_accelerated_modes_keep_one_request_at_a_time(model_path: Path) -> None:
    client = WorkerClient()
    client.start()
    try:
        loaded = client.load(model_path, p.Placement(n_ctx=N_CTX), mode="eagle", n_parallel=4)
        assert loaded.mode == "eagle" and loaded.n_parallel == 1
        # two requests sent together are answered one after the other
        a = client.generate(_chat(QUESTIONS[0]), p.Sampling.greedy(16))
        b = client.generate(_chat(QUESTIONS[1]), p.Sampling.greedy(16))
        seen: list[str] = []
        events = collect(client, [a, b], lambda msg, _e: seen.append(msg.request_id) or [])
        assert seen.index(b) > max(i for i, rid in enumerate(seen) if rid == a)
        assert all(isinstance(events[r][-1], p.Done) for r in (a, b))
    finally:
        client.stop()


def test_parallel_is_checked() -> None:
    for bad in (0, -1, p.N_PARALLEL_MAX + 1, 1000, 2.5, True):
        with pytest.raises(p.SettingsError, match="parallel requests must be 1 to"):
            p.Load(model_path="m.gguf", n_parallel=bad).validate()
    p.Load(model_path="m.gguf", n_parallel=p.N_PARALLEL_MAX).validate()
