"""The saved conversation caches on disk (engine.llm.kv_states writes them): where they are, how
much they take, and clearing them. Qt-free and free of llama.cpp, so Settings can show and clear
them while the worker runs (a file it indexed and no longer finds costs that conversation only a
prefill)."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from engine.paths import cache_dir
from engine.protocol import KV_DISK_BUDGET_DEFAULT as DEFAULT_DISK_BUDGET_BYTES

GIB = 1024**3
__all__ = ["DEFAULT_DISK_BUDGET_BYTES", "DiskUsage", "clear", "disk_usage", "kv_states_root"]


def kv_states_root() -> Path:
    return cache_dir() / "kv-states"


@dataclass(frozen=True)
class DiskUsage:
    n_bytes: int
    n_files: int

    def text(self) -> str:
        if not self.n_files:
            return "none saved yet"
        size = f"{self.n_bytes / GIB:.1f} GB" if self.n_bytes >= GIB else f"{self.n_bytes / 1024**2:.0f} MB"
        return f"{size} in {self.n_files} saved conversation{'s' if self.n_files != 1 else ''}"


def disk_usage(root: Path | None = None) -> DiskUsage:
    n_bytes = n_files = 0
    for f in (root or kv_states_root()).glob("*/*.kv"):
        try:
            n_bytes += f.stat().st_size
            n_files += 1
        except OSError:
            pass  # removed meanwhile (the worker's eviction)
    return DiskUsage(n_bytes, n_files)


def clear(root: Path | None = None) -> None:
    shutil.rmtree(root or kv_states_root(), ignore_errors=True)
