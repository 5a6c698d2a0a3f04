"""The probe's spread (issue 25): a configuration's samples/s is the median of sub-windows of its steady window, with
the slowest-fastest window as its interval; the verdict says when the intervals cannot decide the comparison and how
sure the recommendation is otherwise. The statistics run on two recorded demo runs (1 and 2 CPU processes)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from gpuwizard.analysis.probe.decision import decide
from gpuwizard.analysis.probe.noise_estimate import NoiseFigure
from gpuwizard.analysis.probe.results import (
    SUB_WINDOWS,
    ProbeResult,
    ProbeRow,
    measure,
    steady_window,
    window_rates,
)
from gpuwizard.analysis.probe.verdict import fill_models, rate_range, recommendation_line, result_text, verdict
from gpuwizard.runs.rundir import RunDir

RUNS = Path(__file__).parents[1] / "data" / "runs"
ONE, TWO = RUNS / "20261201-005642-demo-cmp", RUNS / "20261201-005700-demo-cmp"


def result(rows: list[ProbeRow], **fields: object) -> ProbeResult:
    """A probe of these rows with its models, decision and verdict filled in as the grid does."""
    probe = ProbeResult.model_validate(
        {
            "probe_id": "p",
            "preset": "demo-cpu",
            "trainer": "demo",
            "policy": "demo",
            "device": "cpu",
            "hardware": "CPU, 2 cores",
            "created": 0.0,
            "steps": 300,
            "job_steps": 300,
            "headroom": 0.1,
            "full_run_samples": 4800,
            "rows": [r.model_dump() for r in rows],
            "batches": [8],
            **fields,
        }
    )
    fill_models(probe)
    if isinstance(noise := fields.get("noise"), NoiseFigure):  # as if a configuration had measured it
        probe.noise, probe.noise_stage = noise, "the initial weights, the probe's first 200 steps"
        probe.decision = decide(probe)
    probe.verdict = verdict(probe)
    return probe


def row(gpus: int, low: float, median: float, high: float, window: str = "steps 80-120 (5 log lines, 8 s)") -> ProbeRow:
    return ProbeRow(
        gpus=gpus,
        per_device_batch=8,
        outcome="measured",
        samples_per_s=median,
        rate_low=low,
        rate_high=high,
        sub_windows=SUB_WINDOWS,
        window=window,
    )


def test_a_recorded_runs_rate_is_the_median_of_its_sub_windows_and_its_spread_their_extremes():
    run = RunDir(ONE)
    window = steady_window(run.metrics())
    rates = window_rates(window)
    assert len(window) == 23 and len(rates) == SUB_WINDOWS  # 23 steady lines, cut in 6, 6, 5, 6
    lines = [m.samples_per_s or 0.0 for m in window]
    assert rates[0] == statistics.fmean(lines[:6]) and rates[-1] == statistics.fmean(lines[17:])
    measured = measure(run, 1, 8, 300, None)
    assert measured.sub_windows == SUB_WINDOWS
    assert measured.samples_per_s == statistics.median(rates)
    assert measured.rate_low == min(rates) < measured.samples_per_s < measured.rate_high == max(rates)
    assert rate_range(measured) == f"{min(rates):.0f}-{max(rates):.0f}"


def test_a_short_window_has_as_many_sub_windows_as_lines_and_one_line_no_spread():
    window = steady_window(RunDir(ONE).metrics())
    assert len(window_rates(window[:3])) == 3
    assert window_rates([]) == []
    single = ProbeRow(
        gpus=1, per_device_batch=8, outcome="measured", samples_per_s=200.0, rate_low=200.0, rate_high=200.0
    )
    single = single.model_copy(update={"sub_windows": 1})
    assert rate_range(single) == "-", "one window measures no spread"


def test_the_recorded_runs_compared_are_sure_and_the_table_shows_the_spread_in_80_columns():
    one, two = measure(RunDir(ONE), 1, 8, 300, None), measure(RunDir(TWO), 2, 8, 300, None)
    probe = result([one, two])
    lines = probe.verdict
    # 2 processes read 378-423 against 227-267 for 1: 71-93% efficiency, above the 70% bar even at the extremes
    assert lines[0].startswith("Recommended: 2 processes at batch 8 per device ("), lines[0]
    assert (
        "; sure: 2 processes keep 82% efficiency against 1 (71%-93% over 1 pair of adjacent windows), above"
        in (lines[0])
    )
    assert "in samples/s (B_noise was not measured" in lines[0]
    text = result_text(probe)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    header = next(line for line in text.splitlines() if line.lstrip().startswith("gpus"))
    assert "spread" in header
    assert any(" 227-267 " in line for line in text.splitlines())


def test_intervals_either_side_of_the_bar_cannot_tell_and_say_how_to_rerun():
    """The issue's case: one configuration read 592 and 198 samples/s minutes apart."""
    probe = result([row(1, 540, 575, 610), row(2, 700, 850, 1000)])
    said = probe.verdict[0]
    assert said.startswith("Cannot tell here whether 2 processes pay against 1: it keeps 74% efficiency in samples/s")
    assert "but 57%-93% over 1 pair of adjacent windows, either side of the 70% a larger count must keep" in said
    assert said.endswith(
        "rerun on a quieter machine or with --repeat 2 (more alternating rounds). Until then: 1 process at batch 8 "
        "per device (575.0 samples/s)."
    )
    assert not any("Recommended" in line for line in probe.verdict), "no recommendation beside 'cannot tell'"
    assert (
        recommendation_line(probe)
        == "probe recommends 1 process at batch 8 (575 samples/s, judged in samples/s); cannot tell"
    )


def test_overlapping_rates_that_still_decide_say_sure():
    """1 process 540-610 and 2 processes 480-650 overlap, but 2 processes stay at 39-60% efficiency: they do not pay."""
    probe = result([row(1, 540, 575, 610), row(2, 480, 560, 650)])
    assert probe.verdict[0].startswith(
        "Recommended: 1 process at batch 8 per device (575.0 samples/s); sure: 2 processes keep 49% efficiency against "
        "1 (39%-60% over 1 pair of adjacent windows), below the 70% a larger count must keep"
    )
    said = recommendation_line(probe)
    assert said == "probe recommends 1 process at batch 8 (575 samples/s, judged in samples/s); sure"


def test_an_older_probe_json_without_the_spread_still_loads_and_is_not_sure():
    old = {
        "gpus": 1,
        "per_device_batch": 8,
        "outcome": "measured",
        "samples_per_s": 1000.0,
        "window": "steps 80-300 (23 log lines, 7 s)",
    }
    probe = result([ProbeRow.model_validate(old), ProbeRow.model_validate(old | {"gpus": 2, "samples_per_s": 1800.0})])
    assert probe.rows[0].rate_low is None and probe.rows[0].sub_windows == 0 and not probe.steps_asked
    assert probe.decision is not None and probe.decision.confidence == "likely"
    assert probe.verdict[0].startswith("Recommended: 2 processes at batch 8 per device (1800.0 samples/s); likely")
    assert "no spread was measured for 2 processes" in probe.verdict[0]


def test_asked_steps_are_said_as_run_to_their_end():
    probe = result([row(1, 540, 575, 610)], steps=60, steps_asked=True)
    assert "60 steps per configuration, each run to its end (--steps)" in result_text(probe)


def test_a_probed_noise_scale_replaces_the_plans_unmeasured_note(gw):
    """Issue 26: plan said the critical batch was unmeasured (and to run `gpuwizard probe`) after a probe had
    measured it. With a finished probe that measured B_noise ~ 16 (8-32), the demo's effective batch of 16 (8 per
    process x 2) needs (1 + 16/32)/(1 + 16/16) = 0.75x the steps at twice the batch, 0.67x-0.83x over the interval."""
    from gpuwizard.analysis.probe.results import probes_dir

    before = gw("plan", "demo-cpu", "--json").json()
    assert any("unmeasured in the literature" in n for n in before["notes"]), before["notes"]
    noise = NoiseFigure(
        b_simple=16.0, low=8.0, high=32.0, steps=200, b_small=8, b_big=16, provisional=False, source="2 x 8"
    )
    probe = result([row(1, 540, 575, 610), row(2, 700, 850, 1000)], state="finished", noise=noise)
    folder = probes_dir() / "20261207-000000-demo-cpu"
    folder.mkdir(parents=True)
    (folder / "probe.json").write_text(probe.model_copy(update={"probe_id": folder.name}).model_dump_json())
    after = gw("plan", "demo-cpu", "--json").json()
    notes = after["notes"]
    assert not any("unmeasured in the literature" in n for n in notes + after["advice"]), after
    assert (
        "The effective batch is 2x the reference run's; B_noise ~ 16 over probe 20261207-000000-demo-cpu"
        in (after["advice"][-1])
    )
    assert (
        "Probe 20261207-000000-demo-cpu on this machine: Cannot tell here whether 2 processes pay"
        in (after["advice"][0])
    ), "the plan says the probe's own answer, not a generic 'a second GPU will not pay'"
    [said] = [n for n in notes if n.startswith("this job's gradient noise scale, measured over probe 20261207")]
    assert "B_noise ~ 16 (90% interval 8-32)" in said, said
    assert "where it is typically far smaller than later in training" in said
    assert "effective batch of 16, twice the batch would need 0.75x the steps (0.67-0.83 across the interval)" in said


def test_a_gauged_full_runs_later_noise_scale_is_what_plan_says_with_its_stage():
    """Issue 35 item 4: B_noise grows as the loss falls, so a full run's own figure over its later steps replaces a
    probe's first steps. The run's gauge reads |G|^2 = 1 over its first 100 steps and 0.25 over the next 100, with
    tr(Sigma) = 16: B_simple 16, then 64; plan names the second half and its steps."""
    from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE
    from gpuwizard.core import paths
    from gpuwizard.planning.scaling import critical_batch_note
    from support.runs import copy_runs

    copy_runs(paths.data_dir(), "20261129-120000-demo-cpu")
    lines = []
    for step in range(1, 201):
        g_sq, trace, wobble = (1.0 if step <= 100 else 0.25), 16.0, 1 + 0.01 * (step % 3 - 1)
        local, averaged = (g_sq + trace / 8) * wobble, (g_sq + trace / 16) * wobble
        lines.append(
            json.dumps(
                {
                    "kind": "step",
                    "step": step,
                    "local_sq": local,
                    "avg_sq": averaged,
                    "rank_batch": 8,
                    "global_batch": 16,
                }
            )
        )
    run = paths.data_dir() / "runs" / "20261129-120000-demo-cpu"
    (run / GAUGE_FILE).write_text("\n".join(lines) + "\n")
    said = critical_batch_note("demo-cpu", 16, None)
    assert said.startswith(
        "this job's gradient noise scale, measured over steps 101-200 of run 20261129-120000-demo-cpu, the second "
        "half of its gauged steps: B_noise ~ 64"
    ), said
    assert "initial weights" not in said
