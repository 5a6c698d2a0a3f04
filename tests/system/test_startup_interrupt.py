"""Ctrl-C at any point of `run --headless` start-up: no traceback, no run left saying 'starting' (it would read
'lost' later), no half-made folder and no process left. A real `gpuwizard run` of the demo, interrupted at several
points found by watching its data folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwizard.runs.records import RecordError
from gpuwizard.runs.rundir import RunDir
from support.cli import wait_for
from support.presets import DEMO

pytestmark = pytest.mark.slow


def run_folders(data: Path) -> list[Path]:
    runs = data / "runs"
    return sorted(runs.iterdir()) if runs.is_dir() else []


def status_of(folder: Path):
    try:
        return RunDir(folder).status()
    except RecordError:
        return None


def published(data: Path) -> bool:
    return any(status_of(p) is not None for p in run_folders(data) if not p.name.startswith("."))


def supervisor_recorded(data: Path) -> bool:
    return any((s := status_of(p)) is not None and s.supervisor is not None for p in run_folders(data))


def job_running(data: Path) -> bool:
    return any((s := status_of(p)) is not None and s.state == "running" for p in run_folders(data))


def folder_reserved(data: Path) -> bool:
    return bool(run_folders(data))


def marked_processes(data: Path) -> list[int]:
    from gpuwizard.runner.host.procs import marked_pids

    base = str((data / "runs").resolve())
    return [pid for pid, value in marked_pids().items() if value.startswith(base + "/")]


def loaded(library: str):
    """The run process has mapped this extension: it is past Python's own start-up and importing gpuwizard's
    modules (json: the command line itself; psutil and pydantic_core: planning the run)."""

    def check(data: Path, pid: int) -> bool:
        try:
            return library in Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            return False

    return check


POINTS = {
    "importing-the-cli": loaded("/_json."),
    "importing-psutil": loaded("/_psutil_linux."),
    "importing-pydantic": loaded("/_pydantic_core."),
    "folder-reserved": lambda data, pid: folder_reserved(data),
    "published": lambda data, pid: published(data),
    "supervisor-recorded": lambda data, pid: supervisor_recorded(data),
    "job-running": lambda data, pid: job_running(data),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_ctrl_c_at_any_point_of_start_up_leaves_a_final_record_and_nothing_running(tmp_path, point):
    preset = tmp_path / "demo-int.yaml"
    preset.write_text(
        DEMO.format(
            name="demo-int", gpus=2, steps=5000, root=tmp_path, options="  step_time_s: 0.05", hang=30, lr="1.0e-3"
        )
    )
    data = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(preset), "--headless"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        reached = POINTS[point]
        assert wait_for(lambda: reached(data, proc.pid) or proc.poll() is not None, timeout=120, every=0.002)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode in (4, 130), out + err
    assert "Traceback" not in err and "Traceback" not in out, out + err
    folders = run_folders(data)
    assert [p.name for p in folders if p.name.startswith(".")] == [], "no staging folder is left"
    for folder in folders:
        assert any(folder.iterdir()), f"an empty reserved folder is left: {folder.name}"
        status = status_of(folder)
        assert status is not None and status.final, f"{folder.name} still says {status and status.state}"
    assert wait_for(lambda: marked_processes(data) == [], timeout=30), marked_processes(data)
