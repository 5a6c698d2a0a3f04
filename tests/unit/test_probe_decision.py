"""The probe's one answer (issue 35): ratios over adjacent windows taken under one background, physics as a check, one
rule and one confidence, said in one paragraph that the evidence under it never contradicts."""

from __future__ import annotations

import json
import math
import re

from gpuwizard.analysis.probe.decision import adjacent_pairs, checkpoint_stage, decide, moved
from gpuwizard.analysis.probe.noise_estimate import NoiseFigure
from gpuwizard.analysis.probe.results import ProbeResult, ProbeRow, add_scaling
from gpuwizard.analysis.probe.verdict import fill_models, verdict
from gpuwizard.runner.probe.background import BackgroundMeter


def window(
    gpus: int, rate: float, t: float, repeat: int = 0, background: float = 0.2, spread: float = 0.05
) -> ProbeRow:
    """One configuration's measured window at time t: its rate with a +-spread between sub-windows."""
    return ProbeRow(
        gpus=gpus,
        per_device_batch=8,
        outcome="measured",
        samples_per_s=rate,
        rate_low=rate * (1 - spread),
        rate_high=rate * (1 + spread),
        sub_windows=4,
        window="steps 80-300 (20 log lines, 9 s)",
        window_start=t,
        window_end=t + 9,
        background=background,
        background_shift=0.0,
        repeat=repeat,
    )


def probe(
    windows: list[ProbeRow], noise: NoiseFigure | None = None, stage: str = "", batches: tuple[int, ...] = (8,)
) -> ProbeResult:
    result = ProbeResult(
        probe_id="p",
        preset="demo-cpu",
        trainer="demo",
        policy="demo",
        device="cpu",
        hardware="CPU, 2 cores",
        created=0.0,
        steps=300,
        job_steps=300,
        headroom=0.1,
        full_run_samples=4800,
        rows=add_scaling([w for w in windows if not w.repeat]),
        repeats=[w for w in windows if w.repeat],
        batches=list(batches),
        cores=2,
        rounds=2,
        noise_stage=stage,
    )
    fill_models(result)
    if noise is not None:  # as a gauged run would have measured it, then the decision on it
        result.noise, result.noise_stage = noise, stage
        result.decision = decide(result)
    result.verdict = verdict(result)
    return result


def alternating(one: list[float], two: list[float], backgrounds: list[float] | None = None) -> list[ProbeRow]:
    """1 then 2 processes, then 2, 1, 1, 2 ...: the order the probe's rounds take (A B B A A B)."""
    order, out = [(1, 2), (2, 1), (1, 2)], []
    backgrounds = backgrounds or [0.2] * (len(one) + len(two))
    rates = {1: iter(one), 2: iter(two)}
    t = 0.0
    for round_, pair in enumerate(order[: len(one)]):
        for gpus in pair:
            out.append(window(gpus, next(rates[gpus]), t, repeat=round_, background=backgrounds[len(out)]))
            t += 20
    return out


def test_windows_pair_with_their_neighbours_in_the_order_taken():
    windows = alternating([1000, 1010, 990], [400, 410, 390])
    pairs = adjacent_pairs([w for w in windows if w.gpus == 1], [w for w in windows if w.gpus == 2])
    assert [(a.window_start, b.window_start) for a, b in pairs] == [(0, 20), (60, 40), (80, 100)]


def test_a_second_process_well_below_the_bar_is_a_sure_no_said_in_samples_per_s_without_a_noise_scale():
    result = probe(alternating([1000, 1020, 980], [400, 410, 395]))
    d = result.decision
    assert d is not None and (d.gpus, d.confidence, d.basis) == (1, "sure", "samples/s")
    assert d.compared[0].pairs == 3 and 0.19 < d.compared[0].efficiency < 0.21
    head = result.verdict[0]
    assert head.startswith(
        "Recommended: 1 process at batch 8 per device (1000.0 samples/s); sure: 2 processes keep 20%"
    )
    assert "in samples/s (B_noise was not measured" in head
    assert "above the" not in head and "below the 70%" in head


def test_efficiency_above_100_percent_is_never_sure_and_says_the_load_changed():
    """The LeRobot ACT probe on 2 cores measured 219% and called it sure (issue 35)."""
    result = probe(alternating([500, 520, 480], [2200, 2150, 2250]))
    d = result.decision
    assert d is not None and d.confidence == "cannot tell" and d.gpus == 1
    head = result.verdict[0]
    assert head.startswith("Cannot tell here whether 2 processes pay against 1: 2 processes measured 220% efficiency")
    assert "so the machine's load changed between them; rerun on a quieter machine or with --repeat 4" in head
    assert "Recommended: 2" not in "\n".join(result.verdict)


def test_pairs_taken_under_a_different_background_are_left_out_and_all_left_out_cannot_tell():
    # the 1-process windows ran while a burner kept 1.2 cores busy, the 2-process ones on a quiet machine
    backgrounds = [1.2, 0.1, 0.1, 1.2, 1.2, 0.1]
    result = probe(alternating([500, 510, 490], [900, 910, 890], backgrounds))
    d = result.decision
    assert d is not None and d.confidence == "cannot tell"
    assert (
        "every pair of adjacent windows was taken under a different background (1.2 against 0.1 cores busy outside"
        in (result.verdict[0])
    )
    one_moved = [0.2, 0.2, 1.4, 0.2, 0.2, 0.2]
    kept = probe(alternating([1000, 1000, 1000], [400, 100, 400], one_moved)).decision
    assert kept is not None and kept.compared[0].pairs == 2 and len(kept.compared[0].dropped) == 1
    assert kept.confidence == "sure" and kept.compared[0].efficiency == 0.2


def test_an_interval_either_side_of_the_bar_cannot_tell_and_recommends_the_fewest():
    result = probe(alternating([1000, 1000, 1000], [1250, 1500, 1700]))
    d = result.decision
    assert d is not None and (d.confidence, d.gpus) == ("cannot tell", 1)
    assert "either side of the 70% a larger count must keep" in result.verdict[0]
    assert result.verdict[0].endswith("Until then: 1 process at batch 8 per device (1000.0 samples/s).")


def test_a_noise_scale_from_the_initial_weights_never_makes_the_answer_sure():
    """At B_noise 400 a doubled batch costs almost no extra steps, so 2 processes at 80% per sample pay; whether they
    do depends on B_noise, and one from the first steps at the initial weights cannot settle it."""
    noise = NoiseFigure(b_simple=400.0, low=300.0, high=600.0, steps=200, b_small=8, b_big=16, provisional=False)
    rows = alternating([1000, 1000, 1000], [1600, 1600, 1600])
    early = probe(rows, noise, stage="the initial weights, the probe's first 200 steps")
    d = early.decision
    assert d is not None and (d.confidence, d.gpus, d.basis) == ("likely", 2, "time to the same loss")
    assert early.verdict[0].startswith("Recommended: 2 processes at batch 8 per device (1600.0 samples/s); likely, not")
    assert "(B_noise 400, from the initial weights, the probe's first 200 steps)" in early.verdict[0]
    assert early.verdict[0].endswith(
        "but a B_noise from the initial weights is typically far smaller than later in training, and it decides this "
        "answer: a gauged full run (monitor.gauge: true) measures it later, and plan then uses it."
    )
    later = probe(rows, noise, stage=checkpoint_stage(4000, "r1")).decision  # probe --from-run r1
    assert later is not None and later.confidence == "sure"
    assert "(B_noise 400, from step 4,000 of run r1, its newest checkpoint)" in later.paragraph
    # far below the bar whatever B_noise is: sure, even from the initial weights
    slow = probe(alternating([1000, 1000, 1000], [500, 500, 500]), noise, stage="the initial weights").decision
    assert slow is not None and slow.confidence == "sure" and "whatever B_noise is" in slow.paragraph


def test_the_evidence_states_figures_and_never_a_judgement_of_its_own():
    result = probe(alternating([1000, 1020, 980], [400, 410, 395]))
    evidence = "\n".join(result.verdict[1:])
    words = set(re.findall(r"[a-z]+", evidence.lower()))
    assert not words & {"pays", "pay", "sure", "recommended", "likely"}, evidence
    assert evidence.startswith("2 processes: 0.40x the samples/s of 1 (20% per process, batch 8 per device on both)")


def test_a_pair_whose_demand_moved_is_left_out_in_proportion_to_all_that_wants_the_cores():
    """On 2 cores: 0 against 2 threads waiting outside the probe halves its share (left out); 8 against 10 moves it
    by a sixth (kept): the others' CPU time cannot tell these apart on a saturated machine, their demand can."""
    quiet, busy = window(1, 1000, 0), window(2, 400, 20)
    assert moved(quiet.model_copy(update={"waiting": 0.0}), busy.model_copy(update={"waiting": 2.0}), 2) == (
        "0.0 against 2.0 threads outside the probe ready to run"
    )
    assert moved(quiet.model_copy(update={"waiting": 8.0}), busy.model_copy(update={"waiting": 10.0}), 2) is None
    assert moved(quiet, busy.model_copy(update={"background": 0.9}), 2) == (
        "0.2 against 0.9 cores busy outside the probe"
    )


def test_the_meter_gives_a_windows_background_from_its_samples():
    """Cores busy outside the probe are the machine's busy CPU seconds less the probe's own, over the window."""
    meter = BackgroundMeter()
    # t, machine busy s, own s: the machine did 1.6 s a second, the probe 0.6 of them, then the others rose by 0.5
    meter.samples = [(0.0, 0.0, 0.0), (1.0, 1.6, 0.6), (2.0, 3.2, 1.2), (3.0, 5.3, 1.8), (4.0, 7.4, 2.4)]
    meter.waiting = [(0.5, 1), (1.5, 1), (2.5, 3), (3.5, 3)]
    whole, shift, waiting = meter.window(0.0, 4.0)
    assert whole == 1.25 and shift == 0.5 and waiting == 2.0
    assert meter.window(None, 4.0) == (None, None, None)


def test_the_tables_efficiency_above_100_percent_has_its_caveat_under_it():
    """A grid run of 2 processes taken while the load fell reads 130% against its 1-process run: the table shows the
    column as measured, and the note under it says it is no scaling."""
    from gpuwizard.analysis.probe.verdict import result_text

    result = probe(alternating([500, 1000, 1000], [1300, 800, 800]))
    text = " ".join(result_text(result).split())
    assert " 130% " in text
    assert "eff above 100% (2x8): no added process gives that at the same batch per device" in text


def test_the_presets_own_batch_stands_unless_another_is_faster_beyond_the_spread():
    """Four probes on a loaded machine named 1x16, 1x8, 1x16 as the fewest count's best: within the spread the grid's
    first batch (the preset's) is kept, so the answer does not flip on noise."""
    from gpuwizard.analysis.probe.decision import best_per_count

    def at(batch: int, rate: float) -> ProbeRow:
        return window(1, rate, 0).model_copy(update={"per_device_batch": batch})

    close = probe([at(8, 1000), at(16, 1040)], batches=(8, 16))
    assert best_per_count(close, math.inf)[1].per_device_batch == 8
    apart = probe([at(8, 1000), at(16, 1500)], batches=(8, 16))
    assert best_per_count(apart, math.inf)[1].per_device_batch == 16


def test_the_evidence_gives_a_rate_above_100_percent_per_process_only_with_its_caveat():
    """Issue 35 done when: no efficiency above 100% is reported as a fact. 2 processes at batch 16 against 1 at 8
    read 2.2x: part of that is the batch; at the same batch it is the load."""
    bigger = [
        w.model_copy(update={"per_device_batch": 16}) if w.gpus == 2 else w for w in alternating([500] * 3, [1100] * 3)
    ]
    evidence = probe(bigger, batches=(8, 16)).verdict[1]
    assert "(110% per process, above 100%: part of it is the larger batch per device, not the added process" in evidence
    same = probe(alternating([500] * 3, [1100] * 3))
    assert "(110% per process, above 100%, which no added process gives: the load changed" in same.verdict[1]


NOW = 1_796_000_000.0


def test_other_processes_on_the_gpus_are_read_from_the_runs_nvml_samples(tmp_path):
    """A window's GPU background: the utilization NVML saw less this run's share, inside the window only."""
    from gpuwizard.analysis.probe.readings import gpu_others
    from gpuwizard.runs.rundir import RunDir

    run = RunDir(tmp_path)
    lines = [
        {"format": 1, "t": NOW + t, "index": 0, "utilization": util, "run_utilization": mine}
        for t, util, mine in ((1.0, 100, 20), (5.0, 90, 60), (6.0, 80, 60), (9.0, 50, 50))
    ]
    run.gpu_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert gpu_others(run, NOW + 4, NOW + 8) == 25.0
    assert gpu_others(run, NOW + 10, NOW + 12) is None
    pair = window(1, 1000, 0).model_copy(update={"gpu_background": 5.0})
    assert moved(pair, window(2, 500, 20).model_copy(update={"gpu_background": 40.0}), 2) == (
        "other processes kept the GPUs 5% against 40% busy"
    )


def test_a_faster_batch_measured_under_a_lighter_background_does_not_replace_the_presets():
    """Under a changing load the grid's 1x16 window can run while the machine is quieter than 1x8's: no choice."""
    from gpuwizard.analysis.probe.decision import best_per_count

    loaded = window(1, 1000, 0).model_copy(update={"background": 1.5})
    quiet = window(1, 1500, 20).model_copy(update={"per_device_batch": 16, "background": 0.2})
    assert best_per_count(probe([loaded, quiet], batches=(8, 16)), math.inf)[1].per_device_batch == 8
