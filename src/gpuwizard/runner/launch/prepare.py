"""From a preset to a run that may start: smoke variants, --env and --node-rank, restored secrets, and every check
that can run before a process does."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from gpuwizard.core import paths
from gpuwizard.core.errors import Problem, UserError, problem
from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.core.safetext import control_characters
from gpuwizard.core.schema import updated
from gpuwizard.core.secrets import REDACTED, split_secrets
from gpuwizard.core.units import counted
from gpuwizard.model import trust
from gpuwizard.model.job import BuildContext, Plan
from gpuwizard.model.preset import Preset
from gpuwizard.model.preset_files import load_preset
from gpuwizard.model.preset_sections import ENV_NAME
from gpuwizard.planning.checks import missing_dataset
from gpuwizard.planning.machine import machine_problems
from gpuwizard.planning.plan import RUN_ID, build_command, fixed_output, plan_here, with_gpus
from gpuwizard.runner.host.locks import nesting_problems, output_holder
from gpuwizard.runner.launch.resume import ResumeTarget, find_target, resume_problems, with_run_steps
from gpuwizard.runs.rundir import RunDir, baseline_green
from gpuwizard.trainers.check import TrainerCheck
from gpuwizard.trainers.check.doctor import DoctorReport, doctor
from gpuwizard.trainers.registry import check_command, get_trainer

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory

SMOKE_STEPS = 50
SMOKE_PER_DEVICE_BATCH = 2


@dataclass
class PreparedRun:
    """A planned job that passed every check; `warnings` are shown before it starts."""

    preset: Preset
    plan: Plan
    ctx: BuildContext
    smoke: bool
    baseline_green: bool
    warnings: list[Problem] = field(default_factory=list)
    resumed_from: str | None = None
    """The run a resumed run continues (None when it is not one of ours)."""
    checkpoint: Path | None = None
    """The checkpoint a resumed run continues from."""
    driver: tuple[str | None, str | None] = (None, None)
    """The NVIDIA driver and CUDA versions seen here."""
    trainer_check: TrainerCheck | None = None
    """The installed trainer's own reading of the command (None: skipped with --no-check)."""
    doctor: DoctorReport | None = None
    """The preflight of the job's environment (None: skipped with --no-check, or on SLURM)."""
    probe: str | None = None
    """The `gpuwizard probe` this run measures one configuration for."""
    sweep: str | None = None
    """The `gpuwizard sweep` this run is one of."""
    resume_chain: str | None = None
    """The first run of the resume chain a resumed run joins (None: a fresh run starts its own)."""

    def bind_output(self, run: RunDir) -> None:
        """The output folder named now that the run has an id: a fresh run of a preset without output_dir writes
        outputs/train/<name>/<run id>, a smoke run inside its run folder."""
        if self.smoke:
            self.ctx.output_dir = str(run.path / "output")
        else:
            self.ctx.output_dir = self.ctx.output_dir.replace(RUN_ID, run.run_id)


def smoke_variant(preset: Preset) -> Preset:
    """50 steps at the smallest batch: the quick repro of a hang or crash."""
    trainer = get_trainer(preset.trainer)
    world = trainer.world_size(preset)
    size = SMOKE_PER_DEVICE_BATCH * world if trainer.batch_is_global else SMOKE_PER_DEVICE_BATCH
    return updated(
        preset, batch=updated(preset.batch, size=size, grad_accum=1), optim=updated(preset.optim, steps=SMOKE_STEPS)
    )


def with_node_rank(preset: Preset, node_rank: int) -> Preset:
    """`run --node-rank K`: this node's rank, checked against hardware.nodes like the preset's own."""
    from gpuwizard.model.preset import with_field

    try:
        return with_field(preset, "hardware.node_rank", node_rank)
    except UserError as exc:
        raise UserError([replace(p, field="--node-rank") for p in exc.problems]) from None


def with_env(preset: Preset, assignments: list[str]) -> Preset:
    """Apply --env NAME=VALUE pairs to launch.env; a bare NAME takes its value from this environment, which keeps a
    secret out of the process list (`ps` shows gpuwizard's own arguments)."""
    env = dict(preset.launch.env)
    for item in assignments:
        name, sep, value = item.partition("=")
        if not ENV_NAME.fullmatch(name):
            raise UserError(
                problem(
                    "--env",
                    "must be NAME=VALUE or NAME with a valid variable name",
                    "e.g. --env NCCL_P2P_DISABLE=1",
                    value=item,
                )
            )
        if not sep:
            if name not in os.environ:
                raise UserError(
                    problem(
                        "--env",
                        f"{name} is not set in this environment",
                        f"export {name} first, or give NAME=VALUE",
                        value=item,
                    )
                )
            value = os.environ[name]
        if control_characters(value):  # like a preset's values: they reach command lines and batch scripts
            raise UserError(
                problem(
                    "--env",
                    f"the value of {name} holds control characters ({', '.join(control_characters(value))})",
                    "give a value of one line of text",
                    value=name,
                )
            )
        env[name] = value
    return updated(preset, launch=updated(preset.launch, env=env))


def restore_secrets(preset: Preset) -> Preset:
    """A preset read back from a run folder has its secrets redacted: take them from this environment, or from the
    user's preset of the same name, or refuse in one paragraph."""
    missing = [name for name, value in preset.launch.env.items() if value == REDACTED]
    if not missing:
        return preset
    saved: dict[str, str] = {}
    try:
        saved = dict(load_preset(preset.name).launch.env)
    except UserError:
        pass
    env = dict(preset.launch.env)
    for name in missing:
        value = os.environ.get(name) or (saved.get(name) if saved.get(name) != REDACTED else None)
        if value is None:
            raise UserError(
                problem(
                    f"launch.env.{name}",
                    "is a secret, kept out of the run folder",
                    f"export {name} to run this again",
                    value=REDACTED,
                )
            )
        env[name] = value
    return updated(preset, launch=updated(preset.launch, env=env))


def launcher_problems(argv: list[str], env: dict[str, str]) -> list[Problem]:
    exe = argv[0]
    if "/" in exe:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            return [
                problem(
                    "launch.python",
                    f"the launcher {exe} is not an executable file",
                    "install torch (torchrun) in the training environment, or fix launch.python",
                    value=exe,
                )
            ]
        return []
    if shutil.which(exe, path=env.get("PATH")) is None:
        return [
            problem(
                "launch.python",
                f"the launcher `{exe}` is not on PATH",
                f"install {exe} or set launch.python to the training environment's interpreter",
                value=exe,
            )
        ]
    return []


def held_problem(ctx: BuildContext) -> Problem | None:
    """The output folder is locked by a run that is still writing to it (from any data folder or user)."""
    holder = output_holder(ctx.output_path, ctx.preset.hardware.node_rank)
    if holder is None:
        return None
    return problem(
        "output_dir",
        f"run {holder} is still writing to this folder; two runs there would interleave and overwrite checkpoints",
        f"wait for it, stop it (`gpuwizard stop {holder}`), or choose another output_dir",
        value=ctx.output_dir,
    )


def prepare_run(
    preset: Preset,
    gpus: int | None = None,
    smoke: bool = False,
    env: list[str] | None = None,
    inventory: Inventory | None = None,
    resume: bool = False,
    resume_run: str | None = None,
    node_rank: int | None = None,
    slurm: bool = False,
    check: bool = True,
) -> PreparedRun:
    """Plan and check everything that can be checked before a process starts; UserError on any error.

    `resume` continues `resume_run` (or the newest run of this preset) in its output folder, from the last checkpoint
    its resume chain wrote there, to its own optim.steps unless the preset asks for more; `check` asks the installed
    trainer's own parser about the command first."""
    from gpuwizard.gpus.inventory import read_inventory

    if not trust.is_trusted(preset):  # the preset as given: --env and the other changes below are the user's own
        raise UserError(trust.untrusted_problem(preset, preset.name, "run"), preset.name)
    ours = shipped_demo(preset)  # the file it was read from: the changes below make new objects
    trust.remember_launched(preset)
    if resume and smoke:
        raise UserError(
            problem("--smoke", "a smoke run is a fresh 50-step repro and cannot resume", "use one of them", value=True)
        )
    preset = with_gpus(preset, gpus)
    if slurm:
        from gpuwizard.model.preset import with_field

        preset = with_field(preset, "launch.scheduler", "slurm")
    on_slurm = preset.launch.scheduler == "slurm"
    if node_rank is not None:
        if on_slurm:
            raise UserError(
                problem("--node-rank", "SLURM starts every node itself", "leave --node-rank out", value=node_rank)
            )
        preset = with_node_rank(preset, node_rank)
    if env:
        preset = with_env(preset, env)
    if smoke:
        preset = smoke_variant(preset)
    inventory = inventory if inventory is not None else read_inventory()
    target = ResumeTarget()
    resume_found: list[Problem] = []
    output_dir: str | None = None
    if resume:
        target, resume_found = find_target(preset, resume_run)  # before the plan: its folder and steps are the run's
        if any(p.level == ProblemLevel.ERROR for p in resume_found):
            raise UserError(resume_found, preset.name)
        preset, kept = with_run_steps(preset, target)
        resume_found += kept
        output_dir = None if fixed_output(preset) else target.output_dir  # it continues in its run's folder
    elif smoke:
        output_dir = str(paths.runs_dir() / RUN_ID / "output")
    plan, ctx = plan_here(preset, inventory, resume=resume, output_dir=output_dir)
    errors = list(plan.errors)
    held = None if smoke or on_slurm else held_problem(ctx)
    if held is not None:  # what its folder holds is the active run's business: this is the reason to give
        errors = [p for p in errors if p.field != "output_dir"] + [held]
    # the cluster's file system may differ from this machine's; listed with the trainer's own preflight refusals
    missing = [] if on_slurm else missing_dataset(preset, get_trainer(preset.trainer), ctx.workdir)
    trainer_check = None
    doctor_report = None
    if resume and not errors:
        resume_found += resume_problems(preset, ctx, target, resume_run)
        errors += [p for p in resume_found if p.level == ProblemLevel.ERROR]
    resume_warnings = [p for p in resume_found if p.level != ProblemLevel.ERROR]
    if not errors:
        trainer = get_trainer(preset.trainer)
        errors += [p for p in trainer.preflight(ctx) if p.level == ProblemLevel.ERROR]
        spec = build_command(ctx)
        errors += launcher_problems(spec.argv, spec.full_env())
        if check and not errors and not missing:
            trainer_check = check_command(ctx, spec)
            errors += [p for p in trainer_check.problems() if p.level == ProblemLevel.ERROR]
        if check and not errors and not missing and not on_slurm:  # SLURM's nodes are not this machine
            doctor_report = doctor(ctx, spec, trainer.trainer_query(ctx, spec), inventory, ctx.python)
            errors += [p for p in doctor_report.problems() if p.level == ProblemLevel.ERROR]
        if on_slurm:
            from gpuwizard.runner.host.slurm import cluster_problems, secret_problems

            errors += cluster_problems()  # the nodes' GPUs and cores are SLURM's to check, not this machine's
            errors += secret_problems(preset.slurm.sbatch_args, sorted(split_secrets(spec.env)[1]), dict(os.environ))
        errors += machine_problems(preset, plan, inventory)  # the plan showed them; here they refuse
    if not errors and not on_slurm and preset.hardware.nodes > 1 and preset.hardware.rdzv_endpoint:
        from gpuwizard.core.network import preflight

        errors += preflight(preset.hardware.rdzv_endpoint, preset.hardware.node_rank)
    if not errors:
        errors += nesting_problems(ctx.output_path, ctx.output_dir)
    errors += missing
    if errors:
        raise UserError(errors, preset.name)
    warnings = list(plan.warnings) + resume_warnings
    if trainer_check is not None and trainer_check.status == "not checked":
        warnings += trainer_check.problems()
    if doctor_report is not None:
        warnings += doctor_report.problems()  # what slows the run (what fails it refused above)
    green = baseline_green(preset.name)  # reads the whole run history: once per launch
    if plan.world_size > 1 and not green and not ours:
        warnings.append(
            problem(
                None,
                f"preset {preset.name} has never finished green on {counted(1, plan.device)}; a failure on "
                f"{counted(plan.world_size, plan.device)} is much harder to read than one on {counted(1, plan.device)}",
                f"run `gpuwizard run {preset.name} --gpus 1` first (a --smoke run is enough)",
                level=ProblemLevel.WARNING,
            )
        )
    checkpoint = get_trainer(preset.trainer).last_checkpoint(ctx) if resume else None
    driver = (inventory.driver_version, inventory.cuda_version)
    resumed_from = target.run.run_id if target.run else None
    return PreparedRun(
        preset,
        plan,
        ctx,
        smoke,
        green or ours,  # the shipped demo is ours: no baseline rule, here or in the monitor
        warnings,
        resumed_from,
        checkpoint,
        driver,
        trainer_check,
        doctor=doctor_report,
        resume_chain=target.chain,
    )


def shipped_demo(preset: Preset) -> bool:
    """The demo as shipped is ours and tested on 2 processes: the 1-process baseline rule is for the user's own jobs,
    and the README's first step must not draw a "Fix:" (issue 39 item 1)."""
    source = trust.source_of(preset)
    return preset.trainer == "demo" and source is not None and source.parent == paths.shipped_presets_dir()
