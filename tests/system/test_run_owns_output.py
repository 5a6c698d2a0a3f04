"""Issue 25, data and runs, on real torchrun demo jobs (gloo on CPU) through the real `gpuwizard` entry point: a run
owns its output folder, a resume takes only its own chain's checkpoints, an lr mismatch is no green finish, and an
output folder inside another active run's folders is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwizard.runs.rundir import list_runs
from support.cli import gw_subprocess, poll_until
from support.runs import newest_run

pytestmark = pytest.mark.slow

PRESET = """\
version: 1
name: {name}
trainer: demo
policy: demo
dataset: {{repo_id: demo/so100_reach, root: {root}/dataset}}
hardware: {{gpus: 2, device: cpu}}
batch: {{size: 4}}
optim: {{lr: {lr}, steps: {steps}}}
mixed_precision: "no"
{output}
trainer_options:
  log_every: 5
  save_every: 10
{options}
monitor: {{hang_timeout_s: 30}}
"""


def write(tmp_path: Path, name: str, file: str = "", steps: int = 30, output: str = "", options: str = "", lr="1.0e-3"):
    """A demo preset in a file of its own (two files may hold two variants of one preset)."""
    path = tmp_path / f"{file or name}.yaml"
    path.write_text(PRESET.format(name=name, root=tmp_path, lr=lr, steps=steps, output=output, options=options))
    return path


def test_each_fresh_run_owns_its_folder_and_a_resume_continues_its_own_weights(tmp_path):
    """Two runs of one preset without output_dir: each writes outputs/train/<name>/<run id> and marks it; resuming the
    first (crashed after its step-20 checkpoint) continues its own weights in its own folder, with no word of an
    incomplete checkpoint or an lr mismatch, and says that --gpus 1 halves the effective batch."""
    work = tmp_path / "work"
    work.mkdir()
    crashing = write(tmp_path, "own", file="own-crash", options="  inject_crash: {rank: 1, step: 25}")
    fixed = write(tmp_path, "own")
    first = gw_subprocess("run", "--trust", crashing, "--headless", cwd=work, timeout=240)
    assert first.returncode != 0 and "failed" in first.stdout, first.stdout + first.stderr
    crashed = newest_run()
    second = gw_subprocess("run", "--trust", fixed, "--headless", cwd=work, timeout=240)
    assert second.returncode == 0, second.stdout + second.stderr
    finished = newest_run()
    folders = {run.run_id: Path(run.job().output_dir) for run in (crashed, finished)}
    assert folders == {run_id: (work / "outputs" / "train" / "own" / run_id).resolve() for run_id in folders}
    for run_id, folder in folders.items():
        marker = json.loads((folder.parent / f".{run_id}.gpuwizard-run.json").read_text())
        assert (marker["run_id"], marker["chain"]) == (run_id, run_id)
    assert (folders[finished.run_id] / "checkpoints" / "000030" / "model.pt").is_file()

    resumed = gw_subprocess(
        "run", "--trust", fixed, "--headless", "--resume", crashed.run_id, "--gpus", "1", cwd=work, timeout=240
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    own = folders[crashed.run_id]
    assert f"resuming from {own / 'checkpoints' / '000020'}, continuing run {crashed.run_id}" in resumed.stdout
    assert "incomplete" not in resumed.stderr and "lr mismatch" not in resumed.stdout
    assert (
        f"warning: run {crashed.run_id} trained at an effective batch of 8 samples per update on 2 processes; this "
        "resume trains the rest at 4 on 1 process. Fix: resume on 2 processes (--gpus 2) to keep it, or set "
        "batch.grad_accum to 2." in resumed.stderr
    ), resumed.stderr
    third = newest_run()
    assert (third.job().output_dir, third.job().resume_chain) == (str(own), crashed.run_id)
    log = third.log.read_text()
    assert "Resuming from step 20" in log and "step 30/30" in log and third.status().state == "finished"
    marker = json.loads((own.parent / f".{crashed.run_id}.gpuwizard-run.json").read_text())
    assert (marker["run_id"], marker["chain"]) == (third.run_id, crashed.run_id)


def test_a_fresh_run_into_a_fixed_folder_with_another_runs_checkpoints_is_refused(tmp_path):
    """`plan` says so as an error, and `run` refuses before anything starts, in one paragraph with the fix."""
    out = tmp_path / "out"
    path = write(tmp_path, "fixed", steps=10, output=f"output_dir: {out}")
    assert gw_subprocess("run", "--trust", path, "--headless", timeout=240).returncode == 0
    first = newest_run()
    paragraph = (
        f"fixed: output_dir = '{out}': holds checkpoints written by run {first.run_id}: a fresh run there would "
        "overwrite them, and a later resume would continue from a mix of the two runs. Fix: resume that run with "
        f"`gpuwizard run fixed --resume {first.run_id}`, or choose another output_dir (null gives each run a folder of "
        "its own)."
    )
    planned = gw_subprocess("plan", path)
    assert planned.returncode == 2 and paragraph in planned.stderr.splitlines(), planned.stderr
    again = gw_subprocess("run", "--trust", path, "--headless")
    assert again.returncode == 2 and again.stderr == paragraph + "\n", again.stderr
    assert [e.run.run_id for e in list_runs()] == [first.run_id]


def test_a_resume_takes_no_checkpoint_another_run_wrote_over_its_folder(tmp_path):
    """Run 1 crashed before its first checkpoint; run 2 then trained in the same folder. Resuming run 1 would train
    on run 2's weights (and, at its last step, train none): refused, naming run 2."""
    out = tmp_path / "out"
    crash = "  inject_crash: {rank: 1, step: 3}"
    early = write(tmp_path, "taken", "taken-crash", steps=20, output=f"output_dir: {out}", options=crash)
    fixed = write(tmp_path, "taken", steps=20, output=f"output_dir: {out}")
    assert gw_subprocess("run", "--trust", early, "--headless", timeout=240).returncode != 0
    crashed = newest_run()
    assert gw_subprocess("run", "--trust", fixed, "--headless", timeout=240).returncode == 0, (
        "no checkpoint was in the way"
    )
    other = newest_run()
    refused = gw_subprocess("run", "--trust", fixed, "--headless", "--resume", crashed.run_id)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr == (
        f"taken: --resume = '{crashed.run_id}': {out} was last written by run {other.run_id}, not by run "
        f"{crashed.run_id} or a run resumed from it: its checkpoints are run {other.run_id}'s. Fix: resume that run "
        f"(`--resume {other.run_id}`), or run without --resume to start fresh.\n"
    )
    assert len(list_runs()) == 2


def test_an_lr_mismatch_ends_failed_and_a_resume_that_would_train_none_is_refused(tmp_path):
    """The demo ignores its lr flag: every step ran, at 4x the planned lr. The run reads failed with the mismatch, not
    finished green, in the summary, its status and `runs`; resuming it from its last-step checkpoint would train no
    step and is refused."""
    work = tmp_path / "work"
    work.mkdir()
    path = write(tmp_path, "lr-off", steps=20, options="  ignore_lr_flag: true", lr="2.5e-4")
    result = gw_subprocess("run", "--trust", path, "--headless", cwd=work, timeout=240)
    assert result.returncode == 1, result.stdout + result.stderr
    run = newest_run()
    status = run.status()
    assert (status.state, status.exit_code, status.job_exit_code) == ("failed", 1, 0)
    mismatch = "lr mismatch: the trainer logs 0.001, the plan's schedule says 0.00025 (the job itself exited 0)"
    assert status.error == mismatch and "finished green" not in result.stdout
    assert f"run {run.run_id} failed (job exit code 0): {mismatch}; exit code 1." in result.stdout
    assert json.loads(gw_subprocess("runs", "--json").stdout)[0]["state"] == "failed"

    again = gw_subprocess("run", "--trust", path, "--headless", "--resume", cwd=work)
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    checkpoint = Path(run.job().output_dir, "checkpoints", "000020")
    assert (
        f"lr-off: --resume: the checkpoint it continues from ({checkpoint}) is at step 20, and the plan gives the "
        "trainer 20 steps: resuming would train none. Fix: raise optim.steps (now 20) so the plan goes past step 20, "
        "or run without --resume." in again.stderr
    ), again.stderr
    assert len(list_runs()) == 1


def test_an_output_dir_inside_an_active_runs_folders_is_refused(tmp_path):
    busy = write(tmp_path, "busy", steps=5000, output=f"output_dir: {tmp_path}/busy", options="  step_time_s: 0.05")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(busy), "--headless"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        poll_until(lambda: list_runs() and list_runs()[0].status.state == "running", 120)
        active = newest_run()
        for what, inner in (("output folder", tmp_path / "busy" / "mine"), ("run folder", active.path / "mine")):
            nested = write(tmp_path, "nested", steps=10, output=f"output_dir: {inner}")
            result = gw_subprocess("run", "--trust", nested, "--headless")
            assert result.returncode == 2 and "Traceback" not in result.stderr
            assert result.stderr.startswith("nested: output_dir = '") and result.stderr.count("\n") == 1
            assert result.stderr.endswith(  # a long value is shown shortened
                f": is inside the {what} of run {active.run_id} ({inner.parent}), "
                f"which is still running: the two runs' files would mix, and its trainer may clear or resume from what "
                f"this one writes. Fix: choose an output_dir outside it, or wait for run {active.run_id} to end "
                f"(`gpuwizard stop {active.run_id}` stops it).\n"
            )
        assert len(list_runs()) == 1
    finally:
        gw_subprocess("stop", timeout=120)
        proc.wait(timeout=60)
