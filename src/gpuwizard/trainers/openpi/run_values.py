"""What one openpi run does, derived from the preset, the plan and the config's own values (configs.py)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from gpuwizard.core.errors import Problem, problem
from gpuwizard.model.catalog import OpenpiConfig
from gpuwizard.model.job import BuildContext
from gpuwizard.model.trainer_options import OpenpiOptions
from gpuwizard.runs.records import LrSchedule


def entry(ctx: BuildContext) -> str:
    return "scripts/train.py" if OpenpiOptions.of(ctx.preset).backend == "jax" else "scripts/train_pytorch.py"


def exp_name(ctx: BuildContext) -> str:
    return OpenpiOptions.of(ctx.preset).exp_name or ctx.preset.name


def fsdp_devices(ctx: BuildContext) -> int:
    opts = OpenpiOptions.of(ctx.preset)
    if opts.fsdp_devices:
        return opts.fsdp_devices
    return ctx.plan.world_size if ctx.plan.strategy == "fsdp" else 1


def decay(ctx: BuildContext, own: OpenpiConfig) -> tuple[int, float]:
    """The cosine's length and end lr. The length is the config's own decay_steps whatever --num-train-steps says
    (CosineDecaySchedule in src/openpi/training/optimizer.py:24-31 takes only its own fields; config.py:752-757
    pi05_libero keeps 1,000,000 for 30,000 steps); the end lr follows the peak (the cosine ends at decay_lr whatever
    the peak: a peak below it would make the lr rise)."""
    plan = ctx.plan
    end = own.decay_lr if plan.lr == own.peak_lr else own.decay_lr * plan.lr / own.peak_lr
    return own.decay_steps, end


def log_interval(ctx: BuildContext, own: OpenpiConfig) -> int:
    """Steps between train_pytorch.py's log lines: trainer_options.log_interval, else the TrainConfig's."""
    return OpenpiOptions.of(ctx.preset).log_interval or own.log_interval


def schedule(ctx: BuildContext, own: OpenpiConfig) -> LrSchedule:
    """What the command leaves the TrainConfig's CosineDecaySchedule at (openpi 15a9616: optax
    warmup_cosine_decay_schedule in src/openpi/training/optimizer.py:24-31, and the same formula in
    scripts/train_pytorch.py lr_schedule): from peak / (warmup + 1), cosine from the warmup's end to the end lr.
    train_pytorch.py:560-583 logs the mean lr of the updates since its last line (log_interval)."""
    warmup = ctx.plan.warmup_steps or 0
    decay_steps, decay_lr = decay(ctx, own)
    return LrSchedule(
        peak=ctx.plan.lr,
        warmup_steps=warmup,
        warmup_start=1 / (warmup + 1),
        decay="cosine",
        decay_start=warmup,
        decay_end=decay_steps,
        end=decay_lr,
        averaged_over=log_interval(ctx, own),
    )


def schedule_args(ctx: BuildContext, own: OpenpiConfig) -> list[str]:
    """Only what differs from the TrainConfig's own schedule: its lr and warmup belong to the config name."""
    plan = ctx.plan
    decay_lr = decay(ctx, own)[1]
    args = []
    if plan.lr != own.peak_lr:
        args.append(f"--lr-schedule.peak-lr={plan.lr:g}")
    if (plan.warmup_steps or 0) != own.warmup_steps:
        args.append(f"--lr-schedule.warmup-steps={plan.warmup_steps or 0}")
    if decay_lr != own.decay_lr:
        args.append(f"--lr-schedule.decay-lr={decay_lr:g}")
    return args


def dataset(ctx: BuildContext) -> tuple[str, str | None, Problem | None]:
    """--data.repo-id, the HF_LEROBOT_HOME that puts dataset.root at it, and why it cannot.

    openpi opens a LeRobot dataset by repo id alone (src/openpi/training/data_loader.py create_torch_dataset:
    LeRobotDataset(repo_id), no root), which LeRobot reads at HF_LEROBOT_HOME/<repo_id> (lerobot/common/constants.py
    and datasets/lerobot_dataset.py of the lerobot.common era openpi pins at 0cf8648)."""
    spec = ctx.preset.dataset
    if spec.root is None:
        return spec.repo_id or "", None, None
    root = Path(ctx.workdir, os.path.expanduser(spec.root)).resolve()
    repo = spec.repo_id or root.name
    parts = PurePosixPath(repo).parts
    if root.parts[-len(parts) :] != parts:
        return (
            repo,
            None,
            problem(
                "dataset.root",
                f"must end with the repo id {repo}: openpi opens a LeRobot dataset by repo id only, at "
                "$HF_LEROBOT_HOME/<repo_id> (src/openpi/training/data_loader.py passes no root)",
                f"move or link the dataset to a folder ending in {repo}, or set dataset.repo_id to the folder's last "
                f"part ({root.name})",
                value=spec.root,
            ),
        )
    return repo, str(Path(*root.parts[: -len(parts)])), None


def pytorch_weights(ctx: BuildContext, own: OpenpiConfig) -> str | None:
    """The weights a PyTorch run starts from: trainer_options.torch_weights, else the config's own."""
    weights = OpenpiOptions.of(ctx.preset).torch_weights
    return os.path.expanduser(weights) if weights else own.pytorch_weight_path
