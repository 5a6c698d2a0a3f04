"""The source checks' one way to read a file: the layer, contract and test-layout tests walk its syntax tree. Trees
are not kept: the tests keep what they derive (the import graph), since a session's worth of trees held millions of
objects that every garbage collection, and the interpreter's exit, walked again (3 s of the unit loop)."""

from __future__ import annotations

import ast
from pathlib import Path


def parsed(path: Path) -> ast.Module:
    """A file's syntax tree."""
    return ast.parse(path.read_text(), str(path))
