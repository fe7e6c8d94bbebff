"""The AppImage's AppDir (packaging/build_linux.py), built around a stand-in for the frozen app:
seconds, no PyInstaller and no appimagetool (tests/test_packaging.py builds the real installers
where PyInstaller is; the release workflow packs the AppDir with appimagetool)."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "packaging"))

import build_linux


def _stand_in_app(folder: Path) -> Path:
    """A onedir app whose executable says where it runs from and what it was given."""
    (folder / "_internal").mkdir(parents=True)
    (folder / "_internal" / "libx.so.1").write_bytes(b"\x7fELF")
    (folder / "_internal" / "libx.so").symlink_to("libx.so.1")  # PyInstaller's folders hold links
    exe = folder / "specee-chat"
    exe.write_text('#!/bin/sh\necho "$0"\nfor a in "$@"; do echo "[$a]"; done\n')
    exe.chmod(0o755)
    return folder


def test_the_appdir_runs_the_frozen_app_and_carries_its_desktop_entry_and_icon(tmp_path: Path) -> None:
    appdir = build_linux.make_appdir(_stand_in_app(tmp_path / "app"), tmp_path / "specee-chat.AppDir")
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    entry.read(appdir / "specee-chat.desktop")
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application" and desktop["Name"] == "SpecEE Chat" and desktop["Categories"]
    assert desktop["Exec"].split()[0] == "specee-chat"
    # appimagetool looks for the icon the entry names at the AppDir's top
    icon = appdir / f"{desktop['Icon']}.png"
    assert icon.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (appdir / ".DirIcon").resolve() == icon.resolve()
    assert (appdir / "usr" / "lib" / "specee-chat" / "_internal" / "libx.so").is_symlink()
    exe = appdir / "usr" / "lib" / "specee-chat" / "specee-chat"
    env = {k: v for k, v in os.environ.items() if k != "APPDIR"}
    # as the AppImage runtime starts it (APPDIR set, another working folder) and run by hand (no APPDIR)
    for extra in ({"APPDIR": str(appdir)}, {}):
        out = subprocess.run(
            [str(appdir / "AppRun"), "--selftest", "two words"],
            capture_output=True,
            text=True,
            check=True,
            cwd=tmp_path,
            env={**env, **extra},
        ).stdout.splitlines()
        assert out == [str(exe), "[--selftest]", "[two words]"], (extra, out)
