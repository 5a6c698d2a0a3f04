"""LeRobot's lerobot-train: the trainer is in trainer.py; this package only exports it."""

from gpuwizard.trainers.lerobot.trainer import TRAINER, LeRobotTrainer

__all__ = ["TRAINER", "LeRobotTrainer"]
