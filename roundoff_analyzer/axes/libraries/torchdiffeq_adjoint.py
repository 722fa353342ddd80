import torch
import torchdiffeq

from ...solvers.field_tensors import reached_tensors
from .base import LIBRARIES, SolverLibrary
from .handed import odeint_of
from .torchdiffeq_lib import adaptive_solve, solver_name, tableau_name, unsupported_reason


class TorchdiffeqAdjointLibrary(SolverLibrary):
    name = "torchdiffeq-adjoint"
    # Not torchdiffeq's odeint_adjoint itself: its gradients reach only `adjoint_params` (func's parameters by
    # default), not the tensors a closure reaches, which the runs' solve finds (with_reached_tensors).
    import_line = "from roundoff_analyzer.axes.libraries.torchdiffeq_adjoint import odeint  # as swept"
    routed_function = "odeint_adjoint"
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
        field, params = with_reached_tensors(func, y0, t)
        if method.adaptive:
            return adaptive_solve(
                torchdiffeq.odeint_adjoint, self.name, field, y0, t, method, report, adjoint_params=params
            )
        return torchdiffeq.odeint_adjoint(field, y0, t, method=solver_name(method), adjoint_params=params)


def with_reached_tensors(func, y0, t) -> tuple[torch.nn.Module, list[torch.Tensor]]:
    """(the field to solve, the tensors its adjoint must return gradients for). torchdiffeq's adjoint returns gradients
    for y0 and `adjoint_params` only, so a tensor the field reaches that is not a parameter of it (a conditioning
    computed from the batch or by an encoder, which a closure holds) would get none, and nothing upstream of it
    either, silently. They are found as the native solver finds them, from the field's first evaluation, where
    torchdiffeq's solve evaluates it first (at t[0] in y0's dtype): that evaluation is then the solve's own, so the
    field is evaluated, counted and draws as often as without it."""
    own = [p for p in func.parameters() if p.requires_grad]
    time = t[0].to(y0.dtype)
    found = reached_tensors(func, time, y0, own)
    if found.first_stage is None:
        return func, found.params
    return _FirstEvaluationKept(func, time, y0.detach(), found.first_stage), found.params


class _FirstEvaluationKept(torch.nn.Module):
    """`func`, whose first call, at the time and state it was evaluated at already, returns that evaluation."""

    def __init__(self, func, time: torch.Tensor, y0: torch.Tensor, value: torch.Tensor) -> None:
        super().__init__()
        self.func = func
        self._kept: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = (time, y0, value)

    def forward(self, t, y):
        kept, self._kept = self._kept, None
        if kept is not None and _same(t, kept[0]) and _same(y, kept[1]):
            return kept[2]
        return self.func(t, y)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a, b))


_LIBRARY = TorchdiffeqAdjointLibrary()
LIBRARIES.register(_LIBRARY)
# torchdiffeq's signature, solving as the runs did: what the answer's code imports (`import_line`).
odeint = odeint_of(_LIBRARY)
