"""openpi: the JAX `scripts/train.py` (one process over all visible GPUs) or `train_pytorch.py` under torchrun."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from gpuwizard.catalog import OpenpiSchedule
from gpuwizard.contracts import BatchLayout, BuildContext, LaunchSpec
from gpuwizard.errors import Problem, note, problem, warning
from gpuwizard.logparse import LineInfo, parse_openpi
from gpuwizard.runner.records import LrSchedule
from gpuwizard.trainers.base import (
    Trainer,
    TrainerOptions,
    device_env,
    global_layout,
    newest_step_dir,
    torchrun_prefix,
)


class OpenpiOptions(TrainerOptions):
    """openpi's own settings beyond the preset's common fields."""

    config_name: str | None = Field(None, description="The TrainConfig to train, e.g. pi05_libero.")
    backend: Literal["jax", "pytorch"] = Field(
        "jax", description="jax (scripts/train.py) or pytorch (scripts/train_pytorch.py under torchrun)."
    )
    exp_name: str | None = Field(None, description="--exp-name; null: the preset name.")
    fsdp_devices: int | None = Field(
        None, gt=0, description="--fsdp-devices: devices each parameter is sharded over (JAX)."
    )
    uv: bool = Field(True, description="Start it with `uv run`.")
    mem_fraction: float = Field(0.9, gt=0, le=1, description="XLA_PYTHON_CLIENT_MEM_FRACTION (JAX).")
    overwrite: bool = Field(False, description="--overwrite an existing checkpoint folder.")
    wandb: bool = Field(False, description="--wandb-enabled.")


class OpenpiTrainer(Trainer):
    name = "openpi"
    package = "openpi"
    title = "openpi (pi0 / pi0.5, JAX or PyTorch)"
    batch_flag = "--batch-size"
    progress_markers = (
        "Step ",
        "step=",
        "total batch size",
        "effective_batch_size",
        "Progress on:",
        "Saved checkpoint",
        "%|",
    )
    batch_meaning = (
        "--batch-size is global: it is split over all devices (must divide); "
        "--fsdp-devices shards the model, not the batch."
    )
    Options = OpenpiOptions
    needs_cuda = True
    batch_is_global = True
    supports_fsdp = True

    def uses_jax(self, preset) -> bool:  # type: ignore[no-untyped-def]
        return preset.options.backend == "jax"

    def processes_per_node(self, preset) -> int:  # type: ignore[no-untyped-def]
        return 1 if self.uses_jax(preset) else preset.hardware.gpus

    def batch_layout(self, size: int, grad_accum: int, world: int) -> BatchLayout:
        return global_layout(size, grad_accum, world, self.batch_flag)

    def schedule(self, preset, policy) -> OpenpiSchedule:  # type: ignore[no-untyped-def]
        """The TrainConfig's own batch, length and lr schedule; openpi's defaults for a config the catalog lacks."""
        known = policy.openpi.configs if policy.openpi else {}
        return known.get(preset.options.config_name or "", OpenpiSchedule())

    def default_lr(self, preset, policy):  # type: ignore[no-untyped-def]
        return self.schedule(preset, policy).peak_lr

    def default_warmup_steps(self, preset, policy, steps, per_update):  # type: ignore[no-untyped-def]
        return self.schedule(preset, policy).warmup_steps

    def managed_flags(self) -> tuple[str, ...]:
        return (
            "--batch-size",
            "--batch_size",
            "--num-train-steps",
            "--num_train_steps",
            "--fsdp-devices",
            "--fsdp_devices",
            "--exp-name",
            "--exp_name",
            "--lr-schedule.peak-lr",
            "--lr-schedule.warmup-steps",
            "--checkpoint-base-dir",
        )

    def fsdp_devices(self, ctx: BuildContext) -> int:
        opts = ctx.preset.options
        if opts.fsdp_devices:
            return opts.fsdp_devices
        return ctx.plan.world_size if ctx.plan.strategy == "fsdp" else 1

    def check(self, ctx: BuildContext) -> list[Problem]:
        preset, plan, opts = ctx.preset, ctx.plan, ctx.preset.options
        found: list[Problem] = []
        if not opts.config_name:
            found.append(
                problem(
                    "trainer_options.config_name",
                    "is required: openpi trains a named TrainConfig",
                    "set it, e.g. pi05_libero or pi0_libero (run scripts/compute_norm_stats.py for it first)",
                    value=None,
                )
            )
        if preset.batch.grad_accum > 1:
            found.append(
                problem(
                    "batch.grad_accum",
                    "openpi has no gradient accumulation",
                    "set batch.grad_accum: 1 and choose the global batch.size directly",
                    value=preset.batch.grad_accum,
                )
            )
        found += self._schedule_notes(ctx)
        if opts.overwrite and ctx.resume:
            found.append(
                problem(
                    "trainer_options.overwrite",
                    "openpi refuses --overwrite together with --resume (it would wipe the checkpoints to resume from)",
                    "set trainer_options.overwrite: false to resume",
                    value=True,
                )
            )
        if opts.backend == "jax":
            if preset.hardware.nodes > 1:
                found.append(
                    problem(
                        "hardware.nodes",
                        "openpi's JAX trainer does not support multi-node training",
                        "train on one node (hardware.nodes: 1)",
                        value=preset.hardware.nodes,
                    )
                )
            fsdp = self.fsdp_devices(ctx)
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
        else:
            if preset.policy == "pi0_fast":
                found.append(
                    problem(
                        "trainer_options.backend",
                        "openpi's PyTorch trainer does not support pi0_fast (openpi README, PyTorch Support); "
                        "train_pytorch.py would build a pi0 instead",
                        "use backend: jax for pi0_fast",
                        value="pytorch",
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
            if preset.mixed_precision not in ("bf16",):
                found.append(
                    warning(
                        "mixed_precision",
                        "openpi PyTorch trains in full bf16 (pytorch_training_precision); this setting is not passed",
                        "set mixed_precision: bf16",
                        value=preset.mixed_precision,
                    )
                )
        return found

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        script = "scripts/train.py" if ctx.preset.options.backend == "jax" else "scripts/train_pytorch.py"
        if not Path(ctx.workdir, script).is_file():
            return [
                problem(
                    "launch.workdir",
                    f"{script} is not in {ctx.workdir}",
                    "set launch.workdir to your openpi checkout",
                    value=ctx.preset.launch.workdir,
                )
            ]
        return []

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, plan, opts = ctx.preset, ctx.plan, ctx.preset.options
        prefix = ["uv", "run"] if opts.uv else []
        config = opts.config_name or "<trainer_options.config_name>"
        common = [
            f"--exp-name={opts.exp_name or preset.name}",
            f"--batch-size={preset.batch.size}",
            f"--num-train-steps={plan.steps}",
            *self._schedule_args(ctx),
            f"--checkpoint-base-dir={ctx.output_dir}",
        ]
        if opts.overwrite:
            common.append("--overwrite")
        if ctx.resume:
            common.append("--resume")
        common.append("--wandb-enabled" if opts.wandb else "--no-wandb-enabled")
        env = device_env(ctx)
        if opts.backend == "jax":
            env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{opts.mem_fraction:g}"
            if preset.hardware.devices is None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(plan.world_size))
            python = "python" if opts.uv else ctx.python
            argv = prefix + [python, "scripts/train.py", config] + common + [f"--fsdp-devices={self.fsdp_devices(ctx)}"]
        else:
            argv = (
                torchrun_prefix(ctx, plan.processes_per_node, uv=opts.uv)
                + ["scripts/train_pytorch.py", config]
                + common
            )
        return LaunchSpec(argv + preset.launch.extra_args, env | dict(preset.launch.env), [], ctx.workdir)

    def lr_schedule(self, ctx: BuildContext) -> LrSchedule:
        """What _schedule_args leaves the TrainConfig's CosineDecaySchedule at (openpi 15a9616: optax
        warmup_cosine_decay_schedule in src/openpi/training/optimizer.py, and the same formula in
        scripts/train_pytorch.py lr_schedule): from peak / (warmup + 1), cosine from the warmup's end to decay_lr.
        train_pytorch.py logs the mean lr of the steps since its last line (TrainConfig.log_interval, 100)."""
        plan, own = ctx.plan, self.schedule(ctx.preset, ctx.policy)
        warmup = plan.warmup_steps or 0
        return LrSchedule(
            peak=plan.lr,
            warmup_steps=warmup,
            warmup_start=1 / (warmup + 1),
            decay="cosine",
            decay_start=warmup,
            decay_end=plan.steps if plan.steps != own.num_train_steps else own.decay_steps,
            end=own.decay_lr,
            averaged_over=100,
        )

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """<checkpoint-base-dir>/<config>/<exp-name>/<step>/ (src/openpi/training/checkpoints.py)."""
        opts = ctx.preset.options
        if not opts.config_name:
            return None
        return newest_step_dir(ctx.output_path / opts.config_name / (opts.exp_name or ctx.preset.name))

    def _schedule_args(self, ctx: BuildContext) -> list[str]:
        """Only what differs from the TrainConfig's own schedule: its lr and warmup belong to the config name."""
        plan, own = ctx.plan, self.schedule(ctx.preset, ctx.policy)
        args = []
        if plan.lr != own.peak_lr:
            args.append(f"--lr-schedule.peak-lr={plan.lr:g}")
        if (plan.warmup_steps or 0) != own.warmup_steps:
            args.append(f"--lr-schedule.warmup-steps={plan.warmup_steps or 0}")
        if plan.steps != own.num_train_steps:
            args.append(f"--lr-schedule.decay-steps={plan.steps}")  # the cosine follows the run's length
        return args

    def _schedule_notes(self, ctx: BuildContext) -> list[Problem]:
        preset, policy, plan = ctx.preset, ctx.policy, ctx.plan
        config = preset.options.config_name
        if config is None:
            return []
        own = self.schedule(preset, policy)
        if config not in (policy.openpi.configs if policy.openpi else {}):
            return [
                warning(
                    "trainer_options.config_name",
                    f"{config} is not in gpuwizard's catalog, so its schedule is assumed to be openpi's defaults "
                    f"(batch {own.batch_size}, {own.num_train_steps} steps, peak lr {own.peak_lr:g}, warmup "
                    f"{own.warmup_steps})",
                    "set optim.lr and optim.warmup_ratio to the config's own values, or add the config to the "
                    "openpi section of the policy catalog",
                    value=config,
                )
            ]
        if preset.batch.size != own.batch_size and plan.lr == own.peak_lr:
            return [
                note(
                    f"{config}'s lr {own.peak_lr:g} and warmup {own.warmup_steps} were tuned for a global batch of "
                    f"{own.batch_size}; this run trains at {preset.batch.size} with the same lr (set optim.lr, or "
                    f"scaling.reference_gpus and a rule, to change it)"
                )
            ]
        return []

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_openpi(line)


TRAINER = OpenpiTrainer()
