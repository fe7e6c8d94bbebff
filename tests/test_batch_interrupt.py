"""A request that comes while answers decode together stops the step under way (engine/llm/batched.py
interrupt): the stopped step returns no tokens, leaves every cache as its Slot says, and is decoded
again, so each answer is still token for token its one-at-a-time answer, on the real default model.
The interrupt is raised before the step here (the worker's reader thread raises it mid-step): the
decode then stops at its first graph node, the same path. llama.cpp's warnings about the dropped rows
stay out of the log."""

from __future__ import annotations

from typing import Any

import pytest

from engine import protocol as p
from tests.test_batched_pads import N_CTX_SEQ, N_SEQ, _solo, llms  # noqa: F401 (llms: the same two contexts)

pytestmark = pytest.mark.slow


def _prompt(llm: Any, question: str) -> list[int]:
    text = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return llm.tokenize(text.encode(), add_bos=False, special=True)


def test_interrupted_steps_are_decoded_again_and_change_no_answer(
    llms: tuple[Any, Any],  # noqa: F811 (the fixture imported above)
    capfd: pytest.CaptureFixture[str],
) -> None:
    from engine.llm.batched import BatchedVanilla
    from engine.llm.decoders import make_sampler

    llm, solo = llms
    questions = ["Name three fruits.", "What is 2 plus 2?", "Describe the sea in two sentences."]
    prompts = [_prompt(llm, q) for q in questions]
    bv = BatchedVanilla(llm, N_SEQ, N_CTX_SEQ)
    a, b, c = bv.slots
    bv.start(a, prompts[0], make_sampler(llm, p.Sampling.greedy(64)))
    bv.start(c, prompts[2], make_sampler(llm, p.Sampling.greedy(64)))
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def step() -> int:
        out = bv.step()
        for slot, tok, _full in out:
            got[slot.seq].append(tok)
        return len(out)

    bv.interrupt()
    assert step() == 2  # a step with prompt rows never stops: their prefill would be lost
    bv.rearm()
    for k in range(30):
        if k % 3 == 0:
            bv.interrupt()
            kv = [list(s.kv) for s in bv.slots]
            assert step() == 0  # stopped: no tokens, every answer's cache as it was
            for slot, before in zip(bv.slots, kv, strict=True):
                # an idle sequence padded between two answers gives back the row it decoded again
                assert slot.kv == (before[:-1] if k > 20 and slot is b else before)
            bv.rearm()
        if k == 10:  # a request joins the middle sequence: its prompt goes alone, then three answers
            bv.start(b, prompts[1], make_sampler(llm, p.Sampling.greedy(64)))
        if k == 20:
            bv.finish(b)  # it ends: the middle sequence is padded between the other two
        assert step() > 0
    assert bv.n_interrupted == 10
    for seq in (0, 2):
        assert got[seq] == _solo(solo, prompts[seq], len(got[seq]))
    assert got[1] == _solo(solo, prompts[1], len(got[1]))
    bv.close()
    # llama.cpp's warning per sequence of a stopped batch stays out of the worker's log
    assert "removing memory module entries" not in capfd.readouterr().err


def test_only_a_request_that_can_join_stops_the_step() -> None:
    """ConcurrentAnswers.interrupt, which the worker's command reader calls for every command: a step
    stops only while answers are being decoded, a place is free and the request may join them."""
    from types import SimpleNamespace

    from engine.worker.concurrent import ConcurrentAnswers

    raised: list[bool] = []
    batch = SimpleNamespace(free=1, interrupt=lambda: raised.append(True), rearm=lambda: raised.clear())
    session = SimpleNamespace(batch=batch, can_batch=lambda req: not req.logprobs)
    answers = ConcurrentAnswers(session, lambda _msg: None)
    ask = p.Generate("r", [{"role": "user", "content": "hi"}])
    answers.interrupt(ask)
    assert not raised  # nothing being decoded: the request starts at once anyway
    answers._answers[object()] = object()  # type: ignore[index, assignment]
    for no in (p.CountTokens("c", [{"role": "user", "content": "hi"}]), p.Generate("r", prompt="x", logprobs=True)):
        answers.interrupt(no)  # a command that is not a request, a request that cannot join
    assert not raised
    batch.free = 0
    answers.interrupt(ask)
    assert not raised  # no place for it
    batch.free = 1
    answers.interrupt(ask)
    assert raised == [True]
    answers.rearm()
    assert not raised
