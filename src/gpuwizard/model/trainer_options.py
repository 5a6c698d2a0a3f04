"""Each trainer's typed `trainer_options`, beside the preset that holds them: the preset validates them by trainer
name without importing the trainers, and the trainers read them from here. Each model also holds the facts about
its trainer that layers below trainers/ need (the distribution it is found by, the checkout it runs from). A new
trainer adds its model to OPTIONS under its name in trainer_names.TRAINERS."""

from __future__ import annotations

from typing import ClassVar, Literal, NamedTuple, Protocol, Self

from pydantic import Field

from gpuwizard.core.schema import Strict


class Checkout(NamedTuple):
    """A source folder a trainer runs from, beside or around its environment."""

    folder: str
    """Its usual name, looked for beside an environment."""
    marker: str
    """A file only such a checkout holds, relative to it."""


class HasOptions(Protocol):
    """What holds a trainer's options (the preset), seen from here."""

    @property
    def options(self) -> TrainerOptions: ...


class TrainerOptions(Strict):
    """Base for a trainer's typed `trainer_options`: strict, unknown keys refused, defaults left out when saved."""

    package: ClassVar[str]
    """The distribution (importlib.metadata name) an environment has the trainer by, recorded with each run."""
    checkout: ClassVar[Checkout | None] = None
    """The source checkout the trainer runs from, where it runs from one instead of an installed package."""

    @classmethod
    def of(cls, preset: HasOptions) -> Self:
        """A preset's trainer_options as this model: the record the preset validated once, never validated again."""
        options = preset.options
        if not isinstance(options, cls):
            raise TypeError(f"the preset's trainer_options are {type(options).__name__}, not {cls.__name__}")
        return options


class LeRobotOptions(TrainerOptions):
    """lerobot-train's own settings beyond the preset's common fields."""

    package = "lerobot"

    api: Literal["auto", "v0.6", "main"] = Field(
        "auto", description="LeRobot's command-line form; auto detects it in the training environment (0.6.1 or main)."
    )
    policy_path: str | None = Field(
        None,
        description="--policy.path: fine-tune from a pretrained policy (hub id or folder) instead of --policy.type.",
    )
    pretrained_path: str | None = Field(
        None, description="--policy.pretrained_path for a policy type that starts from pretrained weights."
    )
    repo_id: str | None = Field(None, description="--policy.repo_id to push the trained policy to.")
    num_workers: int | None = Field(None, ge=0, description="--num_workers: dataloader workers per process.")
    log_freq: int | None = Field(
        None, gt=0, description="--log_freq: optimizer updates between log lines (x grad_accum on main)."
    )
    save_freq: int | None = Field(
        None, gt=0, description="--save_freq: optimizer updates between checkpoints (x grad_accum on main)."
    )
    seed: int | None = Field(None, description="--seed.")
    wandb: bool = Field(False, description="--wandb.enable.")


class GrootOptions(TrainerOptions):
    """launch_finetune.py's own settings beyond the preset's common fields."""

    package = "gr00t"
    checkout: ClassVar[Checkout] = Checkout("Isaac-GR00T", "gr00t/configs/finetune_config.py")

    base_model_path: str | None = Field(
        None, description="--base-model-path: the GR00T checkpoint to fine-tune (hub id or folder)."
    )
    embodiment_tag: str | None = Field(
        None, description="--embodiment-tag, e.g. NEW_EMBODIMENT (with modality_config_path) for a new robot."
    )
    modality_config_path: str | None = Field(
        None, description="--modality-config-path: the modality config of a new embodiment."
    )
    script: str = Field(
        "gr00t/experiment/launch_finetune.py", description="The fine-tuning script, relative to launch.workdir."
    )
    uv: bool = Field(False, description="Start it with `uv run`.")
    tune_llm: bool = Field(False, description="--tune-llm: also train the language model.")
    tune_visual: bool = Field(False, description="--tune-visual: also train the vision encoder.")
    save_steps: int | None = Field(None, gt=0, description="--save-steps: steps between checkpoints.")
    dataloader_num_workers: int | None = Field(None, ge=0, description="--dataloader-num-workers.")
    use_wandb: bool = Field(False, description="--use-wandb.")


class OpenpiOptions(TrainerOptions):
    """openpi's own settings beyond the preset's common fields."""

    package = "openpi"
    checkout: ClassVar[Checkout] = Checkout("openpi", "src/openpi/training/config.py")

    config_name: str | None = Field(None, description="The TrainConfig to train, e.g. pi05_libero.")
    backend: Literal["jax", "pytorch"] = Field(
        "jax", description="jax (scripts/train.py) or pytorch (scripts/train_pytorch.py under torchrun)."
    )
    exp_name: str | None = Field(None, description="--exp-name; null: the preset name.")
    fsdp_devices: int | None = Field(
        None, gt=0, description="--fsdp-devices: devices each parameter is sharded over (JAX)."
    )
    torch_weights: str | None = Field(
        None,
        min_length=1,
        description="--pytorch-weight-path: a folder with model.safetensors (examples/convert_jax_model_to_pytorch.py) "
        "that PyTorch runs start from; null: the config's own.",
    )
    uv: bool = Field(True, description="Start it with `uv run` (the checkout's .venv is the training interpreter).")
    mem_fraction: float = Field(0.9, gt=0, le=1, description="XLA_PYTHON_CLIENT_MEM_FRACTION (JAX).")
    overwrite: bool | None = Field(
        None,
        description="--overwrite (true) or --no-overwrite (false) an existing checkpoint folder; null: as configured.",
    )
    log_interval: int | None = Field(None, gt=0, description="--log-interval: steps between loss lines.")
    save_interval: int | None = Field(None, gt=0, description="--save-interval: steps between checkpoints.")
    wandb: bool = Field(False, description="--wandb-enabled.")


class HfOptions(TrainerOptions):
    """The training script and what it needs beyond TrainingArguments."""

    package = "transformers"

    script: str | None = Field(None, description="The HF Trainer training script, relative to launch.workdir.")
    script_args: list[str] = Field(
        [], description="The script's own arguments (model, data), before gpuwizard's TrainingArguments."
    )
    report_to: str = Field("none", description="--report_to.")
    lr_scheduler_type: Literal["linear", "cosine", "constant", "constant_with_warmup"] = Field(
        "linear", description="--lr_scheduler_type: the decay after the warmup (constant ignores the warmup)."
    )
    logging_steps: int | None = Field(
        None, gt=0, description="--logging_steps: steps between loss lines; null: the Trainer's own 500."
    )
    eval_split_flag: str | None = Field(
        None,
        pattern=r"^--[A-Za-z0-9_.-]+$",
        description="The script's own flag that takes dataset.eval_split: the script holds out that fraction of its "
        "data as the Trainer's eval_dataset; gpuwizard then adds --eval_strategy steps and --eval_steps at the log "
        "period, so eval_loss is logged beside each loss line. Null: the script is given no held-out split.",
    )


class RankStep(TrainerOptions):
    """One rank at one step."""

    rank: int = Field(ge=0, description="The rank.")
    step: int = Field(gt=0, description="The step.")


class DemoOptions(TrainerOptions):
    """Knobs of the built-in demo trainer, mostly for reproducing faults."""

    package = "gpuwizard"

    inject_hang: RankStep | None = Field(
        None, description="Make one rank stop entering collectives at a step (a real hang)."
    )
    inject_crash: RankStep | None = Field(None, description="Make one rank exit with an error at a step.")
    inject_nan: int | None = Field(None, gt=0, description="From this step on the loss is NaN (a diverged run).")
    step_time_s: float = Field(0.0, ge=0, le=3600, description="Extra seconds per step (a slow job).")
    checkpoint_time_s: float = Field(0.0, ge=0, le=3600, description="Extra seconds per checkpoint.")
    log_every: int = Field(10, gt=0, description="Steps between log lines.")
    save_every: int | None = Field(None, gt=0, description="Steps between checkpoints; null: only at the end.")
    episodes: int = Field(20, gt=0, le=100_000, description="Episodes in the synthetic dataset.")
    seed: int = Field(
        0, ge=0, le=2**31 - 1, description="--seed: the initial weights and each rank's sampling (a sweep's seeds)."
    )
    ignore_lr_flag: bool = Field(False, description="Train at a fixed lr whatever --lr says (to test the lr check).")
    task: Literal["policy", "noise"] = Field(
        "policy",
        description="policy: the demo policy on its dataset; noise: linear regression with Gaussian inputs and label "
        "noise, whose gradient noise scale is known in closed form: (d + 1) + sigma^2 d / offset^2.",
    )
    noise_dim: int = Field(4, gt=0, le=4096, description="The noise task's input dimension d.")
    noise_sigma: float = Field(1.0, gt=0, le=1000, description="The noise task's label noise (standard deviation).")
    noise_offset: float = Field(
        0.25, gt=0, le=1000, description="The noise task starts at this distance |w - w*| from the best weights."
    )
    noise_hold: bool = Field(
        True,
        description="The noise task puts its weights back after every step, so each step measures the gradient at "
        "the same point and the noise scale stays at its closed form; false: it trains (SGD).",
    )
    device_memory_mb: float | None = Field(
        None,
        gt=0,
        description="Pretend each device holds this many MB (the demo needs 2 MB per sample of its batch): a larger "
        "batch fails with the allocator's own out-of-memory error, to try the probe's batch search.",
    )


OPTIONS: dict[str, type[TrainerOptions]] = {
    "lerobot": LeRobotOptions,
    "groot": GrootOptions,
    "openpi": OpenpiOptions,
    "hf": HfOptions,
    "demo": DemoOptions,
}
"""Each trainer's options model, by its name in trainer_names.TRAINERS."""
