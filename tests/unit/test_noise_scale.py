"""The noise-scale estimator (analysis/probe/noise_scale.py) on synthetic gauge values of known answer: exact norms,
noisy ones, the smoothing of each sum on its own, the interval's width, and the gauge file as the ranks write it."""

from __future__ import annotations

import json
import random

import pytest

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, GaugeStep, estimate, main, read_gauge, summary


def expected_norms(g_sq: float, trace: float, batch: float) -> float:
    """E|G_B|^2 = |G|^2 + tr(Sigma) / B: what a gradient averaged over `batch` samples reads on average."""
    return g_sq + trace / batch


def exact_steps(g_sq: float, trace: float, n: int = 50, small: float = 8, big: float = 16) -> list[GaugeStep]:
    return [
        GaugeStep(i, small, expected_norms(g_sq, trace, small), big, expected_norms(g_sq, trace, big)) for i in range(n)
    ]


def test_exact_norms_give_the_ratio_and_a_closed_interval():
    found = estimate(exact_steps(g_sq=0.5, trace=20.0))
    assert found is not None
    assert found.b_simple == pytest.approx(20.0 / 0.5)
    assert found.low == pytest.approx(40.0) and found.high == pytest.approx(40.0)
    assert not found.provisional and "provisional" not in found.line()
    assert found.g_sq == pytest.approx(0.5) and found.trace == pytest.approx(20.0)


def test_warmup_steps_are_left_out():
    early = exact_steps(g_sq=5.0, trace=5.0, n=10)  # the first tenth of 100 steps, far from the rest
    late = [GaugeStep(s.step + 10, s.b_small, s.g_small_sq, s.b_big, s.g_big_sq) for s in exact_steps(0.5, 20.0, n=90)]
    assert estimate(early + late).b_simple == pytest.approx(40.0)
    assert estimate(early + late, warmup=0).b_simple != pytest.approx(40.0)


def test_each_sum_is_smoothed_on_its_own_not_the_ratio():
    """Two halves with |G|^2 of 1 and 3 and tr(Sigma) of 10: the ratio of the means is 20 / 4 = 5, while the mean
    of the per-step ratios would be (10 + 10 / 3) / 2."""
    steps = exact_steps(1.0, 10.0, n=20) + [
        GaugeStep(s.step + 20, s.b_small, s.g_small_sq, s.b_big, s.g_big_sq) for s in exact_steps(3.0, 10.0, n=20)
    ]
    assert estimate(steps, warmup=0).b_simple == pytest.approx(20.0 / 4.0)


def noisy_steps(g_sq: float, trace: float, n: int, noise: float, seed: int = 7) -> list[GaugeStep]:
    """Norms around their expectation with a relative spread `noise` (independent per step and per batch size)."""
    rng = random.Random(seed)
    steps = []
    for i in range(n):
        small, big = (expected_norms(g_sq, trace, b) * (1 + rng.gauss(0, noise)) for b in (64, 128))
        steps.append(GaugeStep(i, 64, small, 128, big))
    return steps


def test_noisy_norms_land_near_the_truth_and_the_interval_holds_it():
    truth = 30.0 / 0.2
    found = estimate(noisy_steps(g_sq=0.2, trace=30.0, n=4000, noise=0.2))
    assert found is not None and found.low is not None and found.high is not None
    assert found.b_simple == pytest.approx(truth, rel=0.15)
    assert found.low < truth < found.high
    assert not found.provisional


def test_a_wide_interval_is_provisional_and_says_so():
    found = estimate(noisy_steps(g_sq=0.2, trace=30.0, n=40, noise=0.5))
    assert found is not None and found.provisional
    assert "provisional" in found.line()


def test_no_gradient_above_its_noise_is_not_measurable():
    steps = [GaugeStep(i, 8, 1.0, 16, 0.4) for i in range(20)]  # falls more than noise allows: |G|^2 reads < 0
    found = estimate(steps)
    assert found is not None and found.b_simple is None and found.provisional
    assert "not measurable" in found.line()
    assert estimate(steps[:1]) is None


def gauge_line(**fields: object) -> str:
    return json.dumps({"kind": "step", "t": 0.0, "dt_s": 0.01, **fields})


def test_the_gauge_file_is_read_per_step_across_ranks(tmp_path):
    """|G|^2 = 1 and tr(Sigma) = 8: E|G_8|^2 = 2 (the ranks read 1.9 and 2.1), E|G_16|^2 = 1.5."""
    lines = [
        gauge_line(rank=rank, step=step, local_sq=local, avg_sq=1.5, rank_batch=8, global_batch=16)
        for step in range(1, 31)
        for rank, local in ((0, 1.9), (1, 2.1))
    ]
    lines.insert(3, '{"kind": "step", "rank": 0, "ste')  # a torn line while the job writes
    lines.append(json.dumps({"kind": "unmeasured", "rank": 0, "what": "gradient norms", "why": "FSDP"}))
    (tmp_path / GAUGE_FILE).write_text("\n".join(lines) + "\n")
    read = read_gauge(tmp_path / GAUGE_FILE)
    assert len(read.steps) == 30 and read.unmeasured == ["FSDP"]
    assert all(s.g_small_sq == pytest.approx(2.0) and (s.b_small, s.b_big) == (8, 16) for s in read.steps)
    found = estimate(read.steps)
    assert found is not None and found.g_sq == pytest.approx(1.0) and found.b_simple == pytest.approx(8.0)


def test_the_reader_prints_the_figure_or_says_why_not(tmp_path, capsys):
    assert summary(tmp_path) is None
    assert main([str(tmp_path)]) == 1 and "not gauged" in capsys.readouterr().err
    unmeasured = {"kind": "unmeasured", "rank": 0, "what": "gradient norms", "why": "no DDP module"}
    (tmp_path / GAUGE_FILE).write_text(json.dumps(unmeasured) + "\n" + gauge_line(rank=0, step=1, local_sq=None))
    assert summary(tmp_path) == "B_simple: not measured: no DDP module"
    steps = exact_steps(0.5, 20.0)
    (tmp_path / GAUGE_FILE).write_text(
        "".join(
            gauge_line(rank=0, step=s.step, local_sq=s.g_small_sq, avg_sq=s.g_big_sq, rank_batch=8, global_batch=16)
            + "\n"
            for s in steps
        )
    )
    assert main([str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("B_simple ~ 40 samples (90% interval 40 to 40, 45 steps)")
