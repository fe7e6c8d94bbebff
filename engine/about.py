"""Version and build identity for About and bug reports: the installer's build-info.json (written
by packaging/build_linux.py next to the executable) or, from a checkout, git's commit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine import __version__
from engine.paths import REPO_ROOT


def build_identity(native: dict | None = None) -> dict:
    """Version, commit and, when given, the native build the worker reported (Ready.native): the
    window never loads llama.cpp itself, so it passes what the worker said."""
    info = {"version": __version__, "commit": "unknown", "frozen": bool(getattr(sys, "frozen", False))}
    if native is not None:
        info["native_build"] = native.get("build_key", "upstream") if native.get("patched", True) else "upstream"
    stamp = Path(sys.executable).parent / "build-info.json"
    if info["frozen"] and stamp.is_file():
        try:
            info.update(json.loads(stamp.read_text()))
        except (OSError, ValueError):
            pass
        return info
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=5)
        info["commit"] = out.stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def about_text(native: dict | None = None) -> str:
    i = build_identity(native)
    return f"SpecEE Chat {i['version']} (build {i['commit']}, native {i.get('native_build', 'not started yet')})"
