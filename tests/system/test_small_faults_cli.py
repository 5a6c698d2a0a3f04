"""The command line's small faults from issue 25, through the real entry point in a child process: one paragraph per
mistake, a fix that applies to the value given, suggestions for mistyped values, readable short times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.cli import gw_subprocess
from support.data import DATA
from support.presets import shipped_preset
from support.trainers import fake_env

WORKSTATION = str(DATA / "nvml" / "workstation_2x4090.json")


def planned(path: Path, env: dict | None = None) -> tuple[int, dict, str]:
    """`gpuwizard plan PRESET --json`: its exit code, the plan, its stderr."""
    result = gw_subprocess("plan", path, "--json", env=env)
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return result.returncode, json.loads(result.stdout), result.stderr


def test_a_bad_launch_python_is_one_paragraph_naming_it(tmp_path):
    """What the trainer cannot find in an interpreter that is not there only repeats that mistake."""
    missing = "/nonexistent/gw-env/bin/python"
    code, plan, err = planned(shipped_preset(tmp_path, "example-lerobot-act", launch__python=missing))
    assert code == 2
    about = [p for p in plan["warnings"] + plan["errors"] if missing in p or p.startswith("launch.python")]
    assert len(about) == 1, about
    [paragraph] = about
    assert paragraph.startswith(f"launch.python = '{missing}': is not an executable file. Fix: ")
    assert "`gpuwizard envs --trainer lerobot`" in paragraph
    assert [line for line in err.splitlines() if missing in line] == [f"example-lerobot-act: {paragraph}"]


@pytest.mark.parametrize("preset, trainer", [("example-openpi", "openpi"), ("example-hf", "hf")])
def test_the_workdir_and_python_fixes_name_the_presets_own_trainer(tmp_path, preset, trainer):
    folder = tmp_path / "no-checkout"
    python = folder / ".venv" / "bin" / "python"
    code, plan, _ = planned(shipped_preset(tmp_path, preset, launch__workdir=str(folder), launch__python=str(python)))
    assert code == 2
    [workdir] = [p for p in plan["errors"] if p.startswith("launch.workdir")]
    assert f"the {trainer} job runs in" in workdir and "GR00T" not in workdir, workdir
    [interpreter] = [p for p in plan["errors"] if p.startswith("launch.python")]
    assert f"`gpuwizard envs --trainer {trainer}`" in interpreter and "lerobot" not in interpreter, interpreter


def test_too_few_visible_gpus_get_a_fix_that_applies_to_the_count(tmp_path):
    """Lowering hardware.gpus is no fix when it is already 1 (or nothing is visible); when some are visible, the
    count that fits is named."""
    one = shipped_preset(tmp_path, "demo-gpu", name="one-gpu", hardware__gpus=1)
    _, plan, _ = planned(one, {"GPUWIZARD_NVML_REPLAY": WORKSTATION, "CUDA_VISIBLE_DEVICES": ""})
    [short] = [p for p in plan["warnings"] if p.startswith("hardware.gpus = 1:")]
    assert "lower hardware.gpus" not in short and "Fix: make the devices visible" in short, short
    two = shipped_preset(tmp_path, "demo-gpu", name="two-gpus", hardware__gpus=2)
    _, plan, _ = planned(two, {"GPUWIZARD_NVML_REPLAY": WORKSTATION, "CUDA_VISIBLE_DEVICES": "0"})
    [short] = [p for p in plan["warnings"] if p.startswith("hardware.gpus = 2:")]
    assert "only 1 of the 2 requested GPUs is visible" in short and "Fix: set hardware.gpus: 1 " in short, short


def test_run_on_a_machine_without_visible_gpus_does_not_say_lower_the_count(tmp_path):
    preset = shipped_preset(tmp_path, "demo-gpu", name="one-gpu", hardware__gpus=1)
    env = {"GPUWIZARD_NVML_REPLAY": WORKSTATION, "CUDA_VISIBLE_DEVICES": ""}
    result = gw_subprocess("run", "--trust", preset, "--headless", "--trust", env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    [refusal] = [line for line in result.stderr.splitlines() if "hardware.gpus = 1" in line]
    assert "this job needs 1 GPU(s) per node but 0 are visible here" in refusal
    assert "lower hardware.gpus" not in refusal and "Fix: make the GPUs visible (CUDA_VISIBLE_DEVICES)" in refusal


def test_a_short_published_time_reads_as_under_a_minute_not_about_under_one(tmp_path):
    code, plan, _ = planned(shipped_preset(tmp_path, "demo-cpu", optim__steps=30))
    assert code == 0
    [note] = [e["note"] for e in plan["estimates"] if e["note"]]
    assert "~<" not in note and "~0 min" not in note and "so <1 min on 1 process" in note, note
    assert "0.01 h" not in note, "a published time under an hour reads in minutes"


@pytest.mark.parametrize(
    "field, typo, meant",
    [("trainer", "lerobt", "lerobot"), ("policy", "smolvl", "smolvla")],
)
def test_a_mistyped_trainer_or_policy_gets_a_suggestion(tmp_path, field, typo, meant):
    result = gw_subprocess("plan", shipped_preset(tmp_path, "example-lerobot-act", **{field: typo}))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [paragraph] = [line for line in result.stderr.splitlines() if f"{field} = '{typo}'" in line]
    assert f"did you mean {meant}?" in paragraph and "Fix: choose one of" in paragraph, paragraph


@pytest.mark.parametrize("dotted, typo, meant", [("scaling__rule", "linear", "linear_lr"), ("strategy", "dpp", "ddp")])
def test_a_mistyped_choice_gets_a_suggestion(tmp_path, dotted, typo, meant):
    result = gw_subprocess("plan", shipped_preset(tmp_path, "demo-cpu", **{dotted: typo}))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    [paragraph] = [line for line in result.stderr.splitlines() if f"= '{typo}'" in line]
    assert f"did you mean {meant}?" in paragraph, paragraph


def test_check_refuses_an_existing_lerobot_output_folder_in_one_paragraph_with_its_fix(tmp_path):
    """lerobot-train's parser would refuse with a bare FileExistsError, said twice with a generic fix; the plan
    already knows the folder is there and says so once, naming output_dir and the resume."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("an earlier run wrote here\n")
    preset = shipped_preset(
        tmp_path,
        "example-lerobot-act",
        launch__python=str(fake_env(tmp_path / "env", "0.6.1", parallelism=False)),
        dataset__root=None,
        output_dir=str(out),
    )
    result = gw_subprocess("check", "--trust", preset, "--trust", cwd=tmp_path, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "FileExistsError" not in result.stdout + result.stderr
    [paragraph] = result.stderr.strip().splitlines()
    assert paragraph.startswith(f"example-lerobot-act: output_dir = '{out}': already exists"), paragraph
    assert "`gpuwizard run example-lerobot-act --resume`" in paragraph


def test_a_refusal_by_the_trainers_parser_is_said_once(tmp_path):
    preset = shipped_preset(tmp_path, "demo-cpu", launch__extra_args=["--no-such-flag"])
    result = gw_subprocess("check", "--trust", preset, "--trust", timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    said = "unrecognized arguments: --no-such-flag"
    assert (result.stdout + result.stderr).count(said) == 1, (result.stdout, result.stderr)
    [paragraph] = result.stderr.strip().splitlines()
    assert paragraph.startswith("demo-cpu: gpuwizard.demo.train refuses this command:") and "Fix: " in paragraph
