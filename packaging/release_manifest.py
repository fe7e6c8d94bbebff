"""Write release.json beside built installers: version, commit, and each artifact's name, size and
sha256, so a later in-app update check can tell what is newer and verify what it downloads."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine import __version__  # noqa: E402

SUFFIXES = (".tar.gz", ".deb", ".dmg", ".exe", ".AppImage")


def manifest(folder: Path) -> dict:
    arts = []
    for f in sorted(folder.iterdir()):
        if f.is_file() and f.name.endswith(SUFFIXES):
            h = hashlib.sha256()
            with f.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
            arts.append({"name": f.name, "size": f.stat().st_size, "sha256": h.hexdigest()})
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return {"format": 1, "version": __version__, "commit": commit, "date": time.strftime("%Y-%m-%d"), "artifacts": arts}


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "dist")
    (out / "release.json").write_text(json.dumps(manifest(out), indent=1))
    print(out / "release.json")
