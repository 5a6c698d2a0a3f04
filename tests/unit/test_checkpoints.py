"""Checkpoints and stops: a stop during a write waits for it, a resume names an incomplete checkpoint, and a finished
run is continued only to more steps. Real demo runs under torchrun; LeRobot's layout as save_checkpoint writes it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from conftest import gw_subprocess, wait_for
from gpuwizard.core.errors import UserError
from gpuwizard.gpus.inventory import read_inventory
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import plan_here
from gpuwizard.runner.follow import request_stop
from gpuwizard.runner.launch import start_run
from gpuwizard.runner.prepare import prepare_run
from gpuwizard.runner.resume import resume_source
from gpuwizard.runs.rundir import RunDir
from gpuwizard.trainers.registry import get_trainer
from test_tui import quick_demo

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
    assert wait_for(lambda: saving(first, 20), 120)
    stopped = gw_subprocess("stop", first.run_id, timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"run {first.run_id}: the stop waits for the checkpoint being written" in stopped.stdout
    assert "stop_waits_for_checkpoint" in kinds(first) and first.status().state == "stopped"
    assert (out / "last").resolve().name == "000020" and (out / "000020" / "model.pt").is_file()

    resumed = prepare_run(load_preset("ckpt"), resume=True)
    assert resumed.checkpoint == (out / "000020").resolve() and resumed.resumed_from == first.run_id
    second = start_run(resumed)
    assert wait_for(lambda: saving(second, 40), 120)
    request_stop(second)
    assert wait_for(lambda: "stop_waits_for_checkpoint" in kinds(second), 30)
    request_stop(second)
    started = time.monotonic()
    assert wait_for(lambda: second.status().final, 60)
    assert time.monotonic() - started < 8, "the second stop does not wait for the 8 s write"
    assert not (out / "000040" / "model.pt").exists() and (out / "last").resolve().name == "000020"

    again = prepare_run(load_preset("ckpt"), resume=True)
    assert again.checkpoint == (out / "000020").resolve()
    assert any(
        "checkpoints/000040 (step 40) is incomplete: it has no model.pt, and checkpoints/last names 000020"
        in w.paragraph()
        for w in again.warnings
    ), [w.paragraph() for w in again.warnings]


def test_a_resume_that_finds_only_an_incomplete_lerobot_checkpoint_names_its_step_and_what_is_missing(tmp_path):
    """The layout lerobot-train 0.6 leaves when stopped after the model was saved and before the optimizer state
    (lerobot/common/train_utils.py save_checkpoint) and before `checkpoints/last` was linked."""
    preset = with_field(load_preset("so100-act-ddp2"), "output_dir", str(tmp_path / "out"))
    step = tmp_path / "out" / "checkpoints" / "000008"
    for name in ("config.json", "model.safetensors", "train_config.json"):
        (step / "pretrained_model" / name).parent.mkdir(parents=True, exist_ok=True)
        (step / "pretrained_model" / name).write_text("{}")
    (step / "training_state").mkdir()
    (step / "training_state" / "training_step.json").write_text('{"step": 8}')
    (step / "training_state" / "optimizer_state.safetensors.tmp").write_text("")
    _, ctx = plan_here(preset, read_inventory(), resume=True)
    _, found = resume_source(preset, ctx, None)
    assert [p.paragraph() for p in found] == [
        f"--resume: there is no complete lerobot checkpoint in {(tmp_path / 'out').resolve()}: checkpoints/000008 "
        "(step 8) is incomplete: it has no training_state/optimizer_state.safetensors, and there is no "
        "checkpoints/last (the run was stopped while writing it). Fix: start fresh without --resume (a partial step "
        "folder can be deleted)."
    ]
    (step / "training_state" / "optimizer_state.safetensors.tmp").rename(
        step / "training_state" / "optimizer_state.safetensors"
    )
    (step.parent / "last").symlink_to("000008")
    assert get_trainer("lerobot").unfinished_checkpoint(tmp_path / "out") is None
    assert get_trainer("lerobot").saved_checkpoint(tmp_path / "out") == "000008"
    _, found = resume_source(preset, ctx, None)
    assert found == []


@pytest.mark.slow
def test_a_finished_run_is_not_repeated_by_a_resume_but_continued_to_more_steps(tmp_path):
    quick_demo(tmp_path, "done", "trainer_options: {log_every: 5}", steps=30)
    finished = start_run(prepare_run(load_preset("done")))
    assert wait_for(lambda: finished.status().final, 120) and finished.status().state == "finished"
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
    assert wait_for(lambda: continued.status().final, 120) and continued.status().state == "finished"
    log = continued.log.read_text()
    assert "Resuming from step 30" in log and "step 60/60" in log and "step 5/60" not in log
    assert continued.progress().step == 60


def test_a_trainer_that_cannot_continue_a_finished_run_refuses_in_one_sentence(tmp_path):
    from gpuwizard.runner.resume import continue_problems

    preset = with_field(load_preset("so100-act-ddp2"), "output_dir", str(tmp_path / "out"))
    _, ctx = plan_here(preset, read_inventory(), resume=True)
    (found,) = continue_problems(preset, ctx, "20261201-000000-x", 20, {})
    assert found.level == "error" and found.message.count(". ") == 0
    assert "cannot be continued to more steps" in found.message and Path(found.fix or "").name
