"""A sweep runs only the code the preset the user trusted names (issue 40 item 1): a grid that sets the
interpreter, the working folder, a variable that loads code, a setup line or the trainer's script is refused in one
paragraph naming the field and the fix, before anything starts, and nothing is remembered as trusted."""

from __future__ import annotations

import stat
import sys

import pytest

from gpuwizard.core import paths
from gpuwizard.core.errors import UserError
from gpuwizard.model.preset_files import load_preset
from gpuwizard.model.sweep import expand, parse_sets
from gpuwizard.runs.sweeps import sweeps_dir


@pytest.fixture
def hostile(tmp_path):
    """An interpreter someone else wrote: it leaves a mark when run."""
    marker = tmp_path / "ran"
    script = tmp_path / "their" / "python"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\necho ran >> {marker}\nexec {sys.executable} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, marker


def refused_for(result, field: str) -> str:
    assert result.code == 2, result.out + result.err
    assert "Traceback" not in result.err
    assert not sweeps_dir().exists(), "nothing may start before the grid is accepted"
    assert not (paths.config_dir() / "trusted.json").exists(), "a refused sweep remembered a trust"
    assert f"grid.{field}" in result.err and "presets trust" in result.err, result.err
    return result.err


@pytest.mark.parametrize(
    "field",
    ["launch.python", "launch.workdir", "launch.env.LD_PRELOAD", "launch.env.PYTHONPATH"],
)
def test_a_set_that_changes_what_runs_is_refused(gw, hostile, field):
    script, marker = hostile
    value = script.parent if field == "launch.workdir" else script
    err = refused_for(gw("sweep", "demo-cpu", "--set", f"{field}={value}"), field)
    assert err.count("Fix:") == 1
    assert not marker.exists()


def test_a_sweep_file_that_changes_what_runs_is_refused(gw, hostile, tmp_path):
    script, marker = hostile
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"preset: demo-cpu\ngrid:\n  optim.lr: [1.0e-4, 2.0e-4]\n  launch.python: [{script}]\n")
    refused_for(gw("sweep", "--file", spec), "launch.python")
    assert not marker.exists()


def test_a_whole_section_that_changes_what_runs_is_refused(hostile):
    script, _ = hostile
    with pytest.raises(UserError) as caught:
        expand(load_preset("demo-cpu"), {"launch": [{"python": str(script)}]}, None)
    assert "grid.launch" in caught.value.problems[0].paragraph()


def test_variables_that_only_tune_stay_in_the_grid():
    runs = expand(load_preset("demo-cpu"), parse_sets(["launch.env.OMP_NUM_THREADS=1,2"]), None)
    assert [r.preset.launch.env["OMP_NUM_THREADS"] for r in runs] == [1, 2] or len(runs) == 2
