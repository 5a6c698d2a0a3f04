"""A data folder on a full disk (a 1 MB tmpfs, filled): `sweep` and `gpus --bandwidth` say so in one paragraph and exit
2, never a traceback. Mounting needs root: skipped elsewhere."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cli import gw_subprocess


@pytest.fixture
def full_data(tmp_path: Path) -> Iterator[Path]:
    """The test's data folder on a tmpfs of 1 MB with no byte left."""
    data = tmp_path / "data"
    data.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(data)], capture_output=True)
    if os.geteuid() != 0 or mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        with open(data / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    try:
        yield data
    finally:
        subprocess.run(["umount", "-l", str(data)], check=True)


def test_a_sweep_on_a_full_disk_says_so(full_data):
    result = gw_subprocess("sweep", "demo-cpu", "--trust", "--set", "optim.lr=1e-3,1e-4", timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr == (
        "cannot record the sweep: No space left on device. Fix: free disk space or set GPUWIZARD_DATA_DIR.\n"
    )
    sweeps = full_data / "sweeps"
    assert not sweeps.exists() or list(sweeps.iterdir()) == [], "no half-made sweep folder is left"


def test_a_bandwidth_measurement_on_a_full_disk_gives_its_figure_and_says_it_is_not_saved(full_data):
    result = gw_subprocess("gpus", "--bandwidth", "--device", "cpu", "--sizes", "0.25", timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("gpus --bandwidth: measured (busbw ") and "GB/s at 256 KiB" in last, last
    assert last.endswith(
        "but the record cannot be saved for `gpuwizard probe`: No space left on device. Fix: free disk space or set "
        "GPUWIZARD_DATA_DIR, then run it again."
    ), last


def test_a_probe_on_a_full_disk_says_so_and_leaves_nothing_running(full_data):
    result = gw_subprocess("probe", "demo-cpu", "--trust", "--gpus", "1", "--batch", "4", "--steps", "10", timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.endswith(
        "cannot record the probe: No space left on device. Fix: free disk space or set GPUWIZARD_DATA_DIR.\n"
    ), result.stderr
