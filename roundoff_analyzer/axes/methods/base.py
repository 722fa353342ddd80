"""The method axis: explicit Runge-Kutta tableaux on a fixed grid, and adaptive embedded pairs."""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...core.registry import Registry


@dataclass(frozen=True)
class ExplicitRK:
    """Butcher tableau of an explicit method: a (strictly lower), b (weights), c (nodes)."""

    name: str
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    description: str = ""

    adaptive = False

    @property
    def n_stages(self) -> int:
        return len(self.b)


@dataclass(frozen=True)
class AdaptiveRK:
    """An embedded Runge-Kutta pair with error control; each library brings its own tableau of it.

    The tolerances and the step budget are the sweep's (`--rtol`, `--atol`, `--max-steps`): the
    registered value holds the defaults and `with_settings` makes the one a configuration runs.
    `max_steps` bounds the steps attempted over the whole solve, accepted and rejected together.
    """

    name: str
    order: int
    n_stages: int
    description: str = ""
    rtol: float = 1e-3
    atol: float = 1e-6
    max_steps: int = 1000

    adaptive = True

    def with_settings(self, **settings: float) -> "AdaptiveRK":
        """This method with other `rtol`, `atol` or `max_steps`."""
        return replace(self, **settings)


Method = ExplicitRK | AdaptiveRK

METHODS: Registry[Method] = Registry("method")
