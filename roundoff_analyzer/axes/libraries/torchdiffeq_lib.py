import torch
import torchdiffeq

from ...solvers.overflow_stop import stop_if_overflowed
from .base import LIBRARIES, SolverLibrary
from .steps import StepCountingDynamics

# torchdiffeq names its solvers as we name methods, except that its `rk4` is the 3/8 rule (`rk4_38` here); it has no
# classical rk4.
_FIXED_GRID = ("euler", "midpoint", "rk4", "heun2", "heun3", "explicit_adams", "implicit_adams")
_ADAPTIVE = ("dopri5", "dopri8", "bosh3", "fehlberg2", "adaptive_heun")
_SOLVER_NAMES = {"rk4_38": "rk4"}


def solver_name(method) -> str:
    """torchdiffeq's name for `method`."""
    return _SOLVER_NAMES.get(method.name, method.name)


def unsupported_reason(library: str, method) -> str | None:
    if method.name == "rk4_classical":
        return f"{library} has no fixed-grid method 'rk4_classical' (its rk4 is the 3/8 rule, rk4_38)"
    if solver_name(method) not in (_ADAPTIVE if method.adaptive else _FIXED_GRID):
        return f"{library} has no {'adaptive' if method.adaptive else 'fixed-grid'} method '{method.name}'"
    return None


def tableau_name(method) -> str:
    return "rk4_38" if solver_name(method) == "rk4" else getattr(method, "tableau", method.name)


def adaptive_solve(odeint, library: str, func, y0, t, method, report, **kwargs):
    """`odeint` (torchdiffeq's, or its adjoint) with the method's tolerances, counting the forward's steps."""
    counted = StepCountingDynamics(func, library, method.max_steps)
    solution = odeint(counted, y0, t, method=solver_name(method), rtol=method.rtol, atol=method.atol, **kwargs)
    report.record_steps(counted.accepted, counted.rejected)
    return solution


class _ProbedDynamics(torch.nn.Module):
    """Reports, per time step, the adjoint reaching the state (torchdiffeq hands the state itself to the
    first stage of each step), and that adjoint rounded to the low dtype: the quantity the native solver
    holds in the low dtype, so that both libraries' profiles compare like with like. torchdiffeq keeps the
    state adjoint in the state's dtype; a step whose adjoint would not fit the low dtype shows as out of its range.

    It only observes: the parameters are used as they are, so autocast keeps its one low-precision
    copy of each weight for the whole solve, and sums that copy's gradient over every step in the
    low dtype, as it does for any user of torchdiffeq under autocast.
    """

    def __init__(self, func, n_stages, n_steps, report):
        super().__init__()
        self.func, self.n_stages, self.n_steps, self.report = func, n_stages, n_steps, report
        self.calls = 0

    def forward(self, t, y):
        call, self.calls = self.calls, self.calls + 1
        out = self.func(t, y)
        step, stage = divmod(call, self.n_stages)
        if stage == 0 and step < self.n_steps and y.requires_grad and out.requires_grad:
            device = y.device.type
            low_dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else y.dtype
            y.register_hook(lambda g, step=step: self._record(step, g, low_dtype))
        return out

    def _record(self, step, state_grad, low_dtype):
        # The gradient is already multiplied by the loss scale of the `grad` strategy, if any.
        finite = bool(torch.isfinite(state_grad).all())
        self.report.record_backward(self.n_steps - 1 - step, state_grad, state_grad.detach().to(low_dtype), finite)
        stop_if_overflowed(finite, self.n_steps - 1 - step)


class TorchdiffeqLibrary(SolverLibrary):
    name = "torchdiffeq"
    routed_function = "odeint"
    adjoint_form = "torchdiffeq-adjoint"
    import_line = None  # the script's own `from torchdiffeq import odeint` stands
    description = (
        f"torchdiffeq {torchdiffeq.__version__}, autograd through every stage (its rk4 is the 3/8 rule, "
        "rk4_38; dopri5 adaptive)"
    )
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method):
        return unsupported_reason(self.name, method)

    def tableau_name(self, method):
        return tableau_name(method)

    def solve(self, func, y0, t, method, scaler, report):
        if method.adaptive:
            # The per-step probe assumes a fixed number of steps; adaptive runs record steps instead.
            return adaptive_solve(torchdiffeq.odeint, self.name, func, y0, t, method, report)
        probed = _ProbedDynamics(func, method.n_stages, t.numel() - 1, report)
        return torchdiffeq.odeint(probed, y0, t, method=solver_name(method))


LIBRARIES.register(TorchdiffeqLibrary())
