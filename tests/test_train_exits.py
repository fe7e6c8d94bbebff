"""`specee train exits` end to end on a tiny budget: data from the engine, MLPs, thresholds,
schedule, a GGUF that loads for the model and drives the engine, and a manifest entry."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="the trainer needs the `train` extra: pip install -e '.[train]'")

from engine.models.exit_predictors import load_predictors
from engine.paths import RESOURCES_DIR
from engine.train import exits

HEAD = RESOURCES_DIR / "acceleration" / "smollm2-135m-instruct-q4_1" / "eagle.gguf"


def test_train_exits_end_to_end(tmp_path: Path, model_path: Path) -> None:
    out_dir = tmp_path / "pack"
    out_dir.mkdir()
    shutil.copy(HEAD, out_dir / "eagle.gguf")
    (out_dir / "manifest.json").write_text(json.dumps({"target_sha256": "x", "eagle": {"file": "eagle.gguf"}}))
    entry = exits.train_exits(
        model_path, out_dir / "eagle.gguf", out_dir / "exits.gguf", RESOURCES_DIR / "prompts" / "train.jsonl",
        first_prompt=1300, n_prompts=6, max_new=24, precision=0.9, work=tmp_path / "work", n_threads=2, epochs=3,
    )  # fmt: skip
    assert entry["steps"] > 50 and entry["file"] == "exits.gguf"
    assert len(entry["heldout_exit_hist"]) == 31 and sum(entry["heldout_exit_hist"]) == entry["heldout_steps"]
    manifest = json.loads((out_dir / "manifest.json").read_text())
    assert manifest["exits"]["schedule"] == entry["schedule"] and manifest["eagle"]["file"] == "eagle.gguf"
    preds = load_predictors(out_dir / "exits.gguf", model_path)
    assert sorted(preds.layers) == entry["schedule"] and preds.n_cand == 32
    assert entry["max_skip"] == exits.MAX_SKIP_LAYERS and all(layer >= 29 - exits.MAX_SKIP_LAYERS for layer in entry["schedule"])
    # resumable: a second run reuses the recorded data instead of decoding again
    data = exits.load_data(tmp_path / "work")
    again = exits.collect(model_path, out_dir / "eagle.gguf", [], tmp_path / "work", 24, 2)
    np.testing.assert_array_equal(again.token, data.token)
    # a recording cut short is set aside with a line saying so, and recording starts over
    recording = tmp_path / "work" / exits.DATA_FILE
    recording.write_bytes(recording.read_bytes()[:1000])
    with pytest.raises(ValueError, match="is damaged"):
        exits.load_data(tmp_path / "work")
    prompts = exits.exit_prompts(RESOURCES_DIR / "prompts" / "train.jsonl", 1300, 1)
    redone = exits.collect(model_path, out_dir / "eagle.gguf", prompts, tmp_path / "work", 8, 2)
    assert 0 < len(redone.token) <= 8 and set(redone.seq.tolist()) == {0}
    assert (tmp_path / "work" / ("damaged-" + exits.DATA_FILE)).is_file()


def test_a_layer_whose_check_costs_more_than_its_exits_save_is_dropped() -> None:
    """Layer 1 takes 2 of 100 steps two layers early; layer 3 takes 32 and skips the head. At the
    measured check cost only layer 3 pays; were a check nearly free, both would."""
    n, n_layer = 100, 4
    z = np.full((n, n_layer), -10.0)
    z[:2, 1] = z[:32, 3] = 10.0
    y = np.ones((n, n_layer), bool)
    thr = np.array([np.inf, 0.0, np.inf, 0.0])
    assert exits.choose_schedule(z, y, thr, n_layer, head_cost=5.0, check_cost=0.01) == [1, 3]
    assert exits.choose_schedule(z, y, thr, n_layer, head_cost=5.0, check_cost=exits.CHECK_COST_LAYERS) == [3]


def test_no_exit_is_calibrated_where_it_would_skip_more_layers_than_allowed() -> None:
    """Every step is settled from layer 0 on; with first_layer 2 the steps layer 0 would have
    taken stay running, so layer 2 takes them all and layers 0 and 1 get no threshold."""
    n, n_layer = 100, 4
    z = np.full((n, n_layer), 10.0)
    y = np.ones((n, n_layer), bool)
    free = exits.calibrate(z, y, 0.9)
    assert np.isfinite(free[0]) and np.isinf(free[1:]).all()  # layer 0 takes every step
    bounded = exits.calibrate(z, y, 0.9, first_layer=2)
    assert np.isinf(bounded[:2]).all() and np.isfinite(bounded[2]) and np.isinf(bounded[3])


def test_the_context_bound_pays_one_check_on_exiting_steps_and_none_elsewhere() -> None:
    """Step 0 fires at layers 1 and 3 (exits at 1), step 1 at 3 only, step 2 nowhere; layer 2 is
    not calibrated, so its firing counts for nothing."""
    from engine.train.exit_sweep import context_bound

    z = np.array([[-1, 5, 5, 5], [-1, -1, 5, 5], [-1, -1, 5, -1.0]])
    thr = np.array([0.0, 0.0, np.inf, 0.0])
    cost, rate = context_bound(z, thr, n_layer=4, head_cost=2.0, check_cost=0.5)
    assert cost == pytest.approx(((1 + 1 + 0.5) + (3 + 1 + 0.5) + (4 + 2.0)) / 3)
    assert rate == pytest.approx(2 / 3)


def test_copy_proposals_are_the_copy_drafters_next_token_from_prompt_and_answer_so_far() -> None:
    from engine.train.exit_sweep import copy_proposals

    # answer[2]: the context ends "1 2", seen in the prompt before "3"; answer[3]: "2 3" was followed by 4
    assert copy_proposals([1, 2, 3, 4], [1, 2, 3, 9]) == [-1, -1, 3, 4]


def test_the_sweep_bounds_never_cost_more_than_the_static_schedule() -> None:
    from engine.train.exit_sweep import sweep

    rng = np.random.default_rng(1)
    n_prompts, steps, n_layer, k = 30, 24, 6, 4
    n = n_prompts * steps
    rec = rng.normal(size=(n, n_layer, k)).astype(np.float32)
    rec[: n // 2, 2:, 0] += 6.0  # half the steps settle on candidate 0 from layer 2
    cands = np.tile(np.arange(k), (n, 1)) + 100
    token = np.where(np.arange(n) < n // 2, 100, rng.integers(0, 5, n))  # the rest: outside the candidates
    data = exits.ExitData(rec, rng.normal(size=(n, k)).astype(np.float32), np.zeros((n, 4), np.float32),
                          cands, token, np.repeat(np.arange(n_prompts), steps))  # fmt: skip
    prompts = {i: rng.integers(0, 5, 40).tolist() for i in range(n_prompts)}
    for s in sweep(data, prompts, [0.99, 0.9], head_cost=3.0, check_cost=0.5, epochs=20):
        assert s.context_bound <= s.static + 1e-9 and s.copy_bound <= s.static + 1e-9
        assert s.static < 1.0 and s.schedule and set(s.schedule) <= set(s.calibrated)
        assert 0.0 < s.copy_hits < 0.5  # tokens 0-4 repeat, so the copy drafter proposes some of them


def _shortlist_data(sure_vocab: float, rng: np.random.Generator, overlap: bool) -> exits.ExitData:
    """A third of the steps settled on a candidate at the last layer, and a shortlist (vocab: top
    logit, margin, log-sum-exp, arg max token) right and sure on a share of the steps (overlap:
    those candidate steps too, as on real models, where both are sure of the easy tokens)."""
    n_prompts, steps, n_layer, k = 40, 25, 4, 4
    n = n_prompts * steps
    rec = rng.normal(size=(n, n_layer, k)).astype(np.float32)
    rec[: n // 3, -1, 0] += 8.0  # a third: candidate 0 clearly on top at the last layer
    cands = np.tile(np.arange(k), (n, 1)) + 100
    token = np.where(np.arange(n) < n // 3, 100, 7)
    sure = (rng.random(n) < sure_vocab) | ((np.arange(n) < n // 3) & overlap)
    vocab = np.zeros((n, 4), np.float32)
    vocab[:, 0] = np.where(sure, 20.0, 5.0) + rng.normal(size=n)
    vocab[:, 1] = np.where(sure, 6.0, 0.5) + rng.normal(size=n) * 0.1
    vocab[:, 2] = np.where(sure, 0.01, 1.5)
    vocab[:, 3] = np.where(sure, token, np.where(rng.random(n) < 0.5, token, 3))  # sure: right; else a coin
    return exits.ExitData(rec, rng.normal(size=(n, k)).astype(np.float32), vocab, cands, token,
                          np.repeat(np.arange(n_prompts), steps))  # fmt: skip


def test_the_shortlist_alone_replaces_layer_checks_and_the_head_where_it_costs_less() -> None:
    """With the EAGLE head's own step priced in (draft_cost), a shortlist sure wherever the
    candidates are and on more steps beats the last-layer candidate exits: the predictors keep no
    layer, so the engine runs no head. Sure on 2% only, the layer schedule and the head stay."""
    rng = np.random.default_rng(0)
    kw = {"precision": 0.95, "vocab_precision": 0.95, "head_cost": 6.8, "n_dv": 10240, "vocab_size": 151936}
    preds, m = exits.fit_predictors(_shortlist_data(0.4, rng, True), "sha", epochs=5, draft_cost=1.0, **kw)
    assert not preds.layers and preds.vocab_head is not None and m["schedule"] == []
    assert m["cost_layers_shortlist_alone"] < m["cost_layers_with_head"] and m["shortlist_alone_exit_rate"] > 0.5
    preds, m = exits.fit_predictors(_shortlist_data(0.02, rng, False), "sha", epochs=5, draft_cost=1.0, **kw)
    assert preds.layers and m["schedule"] == [3]
    preds, m = exits.fit_predictors(_shortlist_data(0.4, rng, True), "sha", epochs=5, **kw)  # no draft cost: as before
    assert preds.layers and "cost_layers_shortlist_alone" not in m
