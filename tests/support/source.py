"""The source checks' one reading of each file: the layer, contract and test-layout tests walk the same syntax trees,
so each file is parsed once per session instead of once per check (the fast loop's largest cost after imports)."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, read once for every check of the session."""
    return ast.parse(path.read_text(), str(path))
