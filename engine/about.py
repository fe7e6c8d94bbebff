"""Version and build identity for About and bug reports: the installer's build-info.json (written
by packaging/build_linux.py next to the executable) or, from a checkout, git's commit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from engine import __version__
from engine.paths import REPO_ROOT


def build_identity() -> dict:
    info = {"version": __version__, "commit": "unknown", "frozen": bool(getattr(sys, "frozen", False))}
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
    try:
        from engine.native import build_info

        info["native_build"] = build_info().get("build_key", "upstream")
    except Exception:
        info["native_build"] = "not loaded"
    return info


def about_text() -> str:
    i = build_identity()
    return f"SpecEE Chat {i['version']} (build {i['commit']}, native {i.get('native_build', '-')})"
