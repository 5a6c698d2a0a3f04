"""NCCL Flight Recorder: the environment every CUDA run gets, and torch's analyzer report read back as an event (a
real dump: tests/system/test_flight_jobs.py)."""

from __future__ import annotations

from pathlib import Path

from gpuwizard.runner.supervise.flight import Finding, analyze, flight_recorder_env, parse_analysis

# The analyzer's report as torch 2.13 prints it: flight_recorder/components/utils.py (error_analysis: "Not all ranks
# joining collective, sequence number: %s") and types.py (EntryState.log: one "key: value" line each).
REPORT = """\
Not all ranks joining collective, sequence number: 118
internal record id: 117
group info: 0:default_pg
collective: nccl:all_reduce
missing ranks: {1, 3}
input sizes: [[25557032]]
output sizes: [[25557032]]
world size: 4
expected ranks: {0, 1, 2, 3}
collective state: scheduled
collective stack trace:
 all_reduce at /usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py:2806
Not all ranks joining collective, sequence number: 119
internal record id: 118
group info: 0:default_pg
collective: nccl:_reduce_scatter_base
missing ranks: {1}
input sizes: [[1024]]
world size: 4
expected ranks: {0, 1, 2, 3}
collective state: scheduled
"""


def test_the_analyzer_report_names_the_missing_ranks():
    assert parse_analysis(REPORT) == [
        Finding((1, 3), "nccl:all_reduce", 118),
        Finding((1,), "nccl:_reduce_scatter_base", 119),
    ]
    assert parse_analysis("AssertionError: Missing dump files from ranks {2}") == [Finding((2,))]
    assert parse_analysis("all ranks joined every collective") == []


def test_every_cuda_run_records_its_collectives_under_both_names(tmp_path):
    env = flight_recorder_env(tmp_path)
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert (
        env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"]
        == env["TORCH_FR_DUMP_TEMP_FILE"]
        == str(tmp_path / "flight_recorder" / "rank_")
    )


def test_after_a_timeout_the_event_names_the_ranks_that_never_entered(tmp_path):
    """analyze() runs `python -m torch.distributed.flight_recorder.fr_trace DUMPS` in the training environment;
    here a stand-in interpreter prints the report above."""
    (tmp_path / "flight_recorder").mkdir()
    (tmp_path / "flight_recorder" / "rank_0").write_bytes(b"dump")
    (tmp_path / "report.txt").write_text(REPORT)
    python = tmp_path / "python"
    python.write_text(
        f'#!/bin/sh\n[ "$2" = torch.distributed.flight_recorder.fr_trace ] && cat {tmp_path}/report.txt\n'
    )
    python.chmod(0o755)
    event = analyze(str(python), tmp_path)
    assert event is not None and event.kind == "flight_recorder" and event.rank == 1
    assert event.title == "rank(s) 1, 3 never entered nccl:all_reduce (collective #118)"
    assert "#119 nccl:_reduce_scatter_base: ranks 1 missing" in event.detail
    assert analyze(str(python), Path(tmp_path / "elsewhere")) is None, "no dumps, nothing to analyze"
