"""Parameter gradients for every form of vector field torchdiffeq accepts, the native drop-in against torchdiffeq.

Forms: an `nn.Module`, a lambda over a module and a parameter, a `functools.partial` holding a parameter, a bound
method, a function using global modules, and a closure over a tensor computed before the solve (`c = encoder(x)`).
For each, with y0 requiring grad and without: in float64, the largest absolute difference between the parameter
gradients of `roundoff_analyzer.solvers.odeint` and of `torchdiffeq.odeint` (rk4_38 against torchdiffeq's rk4, the
same 3/8 rule; euler against euler), and of `odeint_adjoint` against `torchdiffeq.odeint` (the same discrete
gradient); under float16 autocast, each library's parameter-gradient relative error against its own float64 run.

    python bench/field_forms.py
"""

from __future__ import annotations

import copy
import functools

import torch
import torchdiffeq

from roundoff_analyzer.solvers import odeint, odeint_adjoint

WIDTH, BATCH, N_STEPS = 64, 256, 16


def _modules(dtype):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, WIDTH), torch.nn.Tanh(), torch.nn.Linear(WIDTH, 4)).to(dtype)
    encoder = torch.nn.Linear(4, 4).to(dtype)
    scale = torch.nn.Parameter(torch.tensor(0.7, dtype=dtype))
    return net, encoder, scale


class _Module(torch.nn.Module):
    def __init__(self, net, scale) -> None:
        super().__init__()
        self.net, self.scale = net, scale

    def forward(self, t, y):
        return self.net(y) * self.scale


class _Holder:
    def __init__(self, net, scale) -> None:
        self.net, self.scale = net, scale

    def field(self, t, y):
        return self.net(y) * self.scale


GLOBAL: dict[str, torch.nn.Module] = {}


def _global_field(t, y):
    return GLOBAL["net"](y) - 0.1 * y


def _scaled(t, y, net, scale):
    return net(y) * scale


FORMS = {
    "nn.Module": lambda net, scale, c: _Module(net, scale),
    "lambda": lambda net, scale, c: lambda t, y: net(y) * scale,
    "functools.partial": lambda net, scale, c: functools.partial(_scaled, net=net, scale=scale),
    "bound method": lambda net, scale, c: _Holder(net, scale).field,
    "global modules": lambda net, scale, c: _global_field,
    "closure over encoder(x)": lambda net, scale, c: lambda t, y: net(y + c) * scale,
}


def gradients(form, solve, method, dtype, low, y0_grad):
    """The parameter gradients (zeros where none came back) after a loss of every state."""
    net, encoder, scale = (copy.deepcopy(m) for m in _MODULES)
    net, encoder = net.to(dtype), encoder.to(dtype)
    scale = torch.nn.Parameter(scale.detach().to(dtype))
    GLOBAL["net"] = net
    params = [*net.parameters(), scale, *encoder.parameters()]
    x = torch.randn(BATCH, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(dtype)
    t = torch.linspace(0, 1, N_STEPS + 1, dtype=dtype)
    with torch.autocast("cpu", dtype=low or torch.float16, enabled=low is not None):
        c = encoder(x)
        states = solve(FORMS[form](net, scale, c), x.clone().requires_grad_(y0_grad), t, method=method)
        loss = (states.float() ** 2).mean()
    loss.backward()
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).double().reshape(-1) for p in params])


def rel(a, b):
    return float((a - b).norm() / b.norm())


_MODULES = _modules(torch.float32)


def main() -> None:
    adjoint = functools.partial(odeint_adjoint)
    print(
        "| form | y0 grad | float64 max abs diff, rk4_38 vs torchdiffeq rk4 | euler | odeint_adjoint vs torchdiffeq "
        "odeint | float16 rel err, native | float16 rel err, torchdiffeq |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for form in FORMS:
        for y0_grad in (True, False):
            f64 = {
                name: gradients(form, solve, method, torch.float64, None, y0_grad)
                for name, solve, method in (
                    ("native rk4", odeint, "rk4_38"),
                    ("torchdiffeq rk4", torchdiffeq.odeint, "rk4"),
                    ("native euler", odeint, "euler"),
                    ("torchdiffeq euler", torchdiffeq.odeint, "euler"),
                    ("adjoint rk4", adjoint, "rk4_38"),
                )
            }
            native16 = gradients(form, odeint, "rk4_38", torch.float32, torch.float16, y0_grad)
            torchdiffeq16 = gradients(form, torchdiffeq.odeint, "rk4", torch.float32, torch.float16, y0_grad)
            rk4 = float((f64["native rk4"] - f64["torchdiffeq rk4"]).abs().max())
            euler = float((f64["native euler"] - f64["torchdiffeq euler"]).abs().max())
            adj = float((f64["adjoint rk4"] - f64["torchdiffeq rk4"]).abs().max())
            print(
                f"| {form} | {y0_grad} | {rk4:.2e} | {euler:.2e} | {adj:.2e} | "
                f"{rel(native16, f64['native rk4']):.2e} | {rel(torchdiffeq16, f64['torchdiffeq rk4']):.2e} |"
            )


if __name__ == "__main__":
    main()
