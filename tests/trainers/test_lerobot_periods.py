"""What a LeRobot run shorter than its periods, or sent to the cloud, gets from the plan (issue 38 items 3 and 6),
against the real LeRobot's own config classes: 0.6.1 (GPUWIZARD_LEROBOT_PYTHON) and main at 7427f31
(GPUWIZARD_LEROBOT_MAIN_PYTHON): TrainPipelineConfig's log_freq and save_freq (lerobot/configs/train.py) and
JobConfig.is_remote_target (lerobot/configs/default.py), which lerobot_train.train() asks before it submits the run
to HF Jobs instead of training."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpuwizard.model.preset import parse_preset
from gpuwizard.planning.plan import make_plan
from gpuwizard.trainers.lerobot.findings import LOG_FREQ, SAVE_FREQ, cloud_target_findings, period_findings
from support.trainers import trainer_env

pytestmark = pytest.mark.lerobot

ENVS = [pytest.param("GPUWIZARD_LEROBOT_PYTHON", id="0.6.1"), pytest.param("GPUWIZARD_LEROBOT_MAIN_PYTHON", id="main")]
TARGETS = [None, "local", "a10g-small", "h100x8"]
ASK = """
import json, sys
from lerobot.configs.default import JobConfig
from lerobot.configs.train import TrainPipelineConfig
fields = TrainPipelineConfig.__dataclass_fields__
print(json.dumps({
    "log_freq": fields["log_freq"].default,
    "save_freq": fields["save_freq"].default,
    "remote": [JobConfig.is_remote_target(t) for t in json.loads(sys.argv[1])],
}))
"""


def lerobot_says(python: str) -> dict:
    done = subprocess.run(
        [python, "-c", ASK, json.dumps(TARGETS)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def plan_of(python: str, gpus: int, steps: int, extra_args: list[str], **options):
    data = {
        "version": 1,
        "name": "lerobot-periods",
        "trainer": "lerobot",
        "policy": "act",
        "dataset": {"repo_id": "me/pick"},
        "hardware": {"gpus": gpus, "device": "cpu"},
        "batch": {"size": 8},
        "optim": {"steps": steps},
        "scaling": {"rule": "none", "reference_gpus": gpus},
        "trainer_options": options,
        "launch": {"python": python, "extra_args": extra_args},
    }
    return make_plan(parse_preset(data, "test"))[1]


@pytest.mark.parametrize("variable", ENVS)
def test_the_periods_and_the_cloud_rule_are_lerobots_own(variable):
    python = trainer_env(variable, "a LeRobot environment")
    said = lerobot_says(python)
    assert (said["log_freq"], said["save_freq"]) == (LOG_FREQ, SAVE_FREQ)
    for target, remote in zip(TARGETS, said["remote"], strict=True):
        args = [f"--job.target={target}"] if target else []
        found = cloud_target_findings(plan_of(python, 2, 1000, args))
        assert bool(found) == remote, (target, found)
        if remote:
            assert found[0].level == "error" and "one paid cloud job per rank" in found[0].paragraph()
            alone = cloud_target_findings(plan_of(python, 1, 1000, args))
            assert [p.level for p in alone] == ["warning"] and "not on this machine" in alone[0].paragraph()


@pytest.mark.parametrize("variable", ENVS)
def test_a_run_shorter_than_its_periods_is_told_what_it_will_lack(variable):
    python = trainer_env(variable, "a LeRobot environment")
    said = lerobot_says(python)
    short = period_findings(plan_of(python, 2, 40, []))
    assert [p.field for p in short] == ["trainer_options.log_freq", "trainer_options.save_freq"]
    assert f"logs every {said['log_freq']:,} loop steps and this run has 40" in short[0].paragraph()
    assert "set trainer_options.log_freq: 2" in short[0].paragraph()
    assert f"saves every {said['save_freq']:,} loop steps" in short[1].paragraph()
    assert period_findings(plan_of(python, 2, 40, [], log_freq=5, save_freq=10)) == []
    assert period_findings(plan_of(python, 2, 40, ["--log_freq=5", "--save_freq=10"])) == []
    assert period_findings(plan_of(python, 2, said["save_freq"] + 1, [])) == []
