"""engine/knobs.py: one registry of the SPECEE_* environment variables. The code reads no other
(product code through the registry, native/build.py only the build knobs it lists), the docs show
exactly the registry's tables, a switch set to a value it does not take stops the worker at start
with the variable's name, and the native kernels read no environment: the worker sets their
switches from the registry."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from engine import knobs
from tests.conftest import NATIVE_BUILT

REPO = Path(__file__).resolve().parent.parent
# a SPECEE_* name read from (or written to) the environment as a literal
ENV_LITERAL = re.compile(r"""(?:environ(?:\.get|\.pop|\.setdefault)?\s*[\[(]|getenv\s*\()\s*["'](SPECEE_[A-Z0-9_]+)["']""")
NOT_BUILT = "the native build is not installed in this environment"


def _sources(*folders: str) -> list[Path]:
    return [f for folder in folders for f in sorted((REPO / folder).rglob("*.py"))]


def test_product_code_reads_knobs_only_through_the_registry() -> None:
    """No SPECEE_* variable is read by its literal name in engine/ or app/ outside engine/knobs.py."""
    found = {
        f"{f.relative_to(REPO)}: {m.group(1)}"
        for f in _sources("engine", "app")
        if f.name != "knobs.py"
        for m in ENV_LITERAL.finditer(f.read_text())
    }
    assert not found, f"read through engine/knobs.py instead: {sorted(found)}"


def test_the_native_build_reads_only_the_build_knobs_listed() -> None:
    """native/build.py cannot import the engine (it runs first): every SPECEE_* it reads is in the
    registry as read by it, and every knob said to be read by it is."""
    read = set(ENV_LITERAL.findall((REPO / "native" / "build.py").read_text()))
    listed = {k.name for k in knobs.KNOBS if k.reader == knobs.BUILD}
    # the cache folder is the app's own knob, which the build also honours
    assert read - {knobs.CACHE_DIR.name} == listed


def test_the_native_sources_read_no_environment() -> None:
    """The kernels' switches are set by the worker (engine.native.apply_kernel_knobs), never read
    per call in a matmul."""
    found = [f"{f.relative_to(REPO)}" for f in sorted((REPO / "native" / "src").rglob("*.[ch]*")) if "getenv" in f.read_text()]
    assert not found


def test_every_knob_is_documented_exactly_as_registered() -> None:
    doc = (REPO / "docs" / "troubleshooting.md").read_text()
    assert knobs.table(test=False) in doc, "regenerate docs/troubleshooting.md's table from knobs.table(test=False)"
    assert knobs.table(test=True) in doc, "regenerate docs/troubleshooting.md's table from knobs.table(test=True)"


def test_test_knobs_are_named_as_such_and_names_are_unique() -> None:
    names = [k.name for k in knobs.KNOBS]
    assert len(set(names)) == len(names)
    for knob in knobs.KNOBS:
        assert knob.name.startswith("SPECEE_TEST_") == knob.test, knob.name
        assert knob.doc and knob.default
        assert (knob.kind == "choice") == bool(knob.choices)


@pytest.mark.parametrize(("raw", "value"), [(None, None), ("", None), ("1", True), ("0", False), ("on", True), ("No", False)])
def test_a_switch_takes_one_or_zero(raw: str | None, value: bool | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if raw is None:
        monkeypatch.delenv(knobs.SPLIT_BY_THREAD.name, raising=False)
    else:
        monkeypatch.setenv(knobs.SPLIT_BY_THREAD.name, raw)
    assert knobs.SPLIT_BY_THREAD.flag() is value


def test_a_switch_set_to_anything_else_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(knobs.MULTICOL_KERNELS.name, "maybe")
    with pytest.raises(knobs.KnobError, match="SPECEE_TEST_MULTICOL_KERNELS='maybe' is not a switch: set it to 1 or 0"):
        knobs.check_all()
    monkeypatch.setenv(knobs.THEME.name, "blue")
    with pytest.raises(knobs.KnobError, match="SPECEE_THEME='blue' is not one of light, dark"):
        knobs.THEME.choice()


@pytest.mark.skipif(not NATIVE_BUILT, reason=NOT_BUILT)
def test_the_worker_refuses_a_bad_switch_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mistyped switch is said at start, with its name and the values it takes, not ignored."""
    from engine import protocol as p
    from engine.client import WorkerClient, WorkerError

    monkeypatch.setenv(knobs.SPLIT_BY_THREAD.name, "fast")
    client = WorkerClient()
    try:
        with pytest.raises(WorkerError) as err:
            client.start(timeout=120)
        assert err.value.kind == p.ErrorKind.BAD_SETTINGS
        assert "SPECEE_TEST_SPLIT_BY_THREAD='fast'" in str(err.value) and "1 or 0" in str(err.value)
    finally:
        client.stop()


# A process that loads the library itself (not the worker) and decodes one token of the default
# model: it prints how many times a thread took its own run of weight rows (patch 0019).
_SPLITS = """
import sys
from llama_cpp import Llama
from engine.native import split_by_thread_count
llm = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, verbose=False)
llm.eval(llm.tokenize(b"Hello"))
print(split_by_thread_count())
"""


@pytest.mark.skipif(not NATIVE_BUILT, reason=NOT_BUILT)
def test_the_kernels_ignore_the_environment(model_path: Path) -> None:
    """The former per-call getenv (SPECEE_SPLIT_BY_THREAD, SPECEE_MULTICOL) is gone: only the
    setters switch the kernels, so a variable of either name leaves them as they are."""
    env = {"SPECEE_SPLIT_BY_THREAD": "0", "SPECEE_MULTICOL": "0"}
    out = subprocess.run(
        [sys.executable, "-c", _SPLITS, str(model_path)],
        env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) > 0, "the kernels read the environment"


@pytest.mark.skipif(not NATIVE_BUILT, reason=NOT_BUILT)
def test_the_worker_sets_the_kernel_switches_from_the_registry(model_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """apply_kernel_knobs (the worker's start): a switch at 0 turns its kernels off, unset turns them on."""
    from llama_cpp import Llama

    from engine.native import apply_kernel_knobs, split_by_thread_count

    llm = Llama(model_path=str(model_path), n_ctx=64, n_threads=2, verbose=False)
    try:
        tokens = llm.tokenize(b"Hello there")
        monkeypatch.setenv(knobs.SPLIT_BY_THREAD.name, "0")
        apply_kernel_knobs()
        before = split_by_thread_count()
        llm.reset()
        llm.eval(tokens)
        assert split_by_thread_count() == before
        monkeypatch.delenv(knobs.SPLIT_BY_THREAD.name)
        apply_kernel_knobs()
        llm.reset()
        llm.eval(tokens)
        assert split_by_thread_count() > before
    finally:
        monkeypatch.delenv(knobs.SPLIT_BY_THREAD.name, raising=False)
        apply_kernel_knobs()
        llm.close()


RENAMED = ("SIMULATED_LOAD", "ALLOW_SOFTWARE_GPU", "SHIPPED_ACCEL_DIR", "CPU_REPACK", "MULTICOL", "SPLIT_BY_THREAD")


def test_no_test_or_doc_sets_a_knob_by_its_former_name() -> None:
    """The test knobs are SPECEE_TEST_* now: a test (or a doc's command) still setting a former name
    would silently set nothing."""
    former = re.compile(r"\bSPECEE_(?:" + "|".join(RENAMED) + r")\b(?!_)")
    files = [*(REPO / "tests").rglob("*.py"), *(REPO / "docs").rglob("*.md"), REPO / "README.md", REPO / "Makefile"]
    this = Path(__file__).resolve()
    found = [f"{f.relative_to(REPO)}" for f in files if f.resolve() != this and former.search(f.read_text())]
    assert not found
