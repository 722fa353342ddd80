"""FFJORD's `8gaussians` toy density, generated in code from the model's seed."""

from __future__ import annotations

import math

import torch

from .base import DATA_SOURCES, ToyDensity

_DIAGONAL = 1 / math.sqrt(2)
# Eight centres on a circle of radius 4; the points are then divided by 1.414, as in FFJORD's toy_data.py.
_CENTRES = 4.0 * torch.tensor(
    [(1, 0), (-1, 0), (0, 1), (0, -1)]
    + [(_DIAGONAL, _DIAGONAL), (_DIAGONAL, -_DIAGONAL), (-_DIAGONAL, _DIAGONAL), (-_DIAGONAL, -_DIAGONAL)]
)


def eight_gaussians(rows: int, generator: torch.Generator) -> torch.Tensor:
    which = torch.randint(len(_CENTRES), (rows,), generator=generator)
    return (torch.randn(rows, 2, generator=generator) * 0.5 + _CENTRES[which]) / 1.414


DATA_SOURCES.register(
    ToyDensity("8gaussians", "FFJORD's eight-Gaussians toy density (a circle of 8), generated in code", eight_gaussians)
)
