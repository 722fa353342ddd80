"""The drop-in `roundoff_analyzer.solvers.odeint` against torchdiffeq's `odeint` on the same fixed-grid problems,
float64.

For every method name torchdiffeq has, here as there (rk4 the 3/8 rule, also named `rk4_38` here), with
`options=dict(step_size=...)` (linear and cubic read-off, and perturb), on an increasing and a decreasing grid: the
largest absolute difference of the states, of the gradients of y0 and of the parameters, over three problems (a
tanh MLP field, the pendulum, a field with a jump in t). Prints one markdown row per method name, and a last row
for `method="rk4_classical"`, the classical rule, against torchdiffeq's 3/8 rule (a rule's difference).

    python bench/drop_in_vs_torchdiffeq.py
"""

from __future__ import annotations

import itertools

import torch
import torchdiffeq

from roundoff_analyzer.solvers import odeint

SAME_RULE = {
    "euler": "euler",
    "midpoint": "midpoint",
    "heun2": "heun2",
    "heun3": "heun3",
    "rk4": "rk4",
    "rk4_38": "rk4",
}
OTHER_RULE = {"rk4_classical": "rk4"}  # classical here, 3/8 there
OPTIONS = [
    dict(step_size=0.07),
    dict(step_size=0.07, interp="cubic"),
    dict(step_size=0.05, perturb=True),
    dict(step_size=0.013),
]


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).double()

    def forward(self, t, y):
        return self.net(torch.cat([y, t.expand(y.shape[0], 1)], dim=1))


class Pendulum(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.damping = torch.nn.Parameter(torch.tensor(0.1, dtype=torch.float64))

    def forward(self, t, y):
        return torch.stack([y[:, 1], -torch.sin(y[:, 0]) - self.damping * y[:, 1]], dim=1)


class Jump(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rate = torch.nn.Parameter(torch.tensor([0.7, -0.3], dtype=torch.float64))

    def forward(self, t, y):
        return -self.rate * y + (t > 0.25).to(y.dtype)


def run(solver, method, make, t, options):
    func = make()
    y0 = torch.tensor([[1.0, -0.5], [0.2, 0.3]], dtype=torch.float64, requires_grad=True)
    trajectory = solver(func, y0, t, method=method, options=dict(options))
    grads = torch.autograd.grad(trajectory.square().sum(), [y0, *func.parameters()])
    return trajectory.detach(), grads


def largest_differences(method: str, theirs: str) -> tuple[float, float, int]:
    states = grads = 0.0
    cases = 0
    for make, options, reverse in itertools.product((Mlp, Pendulum, Jump), OPTIONS, (False, True)):
        t = torch.tensor([0.0, 0.3, 0.55, 1.0], dtype=torch.float64)
        t = t.flip(0) if reverse else t
        want, want_grads = run(torchdiffeq.odeint, theirs, make, t, options)
        got, got_grads = run(odeint, method, make, t, options)
        states = max(states, float((got - want).abs().max()))
        grads = max(grads, *(float((g - w).abs().max()) for g, w in zip(got_grads, want_grads)))
        cases += 1
    return states, grads, cases


def main() -> None:
    torch.set_num_threads(1)
    print(f"torchdiffeq {torchdiffeq.__version__}, float64, options {OPTIONS}, increasing and decreasing grids\n")
    print("| method here | torchdiffeq's | cases | largest state difference | largest gradient difference |")
    print("| --- | --- | --- | --- | --- |")
    for method, theirs in {**SAME_RULE, **OTHER_RULE}.items():
        states, grads, cases = largest_differences(method, theirs)
        print(f"| {method} | {theirs} | {cases} | {states:.2e} | {grads:.2e} |")


if __name__ == "__main__":
    main()
