from torchdyn.numerics import odeint

from ..methods import Method
from .base import LibraryAdapter

_FIXED_GRID = ("euler", "midpoint", "rk4")
_SOLVER_NAMES = {"rk4_classical": "rk4"}  # torchdyn's rk4 is the classical rule


class TorchdynLibrary:
    name = "torchdyn"
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method: Method) -> str | None:
        if method.adaptive:
            return (
                "torchdyn's adaptive odeint takes no step budget and does not report its steps, which an adaptive "
                "run records"
            )
        if _SOLVER_NAMES.get(method.name, method.name) not in _FIXED_GRID:
            return f"torchdyn has no fixed-grid method '{method.name}'"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        _, trajectory = odeint(func, y0, t, solver=_SOLVER_NAMES.get(method.name, method.name))
        return trajectory


LIBRARY: LibraryAdapter = TorchdynLibrary()
