"""Whatever the mode and whatever auto is doing, a chat's next turn, Regenerate and Continue reuse
the cache of what came before (issue 45): auto's measurement runs in the worker's idle time on the
target's context, so before each unit the conversation in the cache is kept (KvStates) and the next
turn restores it; explicit modes measure vanilla's reference the same way; and a restart restores
the caches kept on disk. In process, so that a measurement unit runs exactly between two turns."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from engine import protocol as p

CHAT = "Here are my notes from the trip; read them and tell me what to pack next time.\n" + " ".join(
    f"Day {i}: walked {i % 5 + 3} km by the lake {i % 4}, rain at {i % 12 + 1}, lost glove number {i}." for i in range(28)
)


def _turn(session, messages: list[dict[str, str]], continue_answer: bool = False) -> tuple[p.Done, p.Stats]:
    events: list[p.Message] = []
    req = p.Generate(uuid.uuid4().hex[:8], messages, p.Sampling.greedy(12), continue_answer=continue_answer)
    session.generate(req, events.append, threading.Event(), time.perf_counter())
    done = events[-1] if isinstance(events[-1], p.Done) else [e for e in events if isinstance(e, p.Done)][-1]
    return done, [e for e in events if isinstance(e, p.Stats)][-1]


def _measure_once(session) -> None:
    """One unit of auto's (or the reference's) measurement, as an idle worker runs it."""
    assert session.has_background_work()
    session.background_step(lambda: False)


@pytest.mark.parametrize("mode", ["auto", "vanilla", "ngram", "eagle", "specee"])
def test_the_next_turn_regenerate_continue_and_a_restart_reuse_the_chats_cache(
    model_path: Path, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.worker.session import EngineSession

    monkeypatch.setenv("SPECEE_CACHE_DIR", str(tmp_path))  # a machine where nothing was measured yet

    load = p.Load(model_path=str(model_path), placement=p.Placement(n_ctx=2048), mode=mode, measure_reference=True)
    session = EngineSession(load)
    try:
        first = [{"role": "user", "content": f"({mode}) {CHAT}"}]
        done, stats = _turn(session, first)
        n_first = done.n_prompt
        assert n_first > 600 and stats.n_prompt_cached == 0
        measuring = session.has_background_work()
        if mode != "vanilla":  # the first load on this machine measures (auto: the modes; others: vanilla's speed)
            assert measuring
        if measuring:
            _measure_once(session)
        nxt = [*first, {"role": "assistant", "content": done.text}, {"role": "user", "content": "And for winter?"}]
        _, stats = _turn(session, nxt)
        assert stats.n_prompt_cached >= n_first - 4, f"{mode}: the next turn read the chat again while measuring"
        if measuring:
            _measure_once(session)
        _, stats = _turn(session, nxt)  # Regenerate: the same prompt again
        assert stats.n_prompt_cached >= n_first - 4, f"{mode}: Regenerate read the chat again"
        while session.has_background_work():  # the measurement ends: auto takes its decision's decoder
            _measure_once(session)
        done, stats = _turn(session, nxt)
        assert stats.n_prompt_cached >= n_first - 4, f"{mode}: the turn after the decision read the chat again"
        cont = [*nxt, {"role": "assistant", "content": done.text}]
        _, stats = _turn(session, cont, continue_answer=True)
        assert stats.n_prompt_cached >= n_first - 4, f"{mode}: Continue read the chat again"
    finally:
        session.close()  # the kept caches go to disk
    session = EngineSession(load)
    try:
        _, stats = _turn(session, nxt)
        assert stats.n_prompt_cached >= n_first - 4, f"{mode}: after a restart the chat was read again"
    finally:
        session.close()


@pytest.mark.parametrize("mode", ["ngram", "eagle"])
def test_a_request_with_a_grammar_between_two_turns_loses_no_cache(model_path: Path, mode: str) -> None:
    """A grammar (tools, JSON) or logprobs runs in the vanilla decoder whatever the mode: it goes on
    from the mode's exact cache, and the mode's next turn goes on from what it left."""
    from engine.worker.session import EngineSession

    session = EngineSession(
        p.Load(model_path=str(model_path), placement=p.Placement(n_ctx=2048), mode=mode, measure_reference=False)
    )
    try:
        first = [{"role": "user", "content": f"(grammar, {mode}) {CHAT}"}]
        done, _ = _turn(session, first)
        asked = [*first, {"role": "assistant", "content": done.text}, {"role": "user", "content": "Yes or no: was it rainy?"}]
        events: list[p.Message] = []
        req = p.Generate("g", asked, p.Sampling.greedy(4), grammar='root ::= "yes" | "no"')
        session.generate(req, events.append, threading.Event(), time.perf_counter())
        stats = [e for e in events if isinstance(e, p.Stats)][-1]
        assert stats.mode == "vanilla" and stats.n_prompt_cached >= done.n_prompt - 4, "the grammar's request read the chat again"
        yes_no = [e for e in events if isinstance(e, p.Done)][-1].text
        nxt = [*asked, {"role": "assistant", "content": yes_no}, {"role": "user", "content": "Why?"}]
        _, stats = _turn(session, nxt)
        assert stats.mode == mode and stats.n_prompt_cached >= done.n_prompt - 4, "the next turn read the chat again"
    finally:
        session.close()
