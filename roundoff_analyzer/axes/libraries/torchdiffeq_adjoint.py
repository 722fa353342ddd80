import torchdiffeq

from .base import LIBRARIES, SolverLibrary
from .torchdiffeq_lib import adaptive_solve, solver_name, tableau_name, unsupported_reason


class TorchdiffeqAdjointLibrary(SolverLibrary):
    name = "torchdiffeq-adjoint"
    import_line = "from torchdiffeq import odeint_adjoint as odeint"
    description = (
        f"torchdiffeq {torchdiffeq.__version__} odeint_adjoint: the continuous adjoint (optimise, then discretise), "
        "solved "
        "backward in time by the same method; the backward runs outside the forward's autocast, as loss.backward() does"
    )
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method):
        return unsupported_reason(self.name, method)

    def tableau_name(self, method):
        return tableau_name(method)

    def solve(self, func, y0, t, method, scaler, report):
        params = tuple(p for p in func.parameters() if p.requires_grad)
        if method.adaptive:
            return adaptive_solve(
                torchdiffeq.odeint_adjoint, self.name, func, y0, t, method, report, adjoint_params=params
            )
        return torchdiffeq.odeint_adjoint(func, y0, t, method=solver_name(method), adjoint_params=params)


LIBRARIES.register(TorchdiffeqAdjointLibrary())
