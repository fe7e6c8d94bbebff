"""The import contracts of pyproject.toml ([tool.importlinter]) hold: app above engine, the engine's
layers, no Qt in the engine, and llama.cpp, the worker and the planner never in the app's process
(only engine.llm and engine.worker run llama.cpp). `make lint` runs the same check."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"


def test_the_import_contracts_are_kept() -> None:
    done = subprocess.run([sys.executable, "-c", LINT], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def _dynamic_imports(path: Path) -> list[int]:
    """Lines calling importlib.import_module or __import__: imports the contracts cannot see."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in ("import_module", "__import__"):
                lines.append(node.lineno)
    return lines


def test_no_import_hides_from_the_contracts() -> None:
    """Only engine/cli/train.py, in the top layer (which may import anything), imports by name: the trainers
    behind the optional `train` extra."""
    found = {
        str(path.relative_to(ROOT)): lines
        for package in ("app", "engine")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := _dynamic_imports(path))
    }
    assert set(found) <= {"engine/cli/train.py"}, found


def test_no_module_of_the_app_or_the_engine_grows_past_500_lines() -> None:
    """Small modules whose names say what they hold (issue 47): a file past 500 lines holds more than
    one idea; split it (engine/worker/session.py reached 504 with a helper that belonged to loading)."""
    long = {
        str(f.relative_to(ROOT)): n
        for folder in ("app", "engine")
        for f in sorted((ROOT / folder).rglob("*.py"))
        if (n := len(f.read_text().splitlines())) > 500
    }
    assert long == {}, f"split these modules: {long}"
