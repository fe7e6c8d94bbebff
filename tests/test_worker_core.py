"""The worker's core (engine/worker/core.py) driven directly, in this process, on the real default
model: no subprocess, no stdin. A Cancel goes through the core's Inbox as the command reader puts it
(from the model thread's emit, it lands at a known token)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine import protocol as p
from engine.worker.core import WorkerCore

QUESTION = [{"role": "user", "content": "Write three sentences about the sea."}]


class Recorder:
    """The core's emit: every event, in order."""

    def __init__(self) -> None:
        self.events: list[p.Message] = []

    def __call__(self, ev: p.Message) -> None:
        self.events.append(ev)

    def take(self) -> list[p.Message]:
        events, self.events = self.events, []
        return events


@pytest.fixture
def out() -> Recorder:
    return Recorder()


@pytest.fixture
def core(out: Recorder) -> Iterator[WorkerCore]:
    core = WorkerCore(out)
    yield core
    core.close()


def load(path: Path, **change: Any) -> p.Load:
    """Vanilla, with no idle measurement unless a test asks for it."""
    return replace(p.Load(str(path), p.Placement(n_ctx=1024), p.Mode.VANILLA, measure_reference=False), **change)


def done_of(events: list[p.Message], rid: str) -> p.Done:
    (done,) = [e for e in events if isinstance(e, p.Done) and e.request_id == rid]
    return done


def test_nothing_loaded_is_said_per_command(core: WorkerCore, out: Recorder) -> None:
    assert core.handle(p.Generate("g", QUESTION, p.Sampling.greedy(4)))
    assert core.handle(p.Embed("e", texts=["sea"]))
    assert core.handle(p.CountTokens("c", QUESTION, "more"))
    assert core.handle(p.Unload())
    g, e, c, u = out.take()
    assert isinstance(g, p.Error) and g.request_id == "g" and g.kind == p.ErrorKind.NO_MODEL
    assert isinstance(e, p.Error) and e.request_id == "e" and e.kind == p.ErrorKind.NO_MODEL
    assert c == p.TokenCount("c")  # n_ctx 0: nothing loaded to count with
    assert isinstance(u, p.Unloaded)
    assert core.handle(p.Shutdown()) is False


def test_a_load_and_a_greedy_answer(core: WorkerCore, out: Recorder, model_path: Path) -> None:
    core.handle(load(model_path))
    (loaded,) = out.take()
    assert isinstance(loaded, p.Loaded) and loaded.n_ctx == 1024 and loaded.mode == p.Mode.VANILLA
    assert not core.session.has_background_work()
    core.handle(p.Generate("a", QUESTION, p.Sampling.greedy(12)))
    events = out.take()
    done = done_of(events, "a")
    assert done.finish_reason == p.FinishReason.LENGTH and done.n_generated == 12
    assert "".join(e.text for e in events if isinstance(e, p.Token)) == done.text
    core.handle(p.Generate("b", QUESTION, p.Sampling.greedy(12)))
    assert done_of(out.take(), "b").tokens == done.tokens
    core.handle(p.CountTokens("c", QUESTION, "And the sky?"))
    (count,) = out.take()
    assert isinstance(count, p.TokenCount) and count.n_ctx == 1024 and 0 < count.n_text < count.n_prompt


def test_cancels_by_id_now_and_for_later(core: WorkerCore, out: Recorder, model_path: Path) -> None:
    """The running answer stops at the next token; an id nothing runs under yet stops nothing now,
    and that request, when it comes, ends at once (its client left while it waited)."""
    core.handle(load(model_path))
    out.take()
    core.inbox.put(p.Cancel("later"))
    assert not core.inbox.cancel.is_set() and out.events == []
    core.handle(p.Generate("now", QUESTION, p.Sampling.greedy(8)))
    assert done_of(out.take(), "now").n_generated == 8  # not stopped by another's Cancel

    at: list[int] = []

    def cancel_at_the_fifth_token(ev: p.Message) -> None:
        out(ev)
        if isinstance(ev, p.Token) and ev.index >= 4 and not at:
            at.append(ev.index)
            core.inbox.put(p.Cancel("long"))  # as the command reader does while the answer decodes

    core.emit = cancel_at_the_fifth_token
    core.handle(p.Generate("long", QUESTION, p.Sampling.greedy(400)))
    done = done_of(out.take(), "long")
    assert done.finish_reason == p.FinishReason.CANCELLED and done.n_generated == at[0] + 1

    core.handle(p.Generate("later", QUESTION, p.Sampling.greedy(8)))
    assert out.take() == [p.Done("later", p.FinishReason.CANCELLED)]
    core.handle(p.Generate("later", QUESTION, p.Sampling.greedy(8)))  # the id is not cancelled forever
    assert done_of(out.take(), "later").n_generated == 8


def test_a_refused_load_keeps_the_model(core: WorkerCore, out: Recorder, model_path: Path, tmp_path: Path) -> None:
    core.handle(load(model_path))
    (loaded,) = out.take()
    session = core.session
    # settings refused before the model goes: the very session stays
    core.handle(load(model_path, placement=p.Placement(n_ctx=10)))
    error, kept = out.take()
    assert isinstance(error, p.Error) and error.kind == p.ErrorKind.BAD_SETTINGS and "context length" in error.message
    assert isinstance(kept, p.Loaded) and kept.kept and kept.name == loaded.name  # type: ignore[attr-defined]
    assert core.session is session
    # a file that is no model: the model that was running loads again, and the refusal says so
    core.handle(load(model_path, model_path=str(tmp_path / "missing.gguf")))
    error, kept = out.take()
    assert isinstance(error, p.Error) and error.kind == p.ErrorKind.MODEL_FILE
    assert error.message.endswith(f"{loaded.name} stays loaded, as it was.")  # type: ignore[attr-defined]
    assert isinstance(kept, p.Loaded) and kept.kept and kept.model_path == loaded.model_path  # type: ignore[attr-defined]
    core.handle(p.Generate("after", QUESTION, p.Sampling.greedy(4)))
    assert done_of(out.take(), "after").n_generated == 4


def test_batched_answers_join_and_what_cannot_join_waits(core: WorkerCore, out: Recorder, model_path: Path) -> None:
    """n_parallel 2: a request that comes while one decodes joins it, CountTokens is answered at
    once, and an Unload waits until both answers are done. step() drives it one decode at a time."""
    core.handle(load(model_path, n_parallel=2))
    (loaded,) = out.take()
    assert isinstance(loaded, p.Loaded) and loaded.n_parallel == 2 and core.together is not None
    core.inbox.put(p.Generate("a", QUESTION, p.Sampling.greedy(24)))
    assert core.step() and core.together.busy  # "a" joined: the batch is its own
    core.inbox.put(p.Generate("b", [{"role": "user", "content": "Name a fruit."}], p.Sampling.greedy(8)))
    core.inbox.put(p.Unload())
    core.inbox.put(p.CountTokens("c", QUESTION, "more"))
    while core.together is not None and core.together.busy:
        assert core.step()
    # the Unload waits, and so does the CountTokens behind it (only a count first in line is answered at once)
    assert list(core.held) == [p.Unload()] and core.inbox.commands.qsize() == 1
    assert core.step() and core.step()
    kinds = [
        (type(e).__name__, getattr(e, "request_id", "")) for e in out.take() if isinstance(e, p.Done | p.Unloaded | p.TokenCount)
    ]
    assert kinds[-2:] == [("Unloaded", ""), ("TokenCount", "c")]  # counted with nothing loaded: n_ctx 0
    assert sorted(kinds[:-2]) == [("Done", "a"), ("Done", "b")]
    assert core.session is None and core.together is None and core.inbox.batched is None


def test_a_count_comes_at_once_while_answers_decode_together(core: WorkerCore, out: Recorder, model_path: Path) -> None:
    core.handle(load(model_path, n_parallel=2))
    out.take()
    core.inbox.put(p.Generate("a", QUESTION, p.Sampling.greedy(16)))  # the model's answer is 23 tokens
    core.step()
    core.inbox.put(p.CountTokens("c", QUESTION, "more"))
    core.step()
    assert any(isinstance(e, p.TokenCount) and e.request_id == "c" for e in out.events)
    assert not any(isinstance(e, p.Done) for e in out.events)  # before the answer ends
    while core.together.busy:
        core.step()
    assert done_of(out.take(), "a").n_generated == 16


def test_shutdown_and_a_gone_client_end_the_loop(core: WorkerCore, out: Recorder) -> None:
    core.inbox.put(p.Shutdown())
    assert core.inbox.stopping.is_set()
    assert core.step() is False
    core.inbox.close()  # the end of stdin
    assert core.step() is False
    assert out.events == []


def test_idle_work_measures_vanilla_for_an_explicit_mode(
    core: WorkerCore, out: Recorder, model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing to do, step() runs auto's measurement a unit at a time, then says what it found."""
    monkeypatch.setenv("SPECEE_CACHE_DIR", str(tmp_path / "cache"))  # nothing measured on this "machine" yet
    core.handle(load(model_path, mode=p.Mode.NGRAM, measure_reference=True))
    (loaded,) = out.take()
    assert isinstance(loaded, p.Loaded) and loaded.mode == p.Mode.NGRAM
    while core.session.has_background_work():
        assert core.step()
    (decided,) = out.take()
    assert isinstance(decided, p.AutoDecided) and decided.mode == p.Mode.NGRAM and decided.measured_tok_s["vanilla"] > 0


def test_a_long_prompts_threads_follow_the_machine_while_it_is_read(core: WorkerCore, out: Recorder, model_path: Path) -> None:
    """Issue 46: the threads a prompt was read with were the count the previous answer ended on (they
    follow the machine only between generated tokens), so a long prompt after a busy spell was read
    on one of two cores for a minute on a machine now quiet. They follow it between batches too."""
    from engine.worker.threads import CpuSample, ThreadGovernor

    core.handle(load(model_path, placement=p.Placement(n_ctx=2048)))
    out.take()
    session = core.session
    assert session is not None
    others = {"cores": 1.5}  # a neighbour keeps one of two cores busy
    clock = {"t": 0.0}

    def sample() -> CpuSample:  # each reading one second after the one before
        clock["t"] += 1.0
        return CpuSample(clock["t"], clock["t"] * others["cores"], 0.0)

    def apply(n: int) -> None:
        session._set_threads(n)
        out(p.Notice("", "threads", str(n)))  # where in the events the count changed

    session._governor = ThreadGovernor(apply, 2, sample=sample, interval_s=0.0, clock=lambda: clock["t"] + 1.0)
    core.handle(p.Generate("busy", QUESTION, p.Sampling.greedy(4)))
    assert session._threads_now == 1  # the answer ended beside the neighbour
    out.take()
    others["cores"] = 0.0  # it went away: the next prompt, ~1,300 tokens, three batches of 512
    long = " ".join(f"Item {i}: the ferry from harbour {i % 9} left with {i * 3} passengers." for i in range(90))
    core.handle(p.Generate("long", [{"role": "user", "content": long}], p.Sampling.greedy(2)))
    events = out.take()
    kinds = [("threads " + e.message) if isinstance(e, p.Notice) else type(e).__name__ for e in events]
    read = [i for i, e in enumerate(events) if isinstance(e, p.PromptProgress) and e.n_done]
    assert len(read) >= 2 and "threads 2" in kinds, kinds
    assert kinds.index("threads 2") < read[-1], f"the whole prompt was read on one thread: {kinds}"
