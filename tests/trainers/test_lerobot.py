"""LeRobot version probing and the real `lerobot-train` (when a LeRobot environment is configured)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from gpuwizard.trainers.lerobot import install
from gpuwizard.trainers.lerobot.install import detect
from gpuwizard.trainers.logparse import parse_lerobot
from support.cli import gw_subprocess, poll_until
from support.runs import newest_run
from support.trainers import FINISHED_STEPS, SHARES_061_RUN, fake_env, real_preset

PRESET = """\
version: 1
name: act-probe
trainer: lerobot
policy: act
dataset: {{repo_id: me/pick}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 8, grad_accum: {accum}}}
optim: {{lr: 1.0e-5, steps: 100}}
mixed_precision: "no"
launch: {{python: {python}}}
"""


@pytest.mark.parametrize("version, parallelism, api", [("0.6.1", False, "v0.6"), ("0.6.2.dev0", True, "main")])
def test_probe_tells_release_from_main_without_importing_lerobot(tmp_path, version, parallelism, api):
    detect.cache_clear()
    python = fake_env(tmp_path / "env", version, parallelism)
    assert detect(str(python), True) == {"version": version, "parallelism": parallelism}
    preset = tmp_path / "p.yaml"
    preset.write_text(PRESET.format(python=python, accum=1))
    spec = json.loads(gw_subprocess("preview", "--trust", preset, "--format", "json").stdout)
    assert spec["argv"][spec["argv"].index("--max-restarts=0") + 1] == str(python.parent / "lerobot-train"), (
        "the resolved path, never $(which ...)"
    )
    has_accum_flag = any(a.startswith("--accelerator.gradient_accumulation.steps") for a in spec["argv"])
    assert has_accum_flag == (api == "main")
    preset.write_text(PRESET.format(python=python, accum=2))
    result = gw_subprocess("plan", "--trust", preset)
    assert (result.returncode == 0) == (api == "main"), result.stderr


def test_probe_is_remembered_until_the_environment_changes(tmp_path, monkeypatch):
    """A real interpreter's answer is kept on disk; a branch switch or an upgrade is noticed."""
    detect.cache_clear()
    fake_env(tmp_path / "env", "0.6.1", parallelism=False)
    site = tmp_path / "env" / "site"
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.symlink_to(os.path.realpath(sys.executable))  # a binary, unlike the fake env's sh wrapper
    monkeypatch.setenv("PYTHONPATH", str(site))
    assert detect(str(python), True) == {"version": "0.6.1", "parallelism": False}

    def no_subprocess(*args, **kwargs):
        raise AssertionError("probed again although nothing changed")

    detect.cache_clear()
    with monkeypatch.context() as patched:
        patched.setattr(install.subprocess, "run", no_subprocess)
        assert detect(str(python), True) == {"version": "0.6.1", "parallelism": False}

    (site / "lerobot" / "configs" / "parallelism.py").write_text("")  # git switch to main in an editable checkout
    detect.cache_clear()
    assert detect(str(python), True) == {"version": "0.6.1", "parallelism": True}
    (site / "lerobot-0.6.1.dist-info").rename(site / "lerobot-0.7.0.dist-info")  # pip install --upgrade
    (site / "lerobot-0.7.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: lerobot\nVersion: 0.7.0\n")
    detect.cache_clear()
    assert detect(str(python), True) == {"version": "0.7.0", "parallelism": True}


def test_version_can_be_stated_where_it_cannot_be_probed(gw, write_preset, tmp_path):
    detect.cache_clear()
    text = PRESET.format(python=sys.executable, accum=2)
    assert gw("plan", "--trust", write_preset(text)).code == 2
    plan = gw("plan", "--trust", write_preset(text + "trainer_options: {api: main}\n"), "--json")
    assert plan.code == 0 and plan.json()["effective_batch"] == 32


REAL_ENVS = [
    pytest.param("GPUWIZARD_LEROBOT_PYTHON", 1, id="0.6.1"),
    pytest.param("GPUWIZARD_LEROBOT_MAIN_PYTHON", 2, id="main-7427f31"),
]
FINISHED_ENVS = [
    pytest.param(*REAL_ENVS[0].values, id="0.6.1", marks=SHARES_061_RUN),
    REAL_ENVS[1],
]
"""0.6.1's finished run is test_lerobot_gauge.py's ungauged one too (conftest.lerobot_run)."""


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, accum", FINISHED_ENVS)
def test_real_lerobot_trains_the_samples_and_lr_the_plan_promised(lerobot_run, variable, accum):
    """The real lerobot-train, ACT on 2 CPU processes, linear_lr from 1 GPU (lr x 2 with a warmup, through
    --use_policy_training_preset=false). Main with accumulation 2 counts loop steps: the plan's 12 updates are 24 of
    its steps and 12 x (2 x 2 x 2) = 96 samples (shared/vendor/README.md; lerobot_train.py at 7427f31)."""
    made = lerobot_run(variable, accum)
    plan, run, steps = made.plan, made.run, FINISHED_STEPS
    assert (plan["steps"], plan["trainer_steps"], plan["samples_seen"]) == (steps, steps * accum, steps * 4 * accum)
    progress = run.progress()
    assert (progress.step, progress.total, progress.finished) == (steps * accum, steps * accum, True)
    assert progress.samples == plan["samples_seen"], "logged smpl: equals steps x effective batch"
    assert progress.lr == pytest.approx(2e-5), "the linearly scaled lr reached LeRobot"
    last = parse_lerobot([line for line in run.log.read_text().splitlines() if "smp/s:" in line][-1])
    assert last is not None and last.step_s and last.samples_per_s is not None
    assert progress.samples_per_s == pytest.approx(2 * 2 / last.step_s), "batch 2 x 2 workers a logged step"
    slack = 0.5 + progress.samples_per_s * 0.001 / last.step_s  # the two roundings of the logged figures
    assert abs(progress.samples_per_s - last.samples_per_s) <= slack, "LeRobot's own figure, unrounded"
    events, unreadable = run.events()
    assert ([(e.kind, e.title) for e in events], unreadable) == ([], 0), "banner, lr and batch agree with the plan"
    checkpoint = made.out / "checkpoints" / f"{steps * accum:06d}" / "pretrained_model" / "model.safetensors"
    assert checkpoint.is_file()
    check = json.loads((run.path / "trainer-check.json").read_text())
    assert check["status"] == "accepted", "lerobot-train's own parser read the launched command as planned"
    shared = ("per_device_batch", "lr", "steps", "warmup_steps", "dataset", "policy")
    assert {k: check["values"][k] for k in shared} == {
        "per_device_batch": 2,
        "lr": pytest.approx(2e-5),
        "steps": steps * accum,
        "warmup_steps": accum,
        "dataset": "local/so100_tiny",
        "policy": "act",
    }, "a 5% warmup of 12 updates, ceil 1, is `accum` loop steps"


LOOP_STEPS, SAVE_EVERY = 20, 4
"""The stop-and-resume run in lerobot-train's loop steps (an update is `accum` of them on main): the stop lands after
the first checkpoint and before the run's end, so 16 loop steps stay between them; fewer steps, or a later first
checkpoint, would let a slow stop find the run finished."""


@pytest.mark.lerobot
@pytest.mark.parametrize("variable, accum", REAL_ENVS)
def test_real_lerobot_stopped_then_resumed_ends_at_the_planned_step(gw, tmp_path, variable, accum):
    """Stop after the first checkpoint, then `run --resume`: lerobot-train continues from
    checkpoints/last/pretrained_model/train_config.json (lerobot/configs/train.py) to the planned step."""
    steps = LOOP_STEPS // accum
    preset = real_preset(tmp_path, variable, accum, steps=steps, save_freq=SAVE_EVERY // accum)
    config = tmp_path / "out" / "checkpoints" / "last" / "pretrained_model" / "train_config.json"
    first = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(preset), "--headless"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    poll_until(lambda: config.is_file() or first.poll() is not None, 400, "a first checkpoint or the run's end")
    assert config.is_file(), "a first checkpoint was written"
    stop = gw("stop")  # in process: the stop's own code, without a second interpreter's start-up in the margin
    assert stop.code == 0, stop.out + stop.err
    first.communicate(timeout=120)
    stopped = newest_run()
    assert stopped.status().state == "stopped"
    checked = gw_subprocess("check", "--trust", preset, "--resume", timeout=600)
    assert checked.returncode == 0 and "accepted by lerobot-train" in checked.stdout, checked.stderr
    assert f"{LOOP_STEPS} steps" in checked.stdout and "resume true" in checked.stdout
    resumed = gw_subprocess("run", "--trust", preset, "--headless", "--resume", timeout=600)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    run = newest_run()
    assert run.status().resumed_from == stopped.run_id
    progress = run.progress()
    assert (progress.step, progress.total) == (LOOP_STEPS, LOOP_STEPS)
    assert "--resume=true" in run.job().argv and not any(a.startswith("--policy.type") for a in run.job().argv)
    check = json.loads((run.path / "trainer-check.json").read_text())
    assert (check["status"], check["values"]["resume"], check["values"]["steps"]) == ("accepted", True, LOOP_STEPS)
    resumed_at = re.search(r"continues from step (\d+) ", " ".join(check["notes"]))
    assert resumed_at and int(resumed_at[1]) % SAVE_EVERY == 0, "the checkpoint's step, read by lerobot-train itself"
    assert int(resumed_at[1]) < LOOP_STEPS, "stopped before its end"
