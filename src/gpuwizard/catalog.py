"""The policy catalog, read from policies.yaml (shipped) merged with the user's own file."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from typing import Annotated, Any, Literal

from msgspec import Meta

from gpuwizard import paths, yamlio
from gpuwizard.errors import UserError, problem
from gpuwizard.schema import FieldError, Strict, convert


class Vram(Strict):
    full_gb: Annotated[float, Meta(gt=0)]
    at_batch: Annotated[int, Meta(gt=0)]
    precision: Literal["fp32", "bf16", "fp16"] = "bf16"
    fixed_fraction: Annotated[float, Meta(ge=0, le=1)] = 0.5
    lora_gb: float | None = None


class LeRobotPolicyFacts(Strict):
    scheduler: Literal["none", "diffuser", "cosine_decay_with_warmup"] = "none"
    warmup_steps: int | None = None
    decay_steps: int | None = None
    decay_lr: float | None = None
    dtype_field: bool = False
    optimizer: dict[str, Any] = {}


class OpenpiPolicyFacts(Strict):
    warmup_steps: int = 1000


class TrainingTime(Strict):
    hours: float
    setting: str


class PolicyEntry(Strict, kw_only=True):
    """What gpuwizard knows about one policy; see the header of policies.yaml."""

    key: str = ""
    title: str
    summary: str = ""
    params_m: float | None = None
    vram: Vram
    trainers: list[str]
    default_lr: dict[str, float] = {}
    lerobot: LeRobotPolicyFacts | None = None
    openpi: OpenpiPolicyFacts | None = None
    fsdp_wrap_units: list[str] | None = None
    fsdp_supported: bool = True
    base_ids: dict[str, str] = {}
    single_gpu_hours: TrainingTime | None = None
    inference_ms: dict[str, float] | None = None
    sources: dict[str, str] = {}

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


def _read(path: Any) -> dict[str, Any]:
    data = yamlio.load_file(path)
    if not isinstance(data, dict):
        raise UserError(problem(None, "a policy catalog must be a YAML mapping of policy keys to entries", "see the header of the shipped policies.yaml"), str(path))
    return data


@functools.lru_cache(maxsize=1)
def load_catalog() -> dict[str, PolicyEntry]:
    """Shipped catalog, with entries from <config>/policies.yaml added or overriding by key."""
    raw = _read(paths.PACKAGE_DIR / "policies.yaml")
    user_file = paths.config_dir() / "policies.yaml"
    if user_file.is_file():
        for key, entry in _read(user_file).items():
            raw[key] = {**raw.get(key, {}), **entry} if isinstance(entry, dict) else entry
    catalog = {}
    for key, entry in raw.items():
        if not isinstance(entry, dict):
            raise UserError(problem(key, "a catalog entry must be a mapping (title, vram, trainers, ...)", "see the header of the shipped policies.yaml", value=entry), str(user_file))
        try:
            catalog[key] = convert({**entry, "key": key}, PolicyEntry)
        except FieldError as exc:
            found = exc.problem
            raise UserError(replace(found, field=f"{key}.{found.field}" if found.field else key), str(user_file)) from None
    return catalog
