"""Time and cost estimates per GPU count (SPEC §4 `estimates`): each source, and the arithmetic."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuwizard.catalog import TrainingTime
from gpuwizard.estimates import ASSUMED_EFFICIENCY, SMALL_BATCH_FLOOR, Measured, estimate_rows

SAMPLE_RUN = Path(__file__).parent / "data" / "runs" / "20261129-120000-demo-cpu"


def test_measured_runs_come_first_then_scaled_with_an_assumed_efficiency():
    rows = [(1, 4500, 8), (2, 4500, 8), (4, 4500, 8)]  # 36,000, 72,000 and 144,000 samples
    measured = [Measured("r1", 1, 10.0), Measured("r2", 2, 18.0)]
    one, two, four = estimate_rows(rows, measured, None, gpu_hour=2.0)
    assert (one.wall_h, one.gpu_hours, one.cost, one.source) == (1.0, 1.0, 2.0, "measured: run r1")
    assert (one.basis, two.basis, four.basis) == ("measured", "measured", "assumed")
    assert two.wall_h == pytest.approx(72_000 / 18.0 / 3600) and two.source == "measured: run r2"
    assert four.wall_h == pytest.approx(144_000 / (10.0 * 4 * ASSUMED_EFFICIENCY) / 3600)
    assert four.source == "run r1 on 1, 85% scaling efficiency assumed"
    assert four.cost == pytest.approx(four.gpu_hours * 2.0)


def test_a_published_time_is_scaled_by_steps_and_batch_per_gpu_and_marked():
    """ACT, 100k steps at batch 64 in 1.5 h on an A100 (the LeRobot notebooks): half the steps at the same batch is
    half the time; a batch of 8 costs the floor plus its share; more GPUs divide the time at the assumed efficiency."""
    act = TrainingTime(hours=1.5, setting="100k steps, batch 64, 1x A100", steps=100_000, batch=64)
    same, small, bigger, two = estimate_rows(
        [(1, 50_000, 64), (1, 100_000, 8), (1, 100_000, 128), (2, 100_000, 64)], [], act, gpu_hour=None
    )
    assert same.wall_h == pytest.approx(0.75) and same.cost is None and same.basis == "published"
    assert same.source == "published 1-GPU time (100k steps, batch 64, 1x A100)"
    assert small.wall_h == pytest.approx(1.5 * (SMALL_BATCH_FLOOR + (1 - SMALL_BATCH_FLOOR) * 8 / 64))
    assert bigger.wall_h == pytest.approx(3.0)
    assert two.wall_h == pytest.approx(1.5 / ASSUMED_EFFICIENCY) and two.basis == "assumed"
    assert two.source.endswith("85% scaling efficiency assumed")


def test_without_any_source_the_estimate_says_so():
    [row] = estimate_rows([(1, 1000, 8)], [], TrainingTime(hours=3, setting="no step count"), gpu_hour=3.0)
    assert (row.wall_h, row.gpu_hours, row.cost) == (None, None, None) and row.source.startswith("unknown")
    assert row.basis == "unknown"


def test_the_seed_anchor_for_gr00t(gw):
    """The project seed: GR00T N1.7 on one 80 GB card in 3-6 h; launch_finetune.py's defaults are 10,000 steps at a
    global batch of 64 (reference/trainers.md), which is what the shipped groot-n17-8gpu preset trains."""
    plan = gw("plan", "groot-n17-8gpu", "--json").json()
    one = plan["estimates"][0]
    assert one["gpus"] == 1 and 3 <= one["wall_h"] <= 6 and one["basis"] == "published"


def test_plan_json_carries_estimates_from_this_presets_history(gw, write_preset):
    """The seed's anchor for the demo: a finished 1-process run in the history is this preset's measurement."""
    from gpuwizard import paths

    text = """\
version: 1
name: est-demo
trainer: demo
policy: demo
dataset: {repo_id: demo/so100_reach}
hardware: {gpus: 1, device: cpu}
batch: {size: 8}
optim: {steps: 300}
mixed_precision: "no"
costs: {gpu_hour: 4.0}
"""
    published = gw("plan", write_preset(text), "--json").json()["estimates"]
    assert [e["gpus"] for e in published] == [1, 2, 4, 8]
    assert published[0]["source"].startswith("published 1-GPU time (200 steps at 8 per process on 2 CPU processes)")
    run = paths.runs_dir() / "20261129-120000-est-demo"
    shutil.copytree(SAMPLE_RUN, run)
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(json.dumps(status | {"run_id": run.name, "preset": "est-demo"}))
    progress = json.loads((run / "progress.json").read_text())
    rate = 650.0
    (run / "progress.json").write_text(json.dumps(progress | {"samples_per_s_mean": rate}))
    plan = gw("plan", write_preset(text), "--json").json()
    one, two = plan["estimates"][:2]
    assert two["source"] == f"measured: run {run.name}" and two["samples"] == 300 * 16, "the sample run had 2 processes"
    assert two["wall_h"] == pytest.approx(4800 / rate / 3600) and two["cost"] == pytest.approx(two["gpu_hours"] * 4.0)
    assert one["source"] == f"run {run.name} on 2, 85% scaling efficiency assumed"
    assert one["wall_h"] == pytest.approx(2400 / (rate / (2 * ASSUMED_EFFICIENCY)) / 3600)
    text_out = gw("plan", write_preset(text)).out
    assert "estimates     GPUs   wall time   GPU-hours    cost   source" in text_out
