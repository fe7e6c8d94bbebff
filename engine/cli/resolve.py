"""Which model a command means: a path, a registered id, or the default model."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.models.default_model import ensure_default_model
from engine.models.registry import ModelRegistry


def resolve_model(spec: str | None) -> Path:
    """A path, a registered model id, or (None) the default model, installed on first use."""
    if not spec:
        return ensure_default_model(lambda msg: print(f"[specee] {msg}", file=sys.stderr))
    return ModelRegistry().path_for(spec)
