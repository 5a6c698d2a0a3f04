"""The built-in demo trainer: the trainer is in trainer.py; this package only exports it."""

from gpuwizard.trainers.demo.trainer import TRAINER, DemoTrainer

__all__ = ["TRAINER", "DemoTrainer"]
