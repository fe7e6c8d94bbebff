"""Trained acceleration weights (EAGLE heads, later SpecEE predictors) and which model they belong to.

Shipped weights live in resources/acceleration/<name>/ with a manifest.json naming the target
model's sha256; user-trained ones in <data dir>/acceleration/. A model gets the weights whose
manifest names its exact sha256: a head trained for another model is never used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from engine import knobs
from engine.atomic import write_text_atomic
from engine.hashing import sha256_file
from engine.models.gguf_file import ModelFileError, inspect_gguf
from engine.models.registry import ModelRecord, ModelRegistry
from engine.paths import RESOURCES_DIR, cache_dir, data_dir

TARGET_SHA_KEY = "specee.target_sha256"
# Architectures whose llama.cpp graph builders carry our hooks (layer capture for EAGLE heads, exit
# checks and K/V fill for SpecEE: patches 0002, 0005); any other model runs vanilla. The list itself
# is the native library's (native/src/exit-graph.cpp, specee_exit_archs; engine.native.exit_archs),
# which the worker asks. This copy serves code that must run without the native library (training's
# and head import's early checks, which engine.models may not import engine.native for);
# tests/test_architectures.py checks it equals the library's.
ACCELERATED_ARCHS = ("llama", "qwen2", "qwen3")


class AccelerationError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class AccelerationPack:
    folder: Path
    manifest: dict

    @property
    def eagle_head(self) -> Path | None:
        name = self.manifest.get("eagle", {}).get("file")
        return self.folder / name if name else None

    @property
    def eagle_measured(self) -> bool:
        """Whether `auto` may consider the head: ours are trained and evaluated here; an imported one
        (engine.models.head_import) only once the engine measured it on the development prompts."""
        eagle = self.manifest.get("eagle", {})
        return "source" not in eagle or "measured" in eagle

    @property
    def exit_predictors(self) -> Path | None:
        name = self.manifest.get("exits", {}).get("file")
        return self.folder / name if name else None


def user_weights_dir() -> Path:
    """Where weights trained or imported here go, one folder per model (acceleration_folder)."""
    return data_dir() / "acceleration"


def search_dirs() -> list[Path]:
    """Shipped weights (SPECEE_TEST_SHIPPED_ACCEL_DIR overrides: tests), then user-trained."""
    shipped = knobs.SHIPPED_ACCEL_DIR.path() or RESOURCES_DIR / "acceleration"
    return [shipped, user_weights_dir()]


def model_sha256(path: Path) -> str:
    """The registry's verified hash when the file is registered, else computed once and cached
    by (path, size, mtime)."""
    path = path.resolve()
    st = path.stat()
    for record in ModelRegistry().all():
        if record.size == st.st_size and ModelRegistry.same_file(record, path):
            return record.sha256
    cache_file = cache_dir() / "sha256-cache.json"
    try:
        cache = json.loads(cache_file.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        cache = {}
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    if key not in cache:
        cache[key] = sha256_file(path)
        write_text_atomic(cache_file, json.dumps(cache))
    return cache[key]


def find_pack(model_path: Path) -> AccelerationPack | None:
    return find_pack_for_sha256(model_sha256(model_path))


def find_pack_for_sha256(sha: str) -> AccelerationPack | None:
    """The installed weights trained for the model file with this hash (no file is read but manifests)."""
    for root in search_dirs():
        for manifest_path in sorted(root.glob("*/manifest.json")):
            try:
                manifest = json.loads(manifest_path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            if manifest.get("target_sha256") == sha:
                return AccelerationPack(manifest_path.parent, manifest)
    return None


def installed_weights(record: ModelRecord) -> str:
    """The acceleration this exact model has weights for (by its registered sha256: no model file is
    hashed), in a few words: "EAGLE + SpecEE", "EAGLE", or "training-free modes" (ngram, draft) when
    none are installed. A loaded model's own state comes from the worker (Loaded.acceleration)."""
    pack = find_pack_for_sha256(record.sha256) if record.sha256 else None
    if pack is None or pack.eagle_head is None:
        return "training-free modes"
    if pack.exit_predictors is not None:
        return "EAGLE + SpecEE"
    return "EAGLE" if pack.eagle_measured else "EAGLE (not measured yet)"


def acceleration_folder(model: Path, sha: str = "") -> Path:
    """The folder for weights trained or imported here for this model file (sha: its sha256, when
    known): its own pack among the user's when it has one, else <data dir>/acceleration/<file stem>,
    or <stem>-<sha256[:8]> when that name holds another model's pack (two files of the same name).
    A file that is not there (yet) gets its stem."""
    root = user_weights_dir()
    sha = sha or (model_sha256(model) if model.is_file() else "")
    if not sha:
        return root / model.stem
    pack = find_pack_for_sha256(sha)
    if pack is not None and pack.folder.parent.resolve() == root.resolve():
        return pack.folder
    folder = root / model.stem
    return root / f"{model.stem}-{sha[:8]}" if (folder / "manifest.json").exists() else folder


def head_target_layers(head: Path) -> list[int]:
    """The target layers whose inputs an EAGLE-3 head reads (GGUF eagle3.target_layers)."""
    try:
        layers = inspect_gguf(head).arch_value("target_layers") or []
    except ModelFileError as exc:
        raise AccelerationError("bad_head", f"EAGLE head {head.name}: {exc}") from None
    return [int(x) for x in layers]


def check_eagle_head(head: Path, model_path: Path) -> None:
    """Refuse, with a clear message, a head that is damaged or was trained for another model."""
    try:
        info = inspect_gguf(head)
    except ModelFileError as exc:
        raise AccelerationError("bad_head", f"EAGLE head {head.name}: {exc}") from None
    if info.architecture != "eagle3":
        raise AccelerationError("bad_head", f"{head.name} is not an EAGLE-3 head (architecture {info.architecture!r}).")
    want = model_sha256(model_path)
    got = info.metadata.get(TARGET_SHA_KEY)
    if got != want:
        raise AccelerationError(
            "wrong_head",
            f"{head.name} was trained for another model (sha256 {str(got)[:12]}…), not {model_path.name} "
            f"({want[:12]}…). Train a head for this model with `specee train eagle --model {model_path}`.",
        )
