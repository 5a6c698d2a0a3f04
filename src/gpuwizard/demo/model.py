"""A small visuomotor policy: conv image encoder + state MLP -> a chunk of future actions."""

from __future__ import annotations

import torch
from torch import nn

CHUNK = 10


class DemoPolicy(nn.Module):
    def __init__(self, dof: int = 6, hidden: int = 384):
        super().__init__()
        self.dof = dof
        self.vision = nn.Sequential(
            nn.Conv2d(3, 16, 5, stride=2, padding=2),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.state = nn.Sequential(nn.Linear(dof, 64), nn.ReLU())
        self.head = nn.Sequential(
            nn.Linear(128, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, dof * CHUNK),
        )

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        features = torch.cat([self.vision(image), self.state(state)], dim=-1)
        chunks: torch.Tensor = self.head(features).view(-1, CHUNK, self.dof)
        return chunks
