"""The app's user settings (Qt-free), a small JSON file in the data dir, written atomically. The modes
and limits are the protocol's (engine.protocol), re-exported here for the settings dialog."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from engine.atomic import write_text_atomic
from engine.paths import data_dir
from engine.protocol import MODES, N_CTX_MAX, N_CTX_MIN, N_THREADS_MAX, Placement, SettingsError

__all__ = ["MODES", "N_CTX_MAX", "N_CTX_MIN", "N_THREADS_MAX", "AppSettings", "load_settings", "save_settings"]


@dataclass
class AppSettings:
    mode: str = "auto"
    n_threads: int = 0  # 0 = physical cores
    n_ctx: int = 4096
    last_model: str = ""

    def validate(self) -> None:
        """SettingsError (a ValueError) for what the engine would refuse: the worker's own checks."""
        if self.mode not in MODES:
            raise SettingsError(f"acceleration mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        Placement(n_ctx=self.n_ctx, n_threads=self.n_threads).validate()
        if not isinstance(self.last_model, str):
            raise SettingsError(f"last model must be a file path, got {self.last_model!r}")


def settings_path() -> Path:
    return data_dir() / "settings.json"


def load_settings(path: Path | None = None) -> AppSettings:
    """Defaults for a missing or damaged file: a bad settings file must never block the app."""
    try:
        raw = json.loads((path or settings_path()).read_text())
        known = {f.name for f in fields(AppSettings)}
        s = AppSettings(**{k: v for k, v in raw.items() if k in known})
        s.validate()
        return s
    except (OSError, ValueError, TypeError, AttributeError):
        return AppSettings()


def save_settings(s: AppSettings, path: Path | None = None) -> None:
    s.validate()
    write_text_atomic(path or settings_path(), json.dumps(asdict(s), indent=1))
