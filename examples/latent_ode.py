"""A latent ODE as a user writes it: a recurrent encoder reads irregularly timed observations backwards in time, the
ODE carries the latent state forward through the same times, a decoder maps it back; the loss compares the decoded
trajectory with the observations.

    roundoff sweep --model examples/latent_ode.py:latent_ode --timesteps 8,32 --per-module

The model is the three modules; the factory at the end gives the sweep its training step and its batches. Every
parameter is measured: the encoder's and the decoder's as well as the vector field's.
"""

from __future__ import annotations

import math

import torch
from torch import nn

import roundoff_analyzer as ra


class RecurrentEncoder(nn.Module):
    """h <- tanh(W [x_k, dt_k, h]), from the last observation to the first; z0 = a linear read-out of the last h."""

    def __init__(self, observed: int, hidden: int, latent: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell = nn.Linear(observed + 1 + hidden, hidden)
        self.read_out = nn.Linear(hidden, latent)

    def forward(self, times: torch.Tensor, observations: torch.Tensor) -> torch.Tensor:
        h = observations.new_zeros(observations.shape[0], self.hidden)
        gaps = torch.diff(times, prepend=times[:1])
        for k in reversed(range(times.shape[0])):
            gap = gaps[k].expand(observations.shape[0], 1)
            h = torch.tanh(self.cell(torch.cat([observations[:, k], gap.to(h.dtype), h], dim=1)))
        return self.read_out(h)


class LatentDynamics(nn.Module):
    def __init__(self, latent: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(latent, hidden), nn.ELU(), nn.Linear(hidden, latent))

    def forward(self, t: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.net(z)


class LatentODE(nn.Module):
    def __init__(self, observed: int = 2, latent: int = 4, hidden: int = 32) -> None:
        super().__init__()
        self.encoder = RecurrentEncoder(observed, hidden, latent)
        self.func = LatentDynamics(latent, hidden)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.Tanh(), nn.Linear(hidden, observed))


def spirals(batch: int, n_obs: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Observations of `batch` spirals at `n_obs` irregular times in [0, 6] shared by the batch (noisy, 2-D)."""
    times = torch.sort(torch.rand(n_obs, generator=generator)).values * 6.0
    radius = 0.5 + torch.rand(batch, 1, generator=generator)
    phase = 2 * math.pi * torch.rand(batch, 1, generator=generator)
    angle = phase + times
    path = torch.stack([radius * torch.exp(-0.1 * times) * torch.cos(angle), radius * torch.sin(angle)], dim=-1)
    return times, path + 0.02 * torch.randn(path.shape, generator=generator)


# What a user writes to sweep it: the training step and the batches (batch k drawn with a seed of its own).
def latent_ode(batch: int = 32, n_obs: int = 12, hidden: int = 32, seed: int = 0) -> ra.Problem:
    def step(model: LatentODE, batch: tuple[torch.Tensor, torch.Tensor], odeint) -> torch.Tensor:
        times, observations = batch
        z = odeint(model.func, model.encoder(times, observations), times)  # (n_obs, batch, latent)
        return ((model.decoder(z) - observations.transpose(0, 1)) ** 2).mean()

    def sample_batch(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return spirals(batch, n_obs, torch.Generator().manual_seed(seed * 1_000_003 + k))

    return ra.Problem(model=LatentODE(hidden=hidden), step=step, sample_batch=sample_batch)
