"""The package's shape: lint clean, one name per meaning (its layers and circles: test_layers.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.data import REPO

SRC = REPO / "src" / "gpuwizard"


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
    result = subprocess.run(
        [str(ruff), "check", "src", "tests", "bench", "scripts"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout
