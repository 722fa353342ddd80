import torch
import torchdiffeq

from .base import LIBRARIES

# torchdiffeq names its fixed-grid solvers as we name methods; its `rk4` is the 3/8 rule.
_FIXED_GRID = ("euler", "midpoint", "rk4", "heun2", "heun3", "explicit_adams", "implicit_adams")


class _ProbedDynamics(torch.nn.Module):
    """Reports, per time step, the adjoint reaching the state and the low-precision gradient at the
    right-hand side's output; torchdiffeq hands the state itself to the first stage of each step."""

    def __init__(self, func, n_stages, n_steps, report):
        super().__init__()
        self.func, self.n_stages, self.n_steps, self.report = func, n_stages, n_steps, report
        self.calls = 0

    def forward(self, t, y):
        call, self.calls = self.calls, self.calls + 1
        out = self.func(t, y)
        step, stage = divmod(call, self.n_stages)
        if stage == 0 and step < self.n_steps and y.requires_grad and out.requires_grad:
            backward_step = self.n_steps - 1 - step
            seen = {}
            out.register_hook(lambda g: seen.__setitem__("low", g))

            def on_state_grad(grad, backward_step=backward_step):
                low = seen.get("low", grad)
                finite = bool(torch.isfinite(grad).all() and torch.isfinite(low).all())
                self.report.record_backward(backward_step, grad, low, finite)

            y.register_hook(on_state_grad)
        return out


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
