"""Any Hugging Face Trainer script: the trainer is in trainer.py; this package only exports it."""

from gpuwizard.trainers.hf.trainer import TRAINER, HfTrainer

__all__ = ["TRAINER", "HfTrainer"]
