"""openpi's train.py and train_pytorch.py: the trainer is in trainer.py; this package only exports it."""

from gpuwizard.trainers.openpi.trainer import TRAINER, OpenpiTrainer

__all__ = ["TRAINER", "OpenpiTrainer"]
