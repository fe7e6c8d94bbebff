"""`specee` mode through the real worker with the shipped head and predictors: found by sha256,
exits really happen, chat keeps working across turns, regenerate and context overflow."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine import protocol as p
from engine.client import WorkerClient, WorkerError
from engine.models.acceleration import find_pack
from engine.models.exit_predictors import load_predictors
from tests.conftest import ON_LAVAPIPE

QUESTION = "Explain how a bicycle works."


def _stats(events: list[p.Message]) -> p.Stats:
    return [e for e in events if isinstance(e, p.Stats)][-1]


def test_the_default_model_has_shipped_predictors(model_path: Path) -> None:
    pack = find_pack(model_path)
    assert pack is not None and pack.exit_predictors is not None
    preds = load_predictors(pack.exit_predictors, model_path)
    assert preds.layers, "the shipped schedule has at least one exit layer"
    assert pack.manifest["exits"]["heldout_precision"] >= 0.99


def test_specee_exits_early_and_reports_per_step_statistics(model_path: Path) -> None:
    with WorkerClient() as client:
        assert client.load(model_path, p.Placement(n_ctx=2048), mode="specee").mode == "specee"
        events = list(client.stream([{"role": "user", "content": QUESTION}], p.Sampling.greedy(64)))
        done, accel = events[-1], _stats(events).accel
        assert isinstance(done, p.Done) and done.n_generated > 8 and done.text.strip()
        assert accel["steps"] >= done.n_generated - 1
        assert 0.0 < accel["exit_rate"] <= 1.0
        # exit_hist[l]: steps that exited after layer l (l + 1 layers ran), [n_layer]: full depth. Which
        # layers exit differs by CPU (this question on an AVX2 EPYC: all at the last checked layer, 29,
        # which skips only the lm_head), so the statistics are checked for agreement, not for depth.
        hist, n_layer = accel["exit_hist"], accel["n_layer"]
        assert sum(hist) == accel["steps"] and len(hist) == n_layer + 1
        assert accel["exit_rate"] == pytest.approx(sum(hist[:n_layer]) / accel["steps"])
        ran = sum(min(layer + 1, n_layer) * n for layer, n in enumerate(hist))
        assert accel["mean_layers"] == pytest.approx(ran / accel["steps"]) and accel["mean_layers"] <= n_layer


def test_specee_multi_turn_regenerate_and_overflow(model_path: Path) -> None:
    """The cached prefix (seq_rm past it) is reused across turns; regenerating gives the same
    greedy answer; a conversation longer than the context is trimmed, not failed."""
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=512), mode="specee")
        history = [{"role": "user", "content": "Name three fruits."}]
        first = list(client.stream(history, p.Sampling.greedy(32)))[-1]
        history += [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Which one is the sweetest?"}]  # type: ignore[attr-defined]
        events = list(client.stream(history, p.Sampling.greedy(32)))
        second = events[-1]
        assert _stats(events).n_prompt_cached > 0 and second.text.strip()  # type: ignore[attr-defined]
        again = list(client.stream(history, p.Sampling.greedy(32)))[-1]
        assert again.tokens == second.tokens  # type: ignore[attr-defined]
        long = [{"role": "user", "content": "word " * 300}, {"role": "assistant", "content": "ok " * 200}, *history]
        events = list(client.stream(long, p.Sampling.greedy(16)))
        assert any(isinstance(e, p.Notice) and e.kind == "context_trimmed" for e in events)
        assert events[-1].n_generated > 0  # type: ignore[attr-defined]


def test_specee_sampling_is_reproducible_with_a_seed(model_path: Path) -> None:
    s = p.Sampling(temperature=0.8, max_tokens=24, seed=7)
    with WorkerClient() as client:
        client.load(model_path, p.Placement(n_ctx=1024), mode="specee")
        a = list(client.stream([{"role": "user", "content": QUESTION}], s))[-1]
        b = list(client.stream([{"role": "user", "content": QUESTION}], s))[-1]
        assert a.tokens == b.tokens and a.n_generated > 0  # type: ignore[attr-defined]


def test_predictors_for_another_model_are_refused_by_the_worker(
    model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.models.exit_predictors import save_predictors

    pack = find_pack(model_path)
    assert pack is not None
    shipped = tmp_path / "shipped"
    dest = shipped / pack.folder.name
    shutil.copytree(pack.folder, dest)
    preds = load_predictors(dest / pack.manifest["exits"]["file"])
    preds.target_sha256 = "f" * 64
    save_predictors(preds, dest / pack.manifest["exits"]["file"])
    monkeypatch.setenv("SPECEE_TEST_SHIPPED_ACCEL_DIR", str(shipped))
    with WorkerClient() as client:
        with pytest.raises(WorkerError) as err:
            client.load(model_path, mode="specee")
        assert err.value.kind == "wrong_predictors" and "specee train exits" in str(err.value)


@pytest.mark.skipif(not ON_LAVAPIPE, reason="needs a Vulkan device (the tests opt into lavapipe where there is no real GPU)")
@pytest.mark.parametrize("layout", ["first", "last"])
def test_specee_runs_with_layers_on_vulkan(model_path: Path, layout: str) -> None:
    """SpecEE's own layout (the first layers on the GPU device, exits skipping the CPU layers) and
    the other split both answer through the worker, exits happen, and the worker keeps answering.
    (It was refused here once: turning on the head's layer capture after a Vulkan decode corrupted
    the heap; the worker now turns it on right after load.)"""
    on_vulkan = p.Placement(n_ctx=1024, n_gpu_layers=3, layout=layout)
    with WorkerClient() as client:
        loaded = client.load(model_path, on_vulkan, mode="specee")
        assert loaded.mode == "specee" and "specee" in loaded.acceleration.modes
        for _ in range(2):
            events = list(client.stream([{"role": "user", "content": QUESTION}], p.Sampling.greedy(24)))
            done = events[-1]
            assert isinstance(done, p.Done) and done.n_generated > 8 and done.text.strip()
        accel = _stats(events).accel
        assert accel["steps"] >= done.n_generated - 1 and sum(accel["exit_hist"]) == accel["steps"]  # type: ignore[attr-defined]
