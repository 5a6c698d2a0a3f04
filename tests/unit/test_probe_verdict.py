"""The verdict of a probe in plain words: a second process that does not pay on a tiny run, one that pays and is
recommended, and one that is slower."""

from __future__ import annotations

from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow
from gpuwizard.analysis.probe.verdict import fill_models, predicted_range, verdict


def grid_result(rates: dict[int, float], samples: int) -> ProbeResult:
    """A probe of a job of `samples` samples that measured these samples/s per process count at batch 8."""
    rows = [ProbeRow(gpus=g, per_device_batch=8, outcome="measured", samples_per_s=r) for g, r in rates.items()]
    result = ProbeResult(
        probe_id="p",
        preset="demo-cpu",
        trainer="demo",
        policy="demo",
        device="cpu",
        hardware="CPU, 2 cores",
        created=0.0,
        steps=300,
        headroom=0.1,
        full_run_samples=samples,
        rows=rows,
        batches=[8],
    )
    fill_models(result)
    return result


def test_the_verdict_on_a_tiny_run_speaks_seconds_and_agrees_with_the_recommendation():
    lines = verdict(grid_result({1: 1000.0, 2: 1180.0}, samples=4800))
    assert lines[0].startswith("Recommended: 1 process at batch 8 per device (1000.0 samples/s); likely, not sure: 2 ")
    assert lines[1] == (
        "2 processes: 1.18x the samples/s of 1 (59% per process, batch 8 per device on both); at that rate the full "
        "run (4,800 samples) takes 4.8 s on 1 process and 4.1 s on 2, 8.1 process-seconds instead of 4.8."
    )
    assert "<1 min" not in "\n".join(lines)


def test_a_second_process_that_keeps_its_efficiency_is_recommended_and_the_evidence_agrees():
    lines = verdict(grid_result({1: 1000.0, 2: 1800.0}, samples=36_000_000))
    assert lines[0].startswith("Recommended: 2 processes at batch 8 per device (1800.0 samples/s); likely, not sure")
    assert "no spread was measured for 2 processes" in lines[0], "a window without sub-windows is never sure"
    assert lines[1].endswith(
        "the full run (36,000,000 samples) takes 10.0 h on 1 process and 5.6 h on 2, 11.1 process-hours instead of "
        "10.0."
    )
    slower = verdict(grid_result({1: 1000.0, 2: 870.0}, samples=4800))
    assert slower[0].startswith("Recommended: 1 process") and "44% efficiency" in slower[0]


def test_a_predicted_row_without_an_upper_end_says_at_least():
    """A fit 100% or more off leaves the shortest step at or below zero: the row's rate has a floor and no ceiling."""
    row = ProbeRow(gpus=1, per_device_batch=256, outcome="predicted", samples_per_s=61031.6, rate_low=18666.2)
    assert predicted_range(row) == "≥18666"
    assert predicted_range(row.model_copy(update={"rate_high": 70000.0})) == "18666-70000"
    assert predicted_range(row.model_copy(update={"rate_low": None})) == "-"
