"""What two runs on the same GPU count were started with, side by side: the settings, trainer and machine in which
they differ, from their folders (plan.json, preset.yaml, environment.json), for `compare`'s run-to-run words."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuwizard.core.secrets import redacted
from gpuwizard.core.units import device_unit
from gpuwizard.runs.records import Environment, PlanSummary, RecordError
from gpuwizard.runs.rundir import RunDir

if TYPE_CHECKING:
    from gpuwizard.model.preset import Preset

PLAN_LABELS = {
    "device": "device",
    "per_device_batch": "batch per {unit}",
    "lr": "lr",
    "steps": "steps",
    "warmup_steps": "warmup steps",
    "rule": "scaling rule",
    "strategy": "strategy",
    "trainer": "trainer",
    "policy": "policy",
}
"""The plan's resolved values (the lr after scaling, the strategy auto chose), not the preset's inputs."""
PRESET_SKIPPED = ("version", "name", "description", "output_dir", "monitor", "costs", "optim", "scaling")
"""Preset keys that name or price a run, or that the plan's resolved values above already cover."""
PRESET_SKIPPED_DOTTED = (
    "trainer",
    "policy",
    "strategy",
    "batch.size",
    "hardware.gpus",
    "hardware.nodes",
    "hardware.node_rank",
    "hardware.rdzv_endpoint",
    "launch.master_port",
)
MACHINE_LABELS = {
    "hostname": "machine",
    "python": "python",
    "torch": "torch",
    "trainer_version": "trainer version",
    "driver": "NVIDIA driver",
    "cuda": "CUDA",
}


def run_settings(run: RunDir, plan: PlanSummary, preset: Preset | None) -> dict[str, dict[str, str]]:
    """The run's settings by source (plan, preset, machine); a source its folder does not hold is left out (unknown,
    which is not a difference)."""
    unit = device_unit(plan.device)
    settings = {"plan": {label.format(unit=unit): shown(getattr(plan, key)) for key, label in PLAN_LABELS.items()}}
    if preset is not None:
        data = preset.model_dump(mode="json")
        data["launch"]["env"] = redacted(data["launch"]["env"])  # never a secret in the words, even if one was kept
        flat = dict(flattened({k: v for k, v in data.items() if k not in PRESET_SKIPPED}))
        settings["preset"] = {k: v for k, v in flat.items() if k not in PRESET_SKIPPED_DOTTED}
        settings["name"] = {"preset": preset.name}
    try:
        env = run.read("environment.json", Environment)
    except RecordError:
        return settings
    settings["machine"] = {label: shown(getattr(env, key)) for key, label in MACHINE_LABELS.items()}
    return settings


def flattened(data: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out += flattened(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", shown(value)))
    return out


def shown(value: Any) -> str:
    if value is None or value in ({}, []):
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return " ".join(map(str, value))
    return str(value)


def differences(other: dict[str, dict[str, str]], reference: dict[str, dict[str, str]]) -> list[str]:
    """'lr 0.001 against 0.002' for each setting `other` has another value of, where both runs record the source;
    a trainer option only one run sets reads as the trainer's default on the other."""
    out = []
    for source in ("plan", "preset", "machine", "name"):
        if source not in other or source not in reference:
            continue
        mine, theirs = other[source], reference[source]
        for key in [*mine, *(k for k in theirs if k not in mine)]:
            absent = "default" if key.startswith("trainer_options.") else "none"
            a, b = mine.get(key, absent), theirs.get(key, absent)
            if a != b:
                out.append(f"{key} {a} against {b}")
    return out
