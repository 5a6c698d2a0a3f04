"""Resuming from checkpoints: an incomplete LeRobot checkpoint (the layout save_checkpoint leaves) is named with its
step, and a trainer that cannot continue a finished run says so. Real runs: system/test_checkpoints_jobs.py."""

from __future__ import annotations

from pathlib import Path

from gpuwizard.gpus.inventory import read_inventory
from gpuwizard.model.preset import with_field
from gpuwizard.model.preset_files import load_preset
from gpuwizard.planning.plan import plan_here
from gpuwizard.runner.launch.resume import ResumeTarget, resume_problems
from gpuwizard.trainers.registry import get_trainer


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
    found = resume_problems(preset, ctx, ResumeTarget(), None)  # checkpoints of no recorded run
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
    found = resume_problems(preset, ctx, ResumeTarget(), None)  # checkpoints of no recorded run
    assert found == []


def test_a_trainer_that_cannot_continue_a_finished_run_refuses_in_one_sentence(tmp_path):
    from gpuwizard.runner.launch.resume import continue_problems

    preset = with_field(load_preset("so100-act-ddp2"), "output_dir", str(tmp_path / "out"))
    _, ctx = plan_here(preset, read_inventory(), resume=True)
    (found,) = continue_problems(preset, ctx, "20261201-000000-x", 20, {})
    assert found.level == "error" and found.message.count(". ") == 0
    assert "cannot be continued to more steps" in found.message and Path(found.fix or "").name
