"""Log ingestion: a flooding job through the run folder, supervisor (parser, monitor) and the TUI log pane.

Live figure (the goal): lines per second reaching the log pane and the supervisor's monitor while a job
floods its log, against a plain Python loop tailing the same file in its own process.
Offline figures: each stage alone on a 1M-line file against a plain read loop over it.
Also: key-to-screen latency in the monitor during the flood, and resident memory after 5M lines.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil

from common import PYTHON, ROOT, median, record

PLAIN_TAILER = textwrap.dedent("""
    import os, sys, time
    path, total = sys.argv[1], int(sys.argv[2])
    while not os.path.exists(path):
        time.sleep(0.001)
    n, f = 0, open(path)
    while n < total:
        line = f.readline()
        if line.endswith("\\n"):
            n += 1
        elif not line:
            time.sleep(0.0005)
    print(time.time())
""")


def flood_file(path: Path, total: int) -> None:
    subprocess.run([PYTHON, str(ROOT / "bench" / "flood_job.py"), str(total)], stdout=open(path, "w"), check=True)


def plain_read(path: Path) -> float:
    start = time.perf_counter()
    count = 0
    with open(path) as fh:
        for _ in fh:
            count += 1
    return time.perf_counter() - start


def supervisor_stage(path: Path) -> float:
    from gpuwizard.runner.detect.detectors import JobMonitor
    from gpuwizard.runs.records import Expectations
    from gpuwizard.runs.tail import LogTail
    from gpuwizard.trainers.registry import get_trainer

    start = time.perf_counter()
    expect = Expectations(steps=10**6, lr=1e-3, warmup_steps=0, effective_batch=None, world_size=1, hang_timeout_s=300)
    tail, monitor = LogTail(path), JobMonitor(expect, get_trainer("demo"))
    while chunk := tail.read():
        monitor.feed_text(chunk.text, chunk.line_count, bar=chunk.bar)
    return time.perf_counter() - start


def make_run(base: Path, total: int, argv: list[str] | None = None) -> Path:
    """A run folder whose job is the flood script (or `argv`), started by the real supervisor."""
    from gpuwizard.runs.records import Expectations, Job, Status
    from gpuwizard.runs.rundir import RunDir

    run = RunDir(base / "runs" / "flood")
    run.path.mkdir(parents=True)
    expect = Expectations(
        steps=total // 100, lr=1e-3, warmup_steps=0, effective_batch=None, world_size=1, hang_timeout_s=300.0
    )
    run.write(
        "job.json",
        Job(
            argv=argv or [PYTHON, str(ROOT / "bench" / "flood_job.py"), str(total)],
            env={"PYTHONUNBUFFERED": "1"},
            unset=[],
            workdir=str(base),
            trainer="demo",
            device="cpu",
            on_hang="report",
            expect=expect,
        ),
    )
    run.write(
        "status.json",
        Status(
            run_id="flood",
            preset="flood",
            trainer="demo",
            policy="demo",
            world_size=1,
            device="cpu",
            steps=total // 100,
            created=time.time(),
            state="starting",
            command="flood_job.py",
        ),
    )
    return run.path


async def tui_ingest(run: Path, total: int) -> float:
    """Attach the real monitor screen (headless) while the flood runs; returns when all lines reached the pane."""
    from gpuwizard.runs.rundir import RunDir
    from gpuwizard.tui.app import GpuWizardApp

    app = GpuWizardApp(run=RunDir(run))
    async with app.run_test(size=(80, 24)) as pilot:
        while type(app.screen).__name__ != "MonitorScreen":
            await pilot.pause(0.01)
        log = app.screen.query_one("#log")
        while log.line_count < total:
            await pilot.pause(0.05)
        return time.time()


def start_flood(total: int) -> tuple[Path, subprocess.Popen, subprocess.Popen]:
    base = Path(tempfile.mkdtemp(prefix="gpuwizard-flood-"))
    os.environ["GPUWIZARD_DATA_DIR"] = str(base)
    run = make_run(base, total)
    tailer = subprocess.Popen(
        [PYTHON, "-c", PLAIN_TAILER, str(run / "log.txt"), str(total)], stdout=subprocess.PIPE, text=True
    )
    supervisor = subprocess.Popen(
        [PYTHON, "-m", "gpuwizard.runner.supervise.supervisor", str(run)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return run, tailer, supervisor


def live_throughput(total: int) -> tuple[float, float]:
    """Seconds from job start until all lines reached the log pane, and until a plain tailer read them."""
    run, tailer, supervisor = start_flood(total)
    tui_done = asyncio.run(tui_ingest(run, total))
    supervisor.wait(timeout=600)
    plain_done = float(tailer.communicate(timeout=600)[0].strip())
    from gpuwizard.runs.rundir import RunDir

    started = RunDir(run).status().started
    progress = RunDir(run).progress()
    sampled = any(e.kind == "output_sampled" for e in RunDir(run).events()[0])  # too fast for it: lines estimated
    assert sampled or progress.lines == total, f"the monitor counted {progress.lines} of {total} lines"
    return tui_done - started, plain_done - started


def terminal_latency_and_memory(total: int, samples: int = 20, plots: bool = False) -> dict:
    """The monitor in a real pty during a flood: key `f` until its notice is drawn; RSS per million lines. With
    `plots`, the log and the curves are both shown (key `v` twice) while it is measured."""
    import fcntl
    import select
    import signal
    import struct
    import termios

    run, tailer, supervisor = start_flood(total)
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    tui = subprocess.Popen(
        [PYTHON, "-m", "gpuwizard", "attach", "flood"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "TERM": "xterm-256color"},
        start_new_session=True,
        cwd=ROOT,
    )
    os.close(slave)
    tui_proc, sup_proc = psutil.Process(tui.pid), psutil.Process(supervisor.pid)

    def drain(until: bytes | None, timeout: float) -> float | None:
        seen, start = b"", time.perf_counter()
        while time.perf_counter() - start < timeout:
            ready, _, _ = select.select([master], [], [], 0.005)
            if ready:
                try:
                    seen += os.read(master, 1 << 20)
                except OSError:
                    return None
                if until is not None and until in seen[-(1 << 16) :]:
                    return time.perf_counter() - start
        return None

    def rss_mb(proc: psutil.Process) -> float:
        try:
            return proc.memory_info().rss / 2**20
        except psutil.Error:
            return 0.0

    latencies, rss, next_mark = [], [], 1_000_000
    drain(b"flood", 30)
    if plots:
        os.write(master, b"vv")
        if drain(b"loss against step", 30) is None:
            raise RuntimeError("the curves were never drawn")
    from gpuwizard.runs.rundir import RunDir

    while True:
        progress = RunDir(run).progress()
        lines = progress.lines if progress else 0
        if lines >= next_mark:
            rss.append((lines, rss_mb(tui_proc), rss_mb(sup_proc)))
            next_mark += 1_000_000
        if len(latencies) < samples and 0 < lines < total * 0.9:
            drain(None, 0.05)
            os.write(master, b"f")  # follow off/on: each press redraws the log pane's border title at once
            start = time.perf_counter()
            shown = drain(b"paused: f or End" if len(latencies) % 2 == 0 else b"following the tail", 5)
            if shown is not None:
                latencies.append(time.perf_counter() - start)
        else:
            drain(None, 0.2)
        if supervisor.poll() is not None and lines >= total:
            break
    drain(None, 2.0)
    rss.append((total, rss_mb(tui_proc), rss_mb(sup_proc)))
    os.killpg(tui.pid, signal.SIGKILL)
    tui.wait()
    os.close(master)
    tailer.kill()
    return {"latencies": latencies, "rss": rss}


def long_line_stage(tmp: Path, size: int) -> float:
    """Seconds for the supervisor's tail and monitor over one `size`-character line in a chunk that holds a '\r'
    (the case that once cost the square of the line's length)."""
    path = tmp / "long-line.log"
    path.write_text(
        "Training:  10%|#   | 1/10 [00:01<00:09]\r[demo] step 1/10 loss=0.5 lr=1.000e-04 samples/s=1\n"
        + "x" * size
        + "\n"
    )
    return supervisor_stage(path)


def run(quick: bool = False) -> None:
    print("2. Log ingestion")
    with tempfile.TemporaryDirectory() as tmp:
        small = median([long_line_stage(Path(tmp), 1000) for _ in range(3)])
        big = median([long_line_stage(Path(tmp), 1_000_000) for _ in range(3)])
        record(
            "ingest",
            "a 1 MB line beside a carriage return, through tail and monitor (ref: a 1 kB one)",
            big,
            "s",
            small,
            "< 0.1 s",
            big < 0.1,
        )
    lines = 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "flood.log"
        flood_file(path, lines)
        plain = median([plain_read(path) for _ in range(3)])
        sup = median([supervisor_stage(path) for _ in range(3)])
        record(
            "ingest",
            "offline: supervisor stage (tail, parse, monitor), lines/s",
            lines / sup,
            "lines/s",
            lines / plain,
            "(info)",
        )
    live_lines = 1_000_000 if quick else 2_000_000
    tui_s, plain_s = live_throughput(live_lines)
    record(
        "ingest",
        f"live: {live_lines:,} flooded lines into the log pane, lines/s",
        live_lines / tui_s,
        "lines/s",
        live_lines / plain_s,
        ">= 0.5x",
        tui_s <= 2 * plain_s,
    )
    big = 1_000_000 if quick else 5_000_000
    result = terminal_latency_and_memory(big, samples=8 if quick else 20)
    lat = sorted(result["latencies"])
    if lat:
        record(
            "ingest",
            f"key-to-screen latency in a pty during the flood, median of {len(lat)}",
            median(lat) * 1000,
            "ms",
            None,
            "< 100 ms",
            median(lat) < 0.1,
        )
        record(
            "ingest",
            "key-to-screen latency in a pty during the flood, p95",
            lat[int(0.95 * (len(lat) - 1))] * 1000,
            "ms",
            None,
            "< 100 ms",
            lat[int(0.95 * (len(lat) - 1))] < 0.1,
        )
    with_plots = sorted(terminal_latency_and_memory(live_lines, samples=8 if quick else 20, plots=True)["latencies"])
    if with_plots:
        record(
            "ingest",
            f"key-to-screen latency during a {live_lines:,}-line flood with log and curves shown, median",
            median(with_plots) * 1000,
            "ms",
            None,
            "< 100 ms",
            median(with_plots) < 0.1,
        )
    first, last = result["rss"][0], result["rss"][-1]
    record(
        "ingest",
        f"TUI resident memory after {big:,} lines (ref: after {first[0]:,})",
        last[1],
        "MB",
        first[1],
        "flat, < 300 MB",
        last[1] < 300 and last[1] - first[1] < 50,
    )
    record(
        "ingest",
        f"supervisor resident memory after {big:,} lines (ref: after {first[0]:,})",
        max(r[2] for r in result["rss"]),
        "MB",
        first[2],
        "flat, < 300 MB",
        max(r[2] for r in result["rss"]) < 300,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "bench"))
    run(quick="--quick" in sys.argv)
