"""The resolved plan: what the batch means here, the scaled lr and steps, the strategy and its checks."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from gpuwizard.core.errors import Problem, UserError, note, problem, unknown, warning
from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.model.catalog import PolicyEntry, load_catalog
from gpuwizard.model.job import BuildContext, DetectedDevices, LaunchSpec, Plan
from gpuwizard.model.preset import Preset
from gpuwizard.planning.checks import (
    checkpoint_findings,
    dataset_findings,
    output_dir_findings,
    rendezvous_findings,
)
from gpuwizard.planning.machine import machine_problems
from gpuwizard.planning.scaling import (
    advice_lines,
    batch_table,
    choose_strategy,
    critical_batch_note,
    estimate_fit,
    plan_estimates,
    scale,
)
from gpuwizard.trainers.base import Trainer, check_python, conflicting_extra_args, resolve_python, workdir_for
from gpuwizard.trainers.registry import get_trainer

if TYPE_CHECKING:
    from gpuwizard.gpus.inventory import Inventory


def devices_from_inventory(inventory: Inventory, preset: Preset) -> DetectedDevices:
    """The devices this preset would use, as the plan sees them (smallest memory wins)."""
    if not inventory.has_gpus:
        return DetectedDevices()
    from gpuwizard.gpus.advice import chosen_gpus

    chosen = chosen_gpus(inventory, preset.hardware.devices, preset.hardware.gpus) or inventory.visible()
    memories = [g.memory_total_mb for g in chosen if g.memory_total_mb]
    return DetectedDevices(
        len(inventory.visible()),
        round(min(memories) / 1024, 1) if memories else None,
        chosen[0].name if chosen else None,
        "detected",
    )


def trainers_for(policy: PolicyEntry) -> list[str]:
    """The trainers that can train a policy: the catalog's list, then those that run any policy (the user's script)."""
    from gpuwizard.trainers.registry import trainer_names

    extra = [name for name in trainer_names() if name not in policy.trainers and get_trainer(name).any_policy]
    return [*policy.trainers, *extra]


def with_gpus(preset: Preset, gpus: int | None) -> Preset:
    """The same preset on another GPU count (explicit device lists are dropped if they no longer fit)."""
    if gpus is None or gpus == preset.hardware.gpus:
        return preset
    from gpuwizard.model.preset import with_field

    try:
        return with_field(
            with_field(preset, "hardware.devices", None), "hardware.gpus", gpus
        )  # validated: bounds apply
    except UserError as exc:
        raise UserError([replace(p, field="--gpus") for p in exc.problems]) from None


def resolve_device(preset: Preset, hw: DetectedDevices) -> tuple[Literal["cpu", "cuda"], list[Problem]]:
    wanted = preset.hardware.device
    if wanted == "cpu":
        return "cpu", []
    if wanted == "cuda" or hw.gpu_count:
        found = []
        if hw.source != "detected" and wanted == "auto":
            found.append(
                note(
                    "no NVIDIA GPU detected here: the plan assumes CUDA devices (set hardware.device: cpu for a CPU "
                    "dry run with gloo)"
                )
            )
        return "cuda", found
    return "cuda", [
        note(
            "no NVIDIA GPU detected here: the plan assumes CUDA devices (set hardware.device: cpu for a CPU dry run "
            "with gloo)"
        )
    ]


RUN_ID = "<run-id>"
"""Stands for the run id in the output folder a plan shows: a fresh run of a preset without output_dir gets a folder
of its own, named once its run folder is staged (PreparedRun.bind_output)."""


def fixed_output(preset: Preset) -> bool:
    """Every run of the preset writes one folder: output_dir is set, or the nodes of a job started by hand (each with
    its own run id) must share the default one."""
    return preset.output_dir is not None or (preset.hardware.nodes > 1 and preset.launch.scheduler == "local")


def preset_output_dir(preset: Preset) -> str:
    """output_dir, or outputs/train/<name>/<run-id>: each run its own (the nodes of a job started by hand share
    outputs/train/<name>)."""
    if preset.output_dir is not None:
        return preset.output_dir
    shared = f"outputs/train/{preset.name}"
    return shared if fixed_output(preset) else f"{shared}/{RUN_ID}"


def output_notes(preset: Preset, resume: bool) -> tuple[str | None, list[Problem]]:
    """Where a run of a preset without output_dir writes, as the plan says it; a resume's folder is that of the
    newest run it would continue."""
    if fixed_output(preset):
        return None, []
    folder = preset_output_dir(preset)
    found = [
        note(
            f"output_dir is null: each run writes to a folder of its own, {folder} ({RUN_ID} is the run's id, chosen "
            "at launch); a resume continues in the folder of the run it resumes"
        )
    ]
    if resume:
        from gpuwizard.runs.owner import newest_full_run

        newest = newest_full_run(preset.name)
        if newest is not None:
            run, job = newest
            found.append(note(f"a resume continues run {run.run_id} in its output folder {job.output_dir}"))
            return job.output_dir, found
    return None, found


def plan_here(
    preset: Preset, inventory: Inventory | None, resume: bool = False, output_dir: str | None = None
) -> tuple[Plan, BuildContext]:
    """Plan against the devices detected here, with their setup advice (P2P, busy, short or mixed) as warnings.

    What stops a CPU run from starting here is an error of the plan (a CPU run can only run here); GPUs short here
    are a setup warning (a plan made here may be for the training machine), and `run` refuses on them."""
    if inventory is None:
        return make_plan(preset, resume=resume, output_dir=output_dir)
    from gpuwizard.gpus.advice import setup_advice

    detected = devices_from_inventory(inventory, preset)
    plan, ctx = make_plan(preset, detected=detected, resume=resume, output_dir=output_dir)
    if plan.device == "cuda":
        plan.problems += setup_advice(
            inventory, preset.hardware.devices, preset.hardware.gpus, preset.hardware.nodes, plan.fits.estimate_gb
        )
    else:
        plan.problems += machine_problems(preset, plan, inventory)
    return plan, ctx


def make_plan(
    preset: Preset,
    gpus: int | None = None,
    detected: DetectedDevices | None = None,
    resume: bool = False,
    output_dir: str | None = None,
) -> tuple[Plan, BuildContext]:
    """Resolve a preset into a plan and the context its trainer builds the command from; `output_dir` is where this
    run writes when that is not the preset's folder (a resume continues in its run's, a smoke run in its run
    folder)."""
    preset = with_gpus(preset, gpus)
    hw = detected or DetectedDevices()
    trainer = get_trainer(preset.trainer)
    python = resolve_python(preset, trainer.default_python())
    policy, found = policy_for(preset, trainer, python)
    if not trainer.any_policy and preset.trainer not in policy.trainers:
        found.append(
            problem(
                "policy",
                f"the {preset.trainer} trainer cannot train {preset.policy}",
                f"use a trainer from {', '.join(policy.trainers)} or another policy",
                value=preset.policy,
            )
        )
    device, device_findings = resolve_device(preset, hw)
    found += device_findings
    if device == "cpu" and trainer.needs_cuda:
        found.append(
            problem(
                "hardware.device",
                f"the {trainer.name} trainer needs CUDA GPUs",
                "set hardware.device: auto or cuda (the demo trainer runs on the CPU)",
                value="cpu",
            )
        )

    world = trainer.world_size(preset)
    layout = trainer.batch_layout(preset.batch.size, preset.batch.grad_accum, world)
    if layout.error:
        found.append(problem("batch.size", layout.error, f"choose a multiple of {world}", value=preset.batch.size))
    reference = trainer.batch_layout(preset.batch.size, preset.batch.grad_accum, preset.scaling.reference_gpus)
    k = layout.effective / reference.effective if layout.effective and reference.effective else None

    base_lr = preset.optim.lr or trainer.default_lr(preset, policy)
    if base_lr is None:
        found.append(
            problem(
                "optim.lr",
                f"is null and the catalog has no default lr for {policy.key} on {trainer.name}",
                "set optim.lr",
                value=None,
            )
        )
        base_lr = 1e-4
    per_update = trainer.trainer_steps_per_update(preset, python)
    lr, steps, warmup, warmup_source, scaling_findings = scale(
        preset.scaling.rule,
        k or 1.0,
        base_lr,
        preset.optim.steps,
        lambda steps: trainer.default_warmup_steps(preset, policy, steps, per_update),
        preset.optim.warmup_ratio,
    )
    found += scaling_findings

    fit = estimate_fit(policy, preset, layout.per_device, world, hw)
    if not policy.memory_known:  # unknown: probe it
        fit = replace(fit, fits=None)
    strategy, strategy_findings = choose_strategy(preset, trainer, policy, world, fit)
    found += strategy_findings
    workdir, workdir_problems = workdir_for(preset)
    dataset_meta, dataset_problems = dataset_findings(preset, trainer, layout.effective, workdir)
    found += dataset_problems
    from gpuwizard.analysis.probe.results import newest_probe

    probe = newest_probe(preset.name)  # read once: the note, the advice and the estimates use it
    found.append(note(critical_batch_note(preset.name, layout.effective, probe)))
    if preset.dataset.eval_split:
        found.append(note(held_out_note(preset, trainer.held_out(preset, python, dataset_meta), trainer.name)))

    table = batch_table(trainer, preset)
    plan = Plan(
        trainer=trainer.name,
        policy=policy.key,
        world_size=world,
        nodes=preset.hardware.nodes,
        processes_per_node=trainer.processes_per_node(preset),
        device=device,
        per_device_batch=layout.per_device,
        effective_batch=layout.effective,
        reference_gpus=preset.scaling.reference_gpus,
        reference_effective_batch=reference.effective,
        scale_factor=k,
        rule=preset.scaling.rule,
        base_lr=base_lr,
        lr=lr,
        base_steps=preset.optim.steps,
        steps=steps,
        trainer_steps=steps * per_update,
        trainer_steps_per_update=per_update,
        samples_seen=steps * layout.effective if layout.effective else None,
        warmup_steps=warmup,
        warmup_source=warmup_source,
        strategy=strategy,
        fits=fit,
        batch_meaning=trainer.batch_meaning,
        batch_flag=trainer.batch_flag,
        batch_table=table,
        dataset=dataset_meta,
        advice=advice_lines(preset, policy, world, strategy, fit, k, probe),
        estimates=plan_estimates(preset, policy, table, reference.effective, base_lr, probe),
        epochs=epochs_of(steps * layout.effective if layout.effective else None, dataset_meta),
    )
    preset_folder = output_dir is None
    if preset_folder:
        output_dir, notes = output_notes(preset, resume)
        found += notes
    ctx = BuildContext(preset, plan, policy, python, workdir, output_dir or preset_output_dir(preset), resume)
    bad_python = check_python(preset)
    found += workdir_problems + bad_python + conflicting_extra_args(preset, trainer)
    found += rendezvous_findings(preset, trainer)
    found += output_dir_findings(ctx)
    found += without_echoes(trainer.check(ctx), python) if bad_python else trainer.check(ctx)
    if preset_folder and not resume and fixed_output(preset):
        if not any(
            p.field == "output_dir" and p.level == ProblemLevel.ERROR for p in found
        ):  # the trainer's own refusal
            found += checkpoint_findings(ctx, trainer)
    plan.problems = found
    return plan, ctx


def policy_for(preset: Preset, trainer: Trainer, python: str) -> tuple[PolicyEntry, list[Problem]]:
    """The catalog's entry for preset.policy, else the installed trainer's own (LeRobot's shipped_policy: its policy
    registry), planned with what is known and its memory "unknown: probe it"; a name neither knows is refused,
    naming what the trainer has."""
    catalog = load_catalog()
    if preset.policy in catalog:
        return catalog[preset.policy], []
    ask = getattr(trainer, "shipped_policy", None)
    shipped = ask(preset, python) if ask else None
    if isinstance(shipped, PolicyEntry):
        lr = f"lr {shipped.default_lr[trainer.name]:g} from its config" if shipped.default_lr else "no default lr"
        return shipped, [
            warning(
                "policy",
                f"is not in gpuwizard's catalog but {shipped.summary.removeprefix('registered by ')} has it: planned "
                f"with what is known ({lr}); its memory is unknown: probe it (the GB figure is no estimate), and the "
                "schedule of its policy preset is not known to the run-time lr check",
                f"measure it with `gpuwizard probe {preset.name}`, or add it to <config>/policies.yaml",
                value=preset.policy,
            )
        ]
    has = f"; {shipped}" if shipped else ""
    raise UserError(
        problem(
            "policy",
            unknown(
                f"is neither in the policy catalog nor known to the {trainer.name} trainer{has}",
                preset.policy,
                [*catalog],
            ),
            f"choose one of {', '.join(catalog)}" + (" or one the trainer registers" if shipped else ""),
            value=preset.policy,
        )
    )


def without_echoes(found: list[Problem], python: str) -> list[Problem]:
    """One paragraph for a bad launch.python: the trainer's warnings that it finds nothing in that interpreter only
    repeat the error, so they go (its errors and notes stay)."""
    return [p for p in found if p.level != ProblemLevel.WARNING or python not in p.message]


def build_command(ctx: BuildContext) -> LaunchSpec:
    from gpuwizard.trainers.rendezvous import with_loopback_plugin

    return with_loopback_plugin(get_trainer(ctx.preset.trainer).build(ctx))


def held_out_note(preset: Preset, given: str | None, trainer: str) -> str:
    """How the trainer is given dataset.eval_split (`given`, Trainer.held_out), or that it is given none: LeRobot
    0.6.1, GR00T's launcher and openpi have no split, and nothing is faked."""
    if given is not None:
        return f"held-out split: {given}"
    return (
        f"dataset.eval_split {preset.dataset.eval_split:g}: the {trainer} trainer is given no held-out split by "
        "gpuwizard, so nothing is held out and no held-out loss, overfitting signal or best checkpoint will be shown"
    )


def epochs_of(samples_seen: int | None, dataset: dict[str, Any] | None) -> float | None:
    """Passes over the dataset: samples seen over its frames (a sampler that drops frames at episode ends, as
    LeRobot's does for policies with several observation steps, makes an epoch a little shorter)."""
    frames = dataset.get("frames") if dataset else None
    if not samples_seen or not isinstance(frames, int) or frames <= 0:
        return None
    return round(samples_seen / frames, 2)
