"""The demo's held-out episodes and their loss, in LeRobot main's form (lerobot 7427f31: datasets/factory.py
make_train_eval_datasets holds out the last ceil(n * eval_split) episodes of each task; scripts/lerobot_train.py
lines 761-805 log `step N: eval_loss=X`, the mean over the held-out batches, averaged across ranks)."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

EVAL_BATCH = 64


def held_out_frames(episode_index: np.ndarray, eval_split: float) -> tuple[np.ndarray, np.ndarray]:
    """Frame indices of the training and held-out episodes: the demo's dataset has one task, so the last
    ceil(n * eval_split) episodes are held out, none where eval_split is 0."""
    episodes = np.unique(episode_index)
    n_eval = math.ceil(len(episodes) * eval_split)
    if n_eval >= len(episodes):
        raise SystemExit(f"eval_split={eval_split} leaves 0 training episodes from {len(episodes)} total.")
    held = np.isin(episode_index, episodes[len(episodes) - n_eval :]) if n_eval else np.zeros(len(episode_index), bool)
    return np.flatnonzero(~held), np.flatnonzero(held)


def eval_loss(
    model: torch.nn.Module,
    frames: torch.Tensor,
    data: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    device: torch.device,
    rank: int,
    world: int,
) -> float:
    """The mean loss over this rank's share of the held-out frames, averaged across ranks as LeRobot main does."""
    images, states, targets = data
    mine = frames[rank::world]
    total, batches = 0.0, 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(mine), EVAL_BATCH):
            idx = mine[start : start + EVAL_BATCH]
            image = images[idx].to(device).float().div_(255.0)
            total += F.mse_loss(model(image, states[idx].to(device)), targets[idx].to(device)).item()
            batches += 1
    model.train()
    mean = torch.tensor([total / max(batches, 1)], device=device)
    if dist.is_initialized():
        dist.all_reduce(mean)
        mean /= world
    return float(mean.item())
