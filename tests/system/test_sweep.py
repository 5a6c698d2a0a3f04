"""Issue 27, done when: a 4-run demo sweep (2 learning rates x 2 seeds, 1 process each, on the CPU) runs at most 2 at
a time on 2 cores, each run in its own output folder, and ends with the comparison; a scheduler killed with -9 and
`sweep resume` finish the runs left, one from its checkpoint; `sweep stop` leaves no process of any run. Real
scheduler, supervisors, torchrun jobs and `gpuwizard` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwizard.model.preset_files import load_preset
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.sweeps import Sweep, read_sweep, sweeps_dir
from support.cli import poll_until
from support.launches import marked_under
from support.presets import swept_preset

pytestmark = pytest.mark.slow

GRID = ("--set", "optim.lr=1e-4,2e-4", "--seeds", "2")
WAIT_S = 420


def on_two_cores() -> None:
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])


def gw(tmp_path: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """The real command in a child pinned to 2 cores, from the test's folder (relative output folders land there)."""
    return subprocess.run(
        [sys.executable, "-m", "gpuwizard", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        preexec_fn=on_two_cores,
    )


def started(tmp_path: Path, steps: int, step_time: float) -> Path:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 cores")
    swept_preset(tmp_path, steps, step_time)
    result = gw(tmp_path, "sweep", "swept", *GRID)
    assert result.returncode == 0, result.stdout + result.stderr
    (folder,) = sweeps_dir().iterdir()
    assert folder.name in result.stdout
    return folder


def sweep(folder: Path) -> Sweep:
    return read_sweep(folder)


def runs_of(folder: Path) -> list[RunDir]:
    return [RunDir(Path(r.run_path)) for r in sweep(folder).runs if r.run_path]


def with_checkpoint(run: RunDir) -> bool:
    progress = run.progress()
    return progress is not None and progress.checkpoints >= 1


def test_four_runs_two_at_a_time_each_in_its_own_folder_then_compared(tmp_path):
    folder = started(tmp_path, steps=40, step_time=0.25)
    most = 0

    def ended() -> bool:
        nonlocal most
        record = sweep(folder)
        most = max(most, sum(r.state in ("starting", "running") for r in record.runs))
        return record.ended

    poll_until(ended, WAIT_S, lambda: sweep(folder).model_dump_json(indent=1))
    record = sweep(folder)
    assert [r.state for r in record.runs] == ["finished"] * 4, [r.error for r in record.runs]
    assert most <= 2, f"{most} runs at once on 2 cores"
    statuses = [run.status() for run in runs_of(folder)]
    spans = [(s.started or s.created, s.ended or 0.0) for s in statuses]
    overlap = max(sum(a <= t < b for a, b in spans) for t, _ in spans)
    assert overlap == 2, f"2 cores hold 2 one-process runs at once: {spans}"
    outputs = {run.job().output_dir for run in runs_of(folder)}
    assert len(outputs) == 4 and all(o and Path(o, "checkpoints", "last").exists() for o in outputs), outputs
    commands = sorted(s.command for s in statuses)
    assert sum("--seed=1" in c for c in commands) == 2 and sum("--lr=0.0002" in c for c in commands) == 2

    shown = gw(tmp_path, "sweep", "status", folder.name)
    assert shown.returncode == 0, shown.stderr
    assert (
        "loss@eq" in shown.stdout
        and "best by final loss (smoothed): #" in shown.stdout
        and "best run: " in shown.stdout
    ), shown.stdout
    assert all(run.run_id in shown.stdout for run in runs_of(folder))
    assert marked_under(tmp_path / "data") == []

    listed = gw(tmp_path, "runs", "--sweep", folder.name)
    assert listed.returncode == 0, listed.stderr
    ids = {r.run_id for r in record.runs}
    lines = [line for line in listed.stdout.splitlines() if line.split()[:1] and line.split()[0] in ids]
    assert len(lines) == 4 and all(s.sweep == folder.name for s in statuses), listed.stdout
    for index, r in enumerate(record.runs):
        (line,) = [line for line in lines if line.startswith(r.run_id or "?")]
        assert f"#{index + 1} lr={r.values['optim.lr']}, seed={r.values['trainer_options.seed']}" in line, line

    best_id = next(line.split()[-1] for line in shown.stdout.splitlines() if line.startswith("best run: "))
    best = next(r for r in record.runs if r.run_id == best_id)
    saved = gw(tmp_path, "sweep", "status", folder.name, "--save-best", "swept-best")
    assert saved.returncode == 0 and "saved the best run's preset as swept-best" in saved.stdout, saved.stderr
    kept = load_preset("swept-best")
    assert kept.optim.lr == best.values["optim.lr"] and kept.output_dir is None
    assert kept.options.seed == best.values["trainer_options.seed"] and folder.name in kept.description
    again = gw(tmp_path, "sweep", "status", folder.name, "--save-best", "swept-best")
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr
    assert load_preset("swept-best") == kept, "the saved preset is never replaced"


def test_a_killed_scheduler_and_resume_finish_the_runs_left(tmp_path):
    folder = started(tmp_path, steps=80, step_time=0.15)
    poll_until(lambda: len(runs_of(folder)) == 2 and all(map(with_checkpoint, runs_of(folder))), WAIT_S)
    scheduler = sweep(folder).scheduler
    assert scheduler is not None
    os.kill(scheduler.pid, signal.SIGKILL)
    poll_until(lambda: not scheduler.alive(), 30)
    first = runs_of(folder)[0]
    stopped = gw(tmp_path, "stop", first.run_id)  # one run ends half way, with a checkpoint to continue from
    assert stopped.returncode == 0 and first.status().state == "stopped", stopped.stdout + stopped.stderr
    assert [r.state for r in sweep(folder).runs][2:] == ["queued", "queued"], "nothing started without its scheduler"
    assert "not running" in gw(tmp_path, "sweep", "status", folder.name).stdout

    resumed = gw(tmp_path, "sweep", "resume", folder.name)
    assert resumed.returncode == 0 and "1 continue from their checkpoints" in resumed.stdout, resumed.stdout
    poll_until(lambda: sweep(folder).ended, WAIT_S, lambda: sweep(folder).model_dump_json(indent=1))
    record = sweep(folder)
    assert [r.state for r in record.runs] == ["finished"] * 4, [r.error for r in record.runs]
    again = record.runs[0]
    assert again.resume_from == first.run_id and again.run_id != first.run_id
    continued = RunDir(Path(again.run_path or ""))
    assert continued.status().resumed_from == first.run_id
    assert "Resuming from step" in continued.log.read_text()
    assert record.runs[1].run_id == runs_of(folder)[1].run_id, "the run that went on under its supervisor is kept"
    assert marked_under(tmp_path / "data") == []


def test_stop_ends_the_scheduler_and_every_run(tmp_path):
    folder = started(tmp_path, steps=2000, step_time=0.05)
    poll_until(lambda: len(runs_of(folder)) == 2 and all(r.progress() for r in runs_of(folder)), WAIT_S)
    scheduler = sweep(folder).scheduler
    assert scheduler is not None and scheduler.alive(), "it outlived the `sweep` command that started it"
    assert os.getsid(scheduler.pid) == scheduler.pid, "a session of its own: no terminal, no SIGHUP on an SSH drop"
    stopped = gw(tmp_path, "sweep", "stop", folder.name)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "nothing of it is left" in stopped.stdout
    assert marked_under(tmp_path / "data") == [], "no process of any run of the sweep"
    assert not scheduler.alive()
    assert [r.state for r in sweep(folder).runs] == ["stopped"] * 4
    assert all(run.status().state == "stopped" for run in runs_of(folder))
