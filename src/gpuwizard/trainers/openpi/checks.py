"""The plan's checks of an openpi preset against what its TrainConfig does (configs.py) and what each backend can."""

from __future__ import annotations

from pathlib import Path

import gpuwizard.trainers.openpi.run_values as run_values
from gpuwizard.core.errors import Problem, note, problem, warning
from gpuwizard.model.job import BuildContext
from gpuwizard.model.trainer_options import OpenpiOptions
from gpuwizard.trainers.openpi.configs import ConfigSource

PLACEHOLDER = "/path/to/"
"""How openpi's placeholder paths start (pi05_libero: pytorch_weight_path="/path/to/your/pytorch_weight_path")."""


def findings(ctx: BuildContext, source: ConfigSource) -> list[Problem]:
    preset, opts = ctx.preset, OpenpiOptions.of(ctx.preset)
    if not opts.config_name:
        return [
            problem(
                "trainer_options.config_name",
                "is required: openpi trains a named TrainConfig",
                "set it, e.g. pi05_libero or pi0_libero (run scripts/compute_norm_stats.py for it first)",
                value=None,
            )
        ]
    found = config_findings(ctx, source)
    if source.refusal:
        return found
    if preset.batch.grad_accum > 1:
        found.append(
            problem(
                "batch.grad_accum",
                "openpi has no gradient accumulation",
                "set batch.grad_accum: 1 and choose the global batch.size directly",
                value=preset.batch.grad_accum,
            )
        )
    found += schedule_findings(ctx, source) + weights_findings(ctx, source)
    found += [p for p in [run_values.dataset(ctx)[2]] if p]
    if opts.overwrite and ctx.resume:
        found.append(
            problem(
                "trainer_options.overwrite",
                "openpi refuses --overwrite together with --resume (it would wipe the checkpoints to resume from)",
                "set trainer_options.overwrite: null or false to resume",
                value=True,
            )
        )
    if ctx.plan.device == "cpu":
        found.append(
            note(
                "openpi on the CPU (gloo for PyTorch, host devices for JAX) is a dry run of the real code path; a full "
                "model trains on GPUs"
            )
        )
    return found + (jax_findings(ctx) if opts.backend == "jax" else pytorch_findings(ctx, source))


def config_findings(ctx: BuildContext, source: ConfigSource) -> list[Problem]:
    """Where the config's own values come from, and whether it trains the preset's policy."""
    preset, own = ctx.preset, source.facts
    config = OpenpiOptions.of(preset).config_name
    if source.refusal:
        return [
            problem(
                "trainer_options.config_name",
                f"the installed openpi has no such TrainConfig: {source.refusal}",
                "use a name from its src/openpi/training/config.py (_CONFIGS)",
                value=config,
            )
        ]
    found = []
    if source.known:
        found.append(
            note(
                f"{config}'s own values (batch {own.batch_size}, {own.num_train_steps:,} steps, peak lr "
                f"{own.peak_lr:g}, warmup {own.warmup_steps:,}, model {own.model}, dataset {own.repo_id}) are from "
                f"{source.where}"
            )
        )
    else:
        found.append(
            warning(
                "trainer_options.config_name",
                f"{config} is not in gpuwizard's catalog and {source.where}, so its schedule is assumed to be "
                f"openpi's defaults (batch {own.batch_size}, {own.num_train_steps:,} steps, peak lr {own.peak_lr:g}, "
                f"warmup {own.warmup_steps:,})",
                "plan where the openpi environment is (it is then asked), or set optim.lr and optim.warmup_ratio to "
                "the config's own values",
                value=config,
            )
        )
    if own.model and own.model != preset.policy:
        found.append(
            problem(
                "policy",
                f"{config} trains {own.model} (its model config in src/openpi/training/config.py), not "
                f"{preset.policy}: the plan's memory estimate and figures would be another model's",
                f"set policy: {own.model}, or choose a {preset.policy} config",
                value=preset.policy,
            )
        )
    if own.data == "FakeDataConfig" and preset.dataset.repo_id != "fake":
        found.append(
            warning(
                "dataset.repo_id",
                f"{config} trains on generated data (FakeDataConfig, repo id 'fake'); another repo id makes it open "
                "that LeRobot dataset without any of a real config's transforms",
                "set dataset.repo_id: fake, or choose a config made for your dataset",
                value=preset.dataset.repo_id,
            )
        )
    if own.data and own.data.startswith("RLDS"):
        found.append(
            warning(
                "dataset.repo_id",
                f"{config} reads RLDS data ({own.data}) from --data.rlds-data-dir, not a LeRobot dataset by repo id",
                "pass --data.rlds-data-dir=<the folder holding droid/> in launch.extra_args",
                value=preset.dataset.repo_id,
            )
        )
    return found


def schedule_findings(ctx: BuildContext, source: ConfigSource) -> list[Problem]:
    """Where the schedule's warmup and cosine end against the run's steps; openpi keeps the config's decay_steps
    whatever --num-train-steps says (run_values.decay), and optax refuses only a cosine no longer than the warmup."""
    preset, plan, own = ctx.preset, ctx.plan, source.facts
    config, found = OpenpiOptions.of(preset).config_name, []
    schedule = run_values.schedule(ctx, own)
    warmup, decay_steps = schedule.warmup_steps, schedule.decay_end
    if plan.steps <= warmup:
        where = "inside the warmup"
    elif plan.steps < decay_steps:
        where = f"{plan.steps - warmup:,} steps into the {decay_steps - warmup:,}-step cosine"
    else:
        where = "after the cosine, at its end lr"
    end = f" (its {own.decay_lr:g} scaled with the peak)" if schedule.end != own.decay_lr else ""
    found.append(
        note(
            f"lr schedule: warmup {warmup:,} steps to {plan.lr:g}, then a cosine to {schedule.end:g}{end} ending at "
            f"step {decay_steps:,} ({config}'s own decay_steps, which openpi keeps whatever --num-train-steps says); "
            f"the run's {plan.steps:,} steps end {where} (lr {schedule.lr_at(plan.steps):.3g})"
        )
    )
    if OpenpiOptions.of(preset).backend == "jax" and decay_steps <= warmup:
        found.append(
            problem(
                "optim.warmup_ratio",
                f"the warmup ({warmup:,} steps) is not shorter than {config}'s cosine, which ends at step "
                f"{decay_steps:,} whatever the run's length: optax.warmup_cosine_decay_schedule, which openpi's "
                "CosineDecaySchedule builds, refuses that when training starts",
                f"set optim.warmup_ratio under {decay_steps / plan.steps:.3g} (a warmup under {decay_steps:,} steps)",
                value=preset.optim.warmup_ratio,
            )
        )
    if preset.batch.size != own.batch_size and plan.lr == own.peak_lr:
        found.append(
            note(
                f"{config}'s lr {own.peak_lr:g} and warmup {own.warmup_steps:,} were tuned for a global batch of "
                f"{own.batch_size}; this run trains at {preset.batch.size} with the same lr (set optim.lr, or "
                "scaling.reference_gpus and a rule, to change it)"
            )
        )
    return found


def weights_findings(ctx: BuildContext, source: ConfigSource) -> list[Problem]:
    """train_pytorch.py loads only <pytorch_weight_path>/model.safetensors; it never reads the JAX weight loader."""
    opts, own = OpenpiOptions.of(ctx.preset), source.facts
    if opts.backend == "jax":
        if opts.torch_weights:
            return [
                warning(
                    "trainer_options.torch_weights",
                    "is used only by backend: pytorch; JAX loads the config's own weight loader",
                    "remove it, or set backend: pytorch",
                    value=opts.torch_weights,
                )
            ]
        return []
    if opts.torch_weights:
        return []
    convert = (
        "convert the JAX checkpoint with examples/convert_jax_model_to_pytorch.py and set "
        "trainer_options.torch_weights to the folder it writes"
    )
    if own.pytorch_weight_path and own.pytorch_weight_path.startswith(PLACEHOLDER):
        return [
            problem(
                "trainer_options.torch_weights",
                f"is needed: {opts.config_name}'s own pytorch_weight_path is openpi's placeholder "
                f"{own.pytorch_weight_path}, which train_pytorch.py fails to load",
                convert,
                value=None,
            )
        ]
    if own.pytorch_weight_path is None and own.weights:
        return [
            warning(
                "trainer_options.torch_weights",
                f"is not set and {opts.config_name} has none: train_pytorch.py starts from random weights (the "
                f"config's JAX weights, {own.weights}, are not read by PyTorch)",
                convert,
                value=None,
            )
        ]
    return []


def jax_findings(ctx: BuildContext) -> list[Problem]:
    preset, plan, found = ctx.preset, ctx.plan, []
    if preset.hardware.nodes > 1:
        found.append(
            problem(
                "hardware.nodes",
                "openpi's JAX trainer does not support multi-node training",
                "train on one node (hardware.nodes: 1)",
                value=preset.hardware.nodes,
            )
        )
    fsdp = run_values.fsdp_devices(ctx)
    if plan.world_size % fsdp:
        found.append(
            problem(
                "trainer_options.fsdp_devices",
                f"{plan.world_size} devices are not divisible by {fsdp} FSDP devices",
                f"use a divisor of {plan.world_size}",
                value=fsdp,
            )
        )
    if preset.mixed_precision != "bf16":
        found.append(
            warning(
                "mixed_precision",
                "openpi's JAX configs fix their own dtypes; this setting is not passed",
                "set mixed_precision: bf16",
                value=preset.mixed_precision,
            )
        )
    if plan.world_size > 1 and fsdp == 1:
        found.append(
            note(
                "openpi JAX shards the batch over all visible GPUs in one process; --fsdp-devices only shards "
                "parameters to save memory (openpi issue #600: multi-GPU is often I/O bound)"
            )
        )
    return found


def pytorch_findings(ctx: BuildContext, source: ConfigSource) -> list[Problem]:
    preset, plan, opts, found = ctx.preset, ctx.plan, OpenpiOptions.of(ctx.preset), []
    model = source.facts.model
    if model == "pi0_fast":
        found.append(
            problem(
                "trainer_options.backend",
                f"openpi's PyTorch trainer does not support pi0_fast, which {opts.config_name} trains (openpi README, "
                "PyTorch Support); train_pytorch.py would build a pi0 instead",
                "use backend: jax for pi0_fast configs",
                value="pytorch",
            )
        )
    elif model is None:
        found.append(
            warning(
                "trainer_options.config_name",
                f"which model {opts.config_name} trains is not known here, and train_pytorch.py builds a pi0 from any "
                "model config (pi0_fast is not supported on PyTorch)",
                "plan where the openpi environment is, which is then asked",
                value=opts.config_name,
            )
        )
    if plan.strategy == "fsdp" or opts.fsdp_devices:
        found.append(
            problem(
                "strategy",
                "openpi's PyTorch trainer supports neither FSDP nor --fsdp-devices",
                "use strategy: ddp, or backend: jax",
                value=plan.strategy,
            )
        )
    if preset.mixed_precision != "bf16":
        found.append(
            warning(
                "mixed_precision",
                "openpi PyTorch trains in full bf16 (pytorch_training_precision); this setting is not passed",
                "set mixed_precision: bf16",
                value=preset.mixed_precision,
            )
        )
    return found


def preflight(ctx: BuildContext, source: ConfigSource) -> list[Problem]:
    """What must exist on the training machine: the entry script, and the PyTorch weights it loads."""
    script = run_values.entry(ctx)
    if not Path(ctx.workdir, script).is_file():
        return [
            problem(
                "launch.workdir",
                f"{script} is not in {ctx.workdir}",
                "set launch.workdir to your openpi checkout",
                value=ctx.preset.launch.workdir,
            )
        ]
    weights = run_values.pytorch_weights(ctx, source.facts)
    if OpenpiOptions.of(ctx.preset).backend == "pytorch" and weights:
        folder = Path(ctx.workdir, weights)
        if not (folder / "model.safetensors").is_file():
            return [
                problem(
                    "trainer_options.torch_weights",
                    f"has no model.safetensors in {folder}, which train_pytorch.py loads",
                    "give the folder examples/convert_jax_model_to_pytorch.py wrote",
                    value=weights,
                )
            ]
    return []
