"""Kahan-compensated updates: what rounding the sum dropped is kept in a buffer of the weights' format and added to
the next step's update, so that a run of updates each below half a unit in the last place still moves the weight."""

from __future__ import annotations

import torch

from ...emulation import NumberFormat
from ...emulation.rounding import round_nearest


def compensated_sum(
    w: torch.Tensor, delta: torch.Tensor, compensation: torch.Tensor, fmt: NumberFormat, rounded
) -> torch.Tensor:
    """`rounded(w + delta + compensation)`; the compensation becomes what that rounding dropped,
    rounded to nearest in `fmt`."""
    exact = w + (delta + compensation)
    new = rounded(exact)
    compensation.copy_(round_nearest(exact - new, fmt))
    return new
