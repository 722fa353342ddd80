from torchdyn import numerics

from ..methods import Method
from .base import LibraryAdapter
from .handed import odeint_of

_FIXED_GRID = ("euler", "midpoint", "rk4")
_SOLVER_NAMES = {"rk4_classical": "rk4"}  # torchdyn's rk4 is the classical rule


class TorchdynLibrary:
    name = "torchdyn"
    import_line = "from roundoff_analyzer.axes.libraries.torchdyn_lib import odeint  # torchdyn, as swept"
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
        _, trajectory = numerics.odeint(func, y0, t, solver=_SOLVER_NAMES.get(method.name, method.name))
        return trajectory


LIBRARY: LibraryAdapter = TorchdynLibrary()
# torchdiffeq's signature, solving as the runs did: what the answer's code imports (`import_line`).
odeint = odeint_of(LIBRARY)
