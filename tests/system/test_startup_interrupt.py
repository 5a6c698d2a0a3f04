"""Ctrl-C at any point of `run --headless` start-up: no traceback, no run left saying 'starting' (it would read
'lost' later), no half-made folder and no process left. A real `gpuwizard run` of the demo, interrupted at several
points found by watching its data folder."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from support.cli import poll_until
from support.launches import demo_run_preset, entries, gw_run, loaded, marked_under, status_of

pytestmark = pytest.mark.slow


def published(data: Path) -> bool:
    return any(status_of(p) is not None for p in entries(data) if not p.name.startswith("."))


def supervisor_recorded(data: Path) -> bool:
    return any((s := status_of(p)) is not None and s.supervisor is not None for p in entries(data))


def job_running(data: Path) -> bool:
    return any((s := status_of(p)) is not None and s.state == "running" for p in entries(data))


def folder_reserved(data: Path) -> bool:
    return bool(entries(data))


POINTS = {  # json: the command line itself; psutil and pydantic_core: planning the run
    "importing-the-cli": lambda data, pid: loaded(pid, "/_json."),
    "importing-psutil": lambda data, pid: loaded(pid, "/_psutil_linux."),
    "importing-pydantic": lambda data, pid: loaded(pid, "/_pydantic_core."),
    "folder-reserved": lambda data, pid: folder_reserved(data),
    "published": lambda data, pid: published(data),
    "supervisor-recorded": lambda data, pid: supervisor_recorded(data),
    "job-running": lambda data, pid: job_running(data),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_ctrl_c_at_any_point_of_start_up_leaves_a_final_record_and_nothing_running(tmp_path, point):
    data = tmp_path / "data"
    proc = gw_run(demo_run_preset(tmp_path, "demo-int"), "--headless")
    try:
        reached = POINTS[point]
        poll_until(lambda: reached(data, proc.pid) or proc.poll() is not None, 120, every=0.002)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode in (4, 130), out + err
    assert "Traceback" not in err and "Traceback" not in out, out + err
    folders = entries(data)
    assert [p.name for p in folders if p.name.startswith(".")] == [], "no staging folder is left"
    for folder in folders:
        assert any(folder.iterdir()), f"an empty reserved folder is left: {folder.name}"
        status = status_of(folder)
        assert status is not None and status.final, f"{folder.name} still says {status and status.state}"
    poll_until(lambda: marked_under(data) == [], 30, lambda: marked_under(data))
