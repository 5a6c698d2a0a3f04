"""Real `gpuwizard run` processes for the signal and interrupted-launch tests: a demo preset, a slow interpreter that
widens a start-up step into a window an interrupt can be aimed at, and what a launch left in the data folder
(folders, statuses, processes carrying a run's marker)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from gpuwizard.runs.records import RecordError, Status
from gpuwizard.runs.rundir import RunDir
from support.cli import gw_subprocess
from support.presets import DEMO


def demo_run_preset(tmp_path: Path, name: str, steps: int = 5000, python: str | None = None) -> Path:
    """The demo on two CPU processes, a step every 50 ms; `python` as its launch.python."""
    text = DEMO.format(name=name, gpus=2, steps=steps, root=tmp_path, options="  step_time_s: 0.05", hang=30, lr="1e-3")
    if python is not None:
        text += f"launch: {{python: {python}}}\n"
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def slow_python(tmp_path: Path, delay_s: float = 2.0) -> Path:
    """The test's interpreter behind a start-up delay (as a conda environment on a slow network disk): the trainer
    check and the environment probe of a launch, both run in it, then take that long."""
    path = tmp_path / "slow" / "python"
    path.parent.mkdir(parents=True)
    path.write_text(f'#!/bin/sh\nsleep {delay_s}\nexec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


def gw_run(*args: str, **popen: object) -> subprocess.Popen:
    """`gpuwizard run ARGS` in its own session, stdout and stderr read by the test."""
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", *map(str, args)],
        stdout=popen.pop("stdout", subprocess.PIPE),
        stderr=popen.pop("stderr", subprocess.PIPE),
        stdin=popen.pop("stdin", subprocess.DEVNULL),
        text=True,
        start_new_session=True,
        **popen,  # type: ignore[arg-type]
    )


def entries(data: Path) -> list[Path]:
    runs = data / "runs"
    return sorted(runs.iterdir()) if runs.is_dir() else []


def run_dirs(data: Path) -> list[Path]:
    """The run folders (a hidden entry is a staging folder or a launch being announced)."""
    return [p for p in entries(data) if p.is_dir() and not p.name.startswith(".")]


def hidden(data: Path) -> list[str]:
    return [p.name for p in entries(data) if p.name.startswith(".")]


def status_of(folder: Path) -> Status | None:
    try:
        return RunDir(folder).status()
    except RecordError:
        return None


def marked_under(data: Path) -> list[int]:
    """Live processes carrying the marker of a run of this data folder."""
    from gpuwizard.runner.host.procs import marked_pids

    base = str((data / "runs").resolve())
    return sorted(pid for pid, value in marked_pids().items() if value.startswith(base + "/") and pid != os.getpid())


def stop_everything(data: Path) -> None:
    """Clean-up of a test that left a run going (on purpose or by failing): each sweep's scheduler that still runs
    (it would start more), `gpuwizard stop` of this data folder, then SIGKILL to whatever still carries a marker of it
    (a stop that failed or timed out), so no job is left unseen."""
    stop_schedulers(data)
    if not marked_under(data):
        return
    try:
        gw_subprocess("stop", env={"GPUWIZARD_DATA_DIR": str(data)}, timeout=120)
    except subprocess.TimeoutExpired:
        pass
    kill_marked(data)


def stop_schedulers(data: Path) -> None:
    """Each sweep scheduler of this data folder still running, stopped as `sweep stop` stops it (it carries no run
    marker: each run gets its own)."""
    from gpuwizard.runner.sweep.manage import stop_scheduler
    from gpuwizard.runs.sweeps import SWEEP_FILE, read_sweep

    for folder in sorted((data / "sweeps").glob(f"*/{SWEEP_FILE}")):
        try:
            if (ref := read_sweep(folder.parent).scheduler) is not None and ref.alive():
                stop_scheduler(folder.parent)
        except RecordError:
            continue


def kill_marked(data: Path) -> None:
    """SIGKILL to each process still carrying a marker of this data folder, pinned (never a pid another took)."""
    from gpuwizard.runner.host.procs import Pinned

    for pid in marked_under(data):
        if (pin := Pinned.open(pid)) is not None:
            if pid in marked_under(data):  # read again once pinned: the pid may have been reused
                pin.signal(signal.SIGKILL)
            pin.close()


def stepping(data: Path, at_least: int = 1) -> RunDir | None:
    """The run of this data folder whose job has logged a step, once it has."""
    for folder in run_dirs(data):
        progress = RunDir(folder).progress()
        if progress is not None and (progress.step or 0) >= at_least:
            return RunDir(folder)
    return None


def loaded(pid: int, library: str) -> bool:
    """The process has mapped this extension: past Python's own start-up, importing gpuwizard's modules."""
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
