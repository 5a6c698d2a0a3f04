"""The types the planner and the trainers share: the batch layout, the plan, the build context, the launch spec.

Both sides import them from here, so neither imports the other for its types.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from gpuwizard.core.errors import Problem
from gpuwizard.core.kinds import ProblemLevel
from gpuwizard.core.secrets import is_secret, redacted, redacted_argv

if TYPE_CHECKING:
    from gpuwizard.model.catalog import PolicyEntry
    from gpuwizard.model.preset import Preset


@dataclass(frozen=True)
class DetectedDevices:
    """What the plan knows about the devices found here: detected, or unknown."""

    gpu_count: int = 0
    memory_gb: float | None = None
    name: str | None = None
    source: str = "none"


@dataclass(frozen=True)
class BatchLayout:
    """What the batch number means on `world` data-parallel devices."""

    world: int
    per_device: int | None
    effective: int | None
    error: str | None = None


@dataclass
class LaunchSpec:
    """Exactly what `run` executes: argv, environment changes, working directory."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    workdir: str = "."

    def shell(self) -> str:
        """One copy-pasteable line (display only; never executed through a shell); a secret is read from your shell."""
        parts = [f"cd {shlex.quote(self.workdir)} &&"]
        if self.unset:
            parts.append("env " + " ".join(f"-u {shlex.quote(n)}" for n in self.unset))
        parts.extend(f'{k}="${k}"' if is_secret(k, v) else f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        parts.append(shlex.join(redacted_argv(self.argv)))
        return " ".join(parts)

    def script(self) -> str:
        """A standalone bash script that runs the same command."""
        lines = [
            "#!/usr/bin/env bash",
            "# Written by gpuwizard.",
            "set -euo pipefail",
            f"cd {shlex.quote(self.workdir)}",
        ]
        lines += [f"unset {shlex.quote(n)}" for n in self.unset]
        lines += [
            f'export {k}="${{{k}:?set {k} in your environment}}"' if is_secret(k, v) else f"export {k}={shlex.quote(v)}"
            for k, v in self.env.items()
        ]
        lines.append("exec " + " \\\n  ".join(shlex.quote(a) for a in self.argv))
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        """As shown and written to run folders: secret values redacted."""
        return {
            "argv": redacted_argv(self.argv),
            "env": redacted(self.env),
            "unset": self.unset,
            "workdir": self.workdir,
            "shell": self.shell(),
        }

    def full_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        for name in self.unset:
            env.pop(name, None)
        env.update(self.env)
        return env


@dataclass
class TrainerQuery:
    """How to ask the installed trainer what it will do with a command, without training (`gpuwizard check`).

    `argv` runs a check script (trainers/check/scripts/) in the training interpreter; it prints the values the trainer's
    own parser resolved, which are compared with `expected`, the plan's values in the trainer's units, by key
    (trainercheck.LABELS lists the shared keys)."""

    argv: list[str]
    expected: dict[str, Any]
    cwd: str = "."
    env: dict[str, str] = field(default_factory=dict)
    """Set on top of the job's own environment."""
    labels: dict[str, str] = field(default_factory=dict)
    """Words after a value in the summary, e.g. lr: "on the logged group"."""
    fixes: dict[str, str] = field(default_factory=dict)
    """The fix for a mismatch of one key, where the trainer module knows it."""
    timeout_s: float = 180.0


@dataclass
class BuildContext:
    """Everything a trainer needs to check and build its command."""

    preset: Preset
    plan: Plan
    policy: PolicyEntry
    python: str
    workdir: str
    output_dir: str
    resume: bool = False
    """Continue from the last checkpoint in output_dir, in the trainer's own resume form."""

    @property
    def output_path(self) -> Path:
        """The folder the trainer writes to (a relative output_dir is under the job's working directory)."""
        return Path(self.workdir, os.path.expanduser(self.output_dir))


@dataclass(frozen=True)
class BatchRow:
    """One process count of the plan's batch table: what the batch flag means there."""

    gpus: int
    per_device: int | None
    effective: int | None
    error: str | None
    """Why the batch does not divide among this many processes."""
    chosen: bool
    """The preset's own count."""


Basis = Literal["measured", "probed", "published", "assumed", "unknown"]
"""Where an estimate's figure comes from; assumed: scaled from another count with an assumed efficiency."""


@dataclass
class Estimate:
    """Wall time, GPU-hours and cost on one process count of the batch table (planning/estimates.py)."""

    gpus: int
    samples: int | None
    wall_h: float | None
    gpu_hours: float | None
    cost: float | None
    source: str
    basis: Basis
    steps: int | None = None
    per_device: int | None = None
    """Samples per GPU (or process) per step."""
    note: str | None = None
    """How a published time became this row's, in words (the published row only)."""


@dataclass
class Fit:
    fits: bool | None
    estimate_gb: float
    device_gb: float | None
    device_source: str
    sharded_estimate_gb: float | None = None


@dataclass
class Plan:
    """Everything resolved from a preset on a given GPU count."""

    trainer: str
    policy: str
    world_size: int
    nodes: int
    processes_per_node: int
    device: Literal["cpu", "cuda"]
    per_device_batch: int | None
    effective_batch: int | None
    reference_gpus: int
    reference_effective_batch: int | None
    scale_factor: float | None
    rule: str
    base_lr: float
    lr: float
    base_steps: int
    steps: int
    """Optimizer updates, whatever the trainer's own steps count."""
    trainer_steps: int
    """What the trainer's steps flag gets: `steps` x `trainer_steps_per_update`."""
    trainer_steps_per_update: int
    """The trainer's own steps in one optimizer update (LeRobot main counts micro-batches)."""
    samples_seen: int | None
    """Samples the whole run trains on: steps x effective batch."""
    warmup_steps: int | None
    warmup_source: str
    strategy: str
    fits: Fit
    batch_meaning: str
    batch_flag: str
    batch_table: list[BatchRow]
    dataset: dict[str, Any] | None
    advice: list[str]
    estimates: list[Estimate] = field(default_factory=list)
    """Per GPU count of the batch table: wall time, GPU-hours, cost and where each figure comes from."""
    epochs: float | None = None
    """Passes over the dataset's frames (samples seen / frames) where its metadata is here to count them."""
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.level == ProblemLevel.ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.level == ProblemLevel.WARNING]

    @property
    def notes(self) -> list[Problem]:
        return [p for p in self.problems if p.level == ProblemLevel.NOTE]

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if k != "problems"}
        data["fits"] = asdict(self.fits)
        data["warnings"] = [p.paragraph() for p in self.warnings]
        data["notes"] = [p.paragraph() for p in self.notes]
        data["errors"] = [p.paragraph() for p in self.errors]
        return data


def first_on_pythonpath(folder: Path, env: dict[str, str]) -> dict[str, str]:
    """The job's environment with `folder` first on PYTHONPATH; the PYTHONPATH the job already sets (or, without
    one, this shell's) follows it, so nothing found there is lost."""
    inherited = env.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    return env | {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), inherited) if p)}
