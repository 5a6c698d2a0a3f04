"""A CPU plan's estimates (issue 25): no figure from a GPU's published time (ACT's A100 time made "<1 min" of 30
steps that took 10 min on 2 CPU processes), a CPU figure or this machine's own measurement only, and no row for a
process count this machine refuses to start."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuwizard.model.catalog import TrainingTime
from gpuwizard.planning.estimates import NO_CPU_FIGURE, estimate_rows, startable_processes

SAMPLE_RUN = Path(__file__).parents[1] / "data" / "runs" / "20261129-120000-demo-cpu"
A100 = TrainingTime(hours=1.5, setting="100k steps, batch 64, 1x A100", steps=100_000, batch=64)

ACT_CPU = """\
version: 1
name: act-cpu
trainer: lerobot
policy: act
dataset: {repo_id: myuser/so100_pick}
hardware: {gpus: 2, device: cpu}
batch: {size: 8}
optim: {lr: 1.0e-5, steps: 30}
scaling: {rule: none}
mixed_precision: "no"
"""


@pytest.fixture
def two_cores(monkeypatch):
    """The machine of the issue: 2 cores (planning/machine.py refuses a CPU run of more processes)."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)


def test_a_gpu_published_time_is_no_basis_for_a_cpu_run(two_cores):
    rows = [(1, 30, 8), (2, 30, 8)]
    one, two = estimate_rows(rows, [], A100, gpu_hour=None, device="cpu")
    for row in (one, two):
        assert (row.wall_h, row.basis, row.source, row.note) == (None, "unknown", NO_CPU_FIGURE, None)
    gpu = estimate_rows(rows, [], A100, gpu_hour=None, device="cuda")
    assert gpu[0].basis == "published", "on GPUs the A100 time still scales"


def test_a_cpu_published_time_still_counts_on_cpu(two_cores):
    demo = TrainingTime(hours=0.01, setting="200 steps at 8 per process on 2 CPU processes", steps=200, batch=8)
    [one] = estimate_rows([(1, 200, 8)], [], demo, gpu_hour=None, device="cpu")
    assert one.basis == "published" and one.source.startswith("published time (200 steps at 8 per process on 2 CPU")


def test_no_cpu_row_for_a_count_this_machine_refuses(two_cores):
    rows = [(g, 30, 8) for g in (1, 2, 4, 8)]
    assert startable_processes("cpu") == 2
    assert [e.gpus for e in estimate_rows(rows, [], None, None, device="cpu")] == [1, 2]
    assert [e.gpus for e in estimate_rows(rows, [], None, None, device="cpu", scheduler="slurm")] == [1, 2, 4, 8]
    assert [e.gpus for e in estimate_rows(rows, [], None, None, device="cuda")] == [1, 2, 4, 8]


def test_plan_of_act_on_cpu_says_to_probe_and_offers_only_startable_counts(gw, write_preset, two_cores):
    plan = gw("plan", write_preset(ACT_CPU), "--json").json()
    assert [e["gpus"] for e in plan["estimates"]] == [1, 2]
    assert all(e["source"] == NO_CPU_FIGURE and e["wall_h"] is None for e in plan["estimates"]), plan["estimates"]
    text = gw("plan", write_preset(ACT_CPU)).out
    assert "<1 min" not in text[text.index("  estimates") :]
    assert NO_CPU_FIGURE in " ".join(text.split())


def test_a_run_this_machine_measured_is_the_cpu_basis(gw, write_preset, two_cores):
    from gpuwizard.core import paths

    run = paths.runs_dir() / "20261129-120000-act-cpu"
    shutil.copytree(SAMPLE_RUN, run)
    status = json.loads((run / "status.json").read_text())
    (run / "status.json").write_text(
        json.dumps(status | {"run_id": run.name, "preset": "act-cpu", "trainer": "lerobot", "policy": "act"})
    )
    one, two = gw("plan", write_preset(ACT_CPU), "--json").json()["estimates"]
    assert two["basis"] == "measured" and two["source"] == f"measured: run {run.name}"
    assert one["basis"] == "assumed" and one["source"].startswith(f"run {run.name} on 2 processes")
