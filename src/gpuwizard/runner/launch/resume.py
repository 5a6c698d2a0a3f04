"""Which earlier run a resumed run continues, in which folder and to how many steps, and whether it can: a complete
checkpoint its own resume chain wrote, a finished run only to more steps, never a resume that trains none."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuwizard.core.codes import RunState
from gpuwizard.core.errors import Problem, UserError, problem, warning
from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.core.schema import to_data
from gpuwizard.core.units import counted
from gpuwizard.model.job import BuildContext
from gpuwizard.model.preset import Preset, with_field
from gpuwizard.model.preset_files import load_preset_file
from gpuwizard.planning.plan import fixed_output, preset_output_dir
from gpuwizard.runs.owner import full_runs, newest_full_run, read_owner
from gpuwizard.runs.records import Job, RecordError, Status
from gpuwizard.runs.rundir import RunDir, find_run, list_runs
from gpuwizard.trainers.base import workdir_for
from gpuwizard.trainers.registry import get_trainer

STEP_FOLDER = re.compile(r"(?:checkpoint-)?(\d+)")
"""A step folder's name: 000040 (LeRobot, the demo), checkpoint-1500 (HF, GR00T), 1500 (openpi)."""


@dataclass
class ResumeTarget:
    """The run a resume continues (None: checkpoints in a fixed output_dir that no recorded run wrote)."""

    run: RunDir | None = None
    status: Status | None = None
    job: Job | None = None
    steps: int | None = None
    """optim.steps of the run's own preset (its preset.yaml: what the monitor's resume continues to)."""

    @property
    def chain(self) -> str | None:
        """The first run of its resume chain, which the output folder's marker must name."""
        if self.run is None:
            return None
        return (self.job.resume_chain if self.job else None) or self.run.run_id

    @property
    def output_dir(self) -> str | None:
        return self.job.output_dir if self.job else None


def fixed_folder(preset: Preset) -> Path:
    """The one folder every run of a preset with a fixed output folder writes, resolved."""
    workdir, _ = workdir_for(preset)
    return Path(workdir, os.path.expanduser(preset_output_dir(preset))).resolve()


def find_target(preset: Preset, run_id: str | None) -> tuple[ResumeTarget, list[Problem]]:
    """The run `--resume [RUN_ID]` continues: the one named; else the run that marked the preset's fixed folder, or
    the newest run of this preset (on that folder, else of this preset file: own_run)."""
    if run_id is not None:
        run = find_run(run_id)
        if run is None:
            found = problem("--resume", "no such run", "pick a run id from `gpuwizard runs`", value=run_id)
            return ResumeTarget(), [found]
    elif fixed_output(preset):
        out = fixed_folder(preset)
        owner = read_owner(out, preset.hardware.node_rank)
        run = find_run(owner.run_id) if owner is not None and owner.run_id else None
        if run is None:
            newest = newest_full_run(preset.name, out)
            run = newest[0] if newest else None
        if run is None:
            return ResumeTarget(), []  # checkpoints of no recorded run: taken as they are, if complete
    else:
        own = own_run(preset)
        if isinstance(own, Problem):
            return ResumeTarget(), [own]
        run = own
    return read_target(preset, run, run_id)


LAUNCH_VARIES = ("description", "hardware", "output_dir")
"""What a launch may change in the preset copy its run keeps (--gpus, --node-rank, the sweep's label) and what
--resume may itself raise (optim.steps), left out when a run is matched to the preset given."""


def same_preset(preset: Preset, run: RunDir, job: Job) -> bool:
    """Is this run one of this preset: run in the folder this preset runs in, from the same preset (its kept copy,
    less what a launch or a longer resume changes; --env's variables and secrets are not compared)?"""
    if job.workdir != workdir_for(preset)[0]:
        return False
    try:
        kept = load_preset_file(run.path / "preset.yaml")
    except UserError:
        return False
    ours, theirs = to_data(preset), to_data(kept)
    for data in (ours, theirs):
        for key in LAUNCH_VARIES:
            data.pop(key, None)
        data.get("optim", {}).pop("steps", None)
        data.get("launch", {}).pop("env", None)
    return bool(ours == theirs)


def own_run(preset: Preset) -> RunDir | Problem:
    """The newest full run of this preset (same_preset), or the refusal listing the runs of its name that are not."""
    others: list[str] = []
    for run, job in full_runs(preset.name):
        if same_preset(preset, run, job):
            return run
        others.append(f"{run.run_id} (in {job.workdir})")
    if not others:
        return problem(
            "--resume",
            f"there is no run of {preset.name} to continue (output_dir is null: each run writes to a folder of its "
            "own)",
            "run without --resume to start fresh, or name the run to continue with --resume RUN_ID",
        )
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return problem(
        "--resume",
        f"no run of this preset file to continue: the runs named {preset.name} ({shown}) ran from another folder or "
        "another preset of that name, and a resume would write into their output folders",
        "name the run to continue with --resume RUN_ID if it is this preset's, or run without --resume",
    )


def read_target(preset: Preset, run: RunDir, run_id: str | None) -> tuple[ResumeTarget, list[Problem]]:
    """The run's records, and whether a resume of it can start here now."""
    value: dict[str, Any] = {"value": run_id} if run_id else {}
    try:
        status = run.status()
        if status.smoke or status.probe:
            what = "a smoke run (a short repro)" if status.smoke else f"a measurement of probe {status.probe}"
            return ResumeTarget(), [
                problem("--resume", f"run {run.run_id} is {what}, which is not continued", "resume a full run", **value)
            ]
        job = run.job()
    except RecordError as exc:
        unreadable = problem("--resume", f"run {run.run_id} cannot be read: {exc}", "pick another run", **value)
        return ResumeTarget(), [unreadable]
    try:
        steps: int | None = load_preset_file(run.path / "preset.yaml").optim.steps
    except UserError:
        steps = None  # its preset cannot be read: the preset given here says how far
    target = ResumeTarget(run, status, job, steps)
    if not status.final:
        return target, [
            problem(
                "--resume",
                f"run {run.run_id} is still {status.state}",
                f"stop it first (`gpuwizard stop {run.run_id}`) or let it end",
                **value,
            )
        ]
    if job.output_dir is None:
        return target, [problem("--resume", f"run {run.run_id} recorded no output folder", "pick another run", **value)]
    if fixed_output(preset) and str(fixed_folder(preset)) != job.output_dir:
        return target, [
            problem(
                "--resume",
                f"run {run.run_id} wrote to {job.output_dir}, but {preset.name} writes to {fixed_folder(preset)}",
                f"resume it with the preset it ran ({status.preset}), or set output_dir to {job.output_dir}",
                **value,
            )
        ]
    return target, []


def with_run_steps(preset: Preset, target: ResumeTarget) -> tuple[Preset, list[Problem]]:
    """A resume trains to the resumed run's own optim.steps (a run continued to more steps keeps them), or to the
    preset's where that asks for more."""
    if target.run is None or target.steps is None or preset.optim.steps >= target.steps:
        return preset, []
    kept = warning(
        None,
        f"{preset.name} has optim.steps {preset.optim.steps}, but run {target.run.run_id} trains to {target.steps}: "
        f"the resume keeps {target.steps}",
        f"raise optim.steps above {target.steps} to continue it further",
    )
    return with_field(preset, "optim.steps", target.steps), [kept]


def resume_problems(preset: Preset, ctx: BuildContext, target: ResumeTarget, run_id: str | None) -> list[Problem]:
    """The checkpoint a resume continues from: there, complete, its own chain's, and short of the planned steps;
    warnings say what the resume does (an incomplete newer checkpoint, another effective batch, more steps)."""
    out = ctx.output_path.resolve()
    value: dict[str, Any] = {"value": run_id} if run_id else {}
    trainer = get_trainer(preset.trainer)
    unfinished = trainer.unfinished_checkpoint(ctx.output_path)
    checkpoint = trainer.last_checkpoint(ctx)
    if checkpoint is None:
        return [
            problem(
                "--resume",
                f"there is no complete {preset.trainer} checkpoint in {out}: {unfinished}"
                if unfinished
                else f"there is no {preset.trainer} checkpoint in {out} to continue from",
                "start fresh without --resume (a partial step folder can be deleted)"
                if unfinished
                else "run without --resume to start fresh (the trainer saves a checkpoint at its save interval and "
                "at the end)",
                **value,
            )
        ]
    found = [warning("--resume", f"{unfinished}; resuming from the previous one")] if unfinished else []
    found += owner_problems(ctx, target, value)
    if any(p.level == ProblemLevel.ERROR for p in found):
        return found
    status = target.status
    if status is not None and status.state == RunState.FINISHED:
        found += continue_problems(preset, ctx, target.run.run_id if target.run else None, status.steps, value)
    else:
        found += step_problems(preset, ctx, checkpoint, value) + going_back(ctx, target, checkpoint)
    return found + batch_problems(ctx, target)


def going_back(ctx: BuildContext, target: ResumeTarget, checkpoint: Path) -> list[Problem]:
    """A run stopped past its newest checkpoint (stopped at 24, saved at 20): the resume trains the steps between
    again, which the user should hear before the step counter goes back."""
    step = checkpoint_step(checkpoint, ctx.output_path)
    try:
        progress = target.run.progress() if target.run else None
    except RecordError:
        progress = None
    reached = progress.step if progress else None
    if step is None or reached is None or reached <= step:
        return []
    return [
        warning(
            "--resume",
            f"the run reached step {reached:,} and its newest checkpoint is at step {step:,}: the resume goes back "
            f"and trains steps {step + 1:,}-{reached:,} again",
            "save more often to lose less to a stop (the trainer's save period)",
        )
    ]


def owner_problems(ctx: BuildContext, target: ResumeTarget, value: dict[str, Any]) -> list[Problem]:
    """The folder's checkpoints must be the resumed run's chain's: its marker names that chain, or, in a folder
    written before folders were marked, no other run wrote there after it."""
    if target.run is None or target.status is None:
        return []
    out = ctx.output_path.resolve()
    owner = read_owner(out, ctx.preset.hardware.node_rank)
    other = owner.run_id if owner is not None and owner.chain != target.chain else None
    if owner is None:
        other = later_writer(target, str(out))
    if other is None:
        return []
    return [
        problem(
            "--resume",
            f"{out} was last written by run {other}, not by run {target.run.run_id} or a run resumed from it: its "
            f"checkpoints are run {other}'s",
            f"resume that run (`--resume {other}`), or run without --resume to start fresh",
            **value,
        )
    ]


def later_writer(target: ResumeTarget, out: str) -> str | None:
    """A run outside the target's resume chain that wrote `out` after it (folders from before markers)."""
    assert target.run is not None and target.status is not None
    chain = {target.run.run_id}
    entries = [e for e in list_runs() if e.status is not None and e.status.created > target.status.created]
    for entry in sorted(entries, key=lambda e: e.sort_key):
        status = entry.status
        assert status is not None
        if status.smoke or status.probe:
            continue
        try:
            job = entry.run.job()
        except RecordError:
            continue
        wrote = job.output_dir == out and job.node_rank == (target.job.node_rank if target.job else 0)
        if wrote and status.resumed_from in chain:
            chain.add(entry.run.run_id)
        elif wrote:
            return entry.run.run_id
    return None


def checkpoint_step(checkpoint: Path, output: Path) -> int | None:
    """The step a checkpoint holds, from the name of its step folder under the output folder (None: not named)."""
    try:
        parts = checkpoint.resolve().relative_to(output.resolve()).parts
    except ValueError:
        return None
    for part in reversed(parts):
        if match := STEP_FOLDER.fullmatch(part):
            return int(match[1])
    return None


def step_problems(preset: Preset, ctx: BuildContext, checkpoint: Path, value: dict[str, Any]) -> list[Problem]:
    """A resume from a checkpoint at or past the planned steps would train none and still read finished."""
    step = checkpoint_step(checkpoint, ctx.output_path)
    planned = ctx.plan.trainer_steps
    if step is None or step < planned:
        return []
    return [
        problem(
            "--resume",
            f"the checkpoint it continues from ({checkpoint}) is at step {step}, and the plan gives the trainer "
            f"{planned} steps: resuming would train none",
            f"raise optim.steps (now {preset.optim.steps}) so the plan goes past step {step}, or run without --resume",
            **value,
        )
    ]


def batch_problems(ctx: BuildContext, target: ResumeTarget) -> list[Problem]:
    """A resume on another process count trains the rest of the run at another effective batch: said, with how to
    keep it."""
    if target.run is None:
        return []
    try:
        before = target.run.plan()
    except RecordError:
        return []
    plan, accum = ctx.plan, ctx.preset.batch.grad_accum
    if before.effective_batch is None or plan.effective_batch is None or before.effective_batch == plan.effective_batch:
        return []
    keep = (
        f"resume on {counted(before.world_size, plan.device)} (--gpus {before.world_size // before.nodes}) to keep it"
    )
    if before.effective_batch % plan.effective_batch == 0:
        keep += f", or set batch.grad_accum to {accum * before.effective_batch // plan.effective_batch}"
    lr = f" and lr {plan.lr:g} instead of {before.lr:g}" if before.lr is not None and before.lr != plan.lr else ""
    return [
        warning(
            None,
            f"run {target.run.run_id} trained at an effective batch of {before.effective_batch} samples per update "
            f"on {counted(before.world_size, plan.device)}; this resume trains the rest at {plan.effective_batch} on "
            f"{counted(plan.world_size, plan.device)}{lr}",
            keep,
        )
    ]


def continue_problems(
    preset: Preset, ctx: BuildContext, run_id: str | None, done: int, value: dict[str, Any]
) -> list[Problem]:
    """Resuming a run that finished all its steps: refused unless it goes on to more steps with a trainer that can;
    then a warning says what the lr schedule does."""
    schedule = get_trainer(preset.trainer).continue_schedule
    steps = ctx.plan.trainer_steps
    if schedule is None:
        return [
            problem(
                "--resume",
                f"run {run_id} finished all its {done} steps, and gpuwizard resumes {preset.trainer} with the step "
                "count saved in its checkpoint, so it cannot be continued to more steps",
                "start a new run without --resume (its checkpoint can be the starting weights)",
                **value,
            )
        ]
    if steps <= done:
        return [
            problem(
                "--resume",
                f"run {run_id} finished all its {done} steps: resuming it would train none",
                f"raise optim.steps above {preset.optim.steps} to continue it ({schedule}), or run without --resume",
                **value,
            )
        ]
    return [
        problem(
            None,
            f"run {run_id} finished {done} steps; this continues it to {steps}: {schedule}",
            level=ProblemLevel.WARNING,
        )
    ]
