"""Nothing lost when the machine misbehaves: a wall-clock jump, a full disk, a line that never ends, two data folders
on one output folder. Real supervisors and jobs, a real (small) filesystem, real `gpuwizard` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwizard.runner.detect.detectors import JobMonitor
from gpuwizard.runs.records import Expectations
from gpuwizard.runs.rundir import RunDir
from gpuwizard.runs.tail import MAX_LINE_CHARS, LogTail
from gpuwizard.trainers.registry import get_trainer
from support.cli import gw_subprocess, poll_until
from support.presets import DEMO
from support.runs import events_of, hand_made_run, start_supervisor

STEPS_THEN = """
import sys, time
from pathlib import Path
steps, flag, then = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
for step in range(1, steps + 1):
    print(f"[demo] step {{step}}/{total} loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
    if step == 5:  # the clock jumps while a (slower) step runs: after step 5 was read, before step 6
        time.sleep(0.5)
        flag.write_text("steps are flowing")
        time.sleep(2.0)
    time.sleep(0.1)
if then == "stall":
    time.sleep(60)  # stuck, no output: a real hang (ends on its own so a missed hang cannot stall the suite)
print("[demo] Training finished", flush=True)
"""


def run_in_process(run: RunDir) -> int:
    """The real supervisor on this run, in this process (so its clock can be moved); its handlers undone after."""
    from gpuwizard.runner.supervise.supervisor import Supervisor

    umask = os.umask(0o022)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)}
    try:
        return Supervisor(run).run_forever()
    finally:
        os.umask(umask)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def jumping_clock(monkeypatch, flag: Path, jump_s: float) -> None:
    """time.time() jumps by `jump_s` once the job's steps are flowing, as an NTP step or a suspended VM would."""
    real = time.time
    jumped = []

    def moved() -> float:
        if not jumped and flag.exists():
            jumped.append(True)
        return real() + (jump_s if jumped else 0.0)

    monkeypatch.setattr(time, "time", moved)


@pytest.mark.parametrize("jump_s", [120.0, 3600.0])
def test_a_wall_clock_jump_forward_is_no_hang(tmp_path, monkeypatch, jump_s):
    script = tmp_path / "job.py"
    script.write_text(STEPS_THEN.format(total=40))
    flag = tmp_path / "flowing"
    run = hand_made_run(
        tmp_path / "20261201-000000-jump", [sys.executable, str(script), "40", str(flag), "end"], hang_timeout_s=30.0
    )
    jumping_clock(monkeypatch, flag, jump_s)
    code = run_in_process(run)
    assert flag.exists() and time.time() - os.stat(flag).st_mtime > jump_s / 2, "the clock did jump meanwhile"
    assert [e.title for e in events_of(run) if e.kind in ("hang_suspected", "slow_progress")] == []
    assert (code, run.status().state) == (0, "finished")


def test_a_real_hang_is_found_when_the_wall_clock_jumps_back(tmp_path, monkeypatch):
    script = tmp_path / "job.py"
    script.write_text(STEPS_THEN.format(total=5))
    flag = tmp_path / "flowing"
    run = hand_made_run(
        tmp_path / "20261201-000000-back", [sys.executable, str(script), "5", str(flag), "stall"], hang_timeout_s=3.0
    )
    jumping_clock(monkeypatch, flag, -3600.0)
    started = time.monotonic()
    code = run_in_process(run)
    assert [e.kind for e in events_of(run) if e.kind == "hang_suspected"] == ["hang_suspected"]
    assert (code, run.status().state) == (3, "hung") and time.monotonic() - started < 50


# -- a full disk -------------------------------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB filesystem (tmpfs), as a full disk at the end of a job; skipped where mount is not permitted."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()}")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


FILL_THE_DISK = """
import sys, time
for step in range(1, 4):
    print(f"[demo] step {step}/3 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
    time.sleep(0.3)
try:
    with open(sys.argv[1], "wb") as fh:  # a checkpoint bigger than what is left
        while True:
            fh.write(b"\\0" * 65536)
            fh.flush()
except OSError:
    sys.exit(1)
"""


def test_a_disk_filled_at_the_end_of_a_job_still_gets_a_final_status(small_disk, tmp_path):
    """The job fills the disk and fails: the supervisor records the end (cause: disk full) without a traceback, and
    the headless client reports it without one."""
    script = tmp_path / "fill.py"
    script.write_text(FILL_THE_DISK)
    data = small_disk / "data"
    run = hand_made_run(data / "runs" / "20261201-000000-full", [sys.executable, str(script), str(small_disk / "ckpt")])
    out, err = start_supervisor(run.path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).communicate(
        timeout=120
    )
    assert "Traceback" not in out + err, out + err
    assert os.statvfs(small_disk).f_bavail == 0 or (small_disk / "ckpt").stat().st_size > 1 << 20, "the disk did fill"
    status = run.status()
    assert status.final and status.state == "failed" and status.job_exit_code == 1
    assert status.error and status.error.startswith("disk full"), status.error
    attached = gw_subprocess("attach", run.run_id, "--headless", env={"GPUWIZARD_DATA_DIR": str(data)})
    assert "Traceback" not in attached.stdout + attached.stderr, attached.stdout + attached.stderr
    assert attached.returncode == 1 and "disk full" in attached.stdout
    listed = gw_subprocess("runs", env={"GPUWIZARD_DATA_DIR": str(data)})
    assert "lost" not in listed.stdout and "failed" in listed.stdout


def supervise(run) -> None:
    """The real supervisor over a hand-made run folder, to its end."""
    start_supervisor(run.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).wait(timeout=120)


def test_a_job_that_says_its_disk_is_full_is_recorded_as_disk_full_on_a_roomy_disk(tmp_path):
    """The checkpoint disk is another one (or freed since): the job's own ENOSPC traceback names the cause."""
    script = tmp_path / "says.py"
    script.write_text(
        "import sys\nprint('[demo] step 1/3 loss=0.5 lr=1.000e-03 samples/s=10.0', flush=True)\n"
        'sys.exit("Traceback (most recent call last):\\nOSError: [Errno 28] No space left on device")\n'
    )
    run = hand_made_run(tmp_path / "data" / "runs" / "20261201-000000-says", [sys.executable, str(script)])
    supervise(run)
    status = run.status()
    assert status.state == "failed" and status.error == "disk full: OSError: [Errno 28] No space left on device"
    assert [e.kind for e in events_of(run)].count("disk_full") == 1


def test_a_green_job_that_printed_enospc_about_another_disk_stays_green(tmp_path):
    """A line about some other disk being full (a cache, a log) is no verdict: the job exited 0 (issue 29, item 7)."""
    script = tmp_path / "green.py"
    script.write_text(
        "print('OSError: [Errno 28] No space left on device: /mnt/scratch/cache', flush=True)\n"
        "print('[demo] step 1/1 loss=0.5 lr=1.000e-03 samples/s=10.0', flush=True)\n"
    )
    run = hand_made_run(tmp_path / "data" / "runs" / "20261201-000000-green", [sys.executable, str(script)])
    supervise(run)
    status = run.status()
    assert status.state == "finished" and status.exit_code == 0 and status.error is None, status


def test_run_headless_on_a_disk_that_fills_with_the_demo_checkpoint(small_disk, tmp_path):
    """End to end: the demo's first checkpoint does not fit on the run's 2 MiB disk."""
    preset = tmp_path / "demo-full.yaml"
    preset.write_text(
        DEMO.format(name="demo-full", gpus=1, steps=60, root=tmp_path, options="", hang=30, lr="1.0e-3").replace(
            f"output_dir: {tmp_path}/out-demo-full", f"output_dir: {small_disk}/out"
        )
    )
    env = {"GPUWIZARD_DATA_DIR": str(small_disk / "data")}
    done = gw_subprocess("run", "--trust", preset, "--headless", env=env, timeout=300)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert done.returncode == 1 and "disk full" in done.stdout, done.stdout + done.stderr
    [folder] = [p for p in (small_disk / "data" / "runs").iterdir() if not p.name.startswith(".")]
    status = RunDir(folder).status()
    assert status.state == "failed" and status.error.startswith("disk full")


# -- a line that never ends --------------------------------------------------------------------------------------
def test_a_fifty_megabyte_line_is_cut_and_the_lines_after_it_are_still_read(tmp_path):
    """A job prints 50 MB without a newline: the tail keeps the line's head (noting the cut), holds no more than one
    line's cap meanwhile, and the progress lines after it still reach the monitor."""
    path = tmp_path / "log.txt"
    with open(path, "wb") as fh:
        fh.write(b"[demo] step 1/3 loss=0.5 lr=1.000e-03 samples/s=10.0\n")
        fh.write(b"HEAD-OF-THE-LONG-LINE " + b"x" * 50_000_000)
        fh.write(b"\n[demo] step 2/3 loss=0.4 lr=1.000e-03 samples/s=10.0\n[demo] step 3/3 loss=0.3 lr=1.000e-03 ")
        fh.write(b"samples/s=10.0\n")
    expect = Expectations(steps=3, lr=1e-3, warmup_steps=0, effective_batch=None, world_size=1, hang_timeout_s=30)
    tail, monitor = LogTail(path), JobMonitor(expect, get_trainer("demo"))
    lines, held = [], 0
    while chunk := tail.read():
        lines += chunk.lines
        monitor.feed_text(chunk.text, chunk.line_count, bar=chunk.bar)
        held = max(held, len(tail.partial))
    assert held <= MAX_LINE_CHARS, f"the unfinished line was held whole: {held} characters"
    [cut] = [line for line in lines if line.startswith("HEAD-OF-THE-LONG-LINE")]
    assert len(cut) < MAX_LINE_CHARS + 100 and cut.endswith(f"line cut here, longer than {MAX_LINE_CHARS} characters]")
    assert sum("xxxx" in line for line in lines) == 1, "the rest of the line is dropped, not split into more lines"
    assert lines[-2:] == [
        "[demo] step 2/3 loss=0.4 lr=1.000e-03 samples/s=10.0",
        "[demo] step 3/3 loss=0.3 lr=1.000e-03 samples/s=10.0",
    ]
    assert monitor.progress.step == 3 and monitor.progress.loss == 0.3


# -- one output folder, two data folders -------------------------------------------------------------------------
def test_the_output_lock_holds_across_data_folders(tmp_path, monkeypatch):
    from gpuwizard.runner.host.locks import OutputLock, output_holder

    out = tmp_path / "shared-out"
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(tmp_path / "alice"))
    first = OutputLock(out)
    assert first.acquire("run-of-alice") is None
    monkeypatch.setenv("GPUWIZARD_DATA_DIR", str(tmp_path / "bob"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "bob-xdg"))
    assert OutputLock(out).acquire("run-of-bob") == "run-of-alice"
    assert output_holder(out) == "run-of-alice"
    first.release()
    second = OutputLock(out)
    assert output_holder(out) is None and second.acquire("run-of-bob") is None
    second.release()
    assert not out.exists(), "LeRobot refuses an output folder that exists: the lock is beside it, not in it"


@pytest.mark.slow
def test_two_data_folders_cannot_start_two_runs_on_one_output_folder(tmp_path):
    preset = tmp_path / "demo-shared.yaml"
    preset.write_text(
        DEMO.format(
            name="demo-shared", gpus=1, steps=5000, root=tmp_path, options="  step_time_s: 0.05", hang=30, lr="1.0e-3"
        )
    )
    first_env = {"GPUWIZARD_DATA_DIR": str(tmp_path / "first")}
    first = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "run", "--trust", str(preset), "--headless"],
        env={**os.environ, **first_env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        runs = tmp_path / "first" / "runs"
        poll_until(
            lambda: any(RunDir(p).status().state == "running" for p in runs.glob("2*") if (p / "status.json").exists()),
            120,
        )
        second = gw_subprocess(
            "run", "--trust", preset, "--headless", env={"GPUWIZARD_DATA_DIR": str(tmp_path / "second")}
        )
        assert second.returncode == 2, second.stdout + second.stderr
        assert "is still writing to this folder" in second.stderr
        assert not (tmp_path / "second" / "runs").exists() or not any((tmp_path / "second" / "runs").iterdir())
    finally:
        os.killpg(first.pid, signal.SIGINT)
        first.communicate(timeout=120)
    assert first.returncode == 4
