"""Time to the same loss (analysis/probe/time_to_loss.py) on configurations whose answer is known by hand: steps from
S = S_min (1 + B_noise / B), the four things a second GPU can buy, how sure each is, and what to do instead."""

from __future__ import annotations

import math

import pytest

from gpuwizard.analysis.probe.time_to_loss import Config, buys, ratios, sentence, table


def config(gpus: int, batch: int, step_s: float, spread: float = 0.0, predicted: bool = False) -> Config:
    return Config(gpus, batch, gpus * batch, step_s, step_s * (1 - spread), step_s * (1 + spread), predicted)


def test_the_ratios_follow_mccandlish():
    steps, samples = ratios(b_noise=32, base_batch=16, batch=32)
    assert steps == pytest.approx((1 + 32 / 32) / (1 + 32 / 16))
    assert samples == pytest.approx((32 + 32) / (16 + 32))
    assert ratios(math.inf, 16, 32) == (0.5, 1.0), "an unbounded B_noise: every sample counts"


def test_far_below_b_noise_a_second_gpu_at_the_same_step_time_buys_both():
    rows = table([config(1, 16, 0.01), config(2, 16, 0.01)], b_noise=1000, low=800, high=1200)
    one, two = rows
    assert one.time_ratio == pytest.approx(1) and one.samples_ratio == pytest.approx(1)
    assert two.steps_ratio == pytest.approx((1 + 1000 / 32) / (1 + 1000 / 16))
    assert two.time_ratio == pytest.approx(two.steps_ratio) and two.time_ratio < 0.55
    assert buys(two) == "both"
    said = sentence(rows, "B_noise ~ 1000", "GPU", 1000)
    assert "2 GPUs reach it in 0.51x the time (0.51-0.51) and 1.02x the samples" in said
    assert "sure" not in said and "instead" not in said, "whether it pays is the decision's, not the evidence's"


def test_near_b_noise_the_second_gpu_buys_wall_clock_but_not_data_and_says_fewer_steps():
    rows = table([config(1, 32, 0.01), config(2, 32, 0.011)], b_noise=64, low=60, high=68)
    two = rows[1]
    assert two.steps_ratio == pytest.approx(2 / 3) and two.samples_ratio == pytest.approx(128 / 96)
    assert two.time_ratio == pytest.approx(2 / 3 * 1.1)
    assert buys(two) == "wall clock"
    said = sentence(rows, "B_noise ~ 64", "GPU", 1000, lr=" at lr 0.002")
    assert f"about {round(1000 * two.steps_ratio):,} steps instead of 1,000 (optim.steps) at lr 0.002" in said


def test_far_past_b_noise_a_bigger_batch_buys_no_steps():
    rows = table([config(1, 64, 0.01), config(2, 64, 0.01)], b_noise=4, low=3, high=5)
    assert rows[1].steps_ratio == pytest.approx((1 + 4 / 128) / (1 + 4 / 64)) and rows[1].steps_ratio > 0.95
    assert buys(rows[1]) == "nothing"


def test_a_slow_second_process_buys_nothing_and_points_at_a_sweep():
    rows = table([config(1, 8, 0.01, 0.05), config(2, 8, 0.03, 0.05)], b_noise=10, low=9, high=12)
    assert buys(rows[1]) == "nothing"
    said = sentence(rows, "B_noise ~ 10", "process", 300)
    assert "2 processes reach it in 2.17x the time" in said and "`gpuwizard sweep`" in said


def test_a_wide_interval_or_spread_shows_as_the_ranges():
    rows = table([config(1, 16, 0.01, 0.3), config(2, 16, 0.012, 0.3)], b_noise=40, low=5, high=None)
    two = rows[1]
    assert two.time_low < 0.9 < two.time_high
    assert f"({two.time_low:.2f}-{two.time_high:.2f})" in sentence(rows, "B_noise ~ 40", "GPU", None)


def test_the_base_is_the_fewest_gpus_soonest_to_the_loss_and_predicted_rows_say_so():
    rows = table(
        [config(1, 8, 0.010), config(1, 16, 0.012), config(2, 16, 0.013), config(4, 16, 0.02, predicted=True)],
        b_noise=100,
        low=90,
        high=110,
    )
    by = {(r.gpus, r.per_device_batch): r for r in rows}
    assert by[(1, 16)].time_ratio == pytest.approx(1.0), "batch 16 on one GPU reaches the loss soonest"
    assert by[(1, 8)].time_ratio > 1 and by[(4, 16)].predicted
    assert "2 GPUs" in sentence(rows, "B", "GPU", 10) and sentence([rows[0]], "B", "GPU", 10).endswith("compare.")
