"""Trainer registry: every module in this package that defines TRAINER is a trainer."""

from __future__ import annotations

import functools
import importlib
import pkgutil

from gpuwizard.trainers.base import Trainer


@functools.lru_cache(maxsize=1)
def _registry() -> dict[str, Trainer]:
    found: dict[str, Trainer] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        trainer = getattr(module, "TRAINER", None)
        if isinstance(trainer, Trainer):
            found[trainer.name] = trainer
    order = ["lerobot", "groot", "openpi", "hf", "demo"]
    return dict(sorted(found.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))


def trainer_names() -> list[str]:
    return list(_registry())


def get_trainer(name: str) -> Trainer:
    return _registry()[name]


def all_trainers() -> list[Trainer]:
    return list(_registry().values())
