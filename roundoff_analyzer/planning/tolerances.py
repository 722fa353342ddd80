"""Before a sweep runs: adaptive methods asked for a tolerance below what a dtype's state can resolve."""

from __future__ import annotations

from ..axes.dtypes import DTYPES
from ..axes.methods import METHODS

# The modes whose state is held in the low dtype itself (under autocast the state stays float32).
_LOW_STATE_MODES = ("pure",)


def tolerance_warnings(methods, dtypes, modes, rtol: float) -> list[str]:
    """One line per dtype whose unit roundoff exceeds rtol, where an adaptive method runs with its state in it (atol
    is absolute: it matters only for components near zero, and is not compared with the unit roundoff)."""
    adaptive = [name for name in methods if METHODS.get(name).adaptive]
    if not adaptive or not any(mode in _LOW_STATE_MODES for mode in modes):
        return []
    lines = []
    for name in dict.fromkeys(dtypes):
        u = DTYPES.get(name).unit_roundoff
        if rtol < u:
            lines.append(
                f"warning: rtol {rtol:g} is below {name}'s unit roundoff {u:.2g}: {', '.join(adaptive)} in pure "
                f"{name} can fail with step_size_underflow; set --rtol well above {u:.2g}"
            )
    return lines
