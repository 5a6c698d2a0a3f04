"""What a gauged preset (monitor.gauge) adds to its job's environment: the gauge first on PYTHONPATH, before the
preset's own entries, its file in the run folder and the plan's batch sizes; and the demo's noise-task flags."""

from __future__ import annotations

import os
from pathlib import Path

from gpuwizard.gauge import gwgauge
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import build_command, make_plan
from gpuwizard.runner.launch.gauge_env import GAUGE_DIR, gauge_env


def test_the_gauge_goes_first_on_the_path_with_the_plans_batches(tmp_path):
    preset = with_field(with_field(load_preset("demo-cpu"), "batch.grad_accum", 3), "monitor.gauge", True)
    plan, _ = make_plan(preset)
    env = gauge_env(tmp_path, plan, preset.batch.grad_accum, {"PYTHONPATH": "/theirs", "KEEP": "1"})
    assert env["PYTHONPATH"].split(os.pathsep) == [str(GAUGE_DIR), "/theirs"]
    assert Path(env["PYTHONPATH"].split(os.pathsep)[0], "sitecustomize.py").is_file()
    assert env[gwgauge.FILE_VAR] == str(tmp_path / "gauge.jsonl") and env["KEEP"] == "1"
    assert env[gwgauge.ACCUM_VAR] == "3"
    assert int(env[gwgauge.RANK_BATCH_VAR]) * plan.world_size == int(env[gwgauge.GLOBAL_BATCH_VAR])
    assert int(env[gwgauge.GLOBAL_BATCH_VAR]) == plan.effective_batch == 8 * 3 * plan.world_size


def test_a_preset_without_the_gauge_leaves_the_job_alone():
    preset = load_preset("demo-cpu")
    assert preset.monitor.gauge is False
    _, ctx = make_plan(preset)
    assert not any(name.startswith("GPUWIZARD_GAUGE") for name in build_command(ctx).env)


def test_the_noise_task_reaches_the_demo_exactly():
    preset = with_field(load_preset("demo-cpu"), "trainer_options.task", "noise")
    preset = with_field(with_field(preset, "trainer_options.noise_offset", 1 / 3), "trainer_options.noise_sigma", 2.5)
    _, ctx = make_plan(preset)
    argv = build_command(ctx).argv
    assert "--task=noise" in argv and "--noise-hold" in argv and "--noise-dim=4" in argv
    assert f"--noise-offset={1 / 3!r}" in argv and "--noise-sigma=2.5" in argv
