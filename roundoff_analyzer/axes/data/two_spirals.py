"""FFJORD's `2spirals` toy density, generated in code from the model's seed."""

from __future__ import annotations

import math

import torch

from .base import DATA_SOURCES, ToyDensity


def two_spirals(rows: int, generator: torch.Generator) -> torch.Tensor:
    # As in FFJORD's toy_data.py: one spiral arm of 1.5 turns, its mirror image, then noise.
    half = (rows + 1) // 2
    angle = torch.sqrt(torch.rand(half, 1, generator=generator)) * 540 * (2 * math.pi) / 360
    x = -torch.cos(angle) * angle + torch.rand(half, 1, generator=generator) * 0.5
    y = torch.sin(angle) * angle + torch.rand(half, 1, generator=generator) * 0.5
    arm = torch.cat([x, y], dim=1)
    points = torch.cat([arm, -arm])[:rows] / 3
    return points + torch.randn(rows, 2, generator=generator) * 0.1


DATA_SOURCES.register(ToyDensity("2spirals", "FFJORD's two-spirals toy density, generated in code", two_spirals))
