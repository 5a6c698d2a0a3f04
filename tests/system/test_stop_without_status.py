"""A run whose processes are alive is stoppable by id and by default whatever is missing from its folder or its
supervisor: the marker its processes carry and its cgroup are the truth, not status.json. Real runs under their real
supervisors (status deleted while the demo trains; a daemon that shed the marker; a supervisor frozen with SIGSTOP),
and a real `gpuwizard stop` or the runner/stopping.stop_run it prints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from gpuwizard.cli.runs import said
from gpuwizard.runner.control.stopping import StopNote, marked_runs, stop_run
from gpuwizard.runner.host.procs import MARKER
from support.cli import gw_subprocess, poll_until
from support.launches import demo_run_preset, gw_run, marked_under, stepping
from support.runs import hand_made_run, start_supervisor

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("named", [False, True], ids=["newest", "by-id"])
def test_a_run_whose_status_was_deleted_is_stopped_with_every_process_of_it(tmp_path, named):
    data = tmp_path / "data"
    client = gw_run(demo_run_preset(tmp_path, "no-status"), "--headless")
    try:
        poll_until(lambda: stepping(data, at_least=3) is not None, 180, "the job steps")
        run = stepping(data)
        poll_until(lambda: len(marked_under(data)) >= 4, 60, "supervisor, torchrun and both ranks")
        os.kill(client.pid, signal.SIGKILL)  # nobody follows it any more
        client.communicate(timeout=60)
        (run.path / "status.json").unlink()
        listed = gw_subprocess("runs", timeout=60)
        assert listed.returncode == 0 and "Traceback" not in listed.stdout + listed.stderr
        row = next(line for line in listed.stdout.splitlines() if line.startswith(run.run_id))
        assert "corrupt" in row and f"`gpuwizard stop {run.run_id}` ends them" in row, row
        stopped = gw_subprocess("stop", *([run.run_id] if named else []), timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"run {run.run_id}: its status cannot be read" in stopped.stdout, stopped.stdout
        assert "nothing of it is left" in stopped.stdout
        assert marked_under(data) == [], "a fresh look finds nothing of it"
        again = gw_subprocess("stop", timeout=60)
        assert again.returncode == 0 and again.stdout == "no active run to stop\n", again.stdout + again.stderr
    finally:
        if client.poll() is None:
            client.kill()
        for pid in marked_under(data):
            os.kill(pid, signal.SIGKILL)


DAEMON = (
    "import os, sys, time\n"
    "from pathlib import Path\n"
    "done = Path(sys.argv[1])\n"
    "done.with_suffix('.tmp').write_text(str(os.getpid()))\n"
    "os.replace(done.with_suffix('.tmp'), done)\n"
    "time.sleep(600)\n"
)

SHEDS_THE_MARKER = f"""
import os, sys, time
if os.fork() == 0:  # a daemon in a session of its own, started again with a clean environment: no run marker
    os.setsid()
    if os.fork() == 0:
        os.execve(sys.executable, [sys.executable, "-c", {DAEMON!r}, sys.argv[1]], {{}})
    os._exit(0)
os.wait()
for step in range(1, 100000):
    print(f"[demo] step {{step}}/100000 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
    time.sleep(0.1)
"""


def test_a_process_that_shed_the_marker_is_found_by_the_runs_cgroup_and_stopped(tmp_path):
    """The supervisor is killed (-9) and the job's root goes with it; what is left is a daemon whose environment no
    longer names the run: `stop` finds it in the run's cgroup and ends it."""
    from gpuwizard.runner.host.cgroup import JobCgroup
    from gpuwizard.runner.host.procs import read_environ

    script, pid_file = tmp_path / "sheds.py", tmp_path / "daemon.pid"
    script.write_text(SHEDS_THE_MARKER)
    run = hand_made_run(
        tmp_path / "data" / "runs" / "20261201-000000-shed", [sys.executable, str(script), str(pid_file)]
    )
    supervisor = start_supervisor(run.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    daemon: psutil.Process | None = None
    try:
        poll_until(pid_file.exists, 120, "the daemon started")
        daemon = psutil.Process(int(pid_file.read_text()))
        if JobCgroup.of_process(daemon.pid) is None:
            pytest.skip("this machine lends no writable cgroup v2 sub-tree")
        assert MARKER not in read_environ(daemon.pid), "the daemon carries no marker"
        job = psutil.Process(run.status().job.pid)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait(timeout=30)
        poll_until(lambda: not alive(job), 30, "the job's root stops with its supervisor")
        assert alive(daemon)
        stopped = gw_subprocess("stop", run.run_id, timeout=120)
        assert stopped.returncode == 0 and "nothing of it is left" in stopped.stdout, stopped.stdout + stopped.stderr
        assert not alive(daemon), "the daemon is ended, found by the cgroup it cannot leave"
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        if daemon is not None and alive(daemon):
            daemon.kill()


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


STEPS = """
import time
for step in range(1, 100000):
    print(f"[demo] step {step}/100000 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
    time.sleep(0.1)
"""


def test_a_stop_its_supervisor_does_not_answer_ends_every_process_from_here(tmp_path, capsys):
    """The supervisor is frozen (SIGSTOP), its folder whole: the stop asks it, waits its limit (3 s here, 30 s in
    `gpuwizard stop`), then ends every process of the run from here, the supervisor included, and says so."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    run = hand_made_run(tmp_path / "data" / "runs" / "20261201-000000-frozen", [sys.executable, str(script)])
    supervisor = start_supervisor(run.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    job: list[psutil.Process] = []
    try:
        poll_until(lambda: (p := run.progress()) is not None and (p.step or 0) >= 2, 120, "it steps")
        root = psutil.Process(run.status().job.pid)
        job = [root, *root.children(recursive=True)]
        os.kill(supervisor.pid, signal.SIGSTOP)
        notes: list[StopNote] = []
        started = time.monotonic()
        result = stop_run(run.run_id, wait_s=3.0, on_note=notes.append)
        assert time.monotonic() - started >= 3.0, "the supervisor was waited for first"
        assert result is not None and result.outcome == "ended_here", result
        assert result.survivors == [] and result.run_id == run.run_id and notes == []
        poll_until(lambda: supervisor.poll() is not None, 30, "the frozen supervisor is ended too")
        assert not any(alive(p) for p in job)
        assert run.path.resolve() not in marked_runs(), "nothing carries its marker"
        assert said(result) == 0
        assert capsys.readouterr().out == (
            f"run {run.run_id} stopped (its supervisor did not answer, so every process was ended here); "
            "nothing of it is left\n"
        )
    finally:
        if supervisor.poll() is None:
            os.kill(supervisor.pid, signal.SIGCONT)
            supervisor.kill()
        for proc in job:
            if alive(proc):
                proc.kill()
