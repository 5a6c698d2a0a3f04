"""Nothing runs from a preset the user only opened (issue 29, item 1): a preset file outside the user's preset
folder whose `launch.python` is someone else's script is planned, previewed and shown without that script running;
`check` and `run` refuse it in one paragraph that lists what it would run, until `presets trust` (or --trust) says
yes, remembered by the hash of what it runs; a change to what it runs asks again."""

from __future__ import annotations

import json
import shutil
import stat
import sys
from pathlib import Path

import pytest

from gpuwizard.core import paths
from gpuwizard.model import trust
from gpuwizard.model.preset_files import load_preset_file

MARKER_SCRIPT = """#!/bin/sh
echo ran >> {marker}
exec {python} "$@"
"""


def hostile_python(tmp_path: Path, name: str = "python") -> tuple[Path, Path]:
    """An interpreter that is someone else's script: it leaves a mark each time it runs, then runs Python."""
    marker = tmp_path / f"{name}.ran"
    script = tmp_path / "theirs" / name
    script.parent.mkdir(exist_ok=True)
    script.write_text(MARKER_SCRIPT.format(marker=marker, python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, marker


def lerobot_preset(tmp_path: Path, python: Path, name: str = "theirs") -> Path:
    path = tmp_path / "downloads" / f"{name}.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"""name: {name}
trainer: lerobot
policy: act
dataset: {{repo_id: lerobot/pusht}}
hardware: {{gpus: 1, device: cpu}}
optim: {{steps: 20}}
launch:
  python: {python}
  env: {{LD_PRELOAD: /tmp/their.so, OMP_NUM_THREADS: "1"}}
"""
    )
    return path


def openpi_preset(tmp_path: Path, python: Path) -> Path:
    path = tmp_path / "downloads" / "their-pi.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(
        f"""name: their-pi
trainer: openpi
policy: pi05
dataset: {{repo_id: physical-intelligence/libero}}
hardware: {{gpus: 1, device: cpu}}
trainer_options: {{config_name: pi05_libero, backend: pytorch, uv: false}}
launch: {{python: {python}, workdir: {tmp_path}}}
"""
    )
    return path


def test_code_items_name_the_interpreter_and_code_loading_variables_not_the_tuning_ones(tmp_path):
    python, _ = hostile_python(tmp_path)
    preset = load_preset_file(lerobot_preset(tmp_path, python))
    assert trust.question_lines(preset) == [f"launch.python = {python}", "launch.env.LD_PRELOAD = /tmp/their.so"]
    assert not trust.is_trusted(preset)


@pytest.mark.parametrize(
    "args",
    [
        ["plan"],
        ["plan", "--json"],
        ["preview"],
        ["preview", "--format", "json"],
        ["preview", "--format", "script"],
        ["preview", "--format", "sbatch"],
        ["presets", "show"],
    ],
    ids=lambda a: " ".join(a),
)
@pytest.mark.parametrize("make", [lerobot_preset, openpi_preset], ids=["lerobot", "openpi"])
def test_reading_an_untrusted_preset_runs_nothing_of_it(gw, tmp_path, args, make):
    python, marker = hostile_python(tmp_path)
    path = make(tmp_path, python)
    result = gw(*args, path)
    assert result.code in (0, 2), result.err
    assert "Traceback" not in result.err
    assert not marker.exists(), f"`gpuwizard {' '.join(args)}` ran the preset's interpreter"


def test_check_refuses_an_untrusted_preset_naming_what_it_would_run_and_the_fix(gw, tmp_path):
    python, marker = hostile_python(tmp_path)
    path = lerobot_preset(tmp_path, python)
    result = gw("check", path)
    assert result.code == 2
    assert result.err.count("Fix:") == 1, result.err
    assert str(python) in result.err and "LD_PRELOAD" in result.err
    assert f"gpuwizard presets trust {path}" in result.err and "--trust" in result.err
    assert not marker.exists()


def test_run_refuses_an_untrusted_preset_before_anything_starts(gw, tmp_path):
    python, marker = hostile_python(tmp_path)
    path = lerobot_preset(tmp_path, python)
    result = gw("run", path, "--headless")
    assert result.code == 2, result.out + result.err
    assert "presets trust" in result.err
    assert not marker.exists()
    assert not (paths.runs_dir()).exists() or not any(paths.runs_dir().iterdir()), "a run folder was made"


def test_trusted_once_it_may_run_until_what_it_runs_changes(gw, tmp_path):
    python, marker = hostile_python(tmp_path)
    path = lerobot_preset(tmp_path, python)
    said = gw("presets", "trust", path)
    assert said.code == 0 and str(python) in said.out
    stored = json.loads((paths.config_dir() / "trusted.json").read_text())
    assert [entry["source"] for entry in stored.values()] == [str(path)]
    gw("check", path)
    assert marker.exists(), "a trusted preset's interpreter is asked by check"

    other, other_marker = hostile_python(tmp_path, "python2")
    path.write_text(path.read_text().replace(str(python), str(other)))
    refused = gw("check", path)
    assert refused.code == 2 and "presets trust" in refused.err, "a changed interpreter is asked about again"
    assert not other_marker.exists()


def test_check_with_trust_says_yes_and_remembers(gw, tmp_path):
    python, marker = hostile_python(tmp_path)
    path = lerobot_preset(tmp_path, python)
    gw("check", path, "--trust")
    assert marker.exists()
    assert trust.is_trusted(load_preset_file(path))


def test_a_preset_in_the_users_own_folder_is_trusted_where_it_lies(gw, tmp_path):
    python, marker = hostile_python(tmp_path)
    folder = paths.user_presets_dir()
    folder.mkdir(parents=True)
    shutil.copy(lerobot_preset(tmp_path, python, "mine"), folder / "mine.yaml")
    result = gw("check", "mine")
    assert "presets trust" not in result.err, result.err
    assert marker.exists(), "the user's own preset runs its interpreter on check"


def test_a_preset_that_names_no_code_needs_no_trust(gw, tmp_path):
    path = tmp_path / "plain.yaml"
    path.write_text("name: plain\ntrainer: demo\npolicy: demo\ndataset: {repo_id: demo/synthetic}\n")
    preset = load_preset_file(path)
    assert trust.code_items(preset) == [] and trust.is_trusted(preset)


def test_an_unwritable_store_is_one_paragraph(gw, tmp_path):
    python, _ = hostile_python(tmp_path)
    path = lerobot_preset(tmp_path, python)
    config = paths.config_dir()
    config.mkdir(parents=True, exist_ok=True)
    (config / "trusted.json").mkdir()  # a folder where the file should be: the write fails, even as root
    result = gw("presets", "trust", path)
    assert result.code == 2 and "could not be remembered" in result.err and "Traceback" not in result.err
