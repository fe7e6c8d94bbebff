"""`specee train status`: where a stopped or running training job stands, from its folder alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the checkpoint is a torch file: pip install -e '.[train]'")

from engine.train.status import folder_status  # noqa: E402


def test_each_stage_left_on_disk_is_reported_and_damage_is_named(tmp_path: Path) -> None:
    assert "no training stage" in folder_status(tmp_path)[0]
    (tmp_path / "magpie").mkdir()
    (tmp_path / "magpie" / "shard-00000.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n')
    (tmp_path / "train-data").mkdir()
    manifest = {"done": ["p1", "p2"], "planned": 5, "shards": [{"name": "shard-00000", "n_seqs": 2, "n_tokens": 1234}]}
    (tmp_path / "train-data" / "manifest.json").write_text(json.dumps(manifest))
    (tmp_path / "head").mkdir()
    history = [{"epoch": 1, "eval": {"top1": 0.3125}}]
    torch.save({"epoch": 1, "batch": 7, "per_epoch": 40, "epochs": 3, "history": history, "elapsed": 5400.0},
               tmp_path / "head" / "checkpoint.pt")  # fmt: skip
    (tmp_path / "exits").mkdir()
    (tmp_path / "exits" / "exit-data.npz").write_bytes(b"PK\x03\x04 cut short")
    assert folder_status(tmp_path) == [
        "questions: 1 shards, 2 written (before deduplication)",
        "teacher data (train-data): 2 of 5 prompts, 1,234 tokens in 1 shards",
        "training: 1 of 3 epochs done, 7 of 40 batches into the next; 1.50 h trained; dev top-1 by epoch 1: 0.312",
        "exit data (exits): unreadable (BadZipFile); `specee train exits` records it again",
    ]
    (tmp_path / "head" / "checkpoint.pt").write_bytes(b"torn")
    assert folder_status(tmp_path)[2].startswith("training: ") and "unreadable" in folder_status(tmp_path)[2]


def test_the_command_prints_the_folder_and_refuses_a_missing_one(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "engine.cli", "train", "status", "--work"]
    missing = subprocess.run([*run, str(tmp_path / "nothing")], capture_output=True, text=True)
    assert missing.returncode == 1 and "no training folder" in missing.stderr
    ok = subprocess.run([*run, str(tmp_path)], capture_output=True, text=True)
    assert ok.returncode == 0 and "no training stage" in ok.stdout
