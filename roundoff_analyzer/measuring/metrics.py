"""Error metrics: pure functions of a run and its float64 reference."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def rel_err(value: torch.Tensor, reference: torch.Tensor) -> float:
    """||value - reference||_2 / ||reference||_2 in float64 (the absolute error when the reference is 0)."""
    value64 = value.detach().to(device="cpu", dtype=torch.float64)
    reference64 = reference.detach().to(device="cpu", dtype=torch.float64)
    difference = float(torch.linalg.vector_norm(value64 - reference64))
    scale = float(torch.linalg.vector_norm(reference64))
    return difference / scale if scale > 0 else difference


def norm(value: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(value.detach().to(device="cpu", dtype=torch.float64)))


def flatten(tensors: Sequence[torch.Tensor], device: torch.device | str = "cpu") -> torch.Tensor:
    flat = [t.detach().reshape(-1).to(device=device, dtype=torch.float64) for t in tensors]
    return torch.cat(flat) if flat else torch.zeros(0, device=device)


def joined(tensors: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """One tensor standing for several, for an error over all of them: the tensor itself where there is one (its error
    computed as it always was), their flat float64 concatenation where there are more, None where there are none."""
    if len(tensors) == 1:
        return tensors[0]
    return flatten(tensors) if tensors else None


def all_finite(tensors: Sequence[torch.Tensor | None]) -> bool:
    return all(t is None or bool(torch.isfinite(t).all()) for t in tensors)


def over_u(error: float | None, unit_roundoff: float) -> float | None:
    return None if error is None else error / unit_roundoff


def finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def collapsed(value_norm: float, reference_norm: float, factor: float = 0.1) -> bool:
    """A gradient whose norm fell far below the reference's: the signature of underflow."""
    return reference_norm > 0 and value_norm <= factor * reference_norm


def zeroed(zero_share: float | None, reference_zero_share: float | None, threshold: float = 0.5) -> bool:
    """Most of the low-precision adjoint was exactly zero at some step, where the reference's was not."""
    return zero_share is not None and zero_share >= threshold and (reference_zero_share or 0.0) < threshold / 5


def mean_and_spread(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    present = [v for v in values if v is not None]
    if not present:
        return None, None
    spread = max(present) - min(present) if len(values) > 1 else None
    return sum(present) / len(present), spread
