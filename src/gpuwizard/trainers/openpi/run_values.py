"""What one openpi run does, derived from the preset, the plan and the config's own values (configs.py)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from gpuwizard.core.errors import Problem, problem
from gpuwizard.model.catalog import OpenpiConfig
from gpuwizard.model.job import BuildContext


def entry(ctx: BuildContext) -> str:
    return "scripts/train.py" if ctx.preset.options.backend == "jax" else "scripts/train_pytorch.py"


def exp_name(ctx: BuildContext) -> str:
    return ctx.preset.options.exp_name or ctx.preset.name


def fsdp_devices(ctx: BuildContext) -> int:
    opts = ctx.preset.options
    if opts.fsdp_devices:
        return opts.fsdp_devices
    return ctx.plan.world_size if ctx.plan.strategy == "fsdp" else 1


def decay(ctx: BuildContext, own: OpenpiConfig) -> tuple[int, float]:
    """The cosine's length and end lr: the config's own shape stretched to the run's steps, its end lr following the
    peak (CosineDecaySchedule in src/openpi/training/optimizer.py ends at decay_lr whatever the peak: a peak below it
    would make the lr rise)."""
    plan, steps = ctx.plan, own.decay_steps
    if plan.steps != own.num_train_steps:
        steps = max(1, round(own.decay_steps * plan.steps / own.num_train_steps))
    end = own.decay_lr if plan.lr == own.peak_lr else own.decay_lr * plan.lr / own.peak_lr
    return steps, end


def schedule_args(ctx: BuildContext, own: OpenpiConfig) -> list[str]:
    """Only what differs from the TrainConfig's own schedule: its lr and warmup belong to the config name."""
    plan = ctx.plan
    decay_steps, decay_lr = decay(ctx, own)
    args = []
    if plan.lr != own.peak_lr:
        args.append(f"--lr-schedule.peak-lr={plan.lr:g}")
    if (plan.warmup_steps or 0) != own.warmup_steps:
        args.append(f"--lr-schedule.warmup-steps={plan.warmup_steps or 0}")
    if decay_steps != own.decay_steps:
        args.append(f"--lr-schedule.decay-steps={decay_steps}")
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
    if ctx.preset.options.torch_weights:
        return os.path.expanduser(ctx.preset.options.torch_weights)
    return own.pytorch_weight_path
