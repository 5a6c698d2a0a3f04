"""The shipped presets and themes live at the top of the repository and are found the same way from a wheel,
an editable install and a plain checkout."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpuwizard.model.preset import preset_schema
from support.data import REPO

SRC = REPO / "src" / "gpuwizard"
WHERE = "from gpuwizard.core import paths; print(paths.shipped_presets_dir()); print(paths.shipped_themes_dir())"


def shipped(kind: str) -> list[str]:
    return sorted(p.name for p in (REPO / kind).iterdir() if p.suffix in (".yaml", ".json"))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # setuptools builds in the checkout's build/ folder: two xdist workers building at once would collide there (the
    # lock is in that folder, so another checkout builds in its own without waiting)
    (REPO / "build").mkdir(exist_ok=True)
    with open(REPO / "build" / ".wheel-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                str(REPO),
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(out),
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=300,
        )
    return next(out.glob("gpuwizard-*.whl"))


def test_the_wheel_ships_every_preset_theme_and_data_file(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted(n.split("/")[-1] for n in names if n.startswith("gpuwizard/presets/")) == shipped("presets")
    assert sorted(n.split("/")[-1] for n in names if n.startswith("gpuwizard/themes/")) == shipped("themes")
    assert {"gpuwizard/model/policies.yaml", "gpuwizard/tui/app.tcss"} <= set(names)
    scripts = SRC / "trainers" / "check" / "scripts"
    assert {f"gpuwizard/trainers/check/scripts/{p.name}" for p in scripts.glob("*.py")} <= set(names)


def test_the_wheel_ships_every_module_of_the_source_tree(wheel):
    """The package list in pyproject.toml is written out by hand: a new folder that is not in it fails here."""
    names = set(zipfile.ZipFile(wheel).namelist())
    source = {f"gpuwizard/{p.relative_to(SRC).as_posix()}" for p in SRC.rglob("*.py")}
    assert len(source) > 100 and source - names == set()
    assert "gpuwizard-dark.yaml" in shipped("themes") and "demo-cpu.yaml" in shipped("presets")


def where_found(env: dict[str, str], cwd: Path) -> list[Path]:
    out = subprocess.run(
        [sys.executable, "-c", "import gpuwizard; print(gpuwizard.__file__); " + WHERE],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return [Path(line) for line in out.stdout.split()]


def test_installed_editable_and_checkout_find_the_same_files(wheel, tmp_path):
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    module, presets, themes = where_found({**base, "PYTHONPATH": str(site)}, tmp_path)
    assert (
        module.is_relative_to(site)
        and presets == site / "gpuwizard" / "presets"
        and themes == site / "gpuwizard" / "themes"
    )
    module, presets, themes = where_found({**base, "PYTHONPATH": str(REPO / "src")}, tmp_path)
    assert module.is_relative_to(REPO / "src") and (presets, themes) == (REPO / "presets", REPO / "themes")
    module, presets, themes = where_found(base, tmp_path)  # this venv's `pip install -e .`
    assert (presets, themes) == (REPO / "presets", REPO / "themes")
    for folder in (site / "gpuwizard" / "presets", REPO / "presets"):
        assert sorted(p.name for p in folder.iterdir()) == shipped("presets")


def test_the_shipped_schema_is_the_one_the_models_generate():
    import json

    assert json.loads((REPO / "presets" / "preset.schema.json").read_text()) == preset_schema(), (
        "regenerate it: gpuwizard presets schema > presets/preset.schema.json"
    )
    for preset in (REPO / "presets").glob("*.yaml"):
        assert preset.read_text().startswith("# yaml-language-server: $schema=./preset.schema.json\n"), preset.name
