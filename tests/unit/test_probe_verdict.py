"""The verdict of a probe in plain words: a second process that does not pay on a tiny run, one that pays and is
recommended, and one that is slower."""

from __future__ import annotations

from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow
from gpuwizard.analysis.probe.verdict import predicted_range, verdict


def grid_result(rates: dict[int, float], samples: int) -> ProbeResult:
    """A probe of a job of `samples` samples that measured these samples/s per process count at batch 8."""
    rows = [ProbeRow(gpus=g, per_device_batch=8, outcome="measured", samples_per_s=r) for g, r in rates.items()]
    return ProbeResult(
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


def test_the_verdict_on_a_tiny_run_speaks_seconds_and_agrees_with_the_recommendation():
    lines = verdict(grid_result({1: 1000.0, 2: 1180.0}, samples=4800))
    assert lines[0] == (
        "2 processes: 1.18x the samples/s of 1 (59% efficiency, batch 8 per device on both); the full run (4,800 "
        "samples) takes 4.8 s on 1 process and 4.1 s on 2, for 8.1 process-seconds instead of 4.8: does not pay "
        "here, 59% efficiency is below the 70% a recommendation needs (69% more compute for 15% less time)."
    )
    assert (
        lines[-1] == "Recommended: 1 process at batch 8 per device (1000.0 samples/s): more processes do not pay here."
    )
    assert "<1 min" not in "\n".join(lines)


def test_a_second_process_that_keeps_its_efficiency_pays_and_is_recommended():
    lines = verdict(grid_result({1: 1000.0, 2: 1800.0}, samples=36_000_000))
    assert lines[0].endswith(
        "the full run (36,000,000 samples) takes 10.0 h on 1 process and 5.6 h on 2, for 11.1 process-hours instead "
        "of 10.0: pays for wall-clock, costs 11% more compute."
    )
    assert lines[-1] == "Recommended: 2 processes at batch 8 per device (1800.0 samples/s)."
    slower = verdict(grid_result({1: 1000.0, 2: 870.0}, samples=4800))
    assert slower[0].endswith(": does not pay: slower.") and slower[-1].endswith("more processes do not pay here.")


def test_a_predicted_row_without_an_upper_end_says_at_least():
    """A fit 100% or more off leaves the shortest step at or below zero: the row's rate has a floor and no ceiling."""
    row = ProbeRow(gpus=1, per_device_batch=256, outcome="predicted", samples_per_s=61031.6, rate_low=18666.2)
    assert predicted_range(row) == "≥18666"
    assert predicted_range(row.model_copy(update={"rate_high": 70000.0})) == "18666-70000"
    assert predicted_range(row.model_copy(update={"rate_low": None})) == "-"
