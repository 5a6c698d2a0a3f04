"""The policy catalog, read from policies.yaml (shipped) merged with the user's own file."""

from __future__ import annotations

import functools
import math
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from gpuwizard.core import paths, yamlio
from gpuwizard.core.errors import UserError, problem, unknown
from gpuwizard.core.schema import Rules, Strict, problems_from
from gpuwizard.model.trainer_names import trainer_names


class Vram(Strict):
    """Measured or published peak training memory of one device."""

    full_gb: float = Field(gt=0, description="Peak GB per device at `at_batch`.")
    at_batch: int = Field(gt=0, description="Per-device batch the figure was taken at.")
    precision: Literal["fp32", "bf16", "fp16"] = Field("bf16", description="Precision the figure was taken in.")
    fixed_fraction: float = Field(
        0.5, ge=0, le=1, description="Share of the figure that does not grow with the batch (weights, optimizer state)."
    )
    lora_gb: float | None = Field(None, gt=0, description="Peak GB with LoRA, where published.")


class LeRobotPolicyFacts(Strict):
    """How LeRobot's policy config trains this policy."""

    scheduler: Literal["none", "diffuser", "cosine_decay_with_warmup"] = Field(
        "none", description="The policy preset's scheduler."
    )
    warmup_steps: int | None = Field(None, ge=0, description="The scheduler's warmup steps.")
    decay_steps: int | None = Field(None, gt=0, description="The scheduler's decay steps.")
    decay_lr: float | None = Field(None, ge=0, description="The lr at the end of the decay.")
    dtype_field: bool = Field(False, description="Whether the policy config has a dtype field.")
    dtype_choices: list[str] = Field(
        ["bfloat16", "float32"], description="The values the policy config's dtype field accepts (its __post_init__)."
    )
    bf16_flag: str | None = Field(
        None,
        description="A boolean policy field turning on the policy's own bf16 autocast; mixed_precision maps to it "
        "instead of AMP.",
    )
    optimizer: dict[str, Any] = Field({}, description="The policy preset's optimizer settings.")
    group_lrs: dict[str, float] = Field(
        {},
        description="Policy config fields holding the lr of a parameter group of its own (get_optim_params), with "
        "their defaults: scaled with the lr, and lost when the policy preset is bypassed.",
    )
    logged_group: str | None = Field(
        None,
        description="The parameter group lerobot-train logs the lr of (optimizer.param_groups[0]), where its lr is not "
        "optimizer_lr.",
    )
    logged_lr_scale: float = Field(1.0, gt=0, description="The logged group's lr as a share of optimizer_lr.")


class OpenpiConfig(Strict):
    """What one openpi TrainConfig does on its own; the defaults are openpi's (TrainConfig and CosineDecaySchedule in
    src/openpi/training/config.py and optimizer.py at Physical-Intelligence/openpi 15a9616). The fallback where the
    installed openpi cannot be asked (trainers/openpi/ asks it first)."""

    batch_size: int = Field(32, gt=0, description="The global batch the schedule was tuned for.")
    num_train_steps: int = Field(30_000, gt=0, description="The config's training steps.")
    peak_lr: float = Field(2.5e-5, gt=0, description="CosineDecaySchedule.peak_lr.")
    warmup_steps: int = Field(1_000, ge=0, description="CosineDecaySchedule.warmup_steps.")
    decay_steps: int = Field(30_000, gt=0, description="CosineDecaySchedule.decay_steps.")
    decay_lr: float = Field(2.5e-6, ge=0, description="CosineDecaySchedule.decay_lr.")
    model: Literal["pi0", "pi05", "pi0_fast"] | None = Field(
        None, description="The model type it trains (model.model_type); in the catalog, the policy it is listed under."
    )
    repo_id: str | None = Field(None, description="data.repo_id: the dataset it trains on unless told otherwise.")
    weights: str | None = Field(None, description="The JAX weight loader's params_path (null: random init).")
    pytorch_weight_path: str | None = Field(None, description="pytorch_weight_path (null: random init on PyTorch).")
    overwrite: bool = Field(False, description="Whether a fresh start wipes an existing checkpoint folder.")
    data: str | None = Field(None, description="The data config's class (LeRobotLiberoDataConfig, ...), where known.")
    log_interval: int = Field(100, gt=0, description="TrainConfig.log_interval: steps between log lines.")
    variant: str | None = Field(
        None,
        description="model.paligemma_variant where it is not the policy's Gemma ('dummy': the debug configs' tiny "
        "model, so the policy's size says nothing about what a process loads).",
    )


class OpenpiPolicyFacts(Strict):
    """How openpi trains this policy: its TrainConfigs, by config name."""

    configs: dict[str, OpenpiConfig] = Field({}, description="Known TrainConfig names and what each does.")


class TrainingTime(Strict):
    """A published single-GPU training time."""

    hours: float = Field(gt=0, description="Wall-clock hours.")
    setting: str = Field(description="On what card, batch and steps.")
    steps: int | None = Field(None, gt=0, description="Optimizer steps in that time, to scale it to another run.")
    batch: int | None = Field(None, gt=0, description="Samples per GPU per step in that setting.")


class PolicyEntry(Strict):
    """What gpuwizard knows about one policy; see the header of policies.yaml."""

    key: str = Field("", description="The policy's catalog key (filled in from the YAML key).")
    title: str = Field(description="Display name.")
    summary: str = Field("", description="One line about the policy.")
    params_m: float | None = Field(None, gt=0, description="Parameters, in millions.")
    vram: Vram = Field(description="Training memory per device.")
    trainers: list[str] = Field(description="Trainers that can train this policy.")
    default_lr: dict[str, float] = Field({}, description="Default lr per trainer.")
    lerobot: LeRobotPolicyFacts | None = Field(None, description="LeRobot's training preset for this policy.")
    openpi: OpenpiPolicyFacts | None = Field(None, description="openpi's training facts for this policy.")
    fsdp_wrap_units: list[str] | None = Field(None, description="Module classes FSDP wraps.")
    fsdp_supported: bool = Field(True, description="Whether the policy can be sharded with FSDP.")
    base_ids: dict[str, str] = Field({}, description="Base checkpoint id per trainer.")
    single_gpu_hours: TrainingTime | None = Field(None, description="A published single-GPU training time.")
    inference_ms: dict[str, float] | None = Field(None, description="Published inference latency per device.")
    sources: dict[str, str] = Field({}, description="Where each figure comes from.")
    memory_known: bool = Field(
        True, description="False for a policy the installed trainer registers and the catalog lacks: vram is no figure."
    )

    @field_validator("trainers", "default_lr", "base_ids")
    @classmethod
    def _registered(cls, named: list[str] | dict[str, Any]) -> list[str] | dict[str, Any]:
        """Every trainer named is one gpuwizard has: a misspelt one would never be offered, and no one would know."""
        names, rules = trainer_names(), Rules("catalog")
        for where, name in enumerate(named) if isinstance(named, list) else ((key, key) for key in named):
            if name not in names:
                rules.add((where,), unknown("unknown trainer", name, names), f"use one of {', '.join(names)}", name)
        rules.raise_any()
        return named

    def estimate_gb(self, per_device_batch: int, precision: str, shard_over: int = 1) -> float:
        """Peak memory per device: the fixed part (sharded by FSDP) plus activations scaled by batch."""
        fixed = self.vram.full_gb * self.vram.fixed_fraction
        activations = self.vram.full_gb - fixed
        per_sample = activations / self.vram.at_batch
        mixed = precision in ("bf16", "fp16")
        if self.vram.precision == "fp32" and mixed:
            per_sample *= 0.6
        elif self.vram.precision != "fp32" and not mixed:
            per_sample *= 1.7
            fixed *= 1.25
        estimate = fixed / max(shard_over, 1) + per_sample * per_device_batch
        return math.ceil(estimate * 10) / 10


UNKNOWN_VRAM = Vram(full_gb=1.0, at_batch=1, fixed_fraction=1.0)
"""A stand-in where nothing is known of a policy's memory (memory_known False): the plan says "unknown: probe it"."""


def uncatalogued(key: str, trainer: str, source: str, lr: float | None) -> PolicyEntry:
    """A policy the installed trainer registers (`source` names it) and the catalog lacks, planned with what is known:
    its config's default lr where it has one, its memory unknown until probed."""
    return PolicyEntry(
        key=key,
        title=key,
        summary=f"registered by {source}, not in gpuwizard's catalog",
        vram=UNKNOWN_VRAM,
        trainers=[trainer],
        default_lr={trainer: lr} if lr else {},
        memory_known=False,
        sources={"default_lr": f"{source}: the policy config's optimizer_lr default"} if lr else {},
    )


def openpi_config(catalog: dict[str, PolicyEntry], name: str) -> OpenpiConfig | None:
    """A TrainConfig by name from whichever policy lists it, its model type being that policy."""
    for key, entry in catalog.items():
        if entry.openpi and name in entry.openpi.configs:
            facts = entry.openpi.configs[name]
            return facts if facts.model else facts.model_copy(update={"model": key})
    return None


def _read(path: Any) -> dict[str, Any]:
    data = yamlio.load_file(path)
    if not isinstance(data, dict):
        raise UserError(
            problem(
                None,
                "a policy catalog must be a YAML mapping of policy keys to entries",
                "see the header of the shipped policies.yaml",
            ),
            str(path),
        )
    return data


@functools.lru_cache(maxsize=1)
def load_catalog() -> dict[str, PolicyEntry]:
    """Shipped catalog, with entries from <config>/policies.yaml added or overriding by key."""
    raw = _read(paths.PACKAGE_DIR / "model" / "policies.yaml")
    user_file = paths.config_dir() / "policies.yaml"
    if user_file.is_file():
        for key, entry in _read(user_file).items():
            raw[key] = {**raw.get(key, {}), **entry} if isinstance(entry, dict) else entry
    catalog, found = {}, []
    for key, entry in raw.items():
        if not isinstance(entry, dict):
            found.append(
                problem(
                    key,
                    "a catalog entry must be a mapping (title, vram, trainers, ...)",
                    "see the header of the shipped policies.yaml",
                    value=entry,
                )
            )
            continue
        try:
            catalog[key] = PolicyEntry.model_validate({**entry, "key": key})
        except ValidationError as exc:
            found += problems_from(exc, PolicyEntry, prefix=(key,))
    if found:
        raise UserError(found, str(user_file))
    return catalog
