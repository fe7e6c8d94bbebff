"""Conversations whose KV cache is kept (engine/llm/kv_states.py): going back to a conversation after
another one was answered restores its cache, so only what is new is prefilled, and the answer is
token-identical to the one after a full prefill (vanilla and ngram, the default model and a tiny qwen2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import WorkerClient
from tests.tiny_models import write_tiny_gguf

TOPIC_A = "Explain, step by step and with an example, how a lighthouse keeper kept the lamp burning in 1850. " * 2
TOPIC_B = "Describe the life cycle of a monarch butterfly, from the egg to the long migration south. " * 2


@pytest.fixture(scope="module")
def tiny_qwen2(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "qwen2.gguf", "qwen2", tokenizer_from=model_path)


def _answer(client: WorkerClient, messages: list[dict[str, str]]) -> tuple[p.Done, p.Stats]:
    events = list(client.stream(messages, p.Sampling.greedy(24)))
    done = events[-1]
    assert isinstance(done, p.Done)
    return done, [e for e in events if isinstance(e, p.Stats)][-1]


def _worker(path: Path, mode: p.Mode, n_draft: int = 0) -> WorkerClient:
    client = WorkerClient()
    client.start()
    client.load(path, p.Placement(n_ctx=1024, n_threads=2), mode=mode, n_draft=n_draft)
    return client


@pytest.mark.parametrize(("which", "mode"), [("default", p.Mode.VANILLA), ("default", p.Mode.NGRAM), ("qwen2", p.Mode.VANILLA)])
def test_going_back_to_a_conversation_restores_its_cache_and_the_same_answer(
    which: str, mode: p.Mode, model_path: Path, tiny_qwen2: Path
) -> None:
    path = model_path if which == "default" else tiny_qwen2
    client = _worker(path, mode)
    try:
        a1 = [{"role": "user", "content": TOPIC_A}]
        done_a1, _ = _answer(client, a1)
        _answer(client, [{"role": "user", "content": TOPIC_B}])  # another chat takes the cache
        a2 = [*a1, {"role": "assistant", "content": done_a1.text}, {"role": "user", "content": "And in winter? " * 3}]
        done_kept, stats = _answer(client, a2)
        # the first question's prompt is cached again (its last tokens may tokenize otherwise once the
        # answer follows them: the tiny model answers with line breaks, which merge)
        assert stats.n_prompt_cached >= done_a1.n_prompt - 4 > 40, "the first conversation's cache was restored"
    finally:
        client.stop()
    for f in _state_files():  # the caches it kept on disk at quit
        f.unlink()
    cold = _worker(path, mode)
    try:
        done_cold, stats_cold = _answer(cold, a2)
        assert stats_cold.n_prompt_cached == 0
    finally:
        cold.stop()
    assert done_kept.tokens == done_cold.tokens


def _state_files() -> list[Path]:
    from engine.paths import cache_dir

    return sorted((cache_dir() / "kv-states").glob("*/*.kv"))


@pytest.mark.parametrize("damage", ["none", "truncated", "flipped"])
def test_a_conversation_kept_on_disk_survives_a_restart_and_a_damaged_file_costs_only_a_prefill(
    damage: str, model_path: Path
) -> None:
    for f in _state_files():
        f.unlink()
    a1 = [{"role": "user", "content": TOPIC_A + damage}]
    client = _worker(model_path, p.Mode.VANILLA)
    try:
        done_a1, _ = _answer(client, a1)
    finally:
        client.stop()  # quit: the live cache goes to disk
    files = _state_files()
    assert len(files) == 1
    if damage == "truncated":
        files[0].write_bytes(files[0].read_bytes()[: files[0].stat().st_size // 2])
    elif damage == "flipped":
        raw = bytearray(files[0].read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        files[0].write_bytes(bytes(raw))
    a2 = [*a1, {"role": "assistant", "content": done_a1.text}, {"role": "user", "content": "And in winter? " * 3}]
    again = _worker(model_path, p.Mode.VANILLA)
    try:
        done, stats = _answer(again, a2)
    finally:
        again.stop()
    if damage == "none":
        assert stats.n_prompt_cached >= done_a1.n_prompt - 4, "restored from disk after the restart"
    else:
        assert stats.n_prompt_cached == 0 and not files[0].exists(), "the damaged file was ignored and removed"
    for f in _state_files():
        f.unlink()
    cold = _worker(model_path, p.Mode.VANILLA)
    try:
        done_cold, _ = _answer(cold, a2)
    finally:
        cold.stop()
    assert done.tokens == done_cold.tokens


@pytest.mark.parametrize(("keep_kv", "disk_budget"), [(True, 0), (False, p.KV_DISK_BUDGET_DEFAULT)])
def test_memory_only_and_off_keep_nothing_on_disk(keep_kv: bool, disk_budget: int, model_path: Path) -> None:
    """Settings' "none (memory only)" writes no file at quit; keep_kv off (the bench) keeps nothing at all."""
    for f in _state_files():
        f.unlink()
    client = WorkerClient()
    client.start()
    try:
        client.load_intent(p.Load(str(model_path), p.Placement(n_ctx=1024, n_threads=2), keep_kv=keep_kv,
                                  kv_disk_budget=disk_budget))  # fmt: skip
        a1 = [{"role": "user", "content": TOPIC_A}]
        done_a1, _ = _answer(client, a1)
        _answer(client, [{"role": "user", "content": TOPIC_B}])
        a2 = [*a1, {"role": "assistant", "content": done_a1.text}, {"role": "user", "content": "And in winter?"}]
        _, stats = _answer(client, a2)
        assert (stats.n_prompt_cached >= done_a1.n_prompt - 4) == keep_kv  # memory still serves it
    finally:
        client.stop()
    assert _state_files() == []


def test_a_disk_budget_outside_the_limits_is_refused() -> None:
    for bad in (-1, p.KV_DISK_BUDGET_MAX + 1, 1.5, True):
        with pytest.raises(p.SettingsError, match="kv_disk_budget"):
            p.Load("m.gguf", kv_disk_budget=bad).validate()


def test_an_eagle_conversation_drafts_after_a_restart_as_it_goes_on_in_the_same_process(model_path: Path) -> None:
    """eagle keeps its head's own cache beside the target's (tagged with the head's sha256): after a
    restart the next answer is drafted exactly as it is when the conversation goes on in the same
    process (the same drafts accepted, not a head that starts from nothing), and its tokens are a
    full prefill's. A fixed 3-draft chain: the default gated chain also learns from the answers it
    gave and from timings, which a restart does not keep, so its draft counts would differ."""
    a1 = [{"role": "user", "content": TOPIC_A}]

    def follow_up(done_a1: p.Done) -> list[dict[str, str]]:
        return [*a1, {"role": "assistant", "content": done_a1.text}, {"role": "user", "content": "And in winter? " * 3}]

    for f in _state_files():
        f.unlink()
    same = _worker(model_path, p.Mode.EAGLE, n_draft=3)
    try:
        done_a1, _ = _answer(same, a1)
        done_same, stats_same = _answer(same, follow_up(done_a1))
    finally:
        same.stop()
    for f in _state_files():
        f.unlink()
    first = _worker(model_path, p.Mode.EAGLE, n_draft=3)
    try:
        assert _answer(first, a1)[0].tokens == done_a1.tokens
    finally:
        first.stop()  # quit: the target's and the head's caches go to disk
    assert len(_state_files()) == 1
    again = _worker(model_path, p.Mode.EAGLE, n_draft=3)
    try:
        done, stats = _answer(again, follow_up(done_a1))
    finally:
        again.stop()
    assert stats.n_prompt_cached >= done_a1.n_prompt - 4, "restored from disk after the restart"
    assert done.tokens == done_same.tokens
    drafts = ("drafted", "accepted")
    assert [stats.accel[k] for k in drafts] == [stats_same.accel[k] for k in drafts], (stats.accel, stats_same.accel)
    for f in _state_files():
        f.unlink()
    cold = _worker(model_path, p.Mode.EAGLE, n_draft=3)
    try:
        assert _answer(cold, follow_up(done_a1))[0].tokens == done.tokens  # lossless: a full prefill's answer
    finally:
        cold.stop()


@pytest.mark.slow  # engine.llm loads llama.cpp
@pytest.mark.parametrize("aux", [None, ("head-sha", bytearray(b"head state " * 100))])
def test_a_state_file_reads_back_as_written_and_any_damage_is_refused(aux: tuple | None, tmp_path: Path) -> None:
    """The file format of kept states (SPECEE-KV1; SPECEE-KV2 with a drafter's cache beside the
    target's): read back as written; a flipped byte anywhere, or a cut, is refused as damaged."""
    from engine.llm import kv_states

    path, tokens, data = tmp_path / "s.kv", (5, 6, 7), bytearray(b"target state " * 300)
    kv_states._write(path, tokens, data, aux)
    got_tokens, got_data, got_aux = kv_states._read(path)
    assert (got_tokens, bytes(got_data)) == (tokens, bytes(data)) and kv_states._read_tokens(path) == tokens
    assert (got_aux[0], bytes(got_aux[1])) == (aux[0], bytes(aux[1])) if aux else got_aux is None  # type: ignore[index]
    raw = path.read_bytes()
    for where in (len(kv_states.MAGIC) + 20, len(raw) - 40, len(raw) // 2):
        broken = bytearray(raw)
        broken[where] ^= 0x01
        path.write_bytes(bytes(broken))
        with pytest.raises(ValueError):
            kv_states._read(path)
    path.write_bytes(raw[: len(raw) - 10])
    with pytest.raises(ValueError):
        kv_states._read(path)


@pytest.mark.slow  # engine.llm loads llama.cpp
def test_a_state_another_engine_writes_after_this_one_started_is_found(tmp_path: Path) -> None:
    """Reopening the app at once: the engine that quit was still writing its caches out when the new
    one looked at the folder, so the chat's newest state was unknown to it and its next turn read
    the answers since the older state again (2-3.7 s instead of ~0.4 s). The folder is looked at
    again before each lookup."""
    from engine.llm import kv_states

    older, newer = (1, 2, 3, 4), (1, 2, 3, 4, 5, 6, 7, 8)
    kv_states._write(tmp_path / "older.kv", older, bytearray(b"o" * 64))
    states = kv_states.KvStates(None, folder=tmp_path)  # the new engine starts
    kv_states._write(tmp_path / "newer.kv", newer, bytearray(b"n" * 64))  # the old one's last write lands
    assert states.best([*newer, 9]) == (len(newer), newer)


@pytest.mark.slow  # engine.llm loads llama.cpp
def test_quitting_writes_the_newest_state_first_and_no_file_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine that takes over 5 s to quit is killed by the app: writing the states oldest first
    (~80 MB each, hashed) lost the live chat's, the one worth most, on a busy machine."""
    from engine.llm import kv_states

    states = kv_states.KvStates(None, folder=tmp_path)
    for key in [(1,), (2,), (3,)]:  # used in this order: (3,) last
        states._states[key] = (bytearray(b"s" * 64), None)
    kv_states._write(tmp_path / kv_states._file_name((2,)), (2,), bytearray(b"s" * 64))  # on disk already
    written: list[tuple[int, ...]] = []
    real_write = kv_states._write
    monkeypatch.setattr(kv_states, "_write", lambda path, key, *rest: (written.append(key), real_write(path, key, *rest)))
    states.spill()
    assert written == [(3,), (1,)]
    times = {key: (tmp_path / kv_states._file_name(key)).stat().st_mtime for key in [(1,), (3,)]}
    assert times[(3,)] > times[(1,)]  # the budget still drops the least recently used first
