"""Our native build is what the engine loads, and the build pipeline behaves."""

import subprocess
import sys
from pathlib import Path

from engine.native import EXPECTED_API_VERSION, build_info, require_patched

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "native"))
import build as native_build  # noqa: E402


def test_loaded_llama_cpp_is_our_patched_build() -> None:
    info = require_patched()
    assert info["api_version"] >= EXPECTED_API_VERSION
    assert "build-info" in info["features"]
    patches = sorted(p.stem for p in (REPO / "native" / "patches").glob("*.patch"))
    assert info["patches"].split(",") == patches


def test_build_key_of_the_checkout_matches_the_loaded_library() -> None:
    key = subprocess.run([sys.executable, str(REPO / "native" / "build.py"), "--print-key"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert build_info()["build_key"] == key, "native sources changed since the build: run `make setup`"


def test_build_key_changes_with_any_input(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    base = native_build.make_recipe(upstream=False)
    extra = tmp_path / "extra.cpp"
    extra.write_text("// new\n")
    changed = native_build.Recipe(base.patches, (*base.sources, extra), base.cmake_args, base.backend)
    assert changed.key != base.key
    flags = native_build.Recipe(base.patches, base.sources, (*base.cmake_args, "-DX=1"), base.backend)
    assert flags.key != base.key
    assert native_build.make_recipe(upstream=True).key != base.key


def test_sync_tree_rewrites_only_changed_files(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "d").mkdir(parents=True)
    (src / "a.c").write_text("a")
    (src / "d" / "b.c").write_text("b")
    assert native_build.sync_tree(src, dst) == 2
    mtime = (dst / "a.c").stat().st_mtime_ns
    (src / "d" / "b.c").write_text("B")
    (dst / "stale.c").write_text("x")
    assert native_build.sync_tree(src, dst) == 2  # b.c rewritten, stale.c removed
    assert (dst / "a.c").stat().st_mtime_ns == mtime
    assert (dst / "d" / "b.c").read_text() == "B" and not (dst / "stale.c").exists()


def test_unknown_backend_is_an_actionable_error(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SPECEE_BACKEND", "quantum")
    try:
        native_build.detect_backend()
    except native_build.BuildError as exc:
        assert "how to fix" in str(exc) and exc.step == "detect"
    else:
        raise AssertionError("expected BuildError")
