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
    # resumable: a second run reuses the recorded data instead of decoding again
    data = exits.load_data(tmp_path / "work")
    again = exits.collect(model_path, out_dir / "eagle.gguf", [], tmp_path / "work", 24, 2)
    np.testing.assert_array_equal(again.token, data.token)


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
