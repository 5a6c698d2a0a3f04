"""`gpuwizard gpus --bandwidth` for real: two gloo processes on the CPU measure each size's busbw with its spread,
the table and JSON say it and the record is saved for the probe; a rank killed mid-measurement is one paragraph and
Ctrl-C stops every rank; in both nothing is left running and nothing is saved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil

from gpuwizard.gpus.bandwidth import MIB, find
from support.cli import gw_subprocess, poll_until

SLOW_SIZES = "16,256,512"
"""Big enough that the sizes after the first take seconds of gloo on two cores: time to act on the ranks."""


def test_two_gloo_processes_measure_busbw_per_size_with_spread_and_keep_the_record():
    as_json = gw_subprocess("gpus", "--bandwidth", "--sizes", "1,4", "--json", timeout=300)
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert (data["device"], data["backend"], data["ranks"]) == ("cpu", "gloo", 2)
    assert [s["size_bytes"] for s in data["sizes"]] == [MIB, 4 * MIB]
    for size in data["sizes"]:
        assert size["iterations"] == 20 and size["time_min_s"] <= size["time_s"] <= size["time_max_s"]
        assert 0 < size["busbw_low"] <= size["busbw"] <= size["busbw_high"]
        assert size["busbw"] == size["algbw"], "2 (n - 1) / n is 1 on two ranks"
    assert data["figure"]["busbw"] == data["sizes"][-1]["busbw"]
    assert "1 MiB: busbw" in as_json.stderr and "2 of 2 sizes" in as_json.stderr, "progress on stderr"
    saved = find("cpu")
    assert saved is not None and saved.model_dump() == {k: v for k, v in data.items() if k not in ("figure", "saved")}
    assert data["saved"].endswith("-cpu.json") and os.path.isfile(data["saved"])

    table = gw_subprocess("gpus", "--bandwidth", "--processes", "2", "--sizes", "2", timeout=300)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("all-reduce over 2 processes (gloo, CPU,") and max(map(len, lines)) <= 80
    row = next(line for line in lines if line.lstrip().startswith("2 MiB")).split()
    busbw, (low, high) = float(row[5]), map(float, row[6].split("-"))
    assert 0 < low <= busbw <= high
    again = find("cpu")
    assert again is not None and again.created > saved.created and again.largest.size_bytes == 2 * MIB


def start_slow_measurement() -> tuple[subprocess.Popen[str], list[psutil.Process]]:
    """`gpus --bandwidth` past its first size, with its two ranks."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "gpus", "--bandwidth", "--sizes", SLOW_SIZES],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    seen = [proc.stderr.readline() for _ in range(2)]
    assert "1 of 3 sizes" in seen[1], seen
    ranks = psutil.Process(proc.pid).children()
    assert len(ranks) == 2 and all("gpuwizard.runner.bandwidth.allreduce" in " ".join(r.cmdline()) for r in ranks)
    return proc, ranks


def gone(ranks: list[psutil.Process]) -> bool:
    return not any(r.is_running() and r.status() != psutil.STATUS_ZOMBIE for r in ranks)


def test_a_rank_killed_mid_measurement_is_one_paragraph_and_leaves_nothing():
    proc, ranks = start_slow_measurement()
    ranks[1].kill()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and out == ""
    paragraph = err.splitlines()[-1]
    assert "Traceback" not in err and paragraph.startswith("gpus --bandwidth: rank ")
    assert "was killed by SIGKILL after 1 of 3 message sizes" in paragraph and "Fix: " in paragraph
    poll_until(lambda: gone(ranks), 30)
    assert find("cpu") is None, "a failed measurement saves nothing"


def test_ctrl_c_stops_every_rank_and_saves_nothing():
    proc, ranks = start_slow_measurement()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and out == "" and "Traceback" not in err
    assert "interrupted: every rank stopped, nothing saved" in err
    assert gone(ranks), "stopped before gpuwizard exited"
    assert find("cpu") is None
