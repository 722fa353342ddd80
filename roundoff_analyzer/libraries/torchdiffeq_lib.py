import torch
import torchdiffeq

from .base import LIBRARIES

# torchdiffeq names its fixed-grid solvers as we name methods; its `rk4` is the 3/8 rule.
_FIXED_GRID = ("euler", "midpoint", "rk4", "heun2", "heun3", "explicit_adams", "implicit_adams")


class _ProbedDynamics(torch.nn.Module):
    """Reports, per time step, what the backward pass saw: the adjoint reaching the state, the
    low-precision gradient at the right-hand side's output, and whether any of it, or the
    parameter gradients of that step, left the dtype's range.

    torchdiffeq hands the state itself to the first stage of each step, so a hook on it sees the
    full adjoint. Each call gets its own view of every parameter, so that a hook on the view sees
    that call's share of the parameter gradient.
    """

    def __init__(self, func, n_stages, n_steps, report):
        super().__init__()
        self.func, self.n_stages, self.n_steps, self.report = func, n_stages, n_steps, report
        self.calls = 0
        self._params_finite: dict[int, bool] = {}

    def forward(self, t, y):
        call, self.calls = self.calls, self.calls + 1
        step, stage = divmod(call, self.n_stages)
        views = {name: p.view_as(p) for name, p in self.func.named_parameters() if p.requires_grad}
        out = torch.func.functional_call(self.func, views, (t, y))
        if step >= self.n_steps or not out.requires_grad:
            return out
        for view in views.values():
            view.register_hook(lambda g, step=step: self._note_params(step, g))
        if stage == 0 and y.requires_grad:
            seen = {}
            out.register_hook(lambda g: seen.__setitem__("low", g))
            y.register_hook(lambda g, step=step: self._record(step, g, seen.get("low", g)))
        return out

    def _note_params(self, step, grad):
        self._params_finite[step] = self._params_finite.get(step, True) and bool(torch.isfinite(grad).all())

    def _record(self, step, state_grad, low_grad):
        finite = bool(torch.isfinite(state_grad).all() and torch.isfinite(low_grad).all()) and self._params_finite.pop(step, True)
        self.report.record_backward(self.n_steps - 1 - step, state_grad, low_grad, finite)


class TorchdiffeqLibrary:
    name = "torchdiffeq"
    description = f"torchdiffeq {torchdiffeq.__version__}, fixed grid, autograd through every stage (rk4 = 3/8 rule)"
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method):
        if method.name not in _FIXED_GRID:
            return f"torchdiffeq has no fixed-grid method '{method.name}'"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        probed = _ProbedDynamics(func, method.n_stages, t.numel() - 1, report)
        return torchdiffeq.odeint(probed, y0, t, method=method.name)


LIBRARIES.register(TorchdiffeqLibrary())
