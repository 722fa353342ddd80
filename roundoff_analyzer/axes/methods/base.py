"""The method axis: explicit Runge-Kutta tableaux on a fixed grid, and adaptive embedded pairs."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ...core.registry import Registry


@dataclass(frozen=True)
class ExplicitRK:
    """Butcher tableau of an explicit method: a (strictly lower), b (weights), c (nodes)."""

    name: str
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    c: tuple[float, ...]
    description: str = ""
    # The name of the rule itself: two method names for one rule (rk4, rk4_classical) share it, and a library
    # that runs a method name by another rule says so (see `tableau_of`).
    tableau: str = ""

    adaptive = False

    def __post_init__(self) -> None:
        if not self.tableau:
            object.__setattr__(self, "tableau", self.name)

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

    def with_settings(self, **settings: float) -> AdaptiveRK:
        """This method with other `rtol`, `atol` or `max_steps` (another name is a TypeError)."""
        # The sweep's step control arrives as one dict of numbers; `replace` checks the names and the dataclass
        # holds what it is given, so the values pass through untouched.
        changes: dict[str, Any] = dict(settings)
        return replace(self, **changes)


Method = ExplicitRK | AdaptiveRK


def tableau_of(library, method: Method) -> str:
    """The rule `library` (a registered SolverLibrary: a plug-in without `tableau_name` reads the default, the
    method's own tableau) runs for `method`."""
    return library.tableau_name(method)


METHODS: Registry[Method] = Registry("method")
