"""A stack dump says what the run is doing: `d` on a run that makes progress calls it healthy, a hang's dump names
the stall (issue 25). py-spy reads a real process."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuwizard.runner.supervise.stacks import dump_stacks
from gpuwizard.runs.records import RankState


def test_a_stack_dump_of_a_healthy_run_calls_it_healthy(tmp_path):
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True:\n    sum(range(10000))\n    time.sleep(0.01)"]
    )
    try:
        rank = RankState(rank=0, local_rank=0, pid=child.pid, cpu=50.0, status="running", alive=True)
        report = dump_stacks([rank], tmp_path, timeout_s=60, healthy=True)
        if not report.ok:
            pytest.skip(f"py-spy cannot read a process here: {report.note}")
        assert "healthy" in report.note and "stall" not in report.note
        stalled = dump_stacks([rank], tmp_path, timeout_s=60)
        assert "host-side stall" in stalled.note, "a hang's dump still names the stall"
    finally:
        child.kill()
        child.wait()
