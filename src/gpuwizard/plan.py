"""The resolved plan (SPEC §4): what the batch means here, the scaled lr and steps, the strategy and its checks."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuwizard import datasets
from gpuwizard.catalog import PolicyEntry, load_catalog
from gpuwizard.contracts import BuildContext, DetectedDevices, Fit, LaunchSpec, Plan
from gpuwizard.errors import Problem, UserError, note, problem, warning
from gpuwizard.machine import machine_problems
from gpuwizard.preset import Preset
from gpuwizard.trainers import get_trainer
from gpuwizard.trainers.base import Trainer, check_python, conflicting_extra_args, resolve_python

TABLE_COUNTS = (1, 2, 4, 8)
ADDED_WARMUP_RATIO = 0.05


def devices_from_inventory(inventory: Any, preset: Preset) -> DetectedDevices:
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
    from gpuwizard.trainers import trainer_names

    extra = [name for name in trainer_names() if name not in policy.trainers and get_trainer(name).any_policy]
    return [*policy.trainers, *extra]


def with_gpus(preset: Preset, gpus: int | None) -> Preset:
    """The same preset on another GPU count (explicit device lists are dropped if they no longer fit)."""
    if gpus is None or gpus == preset.hardware.gpus:
        return preset
    from gpuwizard.preset import with_field

    try:
        return with_field(
            with_field(preset, "hardware.devices", None), "hardware.gpus", gpus
        )  # validated: bounds apply
    except UserError as exc:
        raise UserError([replace(p, field="--gpus") for p in exc.problems]) from None


def resolve_device(preset: Preset, hw: DetectedDevices) -> tuple[str, list[Problem]]:
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


def scale(
    rule: str,
    k: float,
    lr: float,
    steps: int,
    trainer_warmup: Callable[[int], int | None],
    warmup_ratio: float | None,
) -> tuple[float, int, int | None, str, list[Problem]]:
    """Apply the scaling rule; returns lr, steps, warmup steps, where the warmup comes from, and findings.

    `trainer_warmup(steps)` is the warmup the trainer applies on its own for the steps it is given (some scale it)."""
    found: list[Problem] = []
    new_lr, new_steps = lr, steps
    if rule == "linear_lr":
        new_lr = lr * k
    elif rule == "sqrt_lr":
        new_lr = lr * math.sqrt(k)
    elif rule == "divide_steps":
        new_steps = max(1, math.ceil(steps / k))
    if rule == "none" and k != 1:
        found.append(
            warning(
                "scaling.rule",
                f"the effective batch changes by {k:g}x against the reference run but lr and steps stay as tuned",
                "choose linear_lr (lr x k with a warmup) or divide_steps (steps / k)",
                value="none",
            )
        )
    default_warmup = trainer_warmup(new_steps)
    if warmup_ratio is not None:
        return new_lr, new_steps, math.ceil(warmup_ratio * new_steps), "optim.warmup_ratio", found
    if rule == "linear_lr" and k > 1 and not default_warmup:
        warmup = math.ceil(ADDED_WARMUP_RATIO * new_steps)
        found.append(
            note(
                f"linear_lr raises the lr {k:g}x and this trainer has no warmup by default: added {warmup} warmup "
                f"steps ({ADDED_WARMUP_RATIO:.0%} of steps)"
            )
        )
        return new_lr, new_steps, warmup, "added for linear_lr", found
    return new_lr, new_steps, default_warmup, "trainer default" if default_warmup else "none", found


def choose_strategy(
    preset: Preset, trainer: Trainer, policy: PolicyEntry, world: int, fit: Fit
) -> tuple[str, list[Problem]]:
    if preset.strategy == "single" and world > 1:
        return "single", [
            problem(
                "strategy",
                f"single means one process, but the preset runs {world}",
                "set hardware.gpus: 1, or strategy: ddp",
                value="single",
            )
        ]
    if preset.strategy != "auto":
        if preset.strategy == "fsdp" and not trainer.supports_fsdp:
            return "fsdp", [
                problem(
                    "strategy",
                    f"the {trainer.name} trainer has no FSDP path in gpuwizard",
                    "use strategy: ddp (or auto)",
                    value="fsdp",
                )
            ]
        if preset.strategy == "ddp" and world == 1:
            return "single", [note("strategy ddp on one GPU runs as a single process")]
        return preset.strategy, []
    if world == 1:
        return "single", []
    if fit.fits is False and trainer.supports_fsdp and policy.fsdp_supported:
        return "fsdp", [
            note(
                f"strategy auto chose fsdp: {policy.key} needs ~{fit.estimate_gb} GB per device unsharded, more than "
                f"the {fit.device_gb} GB available"
            )
        ]
    return "ddp", []


def estimate_fit(policy: PolicyEntry, preset: Preset, per_device: int | None, world: int, hw: DetectedDevices) -> Fit:
    batch = per_device or preset.batch.size
    estimate = policy.estimate_gb(batch, preset.mixed_precision)
    sharded = policy.estimate_gb(batch, preset.mixed_precision, shard_over=world) if world > 1 else None
    if preset.hardware.gpu_memory_gb:
        device_gb, source = preset.hardware.gpu_memory_gb, "hardware.gpu_memory_gb"
    elif hw.memory_gb:
        device_gb, source = hw.memory_gb, f"detected {hw.name}" if hw.name else "detected"
    else:
        return Fit(None, estimate, None, "unknown", sharded)
    return Fit(estimate <= device_gb * 0.92, estimate, device_gb, source, sharded)


def advice_lines(
    preset: Preset, policy: PolicyEntry, world: int, strategy: str, fit: Fit, k: float | None
) -> list[str]:
    """Honest words on whether more GPUs pay for this job."""
    lines = []
    size = f"~{fit.estimate_gb} GB per device at this batch" + (
        f"; {fit.device_gb:g} GB per device, {fit.device_source}"
        if fit.device_gb
        else "; device memory unknown: set hardware.gpu_memory_gb"
    )
    if fit.fits is False:
        if strategy == "fsdp" and fit.sharded_estimate_gb is not None:
            lines.append(
                f"{policy.title} does not fit one device ({size}). FSDP over {world} devices brings it to "
                f"~{fit.sharded_estimate_gb} GB each, so the extra GPUs pay."
            )
        else:
            lines.append(
                f"{policy.title} does not fit one device ({size}). Lower batch.size with grad_accum, use LoRA, or "
                "shard the model; more GPUs with plain DDP do not lower per-device memory."
            )
    elif world > 1:
        lead = (
            f"{policy.title} fits one device ({size}). A"
            if fit.fits
            else f"{policy.title} needs {size}. If one device holds that, a"
        )
        lines.append(
            f"{lead} second GPU will not pay for a typical small fine-tune: the speedup is below {world}x, the lr and "
            "steps must be rescaled, and distributed runs add failure modes."
        )
        lines.append(
            "More GPUs pay when (1) the model does not fit one device, (2) the same fine-tune runs many times (sweeps "
            "and seeds: run them side by side, one per GPU), or (3) you pretrain on a large dataset."
        )
    else:
        lines.append(
            f"{policy.title} on one device ({size}). One GPU is the right baseline; get it green before scaling out."
        )
    if policy.single_gpu_hours:
        lines.append(
            f"Published single-GPU time: ~{policy.single_gpu_hours.hours:g} h ({policy.single_gpu_hours.setting})."
        )
    if k and k != 1:
        lines.append(
            f"The effective batch is {k:g}x the reference run's; the critical batch size for robot imitation learning "
            "is unmeasured, so a larger batch may not train faster per sample."
        )
    return lines


def plan_estimates(
    preset: Preset, policy: PolicyEntry, table: list[dict[str, Any]], reference_effective: int | None, base_lr: float
) -> list[dict[str, Any]]:
    """Time and cost for each GPU count of the batch table, on the steps the scaling rule gives that count."""
    from gpuwizard.estimates import estimate_rows, measured_runs

    rows: list[tuple[int, int | None, int | None]] = []
    for row in table:
        effective = row["effective"]
        if not effective or row["error"]:
            rows.append((row["gpus"], None, None))
            continue
        k = effective / reference_effective if reference_effective else 1.0
        _, steps, _, _, _ = scale(preset.scaling.rule, k, base_lr, preset.optim.steps, lambda _: None, None)
        rows.append((row["gpus"], steps, effective // row["gpus"]))  # samples per GPU per update
    per_update = next((r[2] for r in rows if r[0] == preset.world_size and r[2]), None)
    per_device = per_update // preset.batch.grad_accum if per_update else None
    estimates = estimate_rows(
        rows, measured_runs(preset.name, per_device), policy.single_gpu_hours, preset.costs.gpu_hour
    )
    return [e.to_json() for e in estimates]


def batch_table(trainer: Trainer, preset: Preset) -> list[dict[str, Any]]:
    counts = sorted(set(TABLE_COUNTS) | {preset.world_size})
    rows = []
    for gpus in counts:
        layout = trainer.batch_layout(preset.batch.size, preset.batch.grad_accum, gpus)
        rows.append(
            {
                "gpus": gpus,
                "per_device": layout.per_device,
                "effective": layout.effective,
                "error": layout.error,
                "chosen": gpus == preset.world_size,
            }
        )
    return rows


def dataset_findings(
    preset: Preset, trainer: Trainer, effective: int | None, workdir: str
) -> tuple[dict[str, Any] | None, list[Problem]]:
    if not preset.dataset.root:
        return None, []
    root = Path(workdir, os.path.expanduser(preset.dataset.root))  # relative: under the job's working directory
    if trainer.writes_dataset and not root.exists():
        return None, [note(f"the {trainer.name} trainer writes its synthetic dataset to {root} on the first run")]
    if not root.exists():
        return None, [
            warning(
                "dataset.root",
                f"{root} does not exist here, so its metadata is not shown",
                "plan on the training machine, or fix the path (a relative one is under launch.workdir)",
                value=preset.dataset.root,
            )
        ]
    try:
        meta = datasets.read_metadata(root)
    except datasets.DatasetError as exc:
        return None, [
            problem(
                "dataset.root",
                str(exc),
                "point dataset.root at a LeRobot dataset folder (the one containing meta/info.json)",
                value=preset.dataset.root,
            )
        ]
    found = []
    if effective and meta.frames:
        share = effective / meta.frames
        if share >= 0.05:
            found.append(
                warning(
                    "batch.size",
                    f"the effective batch ({effective}) is {share:.0%} of the dataset's {meta.frames} frames: one "
                    f"epoch is only {max(1, meta.frames // effective)} optimizer updates",
                    "lower batch.size or the GPU count so each epoch gives the optimizer more updates",
                )
            )
    return meta.to_json(), found


def output_dir_findings(ctx: BuildContext) -> list[Problem]:
    path, output_dir = ctx.output_path, ctx.output_dir
    if path.exists() and not path.is_dir():
        return [problem("output_dir", "exists and is not a folder", "choose a folder path", value=output_dir)]
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not os.access(probe, os.W_OK | os.X_OK):
        return [
            problem(
                "output_dir",
                f"cannot be written ({probe} is not writable)",
                "choose a folder you can write to",
                value=output_dir,
            )
        ]
    return []


def rendezvous_findings(preset: Preset, trainer: Trainer) -> list[Problem]:
    """Where the job's rendezvous store listens, and who could reach it."""
    if not trainer.uses_torchrun:
        return []
    found = []
    if preset.launch.master_port is not None:
        found.append(
            warning(
                "launch.master_port",
                "is not used: on one node torchrun --standalone binds a free port itself, so no other process can take "
                "it first; across nodes the port is the one in hardware.rdzv_endpoint",
                "remove launch.master_port",
                value=preset.launch.master_port,
            )
        )
    if preset.hardware.nodes > 1 and not preset.hardware.rdzv_endpoint and preset.launch.scheduler == "local":
        found.append(
            problem(
                "hardware.rdzv_endpoint",
                "(host:port of node 0) is required when hardware.nodes > 1 and the nodes are started by hand",
                "add it, e.g. 10.0.0.1:29500, or submit with SLURM (`run --slurm`), which finds the head node itself",
                value=None,
            )
        )
    if preset.hardware.nodes > 1 and preset.hardware.rdzv_endpoint and preset.launch.scheduler == "local":
        from gpuwizard.network import interface_note

        found.append(
            note(
                f"the rendezvous store on node 0 ({preset.hardware.rdzv_endpoint}) listens on every interface and "
                "torch "
                "exchanges pickled state through it: firewall that port to the cluster's nodes"
            )
        )
        route = interface_note(preset.hardware.rdzv_endpoint)
        if route:
            found.append(note(route))
    return found


def workdir_for(preset: Preset) -> tuple[str, list[Problem]]:
    if not preset.launch.workdir:
        return os.getcwd(), []
    path = Path(os.path.expanduser(preset.launch.workdir))
    if not path.is_dir():
        return str(path), [
            problem(
                "launch.workdir",
                "is not an existing folder",
                "give the checkout the trainer runs from (e.g. your Isaac-GR00T clone)",
                value=preset.launch.workdir,
            )
        ]
    return str(path.resolve()), []


def plan_here(preset: Preset, inventory: Any, resume: bool = False) -> tuple[Plan, BuildContext]:
    """Plan against the devices detected here, with their setup advice (P2P, busy, short or mixed) as warnings.

    What stops a CPU run from starting here is an error of the plan (a CPU run can only run here); GPUs short here
    are a setup warning (a plan made here may be for the training machine), and `run` refuses on them."""
    if inventory is None:
        return make_plan(preset, resume=resume)
    from gpuwizard.gpus.advice import setup_advice

    plan, ctx = make_plan(preset, detected=devices_from_inventory(inventory, preset), resume=resume)
    if plan.device == "cuda":
        plan.problems += setup_advice(
            inventory, preset.hardware.devices, preset.hardware.gpus, preset.hardware.nodes, plan.fits.estimate_gb
        )
    else:
        plan.problems += machine_problems(preset, plan, inventory)
    return plan, ctx


def make_plan(
    preset: Preset, gpus: int | None = None, detected: DetectedDevices | None = None, resume: bool = False
) -> tuple[Plan, BuildContext]:
    """Resolve a preset into a plan and the context its trainer builds the command from."""
    preset = with_gpus(preset, gpus)
    hw = detected or DetectedDevices()
    trainer = get_trainer(preset.trainer)
    policy = load_catalog()[preset.policy]
    found: list[Problem] = []
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
    python = resolve_python(preset, trainer)
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
    strategy, strategy_findings = choose_strategy(preset, trainer, policy, world, fit)
    found += strategy_findings
    workdir, workdir_problems = workdir_for(preset)
    dataset_meta, dataset_problems = dataset_findings(preset, trainer, layout.effective, workdir)
    found += dataset_problems
    found.append(
        note(
            "the critical batch size for robot imitation learning is unmeasured: scaling rules are heuristics, so "
            "compare against the single-GPU baseline"
        )
    )

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
        advice=advice_lines(preset, policy, world, strategy, fit, k),
        estimates=plan_estimates(preset, policy, table, reference.effective, base_lr),
    )
    output_dir = preset.output_dir or f"outputs/train/{preset.name}"
    ctx = BuildContext(preset, plan, policy, python, workdir, output_dir, resume)
    found += workdir_problems + check_python(preset) + conflicting_extra_args(preset, trainer)
    found += rendezvous_findings(preset, trainer)
    found += output_dir_findings(ctx)
    found += trainer.check(ctx)
    plan.problems = found
    return plan, ctx


def build_command(ctx: BuildContext) -> LaunchSpec:
    return get_trainer(ctx.preset.trainer).build(ctx)
