"""Where the app keeps its files. SPECEE_DATA_DIR / SPECEE_CACHE_DIR override (tests, portable installs: engine/knobs.py)."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from engine import knobs

APP_NAME = "specee-chat"
REPO_ROOT = Path(__file__).resolve().parent.parent
RESOURCES_DIR = REPO_ROOT / "resources"


def data_dir() -> Path:
    path = knobs.DATA_DIR.path() or Path(platformdirs.user_data_dir(APP_NAME))
    path.mkdir(parents=True, exist_ok=True)
    return path


def cache_dir() -> Path:
    path = knobs.CACHE_DIR.path() or Path(platformdirs.user_cache_dir(APP_NAME))
    path.mkdir(parents=True, exist_ok=True)
    return path


def models_dir() -> Path:
    path = data_dir() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path
