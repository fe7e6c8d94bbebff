"""One function names a model's folder of weights trained or imported here (acceleration_folder):
`specee models import-head`, the window's "Train acceleration" and the pack search agree on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.hashing import sha256_file
from engine.models.acceleration import acceleration_folder, find_pack, user_weights_dir
from engine.models.head_import import pack_folder


@pytest.fixture
def model(tmp_path: Path, isolated_data: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPECEE_TEST_SHIPPED_ACCEL_DIR", str(tmp_path / "no-shipped-weights"))
    monkeypatch.setenv("SPECEE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    path.write_bytes(b"not a real model, only bytes to hash")
    return path


def _pack(folder: Path, sha: str) -> None:
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"target_sha256": sha, "eagle": {"file": "eagle.gguf"}}))


def test_a_model_without_weights_gets_its_file_stem(model: Path) -> None:
    assert acceleration_folder(model) == user_weights_dir() / "tiny"
    assert acceleration_folder(model.with_name("not-there.gguf")) == user_weights_dir() / "not-there"
    assert pack_folder(model, sha256_file(model), "org/head", force=False) == (user_weights_dir() / "tiny", {})


def test_another_models_pack_of_the_same_name_is_never_written_over(model: Path) -> None:
    sha = sha256_file(model)
    _pack(user_weights_dir() / "tiny", "f" * 64)  # another file called tiny.gguf
    assert acceleration_folder(model) == user_weights_dir() / f"tiny-{sha[:8]}"
    assert pack_folder(model, sha, "org/head", force=False)[0] == acceleration_folder(model)


def test_the_models_own_pack_is_found_wherever_it_is(model: Path) -> None:
    sha = sha256_file(model)
    _pack(user_weights_dir() / "trained-by-hand", sha)
    pack = find_pack(model)
    assert pack is not None and acceleration_folder(model) == pack.folder == user_weights_dir() / "trained-by-hand"
    folder, manifest = pack_folder(model, sha, "org/head", force=False)  # its head file is not there: replaceable
    assert folder == pack.folder and manifest["target_sha256"] == sha
