"""The fine reference's own error, from its solves at three densities: fine (step h), half (2h) and quarter (4h).

Where the right-hand side is smooth, RK4's error is C·h⁴ in one direction at every density, and Richardson's
estimate |half − fine| / (2⁴ − 1) is accurate. Where it has a kink (OT-Flow's HJB penalty integrates an absolute
value), the step that holds the kink loses RK4 its order (the state converges at about h², the gradients, whose
adjoint then has a jump, at about h), and the size and direction of that step's error change with where the kink
falls inside it, from one density to the next: errors in partly unrelated directions, whose differences overstate
them, or partly cancel. So both are observed:

- the order p, from the sizes of the two differences u = half − fine and w = quarter − half: with errors of
  sizes a, 2ᵖa and 4ᵖa, |w| / |u| = 2ᵖ whatever their directions (when consecutive densities' errors are alike);
- the correlation ρ between consecutive densities' errors, from the cosine between u and w: with unit directions
  correlated ρ from one density to the next (ρ² two apart), u·w = a²(8ᵖρ − 4ᵖρ² − 4ᵖ + 2ᵖρ) and
  |u|² = a²(4ᵖ + 1 − 2ᵖ⁺¹ρ), a quadratic in ρ;

and the fine solve's error is a = |u| / sqrt(4ᵖ + 1 − 2ᵖ⁺¹ρ): Richardson's |u| / (2ᵖ − 1) where the errors share
a direction (ρ = 1), |u| / sqrt(4ᵖ + 1) where they are unrelated (ρ = 0).
The two gradients come from one adjoint solve, so they converge at one order: both use the smaller of the two
observed, the other a pre-asymptotic coincidence. Differences that do not shrink give no estimate (NaN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

RK4_ORDER = 4
# Two solves that differ by no more than this (relative) differ by float64 roundoff: no order can be observed, and the
# fine solve is as close to the ODE's solution as the larger of its differences says.
ROUNDOFF_AGREEMENT = 1e-13


@dataclass(frozen=True)
class Differences:
    """|half − fine| and |quarter − half|, relative to |fine|, and the cosine between the two differences."""

    fine_to_half: float
    half_to_quarter: float
    cosine: float

    @property
    def at_roundoff(self) -> bool:
        return self.half_to_quarter <= ROUNDOFF_AGREEMENT

    @property
    def order(self) -> float | None:
        """The order observed (None: the solves agree to roundoff, or the fine and half solves are equal)."""
        if self.at_roundoff or self.fine_to_half <= 0:
            return None
        return math.log2(self.half_to_quarter / self.fine_to_half)


def differences(fine: torch.Tensor, half: torch.Tensor, quarter: torch.Tensor) -> Differences:
    f, h, q = (x.detach().reshape(-1).to(device="cpu", dtype=torch.float64) for x in (fine, half, quarter))
    # Norms only (u·w from |u + w|² = |u|² + 2u·w + |w|²): a dot product's reduction order follows the thread count,
    # and the estimate must be the same bits however many threads a sweep's process runs.
    size, nu, nw, span = (float(torch.linalg.vector_norm(x)) for x in (f, h - f, q - h, q - f))
    scale = size if size > 0 else 1.0
    cosine = (span * span - nu * nu - nw * nw) / (2 * nu * nw) if nu > 0 and nw > 0 else 1.0
    return Differences(nu / scale, nw / scale, max(-1.0, min(1.0, cosine)))


def correlation(ratio: float, cosine: float) -> float:
    """ρ in [−1, 1] for errors growing `ratio` = 2ᵖ per density whose differences meet at `cosine`: the root of
    −r²ρ² + (r³ + r + 2cr²)ρ − r² − cr(r² + 1) = 0 nearest 0 (the other lies outside, or is the same); where
    the cosine is out of the model's reach, the end it points to."""
    r, c = ratio, cosine
    a, b, k = -r * r, r**3 + r + 2 * c * r * r, -r * r - c * r * (r * r + 1)
    discriminant = b * b - 4 * a * k
    roots = [] if discriminant < 0 else [(-b + s * math.sqrt(discriminant)) / (2 * a) for s in (1, -1)]
    inside = [root for root in roots if -1 <= root <= 1]
    return min(inside, key=abs) if inside else (1.0 if c > 0 else -1.0)


def own_error(found: Differences, order: float | None) -> float:
    """The fine solve's relative error, its differences converging at `order` (capped at RK4's: a larger observed
    order is a coincidence of a pre-asymptotic grid, and 4 gives the larger error)."""
    if found.at_roundoff:
        return max(found.fine_to_half, found.half_to_quarter)
    if found.fine_to_half <= 0:
        return 0.0
    if order is None or order <= 0:
        return math.nan
    ratio = 2 ** min(order, RK4_ORDER)
    rho = correlation(ratio, found.cosine)
    return found.fine_to_half / math.sqrt(max(ratio * ratio + 1 - 2 * ratio * rho, (ratio - 1) ** 2))


def shared_order(found: Sequence[Differences]) -> float | None:
    """The order of quantities that converge together (the gradients of one adjoint solve): the smallest positive
    order any of them shows; None where none shows one."""
    orders = [d.order for d in found if d.order is not None and d.order > 0]
    return min(orders) if orders else None
