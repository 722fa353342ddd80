from torchdyn.numerics import odeint

_FIXED_GRID = ("euler", "midpoint", "rk4")


class TorchdynLibrary:
    name = "torchdyn"
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method):
        if method.adaptive:
            return "torchdyn's adaptive odeint takes no step budget and does not report its steps, which an adaptive run records"
        if method.name not in _FIXED_GRID:
            return f"torchdyn has no fixed-grid method '{method.name}'"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        _, trajectory = odeint(func, y0, t, solver=method.name)
        return trajectory


LIBRARY = TorchdynLibrary()
