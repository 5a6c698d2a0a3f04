"""The HF Trainer's held-out loss through gpuwizard (issue 37 items 1, 2 and 4): a script that names its own split
flag (trainer_options.eval_split_flag; tests/data/hf/tiny_train.py holds out its last rows as the Trainer's
eval_dataset) is given dataset.eval_split with --eval_strategy steps --eval_steps at the log period; the Trainer's
own {'eval_loss': ...} dicts (transformers' Trainer._maybe_log_save_evaluate, 5.x) become the run's held-out metrics
and `runs --best` names the checkpoint-N nearest the lowest. A script that names no flag is given none, and the plan
says so."""

from __future__ import annotations

import json

import pytest

from gpuwizard.core.yamlio import dumps
from gpuwizard.runs.rundir import list_runs
from support.cli import gw_subprocess
from support.data import REPO
from support.trainers import trainer_env

pytestmark = pytest.mark.hf

SCRIPT = REPO / "tests" / "data" / "hf" / "tiny_train.py"


def preset(tmp_path, flag: str | None):
    python = trainer_env("GPUWIZARD_HF_PYTHON", "a transformers 5.24 interpreter")
    options = {"script": str(SCRIPT), "logging_steps": 2} | ({"eval_split_flag": flag} if flag else {})
    data = {
        "version": 1,
        "name": "hf-held-out",
        "trainer": "hf",
        "policy": "act",
        "dataset": {"repo_id": "local/synthetic", "eval_split": 0.25},
        "hardware": {"gpus": 2, "device": "cpu"},
        "batch": {"size": 4},
        "optim": {"lr": 1.0e-3, "steps": 8},
        "scaling": {"rule": "none", "reference_gpus": 2},
        "mixed_precision": "no",
        "trainer_options": options,
        "launch": {"python": python, "env": {"HF_HUB_OFFLINE": "1"}, "extra_args": ["--save_steps", "4"]},
        "output_dir": str(tmp_path / "out"),
        "monitor": {"hang_timeout_s": 300},
    }
    path = tmp_path / "hf-held-out.yaml"
    path.write_text(dumps(data))
    return path


def test_a_script_that_names_no_split_flag_is_given_none(tmp_path):
    path = preset(tmp_path, None)
    plan = json.loads(gw_subprocess("plan", "--trust", path, "--json").stdout)
    assert any("the hf trainer is given no held-out split" in n for n in plan["notes"]), plan["notes"]
    argv = json.loads(gw_subprocess("preview", "--trust", path, "--format", "json").stdout)["argv"]
    assert "--eval_strategy" not in argv and "--eval_split" not in argv


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_real_hf_run_logs_its_held_out_loss_and_names_its_best_checkpoint(tmp_path):
    path = preset(tmp_path, "--eval_split")
    plan = json.loads(gw_subprocess("plan", "--trust", path, "--json").stdout)
    assert any("--eval_split 0.25: the script holds out" in n for n in plan["notes"]), plan["notes"]
    argv = json.loads(gw_subprocess("preview", "--trust", path, "--format", "json").stdout)["argv"]
    at = argv.index("--eval_split")
    assert argv[at : at + 6] == ["--eval_split", "0.25", "--eval_strategy", "steps", "--eval_steps", "2"], argv
    checked = gw_subprocess("check", "--trust", path, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr  # TrainingArguments takes the eval flags

    result = gw_subprocess("run", "--trust", path, "--headless", timeout=800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [entry] = list_runs()
    held = [(m.step, m.loss) for m in entry.run.metrics() if m.kind == "held_out"]
    assert [step for step, _ in held] == [2, 4, 6, 8], held
    lowest = min(held, key=lambda pair: pair[1])[0]
    nearest = min((4, 8), key=lambda step: (abs(step - lowest), step))
    best = gw_subprocess("runs", "--best", entry.run.run_id)
    assert best.returncode == 0 and best.stdout.strip() == str(tmp_path / "out" / f"checkpoint-{nearest}"), (
        best.stdout + best.stderr,
        held,
    )
