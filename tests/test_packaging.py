"""The Linux installers, built from this checkout and smoke-tested from clean folders. Slow (a
PyInstaller build), so it runs only where the packaging tools are installed (the `package` extra)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("PyInstaller") is None,
    reason="installer builds need PyInstaller: pip install -e '.[package]' (then this test builds and smoke-tests them)",
)


@pytest.mark.timeout(1200)
def test_linux_installers_build_install_and_run(tmp_path: Path, model_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "packaging"))
    import build_linux

    work = tmp_path / "work"
    app = build_linux.build_frozen(work / "dist", work / "build")
    tarball = build_linux.make_tarball(app, tmp_path)
    deb = build_linux.make_deb(app, tmp_path)
    extract = tmp_path / "extracted"
    with tarfile.open(tarball) as tar:
        tar.extractall(extract, filter="tar")
    root = next(extract.glob("specee-chat-*"))
    assert (root / "specee-chat.desktop").read_text().startswith("[Desktop Entry]")
    exe = root / "specee-chat" / "specee-chat"
    report = build_linux.smoke(exe)
    assert report["frozen"] and report["worker_command"] == [str(exe), "--specee-worker"]  # the worker is the app itself
    assert set(report["modes"]) == {"vanilla", "ngram", "eagle", "specee"}  # ngram: the drafters library ships
    # the bundle ships and loads the backends this checkout's build loads here (a frozen app once
    # loaded none: ggml looked for them beside PyInstaller's top-level link to libggml, patch 0011);
    # with no Vulkan driver every mode runs on the CPU and the report says why no GPU
    from engine import native

    here = {b["name"]: b for b in native.backends()}
    bundled = {b["name"]: b for b in report["backends"]}
    assert {n for n, b in here.items() if b["shipped"]} <= {n for n, b in bundled.items() if b["shipped"]}
    assert {n for n, b in here.items() if b["loaded"]} <= {n for n, b in bundled.items() if b["loaded"]}
    bare = build_linux.smoke(exe, build_linux.NO_VULKAN_DRIVER)
    assert bare["gpu"] is None and set(bare["modes"]) == set(report["modes"])
    if "vulkan" in bundled:
        assert any("vulkan" in why for why in bare["why_no_gpu"]), bare["why_no_gpu"]
    # no build trees, tests or torch in the bundle
    names = {p.name for p in (root / "specee-chat" / "_internal").iterdir()}
    assert "torch" not in names and "tests" not in names
    # an offscreen screenshot of the main window from the frozen build
    shot = tmp_path / "frozen-window.png"
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECEE_DATA_DIR": str(tmp_path / "home")}
    subprocess.run([str(exe), "--screenshot", str(shot)], timeout=180, env=env, check=True)
    assert shot.stat().st_size > 10_000
    # the Serve API switch's server from the frozen build: the app's own executable serves the bundled model
    assert serve_from_frozen(exe, env)["data"][0]["id"]
    if deb is not None:
        files = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
        assert "./opt/specee-chat/specee-chat" in files and "./usr/share/applications/specee-chat.desktop" in files
        assert b"data.tar.zst" in deb.read_bytes()[:65536]  # zstd: seconds to build and to unpack (xz: minutes)
        # Qt's xcb plugin links libxcb-cursor (and more): without it the window never opened on a bare X desktop
        depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True, check=True).stdout
        assert {"libxcb-cursor0", "libxkbcommon-x11-0", "libegl1"} <= {d.strip() for d in depends.split(",")}
        x = tmp_path / "deb"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(x)], check=True)
        assert build_linux.smoke(x / "opt" / "specee-chat" / "specee-chat")["ok"]


def serve_from_frozen(exe: Path, env: dict[str, str]) -> dict:
    """`specee-chat --specee-serve` (what engine/serve/launcher.py runs in a frozen build) answers
    /v1/models once /health says ok, and stops when its stdin closes; returns the models."""
    from engine.ports import free_port
    from engine.serve.launcher import FROZEN_SERVE_FLAG

    port = free_port()
    cmd = [str(exe), FROZEN_SERVE_FLAG, "--port", str(port), "--mode", "vanilla", "--exit-with-stdin"]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, f"the frozen server exited: {proc.stderr.read() if proc.stderr else ''}"
            assert time.monotonic() < deadline, "the frozen server was not ready in 180 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if json.load(r)["status"] == "ok":
                        break
            except OSError:
                pass
            time.sleep(0.3)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            return json.load(r)
    finally:
        if proc.stdin:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
