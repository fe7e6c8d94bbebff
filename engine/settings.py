"""The app's user settings (Qt-free), a small JSON file in the data dir, written atomically."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from engine.atomic import write_text_atomic
from engine.paths import data_dir
from engine.protocol import MODES


@dataclass
class AppSettings:
    mode: str = "auto"
    n_threads: int = 0  # 0 = physical cores
    n_ctx: int = 4096
    last_model: str = ""

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"acceleration mode must be one of {', '.join(MODES)}")
        if not 0 <= self.n_threads <= 256:
            raise ValueError("threads must be 0 (automatic) to 256")
        if not 256 <= self.n_ctx <= 131072:
            raise ValueError("context length must be 256 to 131072 tokens")


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
