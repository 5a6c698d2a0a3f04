"""A 10,000,000-line (about 1 GB) log in the monitor: attach shows the tail, `/` finds a string on the first
line, and the TUI's memory stays flat, because the pane reads the run's own log file through a line index.
Also one line of 100 and 300 MB without a newline through the real supervisor: its memory stays flat and its
progress writes never stall (the tail keeps the line's head and drops the rest as it reads)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from common import PYTHON, ROOT, isolated_env, median, record
from ingest import make_run as make_job_run
from startup import first_frame

LINES = 10_000_000
FIRST = "first-line-marker-7f3a"
LAST = "last-line-marker-9c1e"
ABSENT = "text-on-no-line-4d2b"
SAMPLE_RUN = ROOT / "tests" / "data" / "runs" / "20261129-120000-demo-cpu"


def write_log(path: Path, lines: int) -> None:
    """`lines` lines of trainer-like noise (~100 bytes each), unique markers on the first and last."""
    block = "".join(
        f"[demo] step {i}/{lines} loss=0.0{i % 97:02d} lr=1.000e-03 samples/s=812.3 rank0 shard {i % 17} fetched ok\n"
        for i in range(10_000)
    )
    with open(path, "w") as fh:
        fh.write(f"{FIRST}: torchrun starting 2 workers\n")
        for _ in range((lines - 2) // 10_000):
            fh.write(block)
        for i in range((lines - 2) % 10_000):
            fh.write(f"tail line {i}\n")
        fh.write(f"{LAST}: Training finished\n")


def make_run(data: Path, lines: int) -> str:
    import shutil

    run = data / "runs" / "20261129-120000-biglog"
    shutil.copytree(SAMPLE_RUN, run)
    write_log(run / "log.txt", lines)
    return run.name


def tui_session(env: dict[str, str], run_id: str, needle: str, marker: bytes) -> dict[str, float]:
    """One monitor in a pty: seconds until the tail is drawn, then until `/needle` draws `marker`; RSS after."""
    import fcntl
    import select
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    start = time.perf_counter()
    tui = subprocess.Popen(
        [PYTHON, "-m", "gpuwizard", "attach", run_id],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**env, "TERM": "xterm-256color"},
        start_new_session=True,
        cwd=ROOT,
    )
    os.close(slave)

    def wait_for(wanted: bytes, timeout: float) -> float | None:
        seen, t0 = b"", time.perf_counter()
        while time.perf_counter() - t0 < timeout:
            ready, _, _ = select.select([master], [], [], 0.01)
            if ready:
                try:
                    seen += os.read(master, 1 << 20)
                except OSError:
                    return None
                if wanted in seen:
                    return time.perf_counter()
        return None

    try:
        tail_at = wait_for(LAST.encode(), 60)
        wait_for(b"search the log", 1.0)  # let the first frames settle
        os.write(master, b"/")
        wait_for(b"search the log", 5)
        os.write(master, needle.encode() + b"\r")
        sent = time.perf_counter()
        found_at = wait_for(marker, 60)
        rss = psutil.Process(tui.pid).memory_info().rss / 2**20
    finally:
        os.killpg(tui.pid, signal.SIGKILL)
        tui.wait()
        os.close(master)
    return {
        "tail_s": (tail_at - start) if tail_at else float("inf"),
        "search_s": (found_at - sent) if found_at else float("inf"),
        "rss_mb": rss,
    }


def run(quick: bool = False) -> None:
    lines = 1_000_000 if quick else LINES
    print(f"7. A {lines:,}-line log in the monitor")
    env = isolated_env()
    run_id = make_run(Path(env["GPUWIZARD_DATA_DIR"]), lines)
    size_gb = (Path(env["GPUWIZARD_DATA_DIR"]) / "runs" / run_id / "log.txt").stat().st_size / 1e9
    subprocess.run(
        ["cat", str(Path(env["GPUWIZARD_DATA_DIR"]) / "runs" / run_id / "log.txt")],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    sessions = [tui_session(env, run_id, FIRST, b"line 1:") for _ in range(2 if quick else 3)]
    absent_sessions = [tui_session(env, run_id, ABSENT, b"No match") for _ in range(2 if quick else 3)]
    frame = median(
        [first_frame([PYTHON, str(ROOT / "bench" / "minimal_app.py")], b"minimal-first-frame", env) for _ in range(3)]
    )
    wc_start = time.perf_counter()
    subprocess.run(
        ["wc", "-l", str(Path(env["GPUWIZARD_DATA_DIR"]) / "runs" / run_id / "log.txt")],
        stdout=subprocess.DEVNULL,
        check=True,
    )
    wc = time.perf_counter() - wc_start
    tail = median([s["tail_s"] for s in sessions])
    search = median([s["search_s"] for s in sessions])
    absent = median([s["search_s"] for s in absent_sessions])
    rss = max(s["rss_mb"] for s in sessions + absent_sessions)
    record(
        "biglog",
        f"attach on a {lines:,}-line ({size_gb:.2f} GB) log: tail drawn (ref: minimal app's first frame)",
        tail,
        "s",
        frame,
        "< 1 s",
        tail < 1.0,
    )
    record(
        "biglog",
        "`/` search for a string on the first line, from the tail (ref: wc -l of the file)",
        search,
        "s",
        wc,
        "< 2 s",
        search < 2.0,
    )
    record(
        "biglog", "`/` search for a string on no line: the whole file scanned (ref: wc -l)", absent, "s", wc, "(info)"
    )
    record("biglog", "TUI resident memory after attach and search", rss, "MB", None, "< 150 MB", rss < 150)
    endless_lines(quick)


ENDLESS_LINE_JOB = """
import sys, time
from pathlib import Path
megabytes, done = int(sys.argv[1]), Path(sys.argv[2])
print("[demo] step 1/3 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
block = b"x" * (1 << 20)
for _ in range(megabytes):
    sys.stdout.buffer.write(block)
    sys.stdout.buffer.flush()
print("", flush=True)
for step in (2, 3):
    print(f"[demo] step {step}/3 loss=0.5 lr=1.000e-03 samples/s=10.0", flush=True)
done.write_text(str(time.time()))
time.sleep(2.0)
"""


def vm_hwm_mb(pid: int) -> float | None:
    """Peak resident memory of a process so far (VmHWM), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def endless_line(megabytes: int) -> dict[str, float]:
    """The real supervisor on a job that prints one line of `megabytes` MB without a newline, then two steps:
    its peak memory, the longest gap between its progress writes, and how long after the line it had step 3."""
    from gpuwizard.runs.rundir import RunDir

    env = isolated_env()
    base = Path(env["GPUWIZARD_DATA_DIR"])
    done = base / "line-done"
    run = RunDir(make_job_run(base, 300, argv=[PYTHON, "-c", ENDLESS_LINE_JOB, str(megabytes), str(done)]))
    sup = subprocess.Popen([PYTHON, "-m", "gpuwizard.runner.supervise.supervisor", str(run.path)], env=env, cwd=ROOT)
    peak, gap, last_write, seen_step3 = 0.0, 0.0, None, None
    progress = run.path / "progress.json"
    while sup.poll() is None:
        peak = max(peak, vm_hwm_mb(sup.pid) or 0.0)
        try:
            mtime = progress.stat().st_mtime
        except OSError:
            mtime = None
        now = time.time()
        if mtime is not None and mtime != last_write:
            if last_write is not None:
                gap = max(gap, mtime - last_write)
            last_write = mtime
        if seen_step3 is None and done.exists() and (run.progress() and run.progress().step == 3):
            seen_step3 = now - float(done.read_text())
        time.sleep(0.02)
    return {"peak_mb": peak, "gap_s": gap, "catch_up_s": seen_step3 if seen_step3 is not None else float("inf")}


def endless_lines(quick: bool) -> None:
    baseline = endless_line(0)
    for megabytes in (100,) if quick else (100, 300):
        found = endless_line(megabytes)
        record(
            "biglog",
            f"supervisor peak memory, one {megabytes} MB line without newline (ref: no long line)",
            found["peak_mb"],
            "MB",
            baseline["peak_mb"],
            "< ref + 40 MB",
            found["peak_mb"] < baseline["peak_mb"] + 40,
        )
        record(
            "biglog",
            f"longest gap between progress writes during that {megabytes} MB line",
            found["gap_s"],
            "s",
            baseline["gap_s"],
            "< 1.5 s",
            found["gap_s"] < 1.5,
        )
        record(
            "biglog",
            f"step after the {megabytes} MB line in progress.json, after it was printed",
            found["catch_up_s"],
            "s",
            None,
            "< 2 s",
            found["catch_up_s"] < 2.0,
        )
