"""A probe refuses, in one paragraph and before anything starts, a trainer whose log lines come too far apart for
its steps (runner/probe/grid.Probe.refuse_silent_log, issue 35 item 7): GR00T logs every 10 steps
(TrainingConfig.logging_steps, gr00t/configs/training/training_config.py at 626af89; launch_finetune.py has no flag
for it), so its 40-step probe would read 4 lines where the window past the warm-up needs 11."""

from __future__ import annotations

from gpuwizard.core import paths
from support.presets import shipped_preset


def test_a_trainer_that_logs_too_rarely_for_the_probes_steps_is_refused_in_one_paragraph(gw, tmp_path):
    preset = shipped_preset(tmp_path, "example-groot", hardware__device="cpu")
    said = gw("probe", preset, "--trust", "--gpus", "1")
    assert said.code == 2 and not said.out
    assert said.err.strip() == (
        "--steps = 40: a configuration of 40 steps logs a loss and a rate every 10 of the trainer's steps, 4 lines: "
        "fewer than the 11 the probe needs to measure past the warm-up. Fix: probe with --steps 107 or more, or lower "
        "the trainer's log interval in trainer_options."
    )
    assert not (paths.data_dir() / "probes").exists() or not any((paths.data_dir() / "probes").iterdir())
