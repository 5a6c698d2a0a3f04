"""Finding environments runs nothing (issue 40 item 3): `gpuwizard envs` and the F6 picker read a `.venv` found in
the current folder, in a child of $HOME (a cloned repository that commits one) or in a preset's launch.workdir from
its files (pyvenv.cfg, the installed distributions' METADATA) and never execute its interpreter."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from gpuwizard.trainers.envs import find_envs


def planted_venv(folder: Path, marker: Path) -> Path:
    """A .venv whose python writes a marker when run, with lerobot and torch metadata as pip leaves it."""
    venv = folder / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\ninclude-system-site-packages = false\nversion = 3.12.3\n")
    site = venv / "lib" / "python3.12" / "site-packages"
    for name, version in (("lerobot", "0.6.1"), ("torch", "2.7.1")):
        (site / f"{name}-{version}.dist-info").mkdir(parents=True)
        (site / f"{name}-{version}.dist-info" / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\necho ran >> {marker}\nexec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GPUWIZARD_ENV_CACHE", str(tmp_path / "no-cache"))
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "MAMBA_ROOT_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_envs_lists_planted_venvs_without_running_them(gw, home, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    here = planted_venv(tmp_path / "here", marker)
    cloned = planted_venv(home / "cloned-repo", marker)
    workdir = planted_venv(tmp_path / "their-workdir", marker)
    monkeypatch.chdir(tmp_path / "here")
    result = gw("envs", "--json", "--workdir", tmp_path / "their-workdir")
    assert result.code == 0, result.err
    listed = {e["python"]: e for e in json.loads(result.out)}
    for python in (here, cloned, workdir):
        assert listed[str(python)]["trainers"] == {"lerobot": "0.6.1"}, listed.get(str(python))
        assert listed[str(python)]["torch"] == "2.7.1" and listed[str(python)]["python_version"] == "3.12.3"
    assert not marker.exists(), "finding environments ran an interpreter nobody trusted"


def test_the_picker_reads_an_untrusted_presets_workdir_without_running_it(home, tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    python = planted_venv(tmp_path / "their-workdir", marker)
    monkeypatch.chdir(home)
    found = {e.python: e for e in find_envs(Path(os.environ["HOME"]), [str(tmp_path / "their-workdir")])}
    assert found[str(python)].trainers == {"lerobot": "0.6.1"}
    assert not marker.exists()
