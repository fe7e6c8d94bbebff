"""llama.cpp's own server tests, the OpenAI-compatible part, against `specee serve` (issue 26).

Their files are taken at test time from the pinned llama-cpp-python sdist (native/build.py fetches,
checks and extracts it; its vendored llama.cpp has tools/server/tests), copied into a temporary
folder and run unchanged by a pytest of their own, into which tests/peer_server/plugin.py replaces
only how the server starts (`specee serve` on our default model, shared across their tests) and
downloads nothing. tests/peer_server/exclusions.py lists, with reasons, what is not ours to pass.

A test that is not excluded and fails fails this test (a regression); an excluded test of a pending
feature that now passes is reported (a PeerSuiteNews warning: drop its entry). The summary (counts,
exclusions by reason) is printed, and written to $SPECEE_PEER_REPORT when set.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from engine.paths import REPO_ROOT
from tests.peer_server import exclusions
from tests.peer_server.report import format_summary, summarize

SUITE_IN_SDIST = "vendor/llama.cpp/tools/server/tests"
SUITE_TIMEOUT_S = 900  # the whole run: ~1 minute on 2 cores
TEST_TIMEOUT_S = 120  # one of their tests
MIN_PASSED = 33  # their tests that pass today; fewer means something stopped running


class PeerSuiteNews(UserWarning):
    """Excluded tests of a pending feature pass now: their entries in exclusions.py can go."""


def vendored_server_tests() -> Path:
    """tools/server/tests of the pinned sources (the build's cached sdist, extracted once)."""
    spec = importlib.util.spec_from_file_location("specee_native_build", REPO_ROOT / "native" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = build  # dataclasses look their module up
    spec.loader.exec_module(build)
    root = build.cache_root()
    return build.extract_pristine(root, build.fetch_sdist(root)) / SUITE_IN_SDIST


def tool_model(folder: Path, model_path: Path) -> Path | None:
    """A tiny model whose chat template takes tools, for test_tool_call.py once tool calls have landed."""
    if not exclusions.TOOL_CALLS_LANDED:
        return None
    from tests.tiny_models import write_tiny_gguf

    template = (Path(__file__).parent / "data" / "qwen2.5-instruct.jinja").read_text()
    return write_tiny_gguf(folder / "tiny-tools.gguf", "qwen2", tokenizer_from=model_path, chat_template=template)


def test_exclusion_list_is_well_formed() -> None:
    """Every exclusion names a known reason with a text; the selected and the left-out files are apart."""
    assert set(exclusions.EXCLUDED.values()) <= set(exclusions.REASONS)
    assert all(r.text.strip() for r in exclusions.REASONS.values())
    assert not set(exclusions.FILES) & set(exclusions.NOT_SELECTED)
    assert all(key.split("::")[0] in exclusions.FILES for key in exclusions.EXCLUDED)
    assert exclusions.reason_for("test_completion.py", "test_completion.py::test_x", "test_completion.py::test_x[1]") == "native"
    assert exclusions.reason_for("test_basic.py", "test_basic.py::test_server_start_simple", "x") is None


@pytest.mark.slow
@pytest.mark.timeout(SUITE_TIMEOUT_S + 120)
def test_llama_cpp_server_tests(model_path: Path, tmp_path: Path) -> None:
    source = vendored_server_tests()
    upstream_files = {p.name for p in (source / "unit").glob("test_*.py")}
    # every file of theirs is either run or left out with a reason (a new one needs a decision)
    assert upstream_files == set(exclusions.FILES) | set(exclusions.NOT_SELECTED), (
        f"not classified: {sorted(upstream_files - set(exclusions.FILES) - set(exclusions.NOT_SELECTED))}; "
        f"gone: {sorted(set(exclusions.FILES) | set(exclusions.NOT_SELECTED) - upstream_files)}"
    )
    suite = tmp_path / "server-tests"
    shutil.copytree(source, suite, ignore=shutil.ignore_patterns("tmp", "__pycache__", ".pytest_cache"))
    results = tmp_path / "results.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])),
        "PYTHONDONTWRITEBYTECODE": "1",
        "SPECEE_PEER_SUITE": str(suite),
        "SPECEE_PEER_MODEL": str(model_path),
        "SPECEE_PEER_RESULTS": str(results),
    }
    tools = tool_model(tmp_path, model_path)
    if tools is not None:
        env["SPECEE_PEER_TOOL_MODEL"] = str(tools)
    cmd = [
        sys.executable, "-m", "pytest", "-p", "tests.peer_server.plugin", "-p", "no:cacheprovider",
        "-c", str(suite / "pytest.ini"), "--rootdir", str(suite), "-q", "-o", f"timeout={TEST_TIMEOUT_S}",
        *(f"unit/{name}" for name in exclusions.FILES),
    ]  # fmt: skip
    run = subprocess.run(
        cmd, cwd=suite, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=SUITE_TIMEOUT_S
    )
    assert results.exists(), f"their pytest ended ({run.returncode}) without results:\n{run.stdout[-6000:]}"
    summary = summarize(json.loads(results.read_text()))
    text = format_summary(summary)
    print(text)
    if os.environ.get("SPECEE_PEER_REPORT"):
        Path(os.environ["SPECEE_PEER_REPORT"]).write_text(text + "\n")
    if summary.newly_passing:
        warnings.warn(PeerSuiteNews("excluded as pending, and passing now: " + ", ".join(summary.newly_passing)), stacklevel=1)
    assert not summary.unexpected, f"{text}\n\ntheir pytest's output (end):\n{run.stdout[-8000:]}"
    assert not summary.unmatched, text
    assert summary.passed >= MIN_PASSED, text
