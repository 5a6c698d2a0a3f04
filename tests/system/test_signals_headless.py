"""What each signal means to a headless `gpuwizard run`, sent for real to real demo runs (torchrun, gloo on CPU):
SIGTERM (a scheduler's time limit, `timeout`, CI) stops the run like Ctrl-C and exits 4 once the stop is recorded, at
any point of the start-up too; SIGHUP (an SSH drop) and the reader of the output going away detach, and the run goes
on where `attach` finds it; `--detach` returns at once with the run's id."""

from __future__ import annotations

import os
import signal
import subprocess

import psutil
import pytest

from gpuwizard.runs.rundir import RunDir
from support.cli import gw_subprocess, poll_until
from support.launches import (
    demo_run_preset,
    gw_run,
    hidden,
    loaded,
    marked_under,
    run_dirs,
    slow_python,
    status_of,
    stepping,
    stop_everything,
)

pytestmark = pytest.mark.slow


def in_slow_python(pid: int) -> bool:
    """The run process waits on the slow interpreter (the trainer check, or the environment probe)."""
    try:
        return any("slow/python" in " ".join(c.cmdline()) for c in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False


def ended(proc: subprocess.Popen, timeout: float = 180) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_sigterm_stops_a_headless_run_and_exits_4_once_the_stop_is_recorded(tmp_path):
    data = tmp_path / "data"
    proc = gw_run(demo_run_preset(tmp_path, "term"), "--headless")
    try:
        poll_until(lambda: stepping(data) is not None, 180, "the job steps")
        run = stepping(data)
        os.kill(proc.pid, signal.SIGTERM)  # what `timeout` and a scheduler's time limit send
        out, err = ended(proc)
        status = run.status()  # read at once: recorded before the command exits
        assert proc.returncode == 4, out + err
        assert "SIGTERM: stopping the job" in out and "stopped by the user" in out, out
        assert status.state == "stopped" and status.exit_code == 4
        assert "Traceback" not in out + err
        poll_until(lambda: marked_under(data) == [], 30, lambda: marked_under(data))
    finally:
        stop_everything(data)


POINTS = {
    "importing-pydantic": lambda data, pid: loaded(pid, "/_pydantic_core."),
    "checking-the-command": lambda data, pid: not run_dirs(data) and in_slow_python(pid),
    "folder-reserved": lambda data, pid: bool(run_dirs(data)),
    "published": lambda data, pid: any(status_of(p) is not None for p in run_dirs(data)),
    "supervisor-recorded": lambda data, pid: any(
        (s := status_of(p)) is not None and s.supervisor is not None for p in run_dirs(data)
    ),
    "job-running": lambda data, pid: any(
        (s := status_of(p)) is not None and s.state == "running" for p in run_dirs(data)
    ),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_sigterm_at_any_point_of_start_up_leaves_a_final_record_or_nothing(tmp_path, point):
    """The interpreter takes 2 s to start (so the trainer check and the environment probe are windows of their own);
    SIGTERM to the `run` process alone, as `timeout` sends it."""
    data = tmp_path / "data"
    proc = gw_run(demo_run_preset(tmp_path, "term-start", python=str(slow_python(tmp_path))), "--headless")
    try:
        reached = POINTS[point]
        poll_until(lambda: reached(data, proc.pid) or proc.poll() is not None, 180, every=0.002)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = ended(proc)
        assert "Traceback" not in out + err, out + err
        if proc.returncode == -signal.SIGTERM:  # before its handler was in: nothing had been made yet
            assert run_dirs(data) == [], out + err
        else:
            assert proc.returncode in (4, 128 + signal.SIGTERM), (proc.returncode, out + err)
        assert hidden(data) == [], "no staging folder or launch announcement is left"
        for folder in run_dirs(data):
            status = status_of(folder)
            assert status is not None and status.final, f"{folder.name} says {status and status.state}"
            assert proc.returncode == 4, "a run was made: its stop is the exit code"
        poll_until(lambda: marked_under(data) == [], 60, lambda: marked_under(data))
    finally:
        stop_everything(data)


def test_sighup_detaches_and_the_run_goes_on_where_attach_finds_it(tmp_path):
    data = tmp_path / "data"
    proc = gw_run(demo_run_preset(tmp_path, "hup", steps=200), "--headless")
    try:
        poll_until(lambda: stepping(data) is not None, 180)
        run = stepping(data)
        os.kill(proc.pid, signal.SIGHUP)  # the SSH session dropped
        out, err = ended(proc)
        assert proc.returncode == 0, out + err
        assert "SIGHUP" in err and "detached, the run goes on" in err and f"gpuwizard attach {run.run_id}" in err
        assert run.is_active(), "the run outlives the hangup"
        attached = gw_subprocess("attach", "--headless", timeout=300)
        assert attached.returncode == 0, attached.stdout + attached.stderr
        assert f"attached to {run.run_id}" in attached.stdout and "finished green" in attached.stdout
    finally:
        stop_everything(data)


def test_the_reader_of_the_output_going_away_detaches(tmp_path):
    """`gpuwizard run ... | head -3`: once the reader has gone, the run goes on and the command says so on stderr."""
    data = tmp_path / "data"
    proc = gw_run(demo_run_preset(tmp_path, "reader"), "--headless")
    try:
        poll_until(lambda: stepping(data) is not None, 180)
        run = stepping(data)
        proc.stdout.close()  # the reader goes; the next status line meets a broken pipe
        err = proc.stderr.read()
        proc.wait(timeout=60)
        assert proc.returncode == 0, err
        assert "the output's reader went away: detached, the run goes on" in err, err
        assert "Traceback" not in err and "Exception ignored" not in err, err
        assert run.is_active()
    finally:
        stop_everything(data)


def test_detach_prints_the_run_id_and_returns_while_the_run_goes_on(tmp_path):
    data = tmp_path / "data"
    try:
        started = gw_subprocess("run", "--trust", demo_run_preset(tmp_path, "detached"), "--detach", timeout=180)
        assert started.returncode == 0, started.stdout + started.stderr
        (folder,) = run_dirs(data)
        assert started.stdout == folder.name + "\n", "stdout holds only the run id"
        assert f"gpuwizard attach {folder.name}" in started.stderr
        run = RunDir(folder)
        assert run.is_active() and run.status().state == "running"
        stopped = gw_subprocess("stop", folder.name, timeout=120)
        assert stopped.returncode == 0 and "nothing of it is left" in stopped.stdout, stopped.stdout + stopped.stderr
    finally:
        stop_everything(data)
