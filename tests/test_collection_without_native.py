"""The quick subset runs in a venv where llama.cpp was never built (`make test-fast VENV=.venv-bare`):
every test module that imports llama_cpp when it is collected must be in conftest's list of modules
left out there, or collection fails before a single test runs (an earlier CI run did exactly that)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import IN_PROCESS_ENGINE_MODULES

ROOT = Path(__file__).resolve().parent.parent


def _module_file(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _is_importorskip(node: ast.stmt) -> bool:
    call = node.value if isinstance(node, (ast.Assign, ast.Expr)) else None
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "importorskip"


def _import_time_imports(path: Path) -> set[str]:
    """Modules a file imports when it is imported: its top-level statements (try/if bodies included,
    `if TYPE_CHECKING:` and function bodies not), each with the packages above it. A module-level
    `pytest.importorskip` ends the scan: past it, the module is skipped in a venv without that extra
    (the bare venv has none of them)."""
    names: set[str] = set()
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if _is_importorskip(node):
                raise StopIteration
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    mod = f"{parent}.{mod}" if mod else parent
                names.add(mod)
                names.update(f"{mod}.{alias.name}" for alias in node.names)  # `from pkg import module`
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body + node.orelse + node.finalbody)
                for handler in node.handlers:
                    visit(handler.body)

    try:
        visit(ast.parse(path.read_text()).body)
    except StopIteration:
        pass
    with_parents: set[str] = set()
    for name in names:
        parts = name.split(".")
        with_parents.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return with_parents


def _loads_llama_cpp(path: Path, seen: set[Path]) -> bool:
    if path in seen:
        return False
    seen.add(path)
    for name in _import_time_imports(path):
        if name == "llama_cpp":
            return True
        ours = name.split(".")[0] in {"engine", "tests", "app"}
        if ours and (dep := _module_file(name)) and _loads_llama_cpp(dep, seen):
            return True
    return False


def test_every_module_that_loads_llama_cpp_at_collection_is_left_out_without_the_build() -> None:
    loading = sorted(p.name for p in (ROOT / "tests").glob("test_*.py") if _loads_llama_cpp(p, set()))
    assert "test_batch_invariance.py" in loading  # the scan sees a direct import
    assert "test_teacher.py" in loading  # and one through engine.llm.teacher
    assert loading == sorted(IN_PROCESS_ENGINE_MODULES)
