"""A user's own model for `roundoff sweep`: a damped oscillator with a small learned correction.

    roundoff sweep --model examples/damped_oscillator.py:damped_oscillator -o damping=0.3 --timesteps 8,32

The factory's keyword parameters are the model's options (`-o frequency=3`); their annotations say
how the strings from the command line are converted. It returns (func, y0, loss).
"""

from __future__ import annotations

import torch
from torch import nn


class DampedOscillator(nn.Module):
    """d/dt (x, v) = (v, -frequency^2 x - damping v) + correction(x, v)."""

    def __init__(self, frequency: float, damping: float, hidden: int) -> None:
        super().__init__()
        self.frequency = frequency
        self.damping = damping
        self.correction = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        position, velocity = y[:, :1], y[:, 1:]
        physics = torch.cat([velocity, -(self.frequency**2) * position - self.damping * velocity], dim=1)
        return physics + self.correction(y)


def damped_oscillator(frequency: float = 2.0, damping: float = 0.1, hidden: int = 16, batch: int = 32, seed: int = 0):
    """Damped oscillator plus a learned correction; loss = mean energy along the trajectory."""
    # roundoff calls this after torch.manual_seed(seed), so nn.Linear's initial weights are reproducible too.
    func = DampedOscillator(frequency, damping, hidden)
    y0 = torch.randn(batch, 2, generator=torch.Generator().manual_seed(seed))

    def loss(trajectory: torch.Tensor) -> torch.Tensor:
        # trajectory: (N+1, batch, 2), every state of the solve.
        position, velocity = trajectory[..., 0], trajectory[..., 1]
        return 0.5 * (velocity**2 + frequency**2 * position**2).mean()

    return func, y0, loss
