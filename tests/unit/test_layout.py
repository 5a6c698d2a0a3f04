"""The package's shape: no import circles between modules, lint clean, one name per meaning."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parent.parent / "src" / "gpuwizard"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """gpuwizard modules a module imports at run time (anywhere in it), leaving out `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in known}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRC.rglob("*.py")}
    known = set(files)
    return {name: imports_of(path, known) - {name} for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every elementary circle found by depth-first search (each reported once, from its smallest member)."""
    found, seen = [], set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                key = tuple(sorted(path))
                if key not in seen:
                    seen.add(key)
                    found.append([*path, start])
            elif nxt > start and nxt not in path:
                walk(start, nxt, [*path, nxt])

    for start in sorted(graph):
        walk(start, start, [start])
    return found


def test_no_import_circles_between_modules():
    graph = import_graph()
    assert "gpuwizard.trainers.base" in graph and graph["gpuwizard.planning.plan"], "the graph was read"
    circles = [
        c for c in cycles(graph) if not all(m.startswith(c[0]) for m in c)
    ]  # a package importing its own submodule is no circle
    assert circles == []


def test_the_circle_finder_finds_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("name", ["Hardware", "Progress", "Event", "Plan", "GpuSample"])
def test_each_meaning_has_one_class_name(name):
    """A class name is defined once in the package (the preset's Hardware is not the detected devices)."""
    defined = [
        p for p in SRC.rglob("*.py") if f"\nclass {name}(" in p.read_text() or f"\nclass {name}:" in p.read_text()
    ]
    assert len(defined) == 1, defined


def test_ruff_is_clean():
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip("ruff is installed by the dev extra")
    root = SRC.parent.parent
    result = subprocess.run(
        [str(ruff), "check", "src", "tests", "bench", "scripts"], cwd=root, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout
