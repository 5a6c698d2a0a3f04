"""Trainer registry: every module in this package except `base` and private helpers (`_*`, a trainer's own split-off
parts) defines TRAINER, named after the module."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from gpuwizard.trainers.base import Trainer

ORDER = ["lerobot", "groot", "openpi", "hf", "demo"]


@functools.lru_cache(maxsize=1)
def trainer_names() -> tuple[str, ...]:
    """Names from the module list alone, so a plan imports only the trainer it uses."""
    names = [info.name for info in pkgutil.iter_modules(__path__) if info.name != "base" and info.name[0] != "_"]
    return tuple(sorted(names, key=lambda n: ORDER.index(n) if n in ORDER else len(ORDER)))


@functools.cache
def get_trainer(name: str) -> Trainer:
    if name not in trainer_names():
        raise KeyError(name)
    trainer = importlib.import_module(f"{__name__}.{name}").TRAINER
    if not isinstance(trainer, Trainer) or trainer.name != name:
        raise TypeError(f"gpuwizard.trainers.{name}.TRAINER must be a Trainer named {name!r}")
    return trainer
