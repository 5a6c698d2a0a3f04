"""The trainer registry: each name in model.trainer_names.TRAINERS is a folder of this package whose trainer.py
defines TRAINER, a Trainer of that name whose Options is the name's model in model.trainer_options.OPTIONS; a plan
imports only the trainer it uses."""

from __future__ import annotations

import functools
import importlib

from gpuwizard.model.job import BuildContext, LaunchSpec
from gpuwizard.model.trainer_names import trainer_names
from gpuwizard.model.trainer_options import OPTIONS
from gpuwizard.model.trust import is_trusted
from gpuwizard.trainers.base import Trainer
from gpuwizard.trainers.check import TrainerCheck, ask, compare

__all__ = ["check_command", "get_trainer", "trainer_names"]


@functools.cache
def get_trainer(name: str) -> Trainer:
    if name not in trainer_names():
        raise KeyError(name)
    trainer = importlib.import_module(f"gpuwizard.trainers.{name}.trainer").TRAINER
    if not isinstance(trainer, Trainer) or trainer.name != name or trainer.Options is not OPTIONS[name]:
        raise TypeError(
            f"gpuwizard.trainers.{name}.trainer.TRAINER must be a Trainer named {name!r} whose Options is "
            f"model.trainer_options.OPTIONS[{name!r}]"
        )
    return trainer


def check_command(ctx: BuildContext, spec: LaunchSpec, use_cache: bool = True) -> TrainerCheck:
    """The installed trainer's own reading of the command `spec`, against the plan in `ctx`; nothing is asked for a
    preset the user has not trusted (its interpreter and environment are someone else's choice)."""
    if not is_trusted(ctx.preset):
        return TrainerCheck(
            status="not checked",
            summary="not checked: this preset names an interpreter, environment or files you have not trusted, and "
            "nothing of it runs until you do (the wizard asks at ctrl+r; `gpuwizard presets trust PRESET`)",
        )
    query = get_trainer(ctx.preset.trainer).trainer_query(ctx, spec)
    if isinstance(query, str):
        return TrainerCheck(status="not checked", summary=f"not checked: {query}")
    answer, cached, seconds = ask(query, spec.full_env(), use_cache)
    return compare(answer, query, cached, seconds)
