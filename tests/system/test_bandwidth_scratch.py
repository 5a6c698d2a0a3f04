"""`gpus --bandwidth` killed with -9 leaves its scratch folder (the ranks' FileStore and error files); the next
measurement removes it, and only it: a folder whose gpuwizard still runs, or one not named for an owner, is kept.
The scratch folders go under the test's own TMPDIR."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from gpuwizard.runs.records import start_ticks
from support.cli import gw_subprocess, poll_until

SLOW_SIZES = "16,256,512"
"""As test_bandwidth_cli's: the later sizes take seconds on two cores, time to kill it mid-measurement."""


def scratch(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("gw-bandwidth-*"))


def test_a_killed_measurements_scratch_folder_is_removed_by_the_next_and_no_other(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    alive = tmp / f"gw-bandwidth-{os.getpid()}-{start_ticks(os.getpid())}-live"  # this test's process still runs
    unnamed = tmp / "gw-bandwidth-abcd1234"  # no owner in its name: nothing says it is left over
    for kept in (alive, unnamed):
        kept.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwizard", "gpus", "--bandwidth", "--sizes", SLOW_SIZES],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        seen = [proc.stderr.readline() for _ in range(2)]
        assert "1 of 3 sizes" in seen[1], seen
        ranks = psutil.Process(proc.pid).children()
        (left,) = set(scratch(tmp)) - {alive, unnamed}
        assert (left / "rank0.err").is_file()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    poll_until(lambda: not any(r.is_running() and r.status() != psutil.STATUS_ZOMBIE for r in ranks), 60)
    assert left.is_dir(), "a kill -9 leaves the folder"

    again = gw_subprocess("gpus", "--bandwidth", "--sizes", "1", env={"TMPDIR": str(tmp)}, timeout=300)
    assert again.returncode == 0, again.stderr
    assert scratch(tmp) == sorted([alive, unnamed]), "the left folder went, the measurement's own too, no other"
