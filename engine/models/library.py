"""The user's models on this machine, Qt-free: the registry's files with their state (ready, damaged,
missing) and facts (size, architecture, context length, acceleration weights); the models folder
scanned for GGUF files nobody registered; a GGUF imported (registered where it lies, as `specee
models add` does); a model deleted with its acceleration folder; a damaged download's way back (the
same file from the hub, checked against the hash it was registered with); the catalog's files
recognised on disk. "My models", the model switcher and the model manager draw this."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from engine.hashing import sha256_file
from engine.models.acceleration import acceleration_folder, installed_weights, user_weights_dir
from engine.models.catalog import CatalogEntry, load_catalog
from engine.models.download import HubFile, partial_path
from engine.models.gguf_file import ModelFileError, inspect_gguf
from engine.models.registry import ModelRecord, ModelRegistry
from engine.models.weights_check import check_weights
from engine.paths import models_dir

# GGUF files in the models folder that are not chat models
NOT_CHAT_MODELS = {"eagle3": "an EAGLE head (acceleration weights), not a chat model"}


def size_text(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def file_problem(record: ModelRecord) -> str:
    """What is wrong with a registered model's file, from its size alone (no byte is read): "" when
    nothing is. Quick enough for the switcher, which lists a damaged model instead of hiding it."""
    p = Path(record.path)
    if not p.is_file():
        return f"the file is gone ({record.path})"
    size = p.stat().st_size
    if size < record.size:
        return f"truncated: {size_text(size)} of {size_text(record.size)} present"
    if size != record.size:
        return f"changed since it was added: {size_text(size)} instead of {size_text(record.size)}"
    return ""


@dataclass
class InstalledModel:
    record: ModelRecord
    state: str  # "ok" | "damaged" | "missing"
    why: str = ""  # what is wrong, in words (damaged, missing)
    architecture: str = ""
    n_ctx_train: int = 0
    n_layer: int = 0
    weights: str = ""  # acceleration weights installed for this exact file (installed_weights)
    catalog: CatalogEntry | None = None  # the catalog's entry for this file, when it is one
    acceleration_dir: Path | None = None  # the folder of weights trained or imported here, if any
    # False: a GGUF found in the models folder that could not be registered (truncated, corrupt): listed
    # so that the user sees it and can delete it; its record is made up from the file (no sha256)
    registered: bool = True

    @property
    def path(self) -> str:
        return self.record.path

    @property
    def repair(self) -> HubFile | None:
        """The same file from the hub, for a damaged or missing one that came from there (a download,
        or a file of the catalog's): checked against the sha256 it was registered with. None for an
        unregistered file: neither its expected size nor its hash is known."""
        return repair_source(self.record, self.catalog) if self.registered else None

    @property
    def in_models_folder(self) -> bool:
        return in_models_folder(self.record.path)


def in_models_folder(path: str | Path, folder: Path | None = None) -> bool:
    """Whether a file lies in the models folder (or below it). A file elsewhere is the user's own,
    registered where it lay by Import GGUF… or `specee models add`: never deleted as a side matter."""
    return Path(path).resolve().is_relative_to((folder or models_dir()).resolve())


def sentence(text: str) -> str:
    """Text ending in exactly one period, for messages composed from other messages (which may or
    may not end in one: "…download it again.." was shown)."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?", "…")) else f"{text}."


def catalog_entry(record: ModelRecord, catalog: list[CatalogEntry] | None = None) -> CatalogEntry | None:
    """The catalog's entry for this file: by its hub source, else by its file name."""
    entries = [e for e in catalog if e.repo_id != "embedded"] if catalog is not None else hub_catalog()
    name = Path(record.path).name.lower()
    source = record.source.removeprefix("hf:")
    for e in entries:
        if source == f"{e.repo_id}/{e.file}" or name == e.file.lower():
            return e
    return None


def hub_catalog() -> list[CatalogEntry]:
    return [e for e in load_catalog() if e.repo_id != "embedded"]


def repair_source(record: ModelRecord, entry: CatalogEntry | None = None) -> HubFile | None:
    sha = record.sha256 or None
    if record.source.startswith("hf:"):
        repo_file = record.source.removeprefix("hf:")
        owner, repo, *rest = repo_file.split("/")
        if rest:
            return HubFile(f"{owner}/{repo}", "/".join(rest), record.size, sha)
    entry = entry or catalog_entry(record)
    if entry is not None:
        return HubFile(entry.repo_id, entry.file, record.size, sha)
    return None


def inspect_model(record: ModelRecord, catalog: list[CatalogEntry] | None = None) -> InstalledModel:
    """One registered model's state and facts: its size first (nothing read), then its GGUF header."""
    entry = catalog_entry(record, catalog)
    problem = file_problem(record)
    if problem:
        state = "missing" if not Path(record.path).is_file() else "damaged"
        return InstalledModel(record, state, problem, catalog=entry)
    try:
        info = inspect_gguf(record.path)
    except ModelFileError as exc:
        return InstalledModel(record, "damaged", str(exc), catalog=entry)
    folder = acceleration_folder(Path(record.path), record.sha256) if record.sha256 else None
    return InstalledModel(
        record, "ok", "", info.architecture, info.n_ctx_train, info.n_layer, installed_weights(record), entry,
        folder if folder is not None and folder.is_dir() else None,
    )  # fmt: skip


def installed_models(registry: ModelRegistry | None = None, folder: Path | None = None) -> list[InstalledModel]:
    """Every registered model, in the order added, with its state; then the GGUF files in the models
    folder that could not be registered, as damaged, saying why (unusable_in_folder)."""
    registry = registry or ModelRegistry()
    catalog = hub_catalog()
    return [inspect_model(r, catalog) for r in registry.all()] + unusable_in_folder(folder, registry, catalog)


def _unregistered_ggufs(folder: Path, registry: ModelRegistry) -> list[Path]:
    """The GGUF files in the models folder (and its subfolders, as LM Studio lays them out) that are
    not registered; a download in progress (`.partial`) is no model."""
    known = {str(Path(m.path).resolve()) for m in registry.all()}
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() == ".gguf")
    return [p for p in files if str(p.resolve()) not in known]


def check_model_file(path: Path) -> None:
    """What import checks before it registers a file: a chat model's GGUF header and a sample of its
    weights. Raises ModelFileError saying what is wrong."""
    info = inspect_gguf(path)
    if info.architecture in NOT_CHAT_MODELS:
        raise ModelFileError("not_a_model", f"{path.name} is {NOT_CHAT_MODELS[info.architecture]}.")
    check_weights(info)


def unusable_in_folder(
    folder: Path | None = None, registry: ModelRegistry | None = None, catalog: list[CatalogEntry] | None = None
) -> list[InstalledModel]:
    """The GGUF files in the models folder that the scan cannot register (truncated, corrupt,
    unreadable), as damaged models saying why, so that they are seen and can be deleted instead of
    being skipped without a word. Headers only (no hash); a file that is not a chat model (an EAGLE
    head) is not a broken one and is left out, as is a sound file the next scan registers."""
    registry = registry or ModelRegistry()
    out: list[InstalledModel] = []
    for p in _unregistered_ggufs(folder or models_dir(), registry):
        try:
            check_model_file(p)
            continue
        except ModelFileError as exc:
            if exc.kind == "not_a_model":
                continue
            why = str(exc)
        except OSError as exc:
            why = f"cannot be read ({exc.strerror or exc})"
        try:
            size = p.stat().st_size
        except OSError:
            size = 0
        record = ModelRecord(p.stem, str(p), "", size, "models folder (not added)")
        out.append(InstalledModel(record, "damaged", why, catalog=catalog_entry(record, catalog), registered=False))
    return out


def _free_id(stem: str, sha: str, registry: ModelRegistry, path: str) -> str:
    """The file's stem, unless another file holds it: then stem-<sha256[:8]>. The same model moved
    (its old path gone, the same hash) keeps its entry."""
    holder = registry.get(stem)
    if holder is None or holder.path == path or (holder.sha256 == sha and not Path(holder.path).exists()):
        return stem
    return f"{stem}-{sha[:8]}"


def import_gguf(path: str | Path, registry: ModelRegistry | None = None, source: str = "local") -> ModelRecord:
    """Register a GGUF file where it lies (as `specee models add`): its header and a sample of its
    weights checked, its sha256 taken. Raises ModelFileError saying what is wrong with it."""
    registry = registry or ModelRegistry()
    p = Path(path).expanduser().resolve()
    check_model_file(p)
    sha = sha256_file(p)
    record = ModelRecord(_free_id(p.stem, sha, registry, str(p)), str(p), sha, p.stat().st_size, source)
    registry.add(record)
    return record


@dataclass
class ScanResult:
    added: list[ModelRecord] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # a GGUF that cannot be used, and why

    def summary(self) -> str:
        found = ", ".join(r.id for r in self.added)
        parts = [f"Found {len(self.added)} new model{'s' * (len(self.added) != 1)}" + (f": {found}" if found else "")]
        parts += [f"skipped {p.name}: {why.rstrip('.')}" for p, why in self.skipped]  # one period at the end
        return sentence("; ".join(parts))


def scan_models_folder(folder: Path | None = None, registry: ModelRegistry | None = None) -> ScanResult:
    """Register the GGUF files copied into the models folder (and its subfolders, as LM Studio lays
    them out) that are not registered yet. A download in progress (`.partial`) is no model; a file
    registered already is not read again; one that cannot be used is reported, not registered."""
    registry = registry or ModelRegistry()
    out = ScanResult()
    for p in _unregistered_ggufs(folder or models_dir(), registry):
        try:
            out.added.append(import_gguf(p, registry, "local"))
        except ModelFileError as exc:
            out.skipped.append((p, str(exc)))
        except OSError as exc:
            out.skipped.append((p, f"cannot be read ({exc.strerror or exc})"))
    return out


def weights_to_delete(record: ModelRecord, registry: ModelRegistry | None = None) -> Path | None:
    """The acceleration folder that deleting this model deletes: its weights trained or imported
    here (shipped weights never), unless another registered copy of the same file still uses them."""
    if not record.sha256:
        return None
    folder = acceleration_folder(Path(record.path), record.sha256)
    if not folder.is_dir() or folder.resolve().parent != user_weights_dir().resolve():
        return None
    others = [m for m in (registry or ModelRegistry()).all() if m.id != record.id and m.sha256 == record.sha256]
    return None if others else folder


def delete_model(record: ModelRecord, registry: ModelRegistry | None = None) -> list[Path]:
    """Delete a model: its file (and an unfinished download of it), its registry entry, and its
    acceleration folder (weights_to_delete). Returns what was removed. The caller has asked the user,
    naming the full path of a file outside the models folder."""
    registry = registry or ModelRegistry()
    removed: list[Path] = []
    p = Path(record.path)
    folder = weights_to_delete(record, registry)
    for f in (p, partial_path(p)):
        if f.is_file():
            f.unlink()
            removed.append(f)
    if folder is not None:
        shutil.rmtree(folder)
        removed.append(folder)
    remove_from_list(record, registry)
    return removed


def remove_from_list(record: ModelRecord, registry: ModelRegistry | None = None) -> None:
    """Forget a model and nothing else: its file and acceleration weights stay where they are. Only
    the entry of this very file goes (an unregistered file's made-up record may share another's id)."""
    registry = registry or ModelRegistry()
    held = registry.get(record.id)
    if held is not None and held.path == record.path:
        registry.remove(record.id)


def on_disk(filename: str, registry: ModelRegistry | None = None, damaged: bool = False) -> ModelRecord | None:
    """The registered, intact model stored under this file name (the catalog's files: "installed");
    damaged: one whose file is damaged or gone instead (a download replaces it)."""
    name = Path(filename).name.lower()
    for r in (registry or ModelRegistry()).all():
        if Path(r.path).name.lower() == name and bool(file_problem(r)) == damaged:
            return r
    return None
