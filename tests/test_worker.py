"""The real worker process on the real default model."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import WorkerClient, WorkerError

QUESTION = [{"role": "user", "content": "Write three sentences about the sea."}]


@pytest.fixture(scope="module")
def worker(model_path: Path) -> Iterator[WorkerClient]:
    client = WorkerClient()
    client.start()
    client.load(model_path, p.Placement(n_ctx=1024))
    yield client
    client.stop()


def run(client: WorkerClient, messages: list[dict[str, str]], sampling: p.Sampling) -> tuple[list[p.Message], p.Done]:
    events = list(client.stream(messages, sampling))
    done = events[-1]
    assert isinstance(done, p.Done)
    return events, done


def test_ready_reports_our_patched_build(worker: WorkerClient) -> None:
    assert worker.ready is not None
    assert worker.ready.native["patched"] is True
    assert "build-info" in worker.ready.native["features"]


def test_greedy_is_deterministic_and_streams(worker: WorkerClient) -> None:
    events1, done1 = run(worker, QUESTION, p.Sampling.greedy(48))
    _events2, done2 = run(worker, QUESTION, p.Sampling.greedy(48))
    pieces = [e for e in events1 if isinstance(e, p.Token)]
    # streamed in pieces as tokens come, not all at the end: the first token alone and at once, then
    # pieces every TOKEN_EMIT_S (how many depends on this machine's speed: 48 tokens gave 10 pieces
    # on a fast run, so a count is not pinned)
    assert pieces[0].index == 0 and pieces[0].text, "the first token goes out at once"
    assert len(pieces) >= 3, "tokens must stream as they come"
    assert [t.index for t in pieces] == sorted({t.index for t in pieces})
    assert "".join(t.text for t in pieces) == done1.text
    assert done1.tokens == done2.tokens and done1.text == done2.text
    assert done1.n_generated == len(done1.tokens) > 10
    stats = [e for e in events1 if isinstance(e, p.Stats)][-1]
    assert stats.decode_tok_s > 0 and stats.ttft_ms > 0 and stats.n_prompt == done1.n_prompt


def test_an_answer_not_streamed_comes_whole_at_its_end(worker: WorkerClient) -> None:
    """Generate.stream=False (the server's non-streaming requests, the bench): no event while the
    answer is decoded, then its text as one Token, the answer's Stats and Done."""
    _e, streamed = run(worker, QUESTION, p.Sampling.greedy(48))
    rid = worker.generate(QUESTION, p.Sampling.greedy(48), stream=False)
    events = [e for e in worker.events_of(rid) if not isinstance(e, p.Notice)]
    assert [type(e) for e in events] == [p.Token, p.Stats, p.Done]
    token, stats, done = events
    assert isinstance(token, p.Token) and isinstance(stats, p.Stats) and isinstance(done, p.Done)
    assert token.text == done.text == streamed.text and done.tokens == streamed.tokens
    assert token.index == len(done.tokens) - 1
    assert stats.decode_tok_s > 0 and stats.n_generated == len(done.tokens)


def test_an_answer_stopped_at_the_length_limit_continues_where_it_stopped(worker: WorkerClient) -> None:
    _e, whole = run(worker, QUESTION, p.Sampling.greedy(40))
    _e, part = run(worker, QUESTION, p.Sampling.greedy(20))
    assert part.finish_reason == "length"
    events = list(
        worker.stream([*QUESTION, {"role": "assistant", "content": part.text}], p.Sampling.greedy(20), continue_answer=True)
    )
    rest = events[-1]
    assert isinstance(rest, p.Done) and rest.text
    assert (part.text + rest.text).startswith(whole.text[: len(part.text) + 8])  # greedy: the same answer goes on


def test_seeded_sampling_repeats_and_differs_by_seed(worker: WorkerClient) -> None:
    hot = dict(temperature=1.2, top_k=0, top_p=1.0, min_p=0.0, max_tokens=24)
    a = run(worker, QUESTION, p.Sampling(seed=1, **hot))[1].tokens
    b = run(worker, QUESTION, p.Sampling(seed=1, **hot))[1].tokens
    c = run(worker, QUESTION, p.Sampling(seed=2, **hot))[1].tokens
    assert a == b
    assert a != c


def test_cancel_stops_within_a_token(model_path: Path) -> None:
    """In process, so that the cancel lands at a known token: the one after it is never made."""
    from engine.worker.session import EngineSession

    session = EngineSession(p.Load(model_path=str(model_path), placement=p.Placement(n_ctx=1024)))
    cancelled = threading.Event()
    events: list[p.Message] = []
    at = []

    def emit(ev: p.Message) -> None:
        events.append(ev)
        if isinstance(ev, p.Token) and ev.index >= 4 and not cancelled.is_set():
            at.append(ev.index)  # tokens go out in pieces: the first piece with the fifth token
            cancelled.set()  # as the worker's command reader does, while that piece is out

    try:
        session.generate(p.Generate("r", QUESTION, p.Sampling.greedy(400)), emit, cancelled, time.perf_counter())
    finally:
        session.close()
    done = events[-1]
    assert isinstance(done, p.Done) and done.finish_reason == "cancelled"
    assert done.n_generated == at[0] + 1, "the worker must stop at the next token boundary"


def test_a_cancelled_answer_ends_and_the_worker_stays_usable(worker: WorkerClient) -> None:
    rid = worker.generate(QUESTION, p.Sampling.greedy(400))
    seen = 0
    while True:
        ev = worker.next_event(60)
        if isinstance(ev, p.Token):
            if seen < 5 <= ev.index + 1:  # the piece that brings the fifth token (pieces of ~30 ms)
                worker.cancel(rid)
            seen = ev.index + 1
        if isinstance(ev, p.Done):
            break
    assert ev.finish_reason == "cancelled"
    assert 5 <= ev.n_generated < 400  # it stopped early; how many tokens came first depends on the machine
    assert run(worker, QUESTION, p.Sampling.greedy(4))[1].n_generated == 4


def test_stop_strings_end_the_answer_without_showing_them(worker: WorkerClient) -> None:
    full = run(worker, QUESTION, p.Sampling.greedy(48))[1].text
    stop = full.split()[3]
    _events, done = run(worker, QUESTION, p.Sampling(**{**p.Sampling.greedy(48).__dict__, "stop": [stop]}))
    assert done.finish_reason == "stop"
    assert stop not in done.text
    assert full.startswith(done.text)


def test_context_overflow_drops_oldest_turns_with_a_notice(model_path: Path) -> None:
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=256))
        history = []
        for i in range(12):
            history += [{"role": "user", "content": f"Question {i}: tell me about topic number {i} in detail."},
                        {"role": "assistant", "content": f"Topic {i} is interesting because of many reasons."}]  # fmt: skip
        history.append({"role": "user", "content": "Summarise our talk."})
        events, done = run(client, history, p.Sampling.greedy(64))
        notices = [e for e in events if isinstance(e, p.Notice)]
        assert notices and notices[0].kind == "context_trimmed" and "oldest messages" in notices[0].message
        assert done.finish_reason in ("stop", "length", "context_full")
        # a single message larger than the whole context is cut from the front, never a crash
        events, done = run(client, [{"role": "user", "content": "word " * 3000}], p.Sampling.greedy(8))
        assert any(isinstance(e, p.Notice) and "cut" in e.message for e in events)
        assert done.n_prompt <= 256


def test_bad_settings_and_requests_get_clear_errors(worker: WorkerClient) -> None:
    with pytest.raises(WorkerError) as err:
        list(worker.stream(QUESTION, p.Sampling(top_p=7.0)))
    assert err.value.kind == "bad_settings" and "top_p" in str(err.value)
    with pytest.raises(WorkerError) as err:
        list(worker.stream([{"role": "assistant", "content": "hi"}], p.Sampling.greedy(4)))
    assert err.value.kind == "bad_request"


@pytest.mark.parametrize("fixture_name", ["truncated_model", "not_a_model", "missing"])
def test_broken_model_files_are_reported_and_the_worker_survives(
    fixture_name: str, request: pytest.FixtureRequest, model_path: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "missing.gguf" if fixture_name == "missing" else request.getfixturevalue(fixture_name)
    with WorkerClient() as client:
        start = time.monotonic()
        with pytest.raises(WorkerError) as err:
            client.load(bad, timeout=30)
        assert err.value.kind == "model_file"
        assert bad.name in str(err.value)
        assert time.monotonic() - start < 30
        assert client.alive
        assert client.load(model_path).n_layer == 30  # the same worker still loads a good model


def test_generate_without_a_model_and_after_unload(model_path: Path) -> None:
    with WorkerClient() as client:
        with pytest.raises(WorkerError) as err:
            list(client.stream(QUESTION, p.Sampling.greedy(4)))
        assert err.value.kind == "no_model"
        client.load(model_path)
        assert run(client, QUESTION, p.Sampling.greedy(2))[1].n_generated == 2
        client.send(p.Unload())
        client.wait_for(p.Unloaded, timeout=30)
        with pytest.raises(WorkerError) as err:
            list(client.stream(QUESTION, p.Sampling.greedy(4)))
        assert err.value.kind == "no_model"


def test_kill_9_mid_answer_is_reported_and_restart_works(model_path: Path) -> None:
    client = WorkerClient()
    client.start()
    try:
        client.load(model_path)
        client.generate(QUESTION, p.Sampling.greedy(400))
        while not isinstance(client.next_event(60), p.Token):
            pass
        os.kill(client.pid, signal.SIGKILL)
        while True:
            ev = client.next_event(30)
            if isinstance(ev, p.Error):
                break
        assert ev.kind == "worker_died"
        assert "signal 9" in ev.message and "restart" in ev.message
        with pytest.raises(WorkerError):
            client.send(p.Generate("x", QUESTION, p.Sampling.greedy(4)))
        client.start()
        client.load(model_path)
        _, done = run(client, QUESTION, p.Sampling.greedy(8))
        assert done.n_generated == 8
    finally:
        client.stop()


def test_idle_worker_does_not_spin(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the OpenMP settings a shipped worker runs with (tests shorten the spin: conftest.py), an
    answer's threads stop spinning after a little CPU time, and the idle worker then uses none.
    Counted in the worker's CPU seconds, never in wall time: a busy machine stretches a spin's wall
    time (a fixed 0.3 s wait assumed the spin was over) but not the CPU it burns, and a spinning thread keeps using
    CPU however busy the machine is."""
    import psutil

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("KMP_BLOCKTIME", raising=False)
    worker = WorkerClient()
    worker.start()
    try:
        worker.load(model_path)
        run(worker, QUESTION, p.Sampling.greedy(16))
        proc = psutil.Process(worker.pid)
        at_done = _cpu_s(proc)
        settled = _cpu_once_idle(proc)
        # the spin after the last token and the answer's wrap-up: milliseconds of CPU
        assert settled - at_done < 0.1, f"the worker used {settled - at_done:.2f} s of CPU after its answer"
        time.sleep(2.0)
        busy = _cpu_s(proc) - settled
    finally:
        worker.stop()
    assert busy < 0.1, f"an idle worker used {busy:.2f}s of CPU in 2s"


def _cpu_s(proc) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def _cpu_once_idle(proc, window_s: float = 0.5, deadline_s: float = 60.0) -> float:
    """The process's CPU seconds once a whole window passes in which it used almost none (under 2%
    of a core); fails if that never happens: it keeps spinning."""
    give_up = time.monotonic() + deadline_s
    before = _cpu_s(proc)
    while time.monotonic() < give_up:
        time.sleep(window_s)
        now = _cpu_s(proc)
        if now - before < 0.02 * window_s:
            return now
        before = now
    raise AssertionError(f"the worker kept using CPU for {deadline_s:.0f} s after its answer (spinning)")


def test_worker_loads_with_numpy_and_gguf_imported_before_llama_cpp(model_path: Path) -> None:
    """On CUDA builds this order crashed at model load (a backend's exported C++ symbols interposed
    on libllama's; fixed by patch 0004): a fresh interpreter imports them first, then runs the worker."""
    code = (
        "import sys, numpy, gguf\n"
        "assert 'llama_cpp' not in sys.modules\n"
        "from engine.worker.process import main\n"
        "sys.exit(main())\n"
    )
    with WorkerClient(command=[sys.executable, "-c", code]) as client:
        loaded = client.load(model_path, p.Placement(n_ctx=512))
        assert loaded.n_layer > 0
        _events, done = run(client, QUESTION, p.Sampling.greedy(8))
        assert done.n_generated == 8


def test_tests_never_write_into_the_users_cache(worker: WorkerClient) -> None:
    """Worker logs, auto-mode decisions and measurements go to this run's own cache dir."""
    import platformdirs

    from engine.paths import cache_dir

    user_cache = Path(platformdirs.user_cache_dir("specee-chat")).resolve()
    here = cache_dir().resolve()
    assert user_cache not in (here, *here.parents)
    assert worker.log_path is not None and here in worker.log_path.resolve().parents


def test_a_refused_load_says_why_and_keeps_the_loaded_model(worker: WorkerClient, model_path: Path) -> None:
    """Load.validate() in the worker, before the current model goes; an unknown mode never decodes."""
    for change, kind, words in [
        ({"mode": p.Mode.REMOTE}, "bad_settings", "remote engines"),
        ({"n_draft": 17}, "bad_settings", "draft chain length must be 0"),
        ({"placement": p.Placement(n_ctx=10)}, "bad_settings", "context length"),
        ({"mode": "turbo"}, "bad_request", "load.mode: 'turbo' is not a known Mode"),
        ({"protocol_version": 1}, "version_mismatch", "the app speaks protocol version 1"),
    ]:
        with pytest.raises(WorkerError) as err:
            worker.load_intent(replace(p.Load(str(model_path), p.Placement(n_ctx=1024)), **change), timeout=30)
        assert err.value.kind == kind and words in str(err.value), (change, str(err.value))
    assert run(worker, QUESTION, p.Sampling.greedy(4))[1].n_generated == 4  # still loaded


def test_loaded_carries_the_models_acceleration_as_flags(worker: WorkerClient, model_path: Path) -> None:
    """The window shows acceleration state and offers training from these, never from reason text."""
    loaded = worker.load_intent(p.Load(str(model_path), p.Placement(n_ctx=1024)))
    assert loaded.mode is p.Mode.VANILLA
    acc = loaded.acceleration
    # the default model ships an EAGLE head and exit predictors (resources/acceleration/)
    assert acc.architecture_supported and acc.eagle_head and acc.eagle_measured and acc.exit_predictors
    assert acc.modes[0] is p.Mode.VANILLA and {"ngram", "eagle", "specee"} <= set(acc.modes)
    assert not loaded.trainable
    assert ("draft" in acc.modes) == bool(acc.draft_model)
    assert not loaded.measuring
    # auto answers in vanilla at once and says it is measuring, unless a decision for this machine was cached
    auto = worker.load_intent(p.Load(str(model_path), p.Placement(n_ctx=1024), mode="auto"))
    assert auto.measuring != bool(auto.measured_tok_s)
    assert not auto.measuring or auto.mode is p.Mode.VANILLA
    worker.load_intent(p.Load(str(model_path), p.Placement(n_ctx=1024)))  # no background measuring for later tests


def test_an_explicit_mode_gets_a_vanilla_reference_measured_without_switching(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The meter's "x vanilla" needs vanilla's speed here: an explicitly chosen mode with none measured
    yet has it measured while the engine is idle; the mode stays, and answers stay exact."""
    monkeypatch.setenv("SPECEE_CACHE_DIR", str(tmp_path / "cache"))  # nothing measured on this "machine" yet
    messages = [{"role": "user", "content": "Name three colours."}]
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=1024))
        _, reference = run(client, messages, p.Sampling.greedy(24))
        loaded = client.load(model_path, p.Placement(n_ctx=1024), mode="ngram")
        # the header says the chosen mode, never "auto: measuring" (issue 45): only vanilla's speed is measured
        assert loaded.mode == "ngram" and not loaded.measuring and not loaded.measured_tok_s
        assert loaded.mode_reason.startswith("ngram: ")
        decided = client.wait_for(p.AutoDecided, timeout=120)
        assert isinstance(decided, p.AutoDecided) and decided.mode == "ngram" and decided.measured_tok_s["vanilla"] > 0
        assert "vanilla measured here" in decided.mode_reason
        _, done = run(client, messages, p.Sampling.greedy(24))
        assert done.text == reference.text  # ngram is lossless, and the measurement left no stale cache behind
        again = client.load(model_path, p.Placement(n_ctx=1024), mode="ngram")
        assert not again.measuring and again.measured_tok_s["vanilla"] == decided.measured_tok_s["vanilla"]  # cached


def test_count_tokens_counts_the_prompt_a_generate_would_build(worker: WorkerClient) -> None:
    """The message box's live count (issue 23, item 16): the worker's own template and tokenizer,
    the very prompt a Generate of that conversation builds, and the room the context leaves for it."""
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}]
    question = "What is the capital of France?"
    worker.send(p.CountTokens("count-1", history, question, max_tokens=16))
    count = worker.wait_for(p.TokenCount)
    assert isinstance(count, p.TokenCount) and count.request_id == "count-1"
    events = list(worker.stream([*history, {"role": "user", "content": question}], p.Sampling.greedy(16)))
    stats = [m for m in events if isinstance(m, p.Stats)][-1]
    assert count.n_prompt == stats.n_prompt
    assert count.n_ctx == 1024 and count.n_budget == 1024 - 16  # Generate keeps max_tokens free for the answer
    assert 5 <= count.n_text <= 12  # the question's own tokens


def test_an_answer_with_no_length_limit_runs_until_the_context_is_full(model_path: Path) -> None:
    """max_tokens 0 (issue 23, item 15: no silent 512 cap): the answer takes the room the context
    has and ends context_full, which Continue can take further."""
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=256))
        counting = ", ".join(str(i) for i in range(1, 21)) + ","  # a raw completion that goes on counting
        client.send(p.Generate("long-1", [], replace(p.Sampling.greedy(), max_tokens=0), prompt=counting))
        events = list(client.events_of("long-1"))
        done = events[-1]
        assert isinstance(done, p.Done)
        stats = [m for m in events if isinstance(m, p.Stats)][-1]
        assert done.finish_reason == "context_full", done.text[-200:]
        assert done.n_generated > 150 and stats.n_prompt + done.n_generated >= 250


def test_continuing_an_answer_that_filled_the_context_goes_on_from_its_latest_part(model_path: Path) -> None:
    """Continue after context_full (issue 23, item 15): the answer alone no longer fits beside the
    question, so the model sees the question and the answer's latest part, and says so."""
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=256))
        answer = ", ".join(str(i) for i in range(1, 301))  # ~900 tokens: far past the 256-token context
        messages = [{"role": "user", "content": "Count from 1 to 500."}, {"role": "assistant", "content": answer}]
        events = list(client.stream(messages, p.Sampling.greedy(8), continue_answer=True))
        done = events[-1]
        assert isinstance(done, p.Done) and done.n_generated >= 1 and done.finish_reason in ("length", "stop")
        [notice] = [m for m in events if isinstance(m, p.Notice)]
        assert "the model now sees the answer without its first" in notice.message
        assert done.n_prompt <= 256 - 8
