"""Issue 25, data and runs: `run --resume RUN_ID` trains to the steps of the run it resumes (as the monitor's `r`
does, from the run's own preset.yaml), not to the preset file's, on real torchrun demo jobs."""

from __future__ import annotations

import re

import pytest

from gpuwizard.runner.launch.start import relaunch
from gpuwizard.runs.rundir import RunDir
from support.cli import gw_subprocess, poll_until
from support.runs import newest_run

pytestmark = pytest.mark.slow

PRESET = """\
version: 1
name: longer
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 4}}
optim: {{lr: 1.0e-3, steps: 20}}
mixed_precision: "no"
trainer_options: {{log_every: 5, save_every: 10, step_time_s: 0.3}}
monitor: {{hang_timeout_s: 30}}
"""


def step_of(run: RunDir) -> int:
    progress = run.progress()
    return progress.step or 0 if progress else 0


def test_a_resume_keeps_the_steps_its_run_was_continued_to(tmp_path, monkeypatch):
    """A 20-step run, continued to 60 steps from the monitor and stopped at step 45 or so: `run PRESET --resume RUN`
    with the preset file still at 20 steps goes on to 60 (before, it planned 20, trained no step past the step-40
    checkpoint and read finished green)."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "longer.yaml"
    path.write_text(PRESET.format(root=tmp_path))
    assert gw_subprocess("run", "--trust", path, "--headless", timeout=240).returncode == 0
    finished = newest_run()
    continued = relaunch(finished, resume=True, steps=60)  # the monitor's `r` on a finished run
    poll_until(lambda: step_of(continued) >= 45, 180)
    stopped = gw_subprocess("stop", continued.run_id, timeout=120)
    assert stopped.returncode == 0 and continued.status().state == "stopped", stopped.stdout + stopped.stderr
    assert step_of(continued) < 60, "stopped before its end"

    resumed = gw_subprocess("run", "--trust", path, "--headless", "--resume", continued.run_id, timeout=240)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    last = newest_run()
    assert f"run {last.run_id}: 2 x cpu, 60 steps" in resumed.stdout and "finished green" in resumed.stdout
    log = last.log.read_text()
    resumed_at = re.search(r"Resuming from step (40|50) ", log)
    assert resumed_at and "step 60/60" in log, log
    reached, saved = step_of(continued), int(resumed_at[1])
    going_back = f"the run reached step {reached} and its newest checkpoint is at step {saved}: the resume goes back"
    assert (going_back in resumed.stderr) == (reached > saved), (reached, saved, resumed.stderr)
    assert last.status().steps == 60 and last.progress().step == 60
    assert (
        f"warning: longer has optim.steps 20, but run {continued.run_id} trains to 60: the resume keeps 60. Fix: raise "
        "optim.steps above 60 to continue it further." in resumed.stderr
    ), resumed.stderr
