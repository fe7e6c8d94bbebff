"""What the engine measures and reports (issue 23, items 4, 5, 11, 12): auto trusts only a quiet
machine's measurement and measures again when the answers contradict it; the speed in Stats is
timed on the engine's clock and compared with vanilla only in the same conditions; a refused load
keeps the running model; a dead worker or server is described by what matters."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from app.model_status import acceleration_state
from engine import protocol as p
from engine.client import WorkerClient, WorkerError
from engine.worker.answer import RECENT_S

QUESTION = [{"role": "user", "content": "Write three sentences about the sea."}]


def _decisions(cache: Path) -> dict:
    path = cache / "auto-mode.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _final_decision(client: WorkerClient, timeout: float = 240) -> p.AutoDecided:
    while True:
        decided = client.wait_for(p.AutoDecided, timeout=timeout)
        assert isinstance(decided, p.AutoDecided)
        if not decided.measuring:
            return decided


def _answer(client: WorkerClient, messages: list[dict[str, str]], tokens: int = 32) -> tuple[list[p.Message], p.Done]:
    events = list(client.stream(messages, p.Sampling.greedy(tokens)))
    done = events[-1]
    assert isinstance(done, p.Done)
    return events, done


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Nothing measured on this "machine" yet."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECEE_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def neighbour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cores another process keeps busy, as the worker reads them (write a number into it)."""
    load = tmp_path / "load"
    load.write_text("0")
    monkeypatch.setenv("SPECEE_TEST_SIMULATED_LOAD", str(load))
    return load


def test_auto_never_trusts_nor_caches_a_measurement_taken_while_the_machine_is_busy(
    model_path: Path, fresh_cache: Path, neighbour: Path
) -> None:
    """auto chose ngram on a busy machine and kept it (every answer then ran at 0.6x vanilla): units
    measured beside a busy neighbour now count for nothing, the worker says it waits, caches nothing,
    and decides once the machine is quiet."""
    neighbour.write_text("1.5")
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=1024), mode="auto")
        assert loaded.measuring and loaded.mode == "vanilla"
        waiting = client.wait_for(p.AutoDecided, timeout=120)
        assert isinstance(waiting, p.AutoDecided) and waiting.measuring and waiting.mode == "vanilla"
        assert "1.5 cores busy" in waiting.mode_reason and "quiet" in waiting.mode_reason
        assert _decisions(fresh_cache) == {}  # nothing measured under load is kept
        neighbour.write_text("0")
        decided = _final_decision(client)
        assert decided.measured_tok_s["vanilla"] > 0
        (entry,) = _decisions(fresh_cache).values()
        assert entry["mode"] == decided.mode and entry["vanilla_reference"]


@pytest.mark.parametrize("mode", ["eagle", "specee"])
def test_an_explicit_mode_on_a_busy_machine_says_why_it_runs_and_never_that_auto_measures(
    model_path: Path, fresh_cache: Path, neighbour: Path, mode: str
) -> None:
    """Issue 45: a mode chosen in Settings showed "auto: measuring" in the header, and its reason
    began empty (": ; vanilla's speed here is measured once..."), in Settings and the tooltip."""
    neighbour.write_text("1.5")
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=1024), mode=mode)
        assert loaded.mode == mode and not loaded.measuring
        assert loaded.mode_reason.startswith(f"{mode}: ")
        waiting = client.wait_for(p.AutoDecided, timeout=120)
        assert isinstance(waiting, p.AutoDecided) and waiting.mode == mode and not waiting.measuring
        assert waiting.mode_reason.startswith(f"{mode}: ") and "quiet" in waiting.mode_reason
        badge, tooltip = acceleration_state(loaded, waiting)
        assert "measuring" not in badge and tooltip.startswith(f"{mode}: ")


def test_auto_measures_again_when_the_answers_contradict_its_decision(model_path: Path, fresh_cache: Path) -> None:
    """A decision whose answers keep running slower than vanilla measured in the same conditions is
    forgotten and measured again (it was kept however slow the answers ran)."""
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=1024), mode="auto")
        _final_decision(client)
        # the cached decision now claims ngram beats a vanilla far faster than this machine's
        data = _decisions(fresh_cache)
        (key,) = data
        data[key].update(mode="ngram", speeds={"vanilla": 1e5, "ngram": 2e5})
        data[key]["vanilla_reference"] = {k: 1e5 for k in data[key]["vanilla_reference"]}
        (fresh_cache / "auto-mode.json").write_text(json.dumps(data))
        loaded = client.load(model_path, p.Placement(n_ctx=1024), mode="auto")
        assert loaded.mode == "ngram" and not loaded.measuring
        seen: list[p.Message] = []
        for _ in range(3):
            events, _done = _answer(client, QUESTION)
            seen += events
        stats = [e for e in seen if isinstance(e, p.Stats) and e.n_generated > 16]
        assert stats and all(0 < s.vs_vanilla < 0.5 for s in stats)  # compared with that vanilla, alike
        again = client.wait_for(p.AutoDecided, timeout=30)
        assert isinstance(again, p.AutoDecided) and again.measuring and again.mode == "vanilla"
        assert "measured again" in again.mode_reason
        assert key not in _decisions(fresh_cache)  # the contradicted decision is not kept
        assert _final_decision(client).measured_tok_s["vanilla"] < 1e5  # measured here, again


def test_stats_time_decode_on_the_engines_clock_and_compare_only_like_with_like(model_path: Path, fresh_cache: Path) -> None:
    """The meter said "2871.8 tok/s" after a long paste and compared every answer with auto's idle
    short-prompt vanilla: Stats now carry the last second's decode speed (never the prompt's) and a
    ratio to vanilla only where vanilla was measured with the same threads and prompt length."""
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=2048), mode="ngram")
        _final_decision(client)  # vanilla's reference for this explicit mode, measured while idle
        events, done = _answer(client, QUESTION, 16)  # within the model's 23-token answer
        last = _check_speeds_against_token_stamps(events, done)
        assert last.vs_vanilla > 0 and last.n_threads > 0  # short prompt: like the reference's
        long_paste = "Summarise this log.\n" + "2024-01-01 12:00:00 INFO request served in 12 ms\n" * 60
        events, done = _answer(client, [{"role": "user", "content": long_paste}], 24)
        last = _check_speeds_against_token_stamps(events, done)  # prefill never counts
        assert last.n_prompt > 512  # another prompt-length band than any vanilla measured here
        assert last.vs_vanilla == 0  # nothing alike to compare with: no ratio


def _check_speeds_against_token_stamps(events: list[p.Message], done: p.Done) -> p.Stats:
    """The final Stats' speeds agree with the Tokens' stamps, all on the engine's clock, whatever the
    machine's load (ratios of wall-clock speeds failed on a busy machine). A Token sent while decoding
    is stamped with the time its last token was sampled, the first at once (Stats.ttft_ms is that same
    moment); one sent after the loop is stamped later than the last sample. So decode_tok_s's end of
    decoding lies between the last two Tokens' stamps, and recent_tok_s is the whole answer's speed
    when it decoded within a second, else at most its tokens over a second's window. Counting the
    prompt's tokens (a speed far too high) or its reading time (far too low) moves the end outside."""
    tokens = [e for e in events if isinstance(e, p.Token)]
    last = [e for e in events if isinstance(e, p.Stats)][-1]
    assert done.finish_reason == p.FinishReason.LENGTH and done.n_generated > 2  # no end-of-generation token sampled
    assert len(tokens) >= 2 and tokens[0].index == 0 and tokens[0].t_ms == pytest.approx(last.ttft_ms, abs=1e-6)
    assert last.decode_tok_s > 0 and last.recent_tok_s > 0
    span_s = (done.n_generated - 1) / last.decode_tok_s  # from the first token's sample to the last's
    decode_end_ms = last.ttft_ms + span_s * 1000
    assert tokens[-2].t_ms - 1e-6 <= decode_end_ms <= tokens[-1].t_ms + 1e-6, (
        [t.t_ms for t in tokens[-2:]],
        last.ttft_ms,
        last.decode_tok_s,
    )
    if span_s < RECENT_S:
        assert last.recent_tok_s == pytest.approx(last.decode_tok_s, rel=1e-9)
    else:
        assert last.recent_tok_s <= (done.n_generated - 1) / RECENT_S * (1 + 1e-9)
    return last


def test_a_refused_load_keeps_the_model_that_was_running(model_path: Path, copied_model: Path) -> None:
    """draft on a model with no paired draft model failed to load and left no model at all: the model
    that was running is loaded again, told after the refusal (kept), and answers."""
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=1024))
        assert "draft" not in loaded.acceleration.modes
        with pytest.raises(WorkerError) as err:
            client.load(copied_model, p.Placement(n_ctx=1024), mode="draft")
        assert err.value.kind == "no_draft_model" and f"{loaded.name} stays loaded" in str(err.value)
        kept = client.wait_for(p.Loaded, timeout=60)
        assert isinstance(kept, p.Loaded) and kept.kept and kept.model_path == str(model_path) and kept.mode == "vanilla"
        assert _answer(client, QUESTION, 4)[1].n_generated == 4
        with pytest.raises(WorkerError) as err:  # refused before anything is unloaded: told all the same
            client.load(copied_model, p.Placement(n_ctx=10))
        assert err.value.kind == "bad_settings"
        kept = client.wait_for(p.Loaded, timeout=60)
        assert isinstance(kept, p.Loaded) and kept.kept and kept.model_path == str(model_path)
        assert client.load(copied_model, p.Placement(n_ctx=1024)).model_path == str(copied_model)


def test_loaded_names_the_model_as_people_do(model_path: Path) -> None:
    """The status bar read "Smollm2 135M 8k Lc100K Mix1 Ep2", the GGUF's general.name."""
    with WorkerClient() as client:
        loaded = client.load(model_path, p.Placement(n_ctx=1024))
    assert loaded.name == "SmolLM2-135M-Instruct.Q4_1"


def test_the_crash_message_quotes_only_a_relevant_log_line(tmp_path: Path) -> None:
    """A worker's death quoted its last log lines, whatever they were (load chatter): now the line
    that says what went wrong, or none."""
    chatter = "print('llama_context: n_ctx = 4096', file=sys.stderr); print('load: 30 layers', file=sys.stderr)"
    for code, quoted in [
        (f"import sys; {chatter}; sys.stderr.flush(); raise MemoryError('no 2 GB')", "MemoryError: no 2 GB"),
        (f"import sys, os; {chatter}; sys.stderr.flush(); os._exit(3)", None),
    ]:
        client = WorkerClient(on_event=None, command=[sys.executable, "-c", code])
        with pytest.raises(WorkerError) as err:
            client.start(timeout=30)
        message = str(err.value)
        assert "llama_context" not in message and "30 layers" not in message, message
        if quoted:
            assert quoted in message
        else:
            assert "Last log line" not in message
        client.stop()


def test_a_server_that_dies_mid_answer_stopped_answering(tmp_path: Path, isolated_data: Path) -> None:
    """A remote server killed mid-answer was reported as a reply that "could not be read"."""
    from engine.chats.session import ChatSession
    from engine.chats.store import ConversationStore
    from engine.remote.client import RemoteClient
    from engine.remote.endpoints import Endpoint, normalise_base_url
    from engine.remote.openai_api import Timeouts
    from tests.remote_servers import piece, scripted_server

    def dies(write, over) -> None:
        write(piece("Part of"))
        write(piece(" it"))  # ... and the process is gone: its socket closes mid-answer

    with scripted_server(dies) as url:
        client = RemoteClient(Endpoint("box", normalise_base_url(url)), timeouts=Timeouts(connect=2.0, read=5.0))
        client.start()
        chat = ChatSession(ConversationStore(tmp_path / "c.db"))
        chat.on_event(client.load())
        client.send(chat.send("Tell me"))
        while True:
            msg = client.next_event(timeout=30)
            chat.on_event(msg)
            if isinstance(msg, p.Error | p.Done):
                break
        client.stop()
    assert isinstance(msg, p.Error) and msg.kind == "server_stopped", msg
    assert chat.notices[-1].startswith("**The server stopped answering:**") and "could not be read" not in chat.notices[-1]
    assert chat.messages[-1]["content"] == "Part of it"  # what arrived is kept


class _Decoder:
    """A decoder that yields tokens at once (AutoCalibration's Decoder protocol)."""

    def stream(self, tokens: list[int], sampling: p.Sampling):
        yield from range(sampling.max_tokens)

    def forget(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_a_unit_measured_beside_a_busy_neighbour_counts_for_nothing_and_waits() -> None:
    """The calibration's rules, on a fake machine and clock: a busy unit is set aside (not counted),
    retried after a doubling wait, and counted once the machine is quiet."""
    from engine.worker import auto
    from engine.worker.threads import CpuSample

    machine = {"t": 0.0, "busy": 0.0, "others": 1.5}

    def sample() -> CpuSample:  # each reading: one second passed, `others` cores busy elsewhere
        machine["t"] += 1.0
        machine["busy"] += machine["others"]
        return CpuSample(machine["t"], machine["busy"], 0.0)

    clock = {"now": 0.0}
    cal = auto.AutoCalibration([[1, 2, 3]], {}, _Decoder(), threads=2, sample=sample, clock=lambda: clock["now"])
    cal.step(lambda: False)
    assert cal.postponed and cal.busy_cores == 1.5 and not cal.done and cal.totals["vanilla"] == [0, 0.0]
    assert cal.waiting and cal.retry_at == auto.BUSY_RETRY_S[0]
    cal.step(lambda: False)  # still waiting: nothing runs
    assert cal.retry_at == auto.BUSY_RETRY_S[0]
    clock["now"] = cal.retry_at
    cal.step(lambda: False)  # busy again: the wait doubles
    assert cal.postponed and cal.retry_at == clock["now"] + 2 * auto.BUSY_RETRY_S[0]
    machine["others"] = 0.2  # a window repainting: tolerated
    clock["now"] = cal.retry_at
    cal.step(lambda: False)
    assert cal.done and not cal.postponed and cal.totals["vanilla"][0] == auto.CALIBRATION_TOKENS - 1
    assert cal.reference() == {"2/0": cal.speeds()["vanilla"]}


def test_answers_compare_with_vanilla_only_in_their_own_conditions() -> None:
    from engine.worker import auto

    assert [auto.prompt_band(n) for n in (30, 512, 513, 2048, 2049, 9000)] == [0, 0, 1, 1, 2, 3]
    ref = auto.VanillaReference({"2/0": 100.0})
    assert ref.ratio(90.0, 2, 0) == 0.9
    assert ref.ratio(90.0, 1, 0) == 0 and ref.ratio(90.0, 2, 1) == 0  # other threads, longer prompt: none
    check = auto.AnswerCheck()
    assert not check.add(0.9) and not check.add(0.0) and not check.add(0.8)  # not comparable: says nothing
    assert not check.add(1.2) and not check.add(0.9) and not check.add(0.9)  # a fast one breaks the run
    assert check.add(0.9)  # three slow ones in a row
