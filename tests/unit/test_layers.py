"""The package's layers (ARCHITECTURE.md): each folder imports only the folders below it, `TYPE_CHECKING` imports
and imports inside functions included, with no allow-list; no circle of modules or of packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.data import REPO

SRC = REPO / "src" / "gpuwizard"

LAYERS = ["core", "model", "runs", "gpus", "trainers", "analysis", "planning", "runner", "tui", "cli"]
"""Bottom first: a module may import its own layer and the layers before it. `demo` (the torchrun target), `gauge`
(loaded inside the training interpreter) and `loopback` (loaded by torchrun) import nothing of gpuwizard; the
package's own `__init__` (its version) imports nothing and may be imported by any layer; `__main__` sits on top."""

SEALED = ("demo", "gauge", "loopback")
"""Folders that run where gpuwizard is not installed: they import only themselves."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every gpuwizard module a file imports, wherever the import stands (TYPE_CHECKING blocks, functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in SRC.rglob("*.py") if "scripts" not in p.relative_to(SRC).parts}
    return {name: imports_of(path, set(files)) - {name} for name, path in files.items()}


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "gpuwizard"


def rank(layer: str) -> int:
    below = {"gpuwizard": -2, **dict.fromkeys(SEALED, -1), "__main__": len(LAYERS)}
    return LAYERS.index(layer) if layer in LAYERS else below[layer]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, imported in sorted(graph.items()):
        here = layer_of(module)
        for other in sorted(imported):
            there = layer_of(other)
            if (here in SEALED and there != here) or module == "gpuwizard":
                wrong.append(f"{module} -> {other} ({module} imports nothing of gpuwizard)")
            elif there == "gpuwizard":
                continue
            elif rank(there) > rank(here) or (here == "tui" and there == "cli"):
                wrong.append(f"{module} ({here}) -> {other} ({there})")
    return wrong


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


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Folder to folder (gpuwizard.trainers.openpi is its own node), a folder's import of itself left out."""

    def folder(module: str) -> str:
        if module == "gpuwizard.__main__" or (SRC.parent / module.replace(".", "/")).is_dir():
            return module  # __main__ is the top, apart from the package's own __init__ (its version) below all
        return module.rsplit(".", 1)[0]

    packages: dict[str, set[str]] = {}
    for module, imported in graph.items():
        packages.setdefault(folder(module), set()).update(folder(m) for m in imported)
    return {name: {m for m in imported if m != name} for name, imported in packages.items()}


def test_every_folder_is_a_declared_layer():
    folders = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(LAYERS) | set(SEALED)


def test_no_layer_imports_a_layer_above_it():
    graph = import_graph()
    assert "gpuwizard.model.preset" in graph and graph["gpuwizard.planning.plan"], "the graph was read"
    assert upward_imports(graph) == []


def test_no_circle_of_modules():
    """A package may import its own modules, but none of them may import the package back."""
    assert cycles(import_graph()) == []


def test_no_circle_of_packages():
    assert cycles(package_graph(import_graph())) == []


def test_the_layer_check_finds_an_upward_import():
    graph = {"gpuwizard.core.errors": {"gpuwizard.model.preset"}, "gpuwizard.tui.app": {"gpuwizard.cli.main"}}
    assert upward_imports(graph) == [
        "gpuwizard.core.errors (core) -> gpuwizard.model.preset (model)",
        "gpuwizard.tui.app (tui) -> gpuwizard.cli.main (cli)",
    ]
    assert upward_imports({"gpuwizard.demo.train": {"gpuwizard.core.paths"}})


def test_the_circle_finder_finds_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_type_checking_imports_count(tmp_path):
    (tmp_path / "m.py").write_text("if TYPE_CHECKING:\n    from gpuwizard.cli import main\n")
    assert imports_of(tmp_path / "m.py", {"gpuwizard.cli"}) == {"gpuwizard.cli"}


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_has_a_docstring(layer):
    assert ast.get_docstring(ast.parse((SRC / layer / "__init__.py").read_text())), layer
