"""Import contracts of the layout: app -> engine -> native bindings, one direction.

- engine never imports Qt (it is driven by the window and the CLI alike);
- app never reaches llama.cpp in its own process (engine.native, llama_cpp), nor the worker's or
  the planner's internals: the worker process is the only place that touches llama.cpp or decides
  about a model, and the window only sends intent and shows what the worker says.

Checked on the source (every import statement, module level or inside functions), transitively."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QT = ("PySide6", "shiboken6", "PyQt5", "PyQt6")
FORBIDDEN_FOR_APP = ("engine.native", "engine.placement", "engine.worker", "llama_cpp")
# app/main.py is also the frozen installer's worker executable: with the worker flag it runs the
# worker's process shell instead of the window (engine/client.py FROZEN_WORKER_FLAG), and with the serve flag
# the `specee serve` command line (engine/serve/launcher.py FROZEN_SERVE_FLAG): child processes, not the window.
ALLOWED = {("app.main", "engine.worker.process"), ("app.main", "engine.cli")}


def _module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _imports(name: str) -> tuple[str, ...]:
    path = _module_file(name)
    if path is None:
        return ()
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names if _module_file(f"{node.module}.{a.name}")]
    return tuple(found)


def _reach(start: str) -> dict[str, list[str]]:
    """Every module reachable from start (project modules followed), with one path to it."""
    paths: dict[str, list[str]] = {start: [start]}
    todo = [start]
    while todo:
        mod = todo.pop()
        for imp in _imports(mod):
            if (mod, imp) in ALLOWED or imp in paths:
                continue
            paths[imp] = [*paths[mod], imp]
            if imp.split(".")[0] in ("app", "engine"):
                todo.append(imp)
    return paths


def _modules(package: str) -> list[str]:
    return sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / package).rglob("*.py"))


def test_engine_never_imports_qt() -> None:
    bad = [f"{m} imports {i}" for m in _modules("engine") for i in _imports(m) if i.split(".")[0] in QT]
    assert bad == []


def test_the_app_never_reaches_llama_cpp_the_worker_or_the_planner() -> None:
    bad = []
    for m in _modules("app"):
        for target, path in _reach(m).items():
            if target.startswith(FORBIDDEN_FOR_APP):
                bad.append(" -> ".join(path))
    assert bad == [], "\n".join(sorted(set(bad)))
