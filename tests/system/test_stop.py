"""A stop stops everything: daemonised grandchildren, a job whose run folder was deleted, and never a process that
took a reaped pid. Real supervisors, real torchrun and real `gpuwizard stop` processes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from gpuwizard.runner.host.procs import read_environ
from gpuwizard.runs.rundir import RunDir
from support.cli import gw_subprocess, poll_until
from support.launches import demo_run_preset, gw_run
from support.runs import hand_made_run, start_supervisor

pytestmark = pytest.mark.slow

TORCHRUN = str(Path(sys.executable).parent / "torchrun")

STEPS = """
import sys, time
for step in range(1, 100000):
    print(f"[demo] step {step}/100000 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
    time.sleep(0.1)
"""

DAEMONISING_RANK = (
    """
import os, signal, sys, time
from pathlib import Path
rank = os.environ.get("RANK", "0")
if os.fork() == 0:  # the classic double fork: a child in its own session, re-parented away from the job
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        Path(sys.argv[1], f".daemon-{rank}").write_text(str(os.getpid()))
        os.replace(Path(sys.argv[1], f".daemon-{rank}"), Path(sys.argv[1], f"daemon-{rank}.pid"))
        while True:
            time.sleep(1)
    os._exit(0)
os.wait()
"""
    + STEPS
)

NO_CGROUP_SUPERVISOR = """
import sys
from gpuwizard.runner.host import cgroup
cgroup.JobCgroup.create = classmethod(lambda cls, name: None)  # as on a machine that lends no cgroup
from gpuwizard.runner.supervise.supervisor import main
raise SystemExit(main(sys.argv[1:]))
"""


def can_make_cgroups() -> bool:
    from gpuwizard.runner.host.cgroup import JobCgroup

    group = JobCgroup.create("probe")
    if group is None:
        return False
    group.remove()
    return True


def supervisor_of(run_path: Path, cgroup: bool = True) -> subprocess.Popen:
    """The real supervisor, or one whose job gets no cgroup (NO_CGROUP_SUPERVISOR), its output read by the test."""
    args = () if cgroup else ("-c", NO_CGROUP_SUPERVISOR)
    return start_supervisor(run_path, args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def delete_folder(path: Path) -> None:
    """rm -rf, again if the supervisor wrote a file into the folder meanwhile (rm would say 'Directory not empty')."""
    poll_until(lambda: shutil.rmtree(path, ignore_errors=True) or not path.exists(), 30, every=0.01)


def marked_with(path: Path) -> list[int]:
    """Every process whose environment names this run folder (however the supervisor spelled the marker)."""
    wanted = str(path.resolve())
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            env = read_environ(int(entry.name))
            if any(value == wanted for key, value in env.items() if key.startswith("GPUWIZARD_RUN")):
                found.append(int(entry.name))
    return found


def running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def job_processes(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def kill_all(procs: list[psutil.Process], run_path: Path | None = None) -> None:
    """Clean-up after a failed check: the given processes and every one carrying the run's marker."""
    marked = [psutil.Process(pid) for pid in marked_with(run_path)] if run_path is not None else []
    for proc in [*procs, *marked]:
        if running(proc):
            proc.kill()


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "marker-only"])
def test_stop_ends_ranks_daemonised_grandchildren(tmp_path, cgroup):
    """Each torchrun rank double-forks a SIGTERM-ignoring child with its own session; `stop` leaves none of them,
    and says "nothing of it is left" only once that is so."""
    if cgroup and not can_make_cgroups():
        pytest.skip("this machine lends no writable cgroup v2 sub-tree")
    script = tmp_path / "rank.py"
    script.write_text(DAEMONISING_RANK)
    out = tmp_path / "pids"
    out.mkdir()
    run = hand_made_run(
        tmp_path / "data" / "runs" / "20261201-000000-daemons",
        [TORCHRUN, "--standalone", "--nproc-per-node=2", str(script), str(out)],
        world_size=2,
    )
    sup = supervisor_of(run.path, cgroup)
    daemons: list[psutil.Process] = []
    try:
        poll_until(lambda: len(list(out.glob("daemon-*.pid"))) == 2, 120, lambda: sup.stdout)
        daemons = [psutil.Process(int(p.read_text())) for p in sorted(out.glob("daemon-*.pid"))]
        assert all(d.ppid() != run.status().job.pid for d in daemons), "the daemons left the job's tree"
        poll_until(lambda: run.progress() is not None and (run.progress().step or 0) >= 2, 60)
        stopped = gw_subprocess("stop", run.run_id, timeout=120)
        sup.wait(timeout=60)
        left = [d.pid for d in daemons if running(d)]
        assert left == [], f"daemons still alive after stop: {left}; stop said: {stopped.stdout}{stopped.stderr}"
        assert stopped.returncode == 0 and "nothing of it is left" in stopped.stdout, stopped.stdout + stopped.stderr
        assert run.status().state == "stopped" and run.status().survivors == []
        assert marked_with(run.path) == []
    finally:
        kill_all(daemons, run.path)
        if sup.poll() is None:
            sup.kill()


def test_the_supervisor_stops_the_job_when_its_run_folder_is_deleted(tmp_path):
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    run = hand_made_run(tmp_path / "data" / "runs" / "20261201-000000-deleted", [sys.executable, str(script)])
    sup = supervisor_of(run.path)
    job: list[psutil.Process] = []
    try:
        poll_until(lambda: run.progress() is not None and (run.progress().step or 0) >= 3, 60)
        job = job_processes(run.status().job.pid)
        delete_folder(run.path)
        poll_until(lambda: sup.poll() is not None, 60, "the supervisor noticed its folder is gone")
        poll_until(lambda: not any(running(p) for p in job), 30, "and stopped the job")
        assert not run.path.exists(), "nothing wrote the folder back (a run folder holding only progress.json)"
        assert "Traceback" not in sup.stdout.read()
    finally:
        kill_all(job, run.path)
        if sup.poll() is None:
            sup.kill()


@pytest.mark.parametrize("named", [False, True], ids=["newest", "by-id"])
def test_stop_finds_and_ends_a_job_whose_folder_was_deleted(tmp_path, named):
    """The supervisor cannot act (stopped with SIGSTOP) and the folder is gone: `stop` finds the run by the marker
    its processes carry, and ends every one of them, the supervisor included."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    run = hand_made_run(tmp_path / "data" / "runs" / "20261201-000000-frozen", [sys.executable, str(script)])
    sup = supervisor_of(run.path)
    job: list[psutil.Process] = []
    try:
        poll_until(lambda: run.progress() is not None and (run.progress().step or 0) >= 3, 60)
        job = job_processes(run.status().job.pid)
        os.kill(sup.pid, signal.SIGSTOP)
        delete_folder(run.path)
        stopped = gw_subprocess("stop", *([run.run_id] if named else []), timeout=120)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert f"run {run.run_id}" in stopped.stdout and "folder was deleted" in stopped.stdout, stopped.stdout
        assert "nothing of it is left" in stopped.stdout
        poll_until(lambda: sup.poll() is not None, 30)
        assert not any(running(p) for p in job)
        assert marked_with(run.path) == []
    finally:
        kill_all(job, run.path)
        if sup.poll() is None:
            os.kill(sup.pid, signal.SIGCONT)
            sup.kill()


def take_pid(pid: int, argv: list[str]) -> subprocess.Popen | None:
    """Start `argv` as process `pid` (just freed): the kernel hands out the pid after ns_last_pid next."""
    for _ in range(300):
        try:
            Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        except OSError:
            return None
        proc = subprocess.Popen(argv, start_new_session=True)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


UNRELATED = """
import signal, sys, time
from pathlib import Path
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # a SIGTERM sent stays pending: seen without a wait
Path(sys.argv[1]).write_text("ready")
time.sleep(120)
"""


def pending_signals(pid: int) -> set[int]:
    """Signals sent to a process and not yet delivered (its blocked ones stay there)."""
    masks = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("SigPnd", "ShdPnd"):
            masks[key] = int(value.strip(), 16)
    bits = masks["SigPnd"] | masks["ShdPnd"]
    return {n for n in range(1, 65) if bits & (1 << (n - 1))}


ROOT_WITH_DAEMON = """
import os, sys, time
from pathlib import Path
if os.fork() == 0:
    os.setsid()  # the lingering descendant: its own session, so the root's group id is free once the root is reaped
    time.sleep(120)
    os._exit(0)
while not Path(sys.argv[1]).exists():
    time.sleep(0.02)
"""


def test_stop_never_signals_a_process_that_took_the_reaped_launchers_pid(tmp_path):
    """torchrun exited and was reaped while a descendant lingers; an unrelated process (its own session) takes
    torchrun's pid. Stopping the job must end the descendant and leave the unrelated process alone."""
    from gpuwizard.runner.host.procs import JobProcesses

    go = tmp_path / "go"
    root = subprocess.Popen([sys.executable, "-c", ROOT_WITH_DAEMON, str(go)], start_new_session=True)
    try:
        procs = JobProcesses(root.pid, launcher=root)
        poll_until(lambda: (procs.refresh() or True) and len(procs.pids()) == 2, 30)
    finally:
        go.write_text("exit")
    descendant = next(p for p in procs.alive() if p.pid != root.pid)
    root.wait(timeout=30)  # reaped, as the supervisor's poll() does
    ready = tmp_path / "ready"
    unrelated = take_pid(root.pid, [sys.executable, "-c", UNRELATED, str(ready)])
    if unrelated is None:
        descendant.kill()
        pytest.skip("cannot steer pid allocation here (/proc/sys/kernel/ns_last_pid is not writable)")
    try:
        poll_until(ready.exists, 30)
        survivors = procs.stop(grace_s=1)
        assert survivors == [] and not running(descendant)
        assert unrelated.poll() is None
        assert signal.SIGTERM not in pending_signals(unrelated.pid), "the process that took the launcher's pid got it"
    finally:
        unrelated.kill()
        unrelated.wait()
        if running(descendant):
            descendant.kill()


def test_a_job_that_left_a_daemon_when_it_ended_leaves_nothing(tmp_path):
    """The job ends on its own (exit 0) after double-forking a child that ignores SIGTERM: the run ends with nothing
    left and the output folder free."""
    script = tmp_path / "leaves.py"
    script.write_text(
        textwrap.dedent(
            """
            import os, signal, sys, time
            from pathlib import Path
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    signal.signal(signal.SIGTERM, signal.SIG_IGN)
                    Path(sys.argv[1] + ".tmp").write_text(str(os.getpid()))
                    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
                    while True:
                        time.sleep(1)
                os._exit(0)
            while not Path(sys.argv[1]).exists():
                time.sleep(0.05)
            print("[demo] step 7/7 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
            """
        )
    )
    pid_file = tmp_path / "daemon.pid"
    run = hand_made_run(
        tmp_path / "data" / "runs" / "20261201-000000-leaves", [sys.executable, str(script), str(pid_file)]
    )
    sup = supervisor_of(run.path)
    daemon = None
    try:
        sup.wait(timeout=120)
        daemon = psutil.Process(int(pid_file.read_text()))
        poll_until(lambda: not running(daemon), 10, "the daemon outlived its job")
        status = run.status()
        assert status.state == "finished" and status.survivors == []
        assert marked_with(run.path) == []
    finally:
        if daemon is not None and running(daemon):
            daemon.kill()
        if sup.poll() is None:
            sup.kill()


def test_stop_of_an_ended_run_checks_for_leftovers(tmp_path):
    """A final status is not proof: `stop` of an ended run whose marked process still runs ends it."""
    run = hand_made_run(tmp_path / "data" / "runs" / "20261201-000000-ended", ["true"])
    run.update_status(state="finished", exit_code=0, ended=time.time())
    left = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"],
        env={**os.environ, "GPUWIZARD_RUN": str(run.path.resolve())},
        start_new_session=True,
    )
    try:
        stopped = gw_subprocess("stop", run.run_id, timeout=60)
        assert stopped.returncode == 0 and "nothing of it is left" in stopped.stdout, stopped.stdout + stopped.stderr
        poll_until(lambda: left.poll() is not None, 10)
    finally:
        if left.poll() is None:
            left.kill()


def test_the_empty_cgroup_of_a_killed_supervisor_is_removed_by_the_next_one():
    """kill -9 of a supervisor leaves its job's cgroup (emptied by the parent-death signal); the next supervisor
    made under the same parent removes it, and never the cgroup of a supervisor still alive."""
    from gpuwizard.runner.host.cgroup import JobCgroup

    if not can_make_cgroups():
        pytest.skip("this machine lends no writable cgroup v2 sub-tree")
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no supervisor has any more
    mine = JobCgroup.create("mine")
    assert mine is not None
    abandoned = mine.path.parent / f"gpuwizard-job-killed-{dead.pid}"
    abandoned.mkdir()
    alive_owner = mine.path  # named after this (live) process
    fresh = JobCgroup.create("next")
    try:
        assert not abandoned.exists() and alive_owner.exists()
    finally:
        for group in (mine, fresh):
            if group is not None:
                group.remove()
        if abandoned.exists():
            abandoned.rmdir()


def test_a_headless_run_whose_folder_is_deleted_ends_with_nothing_left(tmp_path):
    """`run --headless` follows a real demo run; its folder is deleted: the client says so, ends every process of
    the run (its supervisor stops the job too) and exits 1."""
    client = gw_run(demo_run_preset(tmp_path, "demo-gone"), "--headless")
    runs = tmp_path / "data" / "runs"
    folder: Path | None = None
    try:

        def stepping() -> bool:
            nonlocal folder
            folder = next((p for p in sorted(runs.glob("2*")) if (p / "progress.json").exists()), None)
            progress = RunDir(folder).progress() if folder else None
            return bool(progress and progress.step)

        poll_until(stepping, 120)
        delete_folder(folder)
        out, err = client.communicate(timeout=120)
        assert client.returncode == 1, out + err
        assert f"the run folder {folder} was deleted" in out and "nothing of the run is left" in out, out
        assert "Traceback" not in out + err
        poll_until(lambda: marked_with(folder) == [], 30, lambda: marked_with(folder))
        assert not folder.exists()
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
        if folder is not None:
            kill_all([], folder)
