"""Issue 26 on a real trainer: lerobot-train (ACT, the tiny dataset, 2 CPU processes under torchrun with gloo) with
the gauge on trains to the same losses as without it and gives a noise-scale figure. LeRobot wraps the policy in
accelerate's DistributedDataParallel (lerobot_train.py, 0.6.1 and main at 7427f31), whose all-reduce the gauge's
communication hook sees."""

from __future__ import annotations

import pytest

from gpuwizard.analysis.probe.noise_scale import GAUGE_FILE, read_gauge, summary
from support.trainers import SHARES_061_RUN

pytestmark = pytest.mark.lerobot


@SHARES_061_RUN
@pytest.mark.parametrize("variable, accum", [pytest.param("GPUWIZARD_LEROBOT_PYTHON", 1, id="0.6.1")])
def test_lerobot_with_the_gauge_trains_the_same_losses_and_gives_a_noise_scale(lerobot_run, variable, accum):
    """0.6.1 only in the suite: its update_policy calls policy.forward() on the DDP module, the one path the demo and
    the HF Trainer do not take; main 7427f31 calls policy(batch) and passed the same test once
    (GPUWIZARD_LEROBOT_MAIN_PYTHON, accumulation 2). The run without the gauge is test_lerobot.py's (lerobot_run)."""
    plain = lerobot_run(variable, accum).run
    gauged = lerobot_run(variable, accum, gauge=True).run
    losses = [[(m.step, m.loss) for m in run.metrics()] for run in (plain, gauged)]
    assert losses[0] and losses[0] == losses[1], "the same seed, the same losses, with and without the gauge"
    assert not (plain.path / GAUGE_FILE).exists()
    read = read_gauge(gauged.path / GAUGE_FILE)
    assert read.unmeasured == [] and len(read.steps) >= 10, (read.unmeasured, len(read.steps))
    assert {(s.b_small, s.b_big) for s in read.steps} == {(2 * accum, 4 * accum)}, "per rank and global batch"
    said = summary(gauged.path)
    assert said is not None and said.startswith("B_simple"), said
