"""A small MLP vector field with a batch sampler, for the benches that need a model other than the built-in ones
(`bench/noise_uncertainty.py`): dy/dt = MLP(t, y) on points of dimension `d`, loss = mean squared distance of y(1)
from a fixed rotation of y(0); batch k is its own N(0, I) draw.

    roundoff sweep --model bench/mlp_field.py:mlp_field --timesteps 8,32
"""

from __future__ import annotations

import math

import torch
from torch import nn


class MLPField(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d + 1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.out = nn.Linear(hidden, d)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        time = t.expand(y.shape[0], 1).to(y.dtype)
        return self.out(self.net(torch.cat([time, y], dim=1)))


def mlp_field(d: int = 2, hidden: int = 14, batch: int = 64, seed: int = 0):
    """(func, y0, loss, sample_batch): two tanh layers of `hidden` units, 296 parameters at the defaults."""
    func = MLPField(d, hidden)
    angle = torch.tensor(math.pi / 3)
    rotation = torch.eye(d)
    rotation[:2, :2] = torch.stack([torch.stack([angle.cos(), -angle.sin()]), torch.stack([angle.sin(), angle.cos()])])

    def sample_batch(k: int) -> torch.Tensor:
        return torch.randn(batch, d, generator=torch.Generator().manual_seed(seed * 100_003 + k))

    def loss(trajectory: torch.Tensor) -> torch.Tensor:
        start, end = trajectory[0], trajectory[-1]
        return ((end - start @ rotation.to(start.dtype).T) ** 2).sum(dim=1).mean()

    return func, sample_batch(0), loss, sample_batch
