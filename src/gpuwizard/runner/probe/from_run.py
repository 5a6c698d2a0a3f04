"""Where a probe's configurations start (`probe --from-run RUN`): the newest checkpoint of a run of the same preset,
found and checked by the resume machinery (runner/launch/resume.py), copied into each configuration's scratch folder,
which then resumes from it as `run --resume` does; the B_noise they measure is of that stage of training."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path

from gpuwizard.analysis.probe.decision import checkpoint_stage
from gpuwizard.core.errors import Problem, UserError, problem
from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.model.preset import Preset
from gpuwizard.runner.launch.resume import checkpoint_step, find_target, owner_problems, same_preset
from gpuwizard.runs.records import RecordError

FROM_RUN_TRAINERS = ("demo",)
"""Trainers whose resume takes a checkpoint into another folder, batch and process count: the demo loads weights,
optimizer and schedule from checkpoints/last and draws a fresh sampler stream for a world size it has none for
(gpuwizard/demo/train.py resume_state). LeRobot resumes the whole saved config (--config_path: its batch and steps
too), the HF Trainer, GR00T and openpi their own trainer state in their own folder: not yet."""
FLAG = "--from-run"


@dataclass(frozen=True)
class StartPoint:
    """A run's newest checkpoint, at a step: what each of the probe's configurations resumes from."""

    run_id: str
    step: int
    checkpoint: Path
    """The step folder (checkpoints/000400 of the run's output folder)."""
    lr: float | None = None
    """The run's planned lr, which the checkpoint's optimizer state holds and a resume trains on at."""

    @property
    def stage(self) -> str:
        return checkpoint_stage(self.step, self.run_id)

    def seed(self, output: Path) -> None:
        """Make the checkpoint the newest of a configuration's output folder: its step folder copied under
        checkpoints/, `last` naming it (gpuwizard/demo/train.py save_checkpoint's layout); the run's own folder is
        only read."""
        folder = output / "checkpoints"
        if (folder / "last").is_symlink():
            return  # seeded already (a configuration started again)
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.checkpoint, folder / self.checkpoint.name)
        (folder / "last").symlink_to(self.checkpoint.name)


def as_ours(found: list[Problem]) -> list[Problem]:
    """The resume machinery's refusals, named for this flag."""
    return [dataclasses.replace(p, field=FLAG) for p in found if p.level == ProblemLevel.ERROR]


def find_start(preset: Preset, run_id: str) -> StartPoint:
    """The newest complete checkpoint of run `run_id`, which must be a finished or stopped full run of this preset
    (runner/launch/resume.py: find_target, same_preset, owner_problems); UserError, one paragraph, otherwise."""
    from gpuwizard.planning.plan import make_plan
    from gpuwizard.trainers.registry import get_trainer

    if preset.trainer not in FROM_RUN_TRAINERS:
        raise UserError(
            problem(
                FLAG,
                f"a probe starts from a run's checkpoint only with the {', '.join(FROM_RUN_TRAINERS)} trainer; "
                f"{preset.trainer} resumes its own saved state in its own folder, which the probe's configurations "
                "(other batches and process counts, each in a folder of its own) cannot share",
                "probe without --from-run (B_noise then comes from the initial weights, and the verdict says so), or "
                "keep monitor.gauge: true on the full run, whose B_noise plan then uses",
                value=run_id,
            ),
            preset.name,
        )
    target, found = find_target(preset, run_id)
    if refused := as_ours(found):
        raise UserError(refused, preset.name)
    assert target.run is not None and target.job is not None and target.status is not None
    if not same_preset(preset, target.run, target.job):
        raise UserError(
            problem(
                FLAG,
                f"run {target.run.run_id} is a run of {target.status.preset} (in {target.job.workdir}), not of this "
                f"preset file: its checkpoint holds another job's weights",
                f"name a run of {preset.name} from `gpuwizard runs`, or probe the preset that run came from",
                value=run_id,
            ),
            preset.name,
        )
    ctx = make_plan(preset, resume=True, output_dir=target.output_dir)[1]
    trainer = get_trainer(preset.trainer)
    checkpoint = trainer.last_checkpoint(ctx)
    if checkpoint is None:
        unfinished = trainer.unfinished_checkpoint(ctx.output_path)
        raise UserError(
            problem(
                FLAG,
                f"run {target.run.run_id} has no complete checkpoint in {ctx.output_path}"
                + (f": {unfinished}" if unfinished else ""),
                "probe from a run that saved one (trainer_options.save_every, or a run that reached its end), or "
                "without --from-run",
                value=run_id,
            ),
            preset.name,
        )
    if refused := as_ours(owner_problems(ctx, target, {"value": run_id})):
        raise UserError(refused, preset.name)
    step = checkpoint_step(checkpoint, ctx.output_path)
    assert step is not None, "the demo's checkpoints/last names a step folder (checkpoints/000400)"
    try:
        lr = target.run.plan().lr
    except RecordError:
        lr = None  # its plan.json cannot be read: the lr is not said
    return StartPoint(target.run.run_id, step, checkpoint, lr)
