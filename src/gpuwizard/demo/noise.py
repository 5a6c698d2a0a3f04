"""The demo's task with a known gradient noise scale, so a measurement can be held against the truth: linear
regression y = x.w* + e with x ~ N(0, I_d), e ~ N(0, sigma^2), loss 0.5 (x.w - y)^2 averaged over the batch.

At w = w* + D the per-sample gradient is g = x (x.D - e), so G = E[g] = D and, by Isserlis' theorem,
E[g g^T] = |D|^2 I + 2 D D^T + sigma^2 I; hence tr(Sigma) = (d + 1)|D|^2 + sigma^2 d and
B_simple = tr(Sigma) / |G|^2 = (d + 1) + sigma^2 d / |D|^2."""

from __future__ import annotations

import torch

SEED = 1234


def closed_form(dim: int, sigma: float, offset: float) -> float:
    """B_simple at |w - w*| = offset (the module docstring derives it)."""
    return (dim + 1) + sigma**2 * dim / offset**2


class NoiseRegression(torch.nn.Module):
    """The linear model, started at w* + offset along a fixed random direction."""

    def __init__(self, dim: int, offset: float):
        super().__init__()
        g = torch.Generator().manual_seed(SEED)
        self.w_star = torch.randn(dim, generator=g)
        direction = torch.randn(dim, generator=g)
        self.start = self.w_star + offset * direction / direction.norm()
        self.w = torch.nn.Parameter(self.start.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w

    def batch(self, size: int, sigma: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh samples every step: inputs and their noisy labels."""
        x = torch.randn(size, len(self.w_star), generator=generator)
        return x, x @ self.w_star + sigma * torch.randn(size, generator=generator)

    @torch.no_grad()
    def hold(self) -> None:
        """Put the weights back where they started: every step then measures the gradient at the same point."""
        self.w.copy_(self.start.to(self.w.device))
