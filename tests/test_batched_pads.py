"""Idle sequences between busy ones get a row that changes nothing (engine/llm/batched.py _pads), so
a step stays one pass: the answers beside them and the idle sequence's kept cache are checked token
for token against one-at-a-time decoding on the real default model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from engine import protocol as p

N_SEQ, N_CTX_SEQ = 3, 512
PREAMBLE = "You are a careful assistant. Answer briefly, in plain words, and keep to the question asked. " * 3


def _prompt(llm: Any, question: str, answer: list[int] | None = None, follow_up: str = "") -> list[int]:
    text = f"<|im_start|>system\n{PREAMBLE}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
    if answer is not None:
        tail = f"<|im_end|>\n<|im_start|>user\n{follow_up}<|im_end|>\n<|im_start|>assistant\n"
        tokens = tokens + answer + llm.tokenize(tail.encode(), add_bos=False, special=True)
    return tokens


@pytest.fixture(scope="module")
def llms(model_path: Path) -> Iterator[tuple[Any, Any]]:
    """The batch's context (three sequences) and a one-sequence context for the solo answers."""
    from engine.llm.target import Target

    def load(n_seq: int) -> Any:
        return Target.load(model_path, n_ctx=N_CTX_SEQ * n_seq, n_batch=512, n_threads=2, flash_attn=True,
                           repack=False, n_seq_max=n_seq)  # fmt: skip

    yield load(N_SEQ), load(1)


def _solo(llm: Any, tokens: list[int], n: int) -> list[int]:
    from engine.llm.decoders import VanillaDecoder

    dec = VanillaDecoder(llm)
    dec.forget()
    out = []
    for tok in dec.stream(tokens, p.Sampling.greedy(n)):
        out.append(tok)
        if len(out) == n:
            break
    dec.close()
    return out


def test_an_idle_sequence_between_busy_ones_is_padded_and_changes_nothing(llms: tuple[Any, Any]) -> None:
    from engine.llm.batched import BatchedVanilla
    from engine.llm.decoders import make_sampler

    llm, solo = llms
    questions = ["Name three fruits.", "What is 2 plus 2?", "Describe the sea in two sentences."]
    prompts = [_prompt(llm, q) for q in questions]
    bv = BatchedVanilla(llm, N_SEQ, N_CTX_SEQ)
    slots = bv.slots
    for slot, tokens in zip(slots, prompts, strict=True):
        bv.start(slot, tokens, make_sampler(llm, p.Sampling.greedy(64)))
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}
    padded = 0
    while len(got[0]) < 40 or len(got[2]) < 40:
        busy = [s for s in slots if s.active and s.next >= 0]
        padded += bv._pads(busy) == [slots[1]]
        for slot, tok, _full in bv.step():
            got[slot.seq].append(tok)
            if slot.seq == 1 and len(got[1]) == 6:
                bv.finish(slot)  # the middle answer ends early: sequences 0 and 2 decode on
    assert padded >= 30  # every step after the middle one ended
    for seq in (0, 2):
        assert got[seq][:40] == _solo(solo, prompts[seq], 40)
    # the padded sequence's cache is intact: its conversation goes on from it
    middle = slots[1]
    answer = got[1][:5]  # the sixth token was sampled, never decoded
    follow = _prompt(llm, questions[1], answer, "And 3 plus 3?")
    assert middle.kv == prompts[1] + answer and bv.pick(follow) is middle
    bv.finish(slots[0])
    bv.finish(slots[2])
    bv.start(middle, follow, make_sampler(llm, p.Sampling.greedy(24)))
    assert middle.cached == len(prompts[1]) + len(answer)
    cont: list[int] = []
    while len(cont) < 24:
        cont += [tok for _slot, tok, _full in bv.step()]
    assert cont == _solo(solo, follow, 24)
    bv.close()
