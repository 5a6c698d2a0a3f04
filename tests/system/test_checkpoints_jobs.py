"""Checkpoints and stops of real demo runs under torchrun: a stop during a write waits for it, a second stop does
not, a resume names the incomplete checkpoint, and a finished run is continued only to more steps."""

from __future__ import annotations

import time

import pytest

from gpuwizard.core.errors import UserError
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.runner.control.stopping import request_stop
from gpuwizard.runner.launch.prepare import prepare_run
from gpuwizard.runner.launch.start import start_run
from gpuwizard.runs.rundir import RunDir
from support.cli import gw_subprocess, poll_until
from support.presets import quick_demo

SLOW_SAVE = "trainer_options: {step_time_s: 0.02, log_every: 5, save_every: 20, checkpoint_time_s: 8}"


def kinds(run: RunDir) -> list[str]:
    return [e.kind for e in run.events()[0]]


def saving(run: RunDir, step: int) -> bool:
    return f"Saving checkpoint at step {step} ->" in run.log.read_text()


@pytest.mark.slow
def test_a_stop_during_a_checkpoint_write_waits_for_it_and_a_second_stop_does_not(tmp_path):
    """Run 1 is stopped while its step-20 checkpoint is written: the stop waits, the checkpoint is whole, run 2
    resumes from it. Run 2 is stopped twice during its step-40 write: it stops at once, and the next resume says
    that step 40 is incomplete and goes back to step 20."""
    quick_demo(tmp_path, "ckpt", SLOW_SAVE, steps=3000)
    out = tmp_path / "out-ckpt" / "checkpoints"
    first = start_run(prepare_run(load_preset("ckpt")))
    poll_until(lambda: saving(first, 20), 120)
    stopped = gw_subprocess("stop", first.run_id, timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"run {first.run_id}: the stop waits for the checkpoint being written" in stopped.stdout
    assert "stop_waits_for_checkpoint" in kinds(first) and first.status().state == "stopped"
    assert (out / "last").resolve().name == "000020" and (out / "000020" / "model.pt").is_file()

    resumed = prepare_run(load_preset("ckpt"), resume=True)
    assert resumed.checkpoint == (out / "000020").resolve() and resumed.resumed_from == first.run_id
    second = start_run(resumed)
    poll_until(lambda: saving(second, 40), 120)
    request_stop(second)
    poll_until(lambda: "stop_waits_for_checkpoint" in kinds(second), 30)
    request_stop(second)
    started = time.monotonic()
    poll_until(lambda: second.status().final, 60)
    assert time.monotonic() - started < 8, "the second stop does not wait for the 8 s write"
    assert not (out / "000040" / "model.pt").exists() and (out / "last").resolve().name == "000020"

    again = prepare_run(load_preset("ckpt"), resume=True)
    assert again.checkpoint == (out / "000020").resolve()
    assert any(
        "checkpoints/000040 (step 40) is incomplete: it has no model.pt, and checkpoints/last names 000020"
        in w.paragraph()
        for w in again.warnings
    ), [w.paragraph() for w in again.warnings]


@pytest.mark.slow
def test_a_finished_run_is_not_repeated_by_a_resume_but_continued_to_more_steps(tmp_path):
    quick_demo(tmp_path, "done", "trainer_options: {log_every: 5}", steps=30)
    finished = start_run(prepare_run(load_preset("done")))
    assert poll_until(lambda: finished.status().final, 120) and finished.status().state == "finished"
    with pytest.raises(UserError) as refused:
        prepare_run(load_preset("done"), resume=True)
    assert refused.value.paragraph() == (
        f"done: --resume: run {finished.run_id} finished all its 30 steps: resuming it would train none. Fix: raise "
        "optim.steps above 30 to continue it (the demo's lr is flat after its warmup, so the extra steps train at the "
        "same lr, from the saved optimizer state), or run without --resume."
    )
    more = prepare_run(with_field(load_preset("done"), "optim.steps", 60), resume=True)
    assert any(f"run {finished.run_id} finished 30 steps; this continues it to 60" in w.message for w in more.warnings)
    continued = start_run(more)
    assert poll_until(lambda: continued.status().final, 120) and continued.status().state == "finished"
    log = continued.log.read_text()
    assert "Resuming from step 30" in log and "step 60/60" in log and "step 5/60" not in log
    assert continued.progress().step == 60
