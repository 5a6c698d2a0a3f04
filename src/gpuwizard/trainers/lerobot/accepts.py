"""What the installed LeRobot accepts, asked of its own config classes (check script lerobot_config.py): the policy
types it registers and the flags its TrainPipelineConfig parses, so that gpuwizard neither refuses a policy the
trainer ships nor adds a flag the trainer would refuse (LeRobot 0.7 renamed --wandb.* to --trackio.*)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from gpuwizard.core.errors import Problem, note
from gpuwizard.model.catalog import PolicyEntry, uncatalogued
from gpuwizard.model.job import TrainerQuery
from gpuwizard.trainers.base import interpreter_missing
from gpuwizard.trainers.check import ask, check_script

OPTIONAL_FLAGS = (
    "wandb.enable",
    "log_freq",
    "save_freq",
    "eval_steps",
    "dataset.eval_split",
    "env_eval_freq",
    "accelerator.mixed_precision",
    "parallelism.dp_shard",
)
"""Flags gpuwizard adds on its own (tracker, periods, held-out loss, precision, parallelism): left out, with a note,
where the installed config has no such field; the batch, steps, lr and paths stay, and draccus says if they fail."""
POLICY_OPTIONAL = ("use_amp", "dtype", "use_bf16")
"""Precision fields of the policy's own config (--policy.<name>), left out where that config lacks them."""


@dataclass(frozen=True)
class Accepts:
    """The installed LeRobot's answer: its parser, policy types, TrainPipelineConfig fields and policy fields."""

    parser: str
    policies: tuple[str, ...]
    fields: frozenset[str]
    policy_fields: dict[str, frozenset[str]]
    policy_lrs: dict[str, float]

    def takes(self, flag: str, policy: str) -> bool:
        """Whether --flag=... (no dashes) parses here: a gpuwizard-added flag the config lacks is left out."""
        if flag.startswith("policy."):
            name = flag.removeprefix("policy.")
            known = self.policy_fields.get(policy)
            return name not in POLICY_OPTIONAL or known is None or name in known
        return flag not in OPTIONAL_FLAGS or flag in self.fields


@functools.lru_cache(maxsize=16)
def _asked(python: str, pythonpath: str) -> Accepts | None:
    if interpreter_missing(python):
        return None
    query = TrainerQuery(argv=[python, check_script("lerobot_config.py")], expected={}, timeout_s=120.0)
    answer, _, _ = ask(query, dict(os.environ))
    values = answer.values
    if answer.status != "parsed" or not isinstance(values.get("policies"), list):
        return None
    return Accepts(
        answer.parser or "lerobot-train",
        tuple(str(p) for p in values["policies"]),
        frozenset(str(f) for f in values.get("fields", [])),
        {str(k): frozenset(v) for k, v in dict(values.get("policy_fields", {})).items()},
        {str(k): float(v) for k, v in dict(values.get("policy_lrs", {})).items()},
    )


def installed_accepts(python: str, asks: bool) -> Accepts | None:
    """The installed LeRobot's answer (remembered per environment); None where it cannot be asked: no such
    interpreter, no lerobot in it, or an untrusted preset chose it (`asks` False)."""
    return _asked(python, os.environ.get("PYTHONPATH", "")) if asks else None


def without_unaccepted(args: list[str], accepts: Accepts | None, policy: str) -> tuple[list[str], list[str]]:
    """`args` less the gpuwizard-added flags the installed config does not parse, and those left out."""
    if accepts is None:
        return args, []
    kept: list[str] = []
    dropped: list[str] = []
    for arg in args:
        flag = arg.removeprefix("--").split("=", 1)[0]
        (kept if not arg.startswith("--") or accepts.takes(flag, policy) else dropped).append(arg)
    return kept, dropped


def dropped_notes(dropped: list[str], accepts: Accepts | None) -> list[Problem]:
    """One note per flag left out: what it would have set, and that the run goes on without it."""
    parser = accepts.parser if accepts else "lerobot-train"
    return [
        note(
            f"{arg} left out: {parser}'s config has no {arg.removeprefix('--').split('=', 1)[0]} field, so the "
            "run trains without it (pass the installed version's own flag in launch.extra_args)"
        )
        for arg in dropped
    ]


def shipped_policy(policy: str, accepts: Accepts | None, trainer: str) -> PolicyEntry | str | None:
    """`policy` as the installed LeRobot's PreTrainedConfig choice registry has it: an entry with its config's lr and
    unknown memory; a str naming the types it has where it lacks the name too; None where it cannot be asked."""
    if accepts is None:
        return None
    if policy not in accepts.policies:
        return f"{accepts.parser} registers {', '.join(accepts.policies)}"
    return uncatalogued(policy, trainer, accepts.parser, accepts.policy_lrs.get(policy))
