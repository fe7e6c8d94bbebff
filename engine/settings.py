"""The app's user settings (Qt-free), a small JSON file in the data dir, written atomically. The modes
and limits are the protocol's (engine.protocol), re-exported here for the settings dialog."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from engine.atomic import write_text_atomic
from engine.paths import data_dir
from engine.protocol import (
    KV_DISK_BUDGET_DEFAULT,
    KV_DISK_BUDGET_MAX,
    MODES,
    N_CTX_MAX,
    N_CTX_MIN,
    N_THREADS_MAX,
    Placement,
    SettingsError,
)

__all__ = [
    "KV_DISK_GB_MAX",
    "MODES",
    "N_CTX_MAX",
    "N_CTX_MIN",
    "N_THREADS_MAX",
    "THEMES",
    "AppSettings",
    "engine_remote",
    "load_settings",
    "remote_engine_setting",
    "save_settings",
]

THEMES = ("system", "light", "dark")  # "system" follows the OS colour scheme
LOCAL_ENGINE = "local"
_REMOTE_PREFIX = "remote:"
KV_DISK_GB_MAX = KV_DISK_BUDGET_MAX // 1024**3


def remote_engine_setting(endpoint: str, model: str) -> str:
    """AppSettings.engine for a remote endpoint's model: "remote:<endpoint>/<model id>" (an endpoint
    name has no "/", a model id may)."""
    return f"{_REMOTE_PREFIX}{endpoint}/{model}"


def engine_remote(engine: str) -> tuple[str, str] | None:
    """(endpoint name, model id) of a remote AppSettings.engine, None for the local model."""
    if not engine.startswith(_REMOTE_PREFIX):
        return None
    name, _, model = engine.removeprefix(_REMOTE_PREFIX).partition("/")
    return (name, model) if name and model else None


@dataclass
class AppSettings:
    mode: str = "auto"
    n_threads: int = 0  # 0 = physical cores
    n_ctx: int = 4096
    last_model: str = ""
    theme: str = "system"  # one of THEMES
    engine: str = LOCAL_ENGINE  # the engine the chat used last: "local" or remote_engine_setting(...)
    window: list[int] = field(default_factory=list)  # [width, height] when the window last closed ([]: the default)
    kv_disk_gb: int = KV_DISK_BUDGET_DEFAULT // 1024**3  # disk for other conversations' saved caches (0: memory only)

    def validate(self) -> None:
        """SettingsError (a ValueError) for what the engine would refuse: the worker's own checks."""
        if self.mode not in MODES:
            raise SettingsError(f"acceleration mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        Placement(n_ctx=self.n_ctx, n_threads=self.n_threads).validate()
        if not isinstance(self.last_model, str):
            raise SettingsError(f"last model must be a file path, got {self.last_model!r}")
        if self.theme not in THEMES:
            raise SettingsError(f"theme must be one of {', '.join(THEMES)}, got {self.theme!r}")
        if not isinstance(self.engine, str) or (self.engine != LOCAL_ENGINE and engine_remote(self.engine) is None):
            raise SettingsError(f"engine must be 'local' or 'remote:<endpoint>/<model id>', got {self.engine!r}")
        if not (isinstance(self.kv_disk_gb, int) and not isinstance(self.kv_disk_gb, bool)) or not (
            0 <= self.kv_disk_gb <= KV_DISK_GB_MAX
        ):
            raise SettingsError(f"disk for saved conversations must be 0 to {KV_DISK_GB_MAX} GB, got {self.kv_disk_gb!r}")
        if not window_size_ok(self.window):
            raise SettingsError(f"window must be [] or [width, height] in pixels, got {self.window!r}")


def window_size_ok(size: object) -> bool:
    return size == [] or (
        isinstance(size, list) and len(size) == 2 and all(isinstance(v, int) and 200 <= v <= 20_000 for v in size)
    )


def settings_path() -> Path:
    return data_dir() / "settings.json"


def load_settings(path: Path | None = None) -> AppSettings:
    """Defaults for a missing or damaged file: a bad settings file must never block the app."""
    try:
        raw = json.loads((path or settings_path()).read_text())
        known = {f.name for f in fields(AppSettings)}
        s = AppSettings(**{k: v for k, v in raw.items() if k in known})
        # what only changes the look or the first engine picked falls back alone (an older or
        # hand-edited file keeps its mode, threads and context)
        if s.theme not in THEMES:
            s.theme = "system"
        if not isinstance(s.engine, str) or (s.engine != LOCAL_ENGINE and engine_remote(s.engine) is None):
            s.engine = LOCAL_ENGINE
        if not window_size_ok(s.window):
            s.window = []
        s.validate()
        return s
    except (OSError, ValueError, TypeError, AttributeError):
        return AppSettings()


def save_settings(s: AppSettings, path: Path | None = None) -> None:
    s.validate()
    write_text_atomic(path or settings_path(), json.dumps(asdict(s), indent=1))
