"""NVIDIA Isaac-GR00T's launch_finetune.py: the trainer is in trainer.py; this package only exports it."""

from gpuwizard.trainers.groot.trainer import TRAINER, GrootTrainer

__all__ = ["TRAINER", "GrootTrainer"]
