"""The method axis: explicit Runge-Kutta tableaux on a fixed grid."""
from __future__ import annotations

from dataclasses import dataclass

from ..registry import Registry


@dataclass(frozen=True)
class ExplicitRK:
    """Butcher tableau of an explicit method: a (strictly lower), b (weights), c (nodes)."""

    name: str
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    description: str = ""

    @property
    def n_stages(self) -> int:
        return len(self.b)


METHODS: Registry[ExplicitRK] = Registry("method")
