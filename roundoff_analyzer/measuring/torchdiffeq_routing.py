"""A model measured as it calls torchdiffeq: during a sweep's step, every call of torchdiffeq's `odeint` and
`odeint_adjoint` is answered by the `odeint` the step is handed (the library under test), so that public code whose
modules call torchdiffeq themselves (an `ODEBlock` whose `forward` calls the `odeint` its `models.py` imported with
`from torchdiffeq import odeint`) is swept unchanged, its `step` free to ignore the `odeint` argument. An
`odeint_adjoint` call is answered by the library's adjoint form where it has one (torchdiffeq's by torchdiffeq's
`odeint_adjoint`), by the library itself elsewhere.

How the calls are found and routed is the public `answered_by`'s (solvers/torchdiffeq_calls.py): while the library under
test solves (`ConfiguredOdeint.solving`), the names answer as torchdiffeq's own, and a call that reaches torchdiffeq by
another way is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..solvers.torchdiffeq_calls import RoutedName, give_back, routing
from .solve_calls import ConfiguredOdeint

__all__ = ["RoutedName", "RoutedSolves", "give_back", "routed_solves", "routed_to", "routed_words", "user_import"]

UNROUTED = (
    "the step called torchdiffeq's {function} through a reference the sweep cannot route (an attribute, a default "
    "argument or a functools.partial holding the function), so it would solve with torchdiffeq's own method and "
    "precision in every configuration; call it through a module-level name (from torchdiffeq import {function}) or "
    "through the odeint handed to the step"
)


@dataclass(frozen=True)
class RoutedSolves:
    """How many solves of one step came through one routed name (the manifest's `problem.routed`)."""

    module: str
    name: str
    function: str
    solves: int
    caller: str | None = None  # a call through torchdiffeq's namespace: the function that made it (`torchcde.cdeint`)


def routed_solves(origins: Iterable[object]) -> tuple[RoutedSolves, ...]:
    """The routed names among a step's solves' origins (`SolveRecord.origin`), each with its count, in order."""
    counts = Counter(origin for origin in origins if isinstance(origin, RoutedName))
    return tuple(RoutedSolves(name.module, name.name, name.function, n, name.caller) for name, n in counts.items())


@contextmanager
def routed_to(odeint: ConfiguredOdeint) -> Iterator[None]:
    """Within the block, torchdiffeq's `odeint` and `odeint_adjoint` are `odeint`, under every name a loaded module
    gave them (an `odeint_adjoint` call: its adjoint form, `ConfiguredOdeint.adjoint`); each solve a routed call
    makes records the name it came through (`SolveRecord.origin`)."""

    def answer(routed: RoutedName, args: tuple, kwargs: dict):
        solves = odeint.solves
        before = len(solves)
        try:
            if routed.function == "odeint_adjoint":
                return odeint.adjoint(*args, **kwargs)
            return odeint(*args, **kwargs)
        finally:
            for record in solves[before:]:
                record.origin = routed

    with routing(answer, lambda: odeint.solving > 0, UNROUTED):
        yield


def user_import(routed: RoutedSolves) -> str | None:
    """The line that bound a routed name (`from torchdiffeq import odeint_adjoint as odeint`); None for torchdiffeq's
    own namespace (calls written `torchdiffeq.odeint(...)`)."""
    if routed.module.split(".")[0] == "torchdiffeq":
        return None
    shown = routed.function if routed.name == routed.function else f"{routed.function} as {routed.name}"
    return f"from torchdiffeq import {shown}"


def routed_words(routed: Iterable[RoutedSolves]) -> str:
    """Where routed solves came from, in words: `1 through odeblock_models.odeint (from torchdiffeq import odeint)`."""
    parts = []
    for r in routed:
        line = user_import(r)
        if line is not None:
            parts.append(f"{r.solves} through `{r.module}.{r.name}` (`{line}`)")
        elif r.caller is not None:
            parts.append(f"{r.solves} through `{r.caller}` (its call of `torchdiffeq.{r.function}`)")
        else:
            parts.append(f"{r.solves} through `torchdiffeq.{r.function}`")
    return ", ".join(parts)
