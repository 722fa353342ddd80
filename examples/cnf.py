"""A continuous normalizing flow as a user writes it: the state is the pair (z, log-density change), integrated from
t1 back to t0, with the trace of the Jacobian computed exactly by autograd inside the vector field.

    roundoff sweep --model examples/cnf.py:cnf --timesteps 8,32 --per-module

The vector field is a small hypernetwork (its weights depend on t) driving planar units; the loss is the negative
log-likelihood of data points under a standard normal base density pulled back through the flow. The factory at the
end gives the sweep the training step and its batches.
"""

from __future__ import annotations

import math

import torch
from torch import nn

import roundoff_analyzer as ra


class HyperPlanar(nn.Module):
    """dz/dt = mean_i u_i tanh(w_i . z + b_i), with (w, u, b) made from t by a small network."""

    def __init__(self, dimension: int = 2, hidden: int = 32, width: int = 64) -> None:
        super().__init__()
        self.dimension, self.width = dimension, width
        self.hyper = nn.Sequential(
            nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, width * (2 * dimension + 1)),
        )  # fmt: skip

    def forward(self, t: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        z, _ = state
        # A solver that runs its forward without autograd (the adjoint, the native solver) hands states that are not
        # on any graph: the trace then needs a z of its own.
        on_graph = torch.is_grad_enabled() and z.requires_grad
        with torch.enable_grad():
            z = z if on_graph else z.detach().requires_grad_(True)
            params = self.hyper(t.reshape(1, 1).to(z.dtype)).reshape(self.width, 2 * self.dimension + 1)
            w, u, b = params[:, : self.dimension], params[:, self.dimension : -1], params[:, -1]
            dz_dt = torch.tanh(z @ w.t() + b) @ u / self.width
            trace = sum(
                torch.autograd.grad(dz_dt[:, i].sum(), z, create_graph=True)[0][:, i] for i in range(self.dimension)
            )
        return dz_dt, -trace.reshape(-1, 1)


def circles(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Points on two noisy concentric circles."""
    angle = 2 * math.pi * torch.rand(batch, generator=generator)
    radius = torch.where(torch.rand(batch, generator=generator) < 0.5, 0.5, 1.0)
    points = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], dim=1)
    return points + 0.05 * torch.randn(points.shape, generator=generator)


# What a user writes to sweep it: the training step and the batches (batch k drawn with a seed of its own).
def cnf(batch: int = 256, hidden: int = 32, width: int = 64, t1: float = 10.0, seed: int = 0) -> ra.Problem:
    def step(model: HyperPlanar, x: torch.Tensor, odeint) -> torch.Tensor:
        z, log_density_change = odeint(model, (x, torch.zeros_like(x[:, :1])), torch.tensor([t1, 0.0]))
        log_base = -0.5 * (z[-1] ** 2).sum(dim=1) - math.log(2 * math.pi)  # standard normal in 2-D
        return -(log_base - log_density_change[-1].squeeze(1)).mean()

    def sample_batch(k: int) -> torch.Tensor:
        return circles(batch, torch.Generator().manual_seed(seed * 1_000_003 + k))

    return ra.Problem(model=HyperPlanar(2, hidden, width), step=step, sample_batch=sample_batch)
