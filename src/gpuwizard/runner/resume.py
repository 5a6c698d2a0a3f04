"""Which earlier run and checkpoint a resumed run continues, and whether it can: a complete checkpoint, and a
finished run only to more steps."""

from __future__ import annotations

from typing import Any

from gpuwizard.core.codes import RunState
from gpuwizard.core.errors import Problem, problem
from gpuwizard.model.job import BuildContext
from gpuwizard.model.preset import Preset
from gpuwizard.runs.records import RecordError
from gpuwizard.runs.rundir import find_run, list_runs
from gpuwizard.trainers.registry import get_trainer


def resume_source(preset: Preset, ctx: BuildContext, run_id: str | None) -> tuple[str | None, list[Problem]]:
    """The earlier run a resumed run continues: the one named, or the newest of this preset on the same output
    folder; the checkpoint it continues from must exist and be complete, and a finished run is continued only to more
    steps, by a trainer that can. Problems of level warning say what such a resume does."""
    out = str(ctx.output_path.resolve())
    found: list[Problem] = []
    linked, linked_status = None, None
    if run_id is not None:
        run = find_run(run_id)
        if run is None:
            return None, [problem("--resume", "no such run", "pick a run id from `gpuwizard runs`", value=run_id)]
        try:
            status, job = run.status(), run.job()
        except RecordError as exc:
            return None, [problem("--resume", f"run {run.run_id} cannot be read: {exc}", "pick another run")]
        if job.output_dir != out:
            found.append(
                problem(
                    "--resume",
                    f"run {run.run_id} wrote to {job.output_dir}, but {preset.name} writes to {out}",
                    f"resume it with the preset it ran ({status.preset}), or set output_dir to {job.output_dir}",
                    value=run_id,
                )
            )
        elif not status.final:
            found.append(
                problem(
                    "--resume",
                    f"run {run.run_id} is still {status.state}",
                    f"stop it first (`gpuwizard stop {run.run_id}`) or let it end",
                    value=run_id,
                )
            )
        linked, linked_status = run.run_id, status
    else:
        for entry in list_runs():
            entry_status = entry.status
            if entry_status is None or entry_status.preset != preset.name or entry_status.smoke:
                continue
            try:
                if entry.run.job().output_dir == out:
                    linked, linked_status = entry.run.run_id, entry_status
                    break
            except RecordError:
                continue
    trainer = get_trainer(preset.trainer)
    unfinished = trainer.unfinished_checkpoint(ctx.output_path)
    value = {"value": run_id} if run_id else {}
    if not found and trainer.last_checkpoint(ctx) is None:
        found.append(
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
        )
    elif unfinished:
        found.append(problem("--resume", f"{unfinished}; resuming from the previous one", level="warning"))
    if not found and linked_status is not None and linked_status.state == RunState.FINISHED:
        found += continue_problems(preset, ctx, linked, linked_status.steps, value)
    return linked, found


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
        problem(None, f"run {run_id} finished {done} steps; this continues it to {steps}: {schedule}", level="warning")
    ]
