"""NCCL Flight Recorder for real: a 2-rank gloo job that skips a collective dumps its buffers, and torch's own
analyzer report of them is read back as an event."""

from __future__ import annotations

import os

import pytest

from gpuwizard.runner.supervise.flight import Finding, analyze, parse_analysis
from support.data import DATA


@pytest.mark.slow
def test_the_real_analyzer_report_of_a_real_dump_is_read(tmp_path):
    """A real 2-rank gloo job whose rank 1 skips one all_reduce dumps its Flight Recorder buffers; torch's own
    fr_trace reads them (tests/data/flight_recorder/fr_trace_gloo_missing_rank1.txt is that output, torch 2.13)."""
    import pickle
    import subprocess
    import sys

    dumps = tmp_path / "flight_recorder"
    dumps.mkdir()
    job = DATA / "flight_recorder" / "missing_rank_job.py"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    done = subprocess.run(
        [*torchrun, str(job), str(dumps)],
        env={**os.environ, "TORCH_FR_BUFFER_SIZE": "2000", "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and sorted(p.name for p in dumps.iterdir()) == ["rank_0", "rank_1"], done.stderr
    for dump in dumps.iterdir():
        # gloo registers its group under '' where NCCL (getNCCLComm) writes its id, which the analyzer needs
        data = pickle.loads(dump.read_bytes())
        data["pg_config"] = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
        dump.write_bytes(pickle.dumps(data))
    event = analyze(sys.executable, tmp_path)
    assert event is not None and event.title == "rank(s) 1 never entered gloo:all_reduce (collective #4)"
    recorded = (DATA / "flight_recorder" / "fr_trace_gloo_missing_rank1.txt").read_text()
    assert parse_analysis(recorded) == [Finding((1,), "gloo:all_reduce", 4)]
