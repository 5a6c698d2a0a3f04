"""Time and cost estimates per GPU count (SPEC §4 `estimates`): each source, and the arithmetic."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from gpuwizard.model.catalog import TrainingTime
from gpuwizard.planning.estimates import ASSUMED_EFFICIENCY, SMALL_BATCH_FLOOR, Measured, estimate_rows
from support.data import DATA, REPO

SAMPLE_RUN = DATA / "runs" / "20261129-120000-demo-cpu"


def test_measured_runs_come_first_then_scaled_with_an_assumed_efficiency():
    rows = [(1, 4500, 8), (2, 4500, 8), (4, 4500, 8)]  # 36,000, 72,000 and 144,000 samples
    measured = [Measured("r1", 1, 10.0), Measured("r2", 2, 18.0)]
    one, two, four = estimate_rows(rows, measured, None, gpu_hour=2.0)
    assert (one.wall_h, one.gpu_hours, one.cost, one.source) == (1.0, 1.0, 2.0, "measured: run r1")
    assert (one.basis, two.basis, four.basis) == ("measured", "measured", "assumed")
    assert two.wall_h == pytest.approx(72_000 / 18.0 / 3600) and two.source == "measured: run r2"
    assert four.wall_h == pytest.approx(144_000 / (10.0 * 4 * ASSUMED_EFFICIENCY) / 3600)
    assert four.source == "run r1 on 1 GPU, 85% scaling efficiency assumed"
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
    from gpuwizard.core import paths

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
    cores = os.cpu_count() or 1  # a CPU plan offers only the process counts this machine can start
    assert [e["gpus"] for e in published] == [n for n in (1, 2, 4, 8) if n <= cores]
    assert published[0]["source"].startswith("published time (200 steps at 8 per process on 2 CPU processes)")
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
    assert one["source"] == f"run {run.name} on 2 processes, 85% scaling efficiency assumed"
    assert one["wall_h"] == pytest.approx(2400 / (rate / (2 * ASSUMED_EFFICIENCY)) / 3600)
    text_out = gw("plan", write_preset(text)).out
    assert "estimates    procs   wall time  proc-hours    cost   source" in text_out


DEMO_CPU = """\
version: 1
name: est-cpu
trainer: demo
policy: demo
dataset: {repo_id: demo/so100_reach}
hardware: {gpus: 2, device: cpu}
batch: {size: 8}
optim: {steps: 300}
scaling: {rule: none}
mixed_precision: "no"
"""


def test_cpu_estimates_and_advice_count_processes_not_gpus(gw, write_preset):
    """A CPU preset runs processes: the plan's estimates, its advice and the wizard's Scaling step say so."""
    from gpuwizard.model.preset_files import load_preset_file
    from gpuwizard.planning.plan import make_plan
    from gpuwizard.tui.wizard.job_steps import estimates_text

    path = write_preset(DEMO_CPU)
    text = gw("plan", path).out
    table = text[text.index("  estimates") : text.index("  memory")]
    assert table.splitlines()[0] == "  estimates    procs   wall time  proc-hours    cost   source"
    assert "GPU" not in table, table
    assert "published time (200 steps at 8 per process on 2 CPU processes), 85% scaling efficiency assumed" in table
    words = " ".join(text.split())
    assert "Published single-GPU time" not in words and "reference on 1 process: 8" in words
    assert "Published time: ~1 min (200 steps at 8 per process on 2 CPU processes), for those steps and that" in words
    plan, _ = make_plan(load_preset_file(path))
    wizard = estimates_text(plan)
    assert "GPU" not in wizard, wizard
    assert "  1 process     1 min · 0.01 proc-h · published" in wizard.splitlines()
    assert any(line.startswith("> 2 processes   1 min · 0.04 proc-h · assumed") for line in wizard.splitlines())


def test_the_published_time_and_its_scaling_agree_and_say_why_more_gpus_are_no_sooner(gw, write_preset):
    """so100-act-ddp2: ACT's published 1.5 h is for 100k steps at batch 64; this preset trains 100k steps at batch 8,
    which the estimates make ~51 min on 1 GPU. linear_lr keeps the steps and the batch per GPU, so 2, 4 and 8 GPUs
    each do the same work (and see 2x, 4x, 8x the samples): the same wall time, said in words. divide_steps cuts it."""
    from gpuwizard.core.units import fmt_hours

    result = gw("plan", "so100-act-ddp2", "--json")
    one, two, four, eight = result.json()["estimates"]
    assert fmt_hours(one["wall_h"]) == "51 min" and one["basis"] == "published"
    assert fmt_hours(two["wall_h"]) == fmt_hours(four["wall_h"]) == fmt_hours(eight["wall_h"]) == "1.0 h"
    text = " ".join(gw("plan", "so100-act-ddp2").out.split())
    assert (
        "Published single-GPU time: ~1.5 h (100k steps, batch 64, 1x A100), for those steps and that batch; the "
        "estimates scale it to this preset's steps and batch." in text
    )
    assert (
        "The published 1-GPU time, ~1.5 h for 100k steps, batch 64, 1x A100, is scaled to this preset's 100000 steps "
        "at 8 samples per GPU: a step at batch 8 is taken as 0.56x one at batch 64 (never under 0.5x: a small batch "
        "does not keep a GPU busy), so ~51 min on 1 GPU." in text
    ), text
    assert (
        "linear_lr keeps 100000 steps at 8 samples per GPU on every GPU count, so each GPU does the same work and more "
        "GPUs only see more samples (16 per step on 2, 32 on 4, 64 on 8): the wall time does not drop. divide_steps "
        "(steps / k) shortens the run instead." in text
    ), text
    divided = write_preset(
        (REPO / "presets" / "so100-act-ddp2.yaml").read_text().replace("rule: linear_lr", "rule: divide_steps")
    )
    one, two, four, eight = gw("plan", divided, "--json").json()["estimates"]
    assert one["wall_h"] > two["wall_h"] > four["wall_h"] > eight["wall_h"]
    assert "keeps" not in " ".join(gw("plan", divided).out.split())
