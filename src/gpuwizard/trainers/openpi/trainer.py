"""openpi: the JAX `scripts/train.py` (one process over all visible GPUs) or `train_pytorch.py` under torchrun.

Facts below are from Physical-Intelligence/openpi at 15a9616 unless a line says otherwise; what a named TrainConfig
does on its own comes from the installed openpi where it can be asked (configs.py), else the catalog.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import gpuwizard.trainers.openpi.checks as checks
import gpuwizard.trainers.openpi.run_values as run_values
from gpuwizard.core.errors import Problem
from gpuwizard.model.job import BatchLayout, BuildContext, LaunchSpec, TrainerQuery
from gpuwizard.model.preset import with_field
from gpuwizard.model.trainer_options import OpenpiOptions
from gpuwizard.runs.records import LrSchedule
from gpuwizard.trainers.base import (
    Trainer,
    device_env,
    global_layout,
    interpreter_missing,
    newest_step_dir,
    torchrun_prefix,
    trainer_args,
)
from gpuwizard.trainers.check import check_script
from gpuwizard.trainers.logparse import LineInfo, parse_openpi
from gpuwizard.trainers.openpi.configs import ConfigSource, config_source, training_python

if TYPE_CHECKING:
    from gpuwizard.model.catalog import PolicyEntry
    from gpuwizard.model.preset import Preset

PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
"""JAX's switch for taking XLA_PYTHON_CLIENT_MEM_FRACTION of each GPU at start-up (jax/_src/xla_bridge.py; on by
default), which makes NVML read that fraction whatever the batch."""


class OpenpiTrainer(Trainer):
    name = "openpi"
    title = "openpi (pi0 / pi0.5, JAX or PyTorch)"
    batch_flag = "--batch-size"
    progress_markers = (
        "Step ",
        "step=",
        "total batch size",
        "Training config:",
        "Progress on:",
        "Saved checkpoint",
        "Save Finalize is done",
        "Waiting for checkpoint manager",
        "%|",
    )
    batch_meaning = (
        "--batch-size is global: it is split over all devices (must divide); "
        "--fsdp-devices shards the model, not the batch."
    )
    Options = OpenpiOptions
    batch_is_global = True
    supports_fsdp = True

    def uses_jax(self, preset: Preset) -> bool:
        return OpenpiOptions.of(preset).backend == "jax"

    def processes_per_node(self, preset: Preset) -> int:
        return 1 if self.uses_jax(preset) else preset.hardware.gpus

    def batch_layout(self, size: int, grad_accum: int, world: int) -> BatchLayout:
        return global_layout(size, grad_accum, world, self.batch_flag)

    def source(self, preset: Preset) -> ConfigSource:
        """The named TrainConfig's own values: the installed openpi's, else the catalog's."""
        return config_source(preset)

    def default_lr(self, preset: Preset, policy: PolicyEntry) -> float | None:
        return self.source(preset).facts.peak_lr

    def default_warmup_steps(self, preset: Preset, policy: PolicyEntry, steps: int, per_update: int) -> int | None:
        return self.source(preset).facts.warmup_steps

    def managed_flags(self) -> tuple[str, ...]:
        """tyro takes each flag with dashes or underscores (train_pytorch.py's docstring uses --exp_name)."""
        flags = (
            "--batch-size",
            "--num-train-steps",
            "--fsdp-devices",
            "--exp-name",
            "--lr-schedule.peak-lr",
            "--lr-schedule.warmup-steps",
            "--lr-schedule.decay-steps",
            "--lr-schedule.decay-lr",
            "--data.repo-id",
            "--checkpoint-base-dir",
            "--pytorch-weight-path",
            "--log-interval",
            "--save-interval",
            "--overwrite",
            "--no-overwrite",
            "--resume",
        )
        return tuple(dict.fromkeys(f for flag in flags for f in (flag, "--" + flag[2:].replace("-", "_"))))

    def check(self, ctx: BuildContext) -> list[Problem]:
        return checks.findings(ctx, self.source(ctx.preset))

    def preflight(self, ctx: BuildContext) -> list[Problem]:
        return checks.preflight(ctx, self.source(ctx.preset))

    def build(self, ctx: BuildContext) -> LaunchSpec:
        preset, plan, opts = ctx.preset, ctx.plan, OpenpiOptions.of(ctx.preset)
        own = self.source(preset).facts
        prefix = ["uv", "run"] if opts.uv else []
        config = opts.config_name or "<trainer_options.config_name>"
        repo, lerobot_home, _ = run_values.dataset(ctx)
        common = [
            f"--exp-name={run_values.exp_name(ctx)}",
            f"--batch-size={preset.batch.size}",
            f"--num-train-steps={plan.steps}",
            *run_values.schedule_args(ctx, own),
            f"--data.repo-id={repo}",
            f"--checkpoint-base-dir={ctx.output_dir}",
        ]
        if opts.backend == "pytorch" and opts.torch_weights:
            common.append(f"--pytorch-weight-path={os.path.expanduser(opts.torch_weights)}")
        if opts.log_interval:
            common.append(f"--log-interval={opts.log_interval}")
        if opts.save_interval:
            common.append(f"--save-interval={opts.save_interval}")
        if ctx.resume:
            common += ["--resume", "--no-overwrite"]  # TrainConfig.__post_init__ refuses resume with overwrite
        elif opts.overwrite is not None:
            common.append("--overwrite" if opts.overwrite else "--no-overwrite")
        common.append("--wandb-enabled" if opts.wandb else "--no-wandb-enabled")
        env = device_env(ctx)
        if lerobot_home:
            env["HF_LEROBOT_HOME"] = lerobot_home
        if opts.backend == "jax":
            env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = f"{opts.mem_fraction:g}"
            if plan.device == "cpu":  # JAX's own split of the host into the planned number of devices
                env["JAX_PLATFORMS"] = "cpu"
                env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={plan.world_size}"
            elif preset.hardware.devices is None:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(plan.world_size))
            python = "python" if opts.uv else ctx.python
            fsdp = f"--fsdp-devices={run_values.fsdp_devices(ctx)}"
            argv = prefix + [python, "scripts/train.py", config, *common, fsdp]
        else:
            argv = [*torchrun_prefix(ctx, plan.processes_per_node, uv=opts.uv), "scripts/train_pytorch.py", config]
            argv += common
        launch_env = {key: str(value) for key, value in preset.launch.env.items()}
        return LaunchSpec(argv + preset.launch.extra_args, env | launch_env, [], ctx.workdir)

    def trainer_query(self, ctx: BuildContext, spec: LaunchSpec) -> TrainerQuery | str:
        """openpi's own tyro CLI (`_config.cli()`, as the entry script calls it) in the training interpreter."""
        python = training_python(ctx.preset)
        if missing := interpreter_missing(python):
            return missing
        preset, plan, opts = ctx.preset, ctx.plan, OpenpiOptions.of(ctx.preset)
        entry, own = run_values.entry(ctx), self.source(preset).facts
        decay_steps, decay_lr = run_values.decay(ctx, own)
        jax = opts.backend == "jax"
        args = trainer_args(spec.argv, entry)
        checkpoints = (ctx.output_path / (opts.config_name or "") / run_values.exp_name(ctx)).resolve()
        expected = {
            "global_batch": preset.batch.size,
            "per_device_batch": None if jax else plan.per_device_batch,
            "lr": plan.lr,
            "warmup_steps": plan.warmup_steps or 0,
            "decay_steps": decay_steps,
            "decay_lr": decay_lr,
            "steps": plan.steps,
            "dataset": run_values.dataset(ctx)[0],
            "model": preset.policy,
            "weights": own.weights if jax else run_values.pytorch_weights(ctx, own),
            "fsdp_devices": run_values.fsdp_devices(ctx) if jax else None,
            "resume": ctx.resume,
            "overwrite": False if ctx.resume else (own.overwrite if opts.overwrite is None else opts.overwrite),
            "checkpoint_dir": str(checkpoints),
        }
        return TrainerQuery(
            argv=[python, check_script("check_openpi.py"), entry, str(plan.world_size), *args],
            expected=expected,
            cwd=ctx.workdir,
            labels={"lr": "peak"},
            fixes={
                "model": f"set policy to the model {opts.config_name} trains",
                "checkpoint_dir": "gpuwizard resumes from output_dir/<config>/<exp-name>: remove --checkpoint-base-dir "
                "or --exp-name from launch.extra_args",
            },
        )

    def lr_schedule(self, ctx: BuildContext) -> LrSchedule:
        return run_values.schedule(ctx, self.source(ctx.preset).facts)

    def last_checkpoint(self, ctx: BuildContext) -> Path | None:
        """<checkpoint-base-dir>/<config>/<exp-name>/<step>/ (src/openpi/training/checkpoints.py)."""
        config = OpenpiOptions.of(ctx.preset).config_name
        return newest_step_dir(ctx.output_path / config / run_values.exp_name(ctx)) if config else None

    def parse_line(self, line: str) -> LineInfo | None:
        return parse_openpi(line)

    def probe_variant(self, preset: Preset, steps: int) -> Preset:
        """JAX probe runs without preallocation, so the memory NVML reads grows with what the batch needs."""
        short = super().probe_variant(preset, steps)
        return with_field(short, f"launch.env.{PREALLOCATE}", "false") if self.uses_jax(preset) else short

    def probe_memory_source(self, preset: Preset, device: str) -> str | None:
        """Which figure a JAX probe row's memory is (None: the PyTorch backend, measured as any torch trainer)."""
        if not self.uses_jax(preset):
            return None
        if device == "cuda":
            return (
                f"NVML, the JAX process per GPU, run with {PREALLOCATE}=false: its allocator's pool as it grew to the "
                "run's peak (XLA keeps what it took), not the fraction JAX takes up front"
            )
        return "resident memory of the one JAX process, all its host devices together"


TRAINER = OpenpiTrainer()
