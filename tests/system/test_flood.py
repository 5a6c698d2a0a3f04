"""A job that floods its log never starves its supervisor: progress.json keeps its heartbeat, the job's end and its own
exit code are recorded soon after it, and a stop sent as it ends finds a supervisor that answers. Real supervisors on
a real flooding job (bench/flood_job.py), about 1.5 GB of log each, deleted after."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpuwizard.runs.rundir import RunDir
from support.cli import gw_subprocess, poll_until
from support.data import REPO
from support.runs import hand_made_run, start_supervisor

pytestmark = pytest.mark.slow

FLOOD_JOB = REPO / "bench" / "flood_job.py"
RATE, SECONDS = "5000000", "6"
"""Lines a second, for this long: far more than a supervisor parses on a 2-core machine."""
MAX_GAP_S = 12.0
"""Generous, for a loaded machine: progress.json is written every 0.5 s; before the fix it stalled for the whole
backlog (20-30 s here)."""


def start_flood(tmp_path: Path, name: str) -> tuple[RunDir, Path, subprocess.Popen]:
    done = tmp_path / "done.json"
    argv = [sys.executable, str(FLOOD_JOB), "--rate", RATE, "--seconds", SECONDS, "--done", str(done)]
    run = hand_made_run(tmp_path / "data" / "runs" / f"20261202-000000-{name}", argv)
    sup = start_supervisor(run.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return run, done, sup


def end(run: RunDir, sup: subprocess.Popen) -> None:
    """Never leave a supervisor behind, nor gigabytes of log in pytest's kept temporary folders."""
    if sup.poll() is None:
        sup.kill()
        sup.wait()
    run.log.unlink(missing_ok=True)


def ended(pid: int) -> bool:
    """The job has exited (a zombie until its supervisor reaps it): a stop now comes after its own end."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def final(run: RunDir) -> bool:
    return run.status().final


def test_a_flooding_job_keeps_progress_fresh_and_its_end_is_recorded_at_once(tmp_path):
    run, done, sup = start_flood(tmp_path, "flood")
    progress = run.path / "progress.json"
    try:
        gap, last, finished_at = 0.0, None, None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not final(run):
            try:
                mtime = progress.stat().st_mtime
            except FileNotFoundError:
                mtime = None
            if mtime is not None and mtime != last:
                gap = max(gap, mtime - last) if last is not None else gap
                last = mtime
            if last is not None and not done.exists():  # while the job floods, measured as it happens
                gap = max(gap, time.time() - last)
            time.sleep(0.05)
        status = run.status()
        assert status.final, f"no final status after 300 s: {status.state}"
        job_end = json.loads(done.read_text())
        finished_at = status.ended - job_end["ended"]
        assert status.state == "finished" and status.exit_code == 0 and status.job_exit_code == 0, status
        assert finished_at < MAX_GAP_S, f"the end was recorded {finished_at:.1f} s after the job ended"
        assert gap < MAX_GAP_S, f"progress.json went {gap:.1f} s without an update during the flood"
        p = run.progress()
        assert p is not None and (p.step or 0) > 0
        assert [e.title for e in run.events()[0] if e.kind in ("hang_suspected", "slow_progress")] == []
        sampled = [e for e in run.events()[0] if e.kind == "output_sampled"]
        if not sampled:  # what it did not parse, it says; what it says nothing about, it counted
            assert p.lines == job_end["lines"], f"{p.lines} of {job_end['lines']} lines counted and nothing said"
        else:
            assert "lines not parsed" in sampled[-1].title and sampled[-1].data["lines"] > 0
        sup.wait(timeout=60)
    finally:
        end(run, sup)


def test_a_stop_sent_as_a_flooding_job_ends_keeps_its_exit_code(tmp_path):
    run, done, sup = start_flood(tmp_path, "flood-stop")
    try:
        poll_until(done.exists, 120, "the flooding job never ended")
        poll_until(lambda: ended(run.status().job.pid), 60, "the job never exited")
        stopped = gw_subprocess("stop", run.run_id, timeout=120)
        said = stopped.stdout + stopped.stderr
        assert stopped.returncode == 0 and "did not answer" not in said, said
        status = run.status()
        assert status.final and status.state != "lost", status
        assert status.job_exit_code == 0 and status.exit_code == 0 and status.state == "finished", status
        sup.wait(timeout=60)
    finally:
        end(run, sup)
