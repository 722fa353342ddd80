"""A backward pass that ends at its first non-finite step, where all it is asked is whether it overflows.

A loss scaler's search probes scales with whole backward passes and keeps only the one that stays finite; a probe that
overflows at a step of the adjoint is wasted from there on. The adjoint is carried back to the solve's initial state by
additions, in which inf and NaN stay non-finite, so once a step of it is non-finite the gradient with respect to y0,
and every leaf it reaches, will be: stopping there answers the probe as the whole pass would. A solver that records a
step as non-finite calls `stop_if_overflowed`, which raises `BackwardOverflow` inside a `stopping_at_overflow()` block
(and not inside `whole_passes()`, which the run of a watched configuration uses: its observer counts passes by their
calls)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

# A plain module-level state, not a context variable: on a GPU, autograd runs a backward in threads of its own.
_state = {"probing": False, "whole_passes": False}


class BackwardOverflow(ArithmeticError):
    """A backward pass stopped at the first step whose adjoint was non-finite (backward step `step`)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"the adjoint overflowed at backward step {step}; the pass was stopped there")
        self.step = step


@contextmanager
def _switched_on(flag: str) -> Iterator[None]:
    before, _state[flag] = _state[flag], True
    try:
        yield
    finally:
        _state[flag] = before


def stopping_at_overflow() -> AbstractContextManager[None]:
    """Backward passes in this block stop at their first non-finite step (`BackwardOverflow`)."""
    return _switched_on("probing")


def whole_passes() -> AbstractContextManager[None]:
    """Every backward pass in this block runs to its end, also inside `stopping_at_overflow()`."""
    return _switched_on("whole_passes")


def stop_if_overflowed(finite: bool, step: int) -> None:
    """Called by a solver after recording backward step `step`: stop the pass there when it is non-finite and a
    probe asked for that."""
    if not finite and _state["probing"] and not _state["whole_passes"]:
        raise BackwardOverflow(step)
