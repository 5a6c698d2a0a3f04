"""The package's layers (ARCHITECTURE.md): each folder imports only the folders below it, `TYPE_CHECKING` imports
and imports inside functions included, with no allow-list; no circle of modules or of packages."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from support.data import REPO
from support.source import parsed

SRC = REPO / "src" / "gpuwizard"

LAYERS = ["core", "model", "runs", "gpus", "trainers", "analysis", "planning", "runner", "tui", "cli"]
"""Bottom first: a module may import its own layer and the layers before it. `demo` (the torchrun target), `gauge`
(loaded inside the training interpreter) and `loopback` (loaded by torchrun) import nothing of gpuwizard; the
package's own `__init__` (its version) imports nothing and may be imported by any layer; `__main__` sits on top."""

ROOMS = {
    "analysis": ["compare", "probe"],
    "runner": ["host", "detect", "control", "supervise", "launch", "probe", "sweep", "bandwidth"],
    "tui": ["base", "widgets", "dialogs", "screens", "monitor", "wizard"],
}
"""The sub-rooms of a layer, bottom first, as the layers are: a module imports its own sub-room and those before it;
the modules at the layer's top level (`tui/app.py`, the runner's shims) sit above all of its sub-rooms."""

SEALED = ("demo", "gauge", "loopback")
"""Folders that run where gpuwizard is not installed: they import only themselves."""


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every gpuwizard module a file imports, wherever the import stands (TYPE_CHECKING blocks, functions)."""
    found: set[str] = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if name in known}


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module to the gpuwizard modules it imports, read once for the three checks that walk it (callers copy it)."""
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
            elif here == there and here in ROOMS and room_rank(other) > room_rank(module):
                wrong.append(f"{module} ({room_of(module)}) -> {other} ({room_of(other)})")
    return wrong


def room_of(module: str) -> str:
    """`runner/host` for gpuwizard.runner.host.procs; the layer's name for a module at its top level."""
    parts = module.split(".")
    sub = parts[2] if len(parts) > 3 or (len(parts) == 3 and parts[2] in ROOMS.get(parts[1], ())) else ""
    return f"{parts[1]}/{sub}" if sub else parts[1]


def room_rank(module: str) -> int:
    """Within a layer with sub-rooms: its package `__init__` below all, then the sub-rooms in order, then the top."""
    parts = module.split(".")
    rooms = ROOMS[parts[1]]
    if len(parts) == 2:
        return -1
    return rooms.index(parts[2]) if parts[2] in rooms else len(rooms)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan's, iterative), each sorted: a circle of
    imports is one such component, and the search is linear in the graph where a search of paths is exponential."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    nodes = sorted(set(graph) | {m for targets in graph.values() for m in targets})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            nxt = next(successors, None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on_stack.add(nxt)
                work.append((nxt, iter(sorted(graph.get(nxt, ())))))
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
    return sorted(found)


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


@pytest.mark.parametrize("layer", sorted(ROOMS))
def test_every_sub_folder_of_a_layer_with_rooms_is_a_declared_room(layer):
    folders = {p.name for p in (SRC / layer).iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(ROOMS[layer])


@pytest.mark.parametrize("room", [f"{layer}/{room}" for layer, rooms in sorted(ROOMS.items()) for room in rooms])
def test_each_room_has_a_docstring(room):
    assert ast.get_docstring(ast.parse((SRC / room / "__init__.py").read_text())), room


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


def test_the_layer_check_finds_an_import_up_the_rooms_of_a_layer():
    graph = {
        "gpuwizard.runner.host.procs": {"gpuwizard.runner.control.follow"},
        "gpuwizard.runner.supervise.localjob": {"gpuwizard.runner.supervisor", "gpuwizard.runner.detect.stalls"},
        "gpuwizard.tui.base.messages": {"gpuwizard.tui.app"},
        "gpuwizard.tui.wizard.screen": {"gpuwizard.tui.screens.probe", "gpuwizard.tui.base.apphost"},
    }
    assert upward_imports(graph) == [
        "gpuwizard.runner.host.procs (runner/host) -> gpuwizard.runner.control.follow (runner/control)",
        "gpuwizard.runner.supervise.localjob (runner/supervise) -> gpuwizard.runner.supervisor (runner)",
        "gpuwizard.tui.base.messages (tui/base) -> gpuwizard.tui.app (tui)",
    ]


def test_the_circle_finder_finds_circles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "e"}, "e": set()}) == [["a", "b"], ["c", "d"]]


def test_the_circle_finder_is_linear_on_a_dense_graph():
    """A complete graph of 60 nodes has more elementary circles than atoms in the earth; one component."""
    nodes = [f"m{i:02d}" for i in range(60)]
    assert cycles({n: set(nodes) - {n} for n in nodes}) == [nodes]


def test_type_checking_imports_count(tmp_path):
    (tmp_path / "m.py").write_text("if TYPE_CHECKING:\n    from gpuwizard.cli import main\n")
    assert imports_of(tmp_path / "m.py", {"gpuwizard.cli"}) == {"gpuwizard.cli"}


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_has_a_docstring(layer):
    assert ast.get_docstring(ast.parse((SRC / layer / "__init__.py").read_text())), layer
