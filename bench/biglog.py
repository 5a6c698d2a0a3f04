"""A 10,000,000-line (about 1 GB) log in the monitor: attach shows the tail, `/` finds a string on the first
line, and the TUI's memory stays flat, because the pane reads the run's own log file through a line index."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import psutil

from common import PYTHON, ROOT, isolated_env, median, record
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
