"""The tests' own shape (tests/README.md): every test module sits in unit/, tui/, system/ or trainers/ under a name of
its own, shared helpers live in support/, no test module imports another test module or a conftest, and tests/unit
(the fast loop) imports no torch and starts no torchrun."""

from __future__ import annotations

import ast
from pathlib import Path

from support.data import TESTS
from support.source import parsed

FOLDERS = ("unit", "tui", "system", "trainers")


def python_files() -> list[Path]:
    """Every Python file of the tests, the recorded data (tests/data: jobs, scripts) aside."""
    return sorted(p for p in TESTS.rglob("*.py") if "data" not in p.relative_to(TESTS).parts[:1])


def is_test_path(dotted: str) -> bool:
    """A module path that names a test module or a conftest (tests.tui.test_tui, test_tui, conftest)."""
    return any(part == "conftest" or part.startswith("test_") for part in dotted.split("."))


def imports_of_test_modules(path: Path) -> list[str]:
    """The test modules (test_*, conftest, also as tests.<folder>.test_*) a file imports, wherever the import stands:
    at the top, inside a function, under `if TYPE_CHECKING:`."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] if is_test_path(node.module) else [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names if is_test_path(name)]
    return found


TORCHRUN = "torch.distributed.run"


def slow_parts(path: Path) -> list[str]:
    """What keeps tests/unit from being the fast loop, wherever it stands in the file: an import of torch (2-4 s) or
    of gpuwizard.demo (which imports it), and an argv list that starts torchrun (`-m torch.distributed.run`)."""
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.List):
            words = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            names = [f"-m {b}" for a, b in zip(words, words[1:], strict=False) if (a, b) == ("-m", TORCHRUN)]
        else:
            continue
        slow = [n for n in names if n.split(".")[0] == "torch" or n.startswith(("gpuwizard.demo", "-m torch"))]
        found += [f"line {node.lineno}: {n}" for n in slow]
    return found


def test_no_unit_test_imports_torch_or_starts_torchrun():
    """A test that needs torch or a real job belongs in system/ (or trainers/, for a trainer's own code): a fact of
    a recording (a gauge file's true B_simple) is written out in the unit test instead."""
    wrong = {p.name: found for p in sorted((TESTS / "unit").glob("test_*.py")) if (found := slow_parts(p))}
    assert wrong == {}, "move the test to system/ or trainers/, or write the recorded figure out"


def test_the_unit_check_finds_torch_and_torchrun(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text(
        "import torch.nn\nfrom gpuwizard.demo.noise import closed_form\ndef test_a():\n    import torch\n"
        "    run([sys.executable, '-m', 'torch.distributed.run'])\n"
    )
    assert slow_parts(module) == [
        "line 1: torch.nn",
        "line 2: gpuwizard.demo.noise",
        "line 4: torch",
        "line 5: -m torch.distributed.run",
    ]


def test_no_test_module_imports_another_test_module():
    files = python_files()
    assert len(files) > 40 and TESTS / "conftest.py" in files, "the tests were read"
    wrong = {str(p.relative_to(TESTS)): found for p in files if (found := imports_of_test_modules(p))}
    assert wrong == {}, "move what they share into tests/support/ and import it from there"


def test_the_import_check_finds_an_import_of_a_test_module(tmp_path):
    module = tmp_path / "test_x.py"
    module.write_text(
        "from support.tui import settle\nfrom conftest import DATA\nimport os, test_tui\n"
        "def test_a():\n    from tests.tui import test_tui\n    from tests.tui.test_tui import goto\n"
    )
    assert imports_of_test_modules(module) == [
        "line 2: conftest",
        "line 3: test_tui",
        "line 5: tests.tui.test_tui",
        "line 6: tests.tui.test_tui",
    ]


def test_every_test_module_is_in_a_folder_of_its_kind_under_a_name_of_its_own():
    """pytest imports each test module by its file name (no __init__.py in the test folders), so two of one name
    would clash; and a test module outside the four folders would run in no loop a newcomer expects."""
    modules = [p for p in python_files() if p.name.startswith("test_")]
    assert [str(p.relative_to(TESTS)) for p in modules if p.relative_to(TESTS).parts[0] not in FOLDERS] == []
    names = [p.name for p in modules]
    assert sorted({n for n in names if names.count(n) > 1}) == []


def test_every_support_module_says_what_it_is_for():
    helpers = sorted((TESTS / "support").glob("*.py"))
    assert len(helpers) > 5
    assert [p.name for p in helpers if not ast.get_docstring(ast.parse(p.read_text()))] == []
