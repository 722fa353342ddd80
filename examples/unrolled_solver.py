"""A solver library of your own, measured by roundoff: explicit Runge-Kutta on the fixed grid, autograd through
every stage, each state kept in float32 whatever the stages were evaluated in.

    roundoff sweep --model otflow --library examples/unrolled_solver.py:library --dtype float16,bfloat16 --scaling
    none,grad

`library` follows roundoff_analyzer.plugins.SolverLibrary: a name, a description, whether it scales the adjoint
in a backward of its own (the `dynamic` scaling), which methods it cannot run, and `solve`.
"""

import torch


class UnrolledRungeKutta:
    name = "unrolled-rk"
    description = "explicit Runge-Kutta unrolled for autograd; stages under the ambient autocast, states in float32"
    supports_adjoint_scaling = False

    def unsupported_method_reason(self, method):
        # `method` carries its Butcher tableau (a, b, c) for fixed-grid methods; adaptive ones name an embedded pair.
        if method.adaptive:
            return f"this solver steps on the fixed grid only; '{method.name}' is adaptive"
        return None

    def solve(self, func, y0, t, method, scaler, report):
        state_dtype = torch.promote_types(y0.dtype, torch.float32)
        y = y0.to(state_dtype)
        states = [y]
        for k in range(t.numel() - 1):
            h = t[k + 1] - t[k]
            stages = []
            for a_row, c in zip(method.a, method.c):
                stage_y = y + sum((h * a) * stage for a, stage in zip(a_row, stages) if a) if stages else y
                stages.append(func(t[k] + c * h, stage_y.to(y0.dtype)))
            y = y + h * sum(b * stage.to(state_dtype) for b, stage in zip(method.b, stages) if b)
            states.append(y)
        return torch.stack(states).to(y0.dtype)


library = UnrolledRungeKutta()
