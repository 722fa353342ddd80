"""Small fixed problems on which the native solver is checked against its plain oracle (tests/native_oracle.py):
an MLP whose output stays in the autocast dtype, a steep one that makes the dynamic scaler back off,
OT-Flow (whose `cat` promotes to float32) and an OT-Flow whose float16 gradients overflow.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import torch

from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.models import MODELS, parse_options
from roundoff_analyzer.solvers import DynamicAdjointScaler, SolveReport, odeint

from . import native_oracle

N_TIMESTEPS = 6


class TanhMLP(torch.nn.Module):
    """An MLP right-hand side whose output stays in the autocast dtype (unlike otflow, whose `cat` promotes)."""

    def __init__(self, d: int = 4, hidden: int = 16) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(3)
        self.inner = torch.nn.Linear(d + 1, hidden)
        self.outer = torch.nn.Linear(hidden, d)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) / p.shape[-1] ** 0.5)

    def forward(self, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        s = torch.cat([y, t.to(y.dtype).expand(y.shape[0], 1)], dim=1)
        return self.outer(torch.tanh(self.inner(s)))


@dataclass(frozen=True)
class Case:
    # "mlp", "mlp_steep" (the dynamic scaler has to back off, step after step), "otflow" or
    # "otflow_overflowing" (gradients that overflow float16 unscaled)
    model: str
    dtype: str
    method: str
    scaler: bool
    report: bool
    mode: str = "autocast"  # or "pure": parameters and y0 cast to the dtype, no autocast
    # "even": n equal float32 steps from 0 to 1; "uneven": float64 times of unequal steps from 1 down to 0
    grid: str = "even"
    perturb: bool = False  # torchdiffeq's option: stage times nudged off the grid points
    checkpoint: str = "states"  # or "stages": the forward's stage graphs kept for the backward

    @property
    def key(self) -> str:
        scaler = "dynamic" if self.scaler else "none"
        extra = ("" if self.grid == "even" else f"-{self.grid}") + ("-perturb" if self.perturb else "")
        extra += f"-{self.checkpoint}"
        return (
            f"{self.model}-{self.dtype}-{self.mode}-{self.method}-{scaler}-{'report' if self.report else 'plain'}"
            + extra
        )


def cases() -> list[Case]:
    """Every case with either backward: the stage graphs kept from the forward, or rebuilt from the stored states."""
    return [replace(case, checkpoint=checkpoint) for case in _cases() for checkpoint in ("states", "stages")]


def _cases() -> list[Case]:
    grid = [
        Case(model, dtype, method, scaler, report)
        for model, dtype, method, (scaler, report) in itertools.product(
            ("mlp", "otflow"),
            ("float16", "bfloat16"),
            ("euler", "rk4"),
            ((False, False), (False, True), (True, True), (True, False)),
        )
    ]
    return grid + [
        Case("otflow_overflowing", "float16", "rk4", True, True),
        Case("otflow_overflowing", "float16", "euler", False, True),
        Case("mlp_steep", "float16", "rk4", True, True),
        Case("mlp_steep", "float16", "euler", True, False),
        Case("mlp_steep", "float16", "rk4", False, True),
        Case("mlp", "float32", "rk4", False, False),
        Case("otflow", "float32", "rk4", True, True),
        Case("mlp", "float16", "rk4", False, True, mode="pure"),
        Case("mlp", "float16", "euler", True, False, mode="pure"),
        # Tableaus whose stage times and factors are not exact in binary (1/3, 2/3), more than one a_ij per stage, a
        # zero weight; a decreasing float64 grid of unequal steps; perturbed stage times.
        Case("mlp", "float16", "rk4_38", False, True, grid="uneven"),
        Case("mlp", "bfloat16", "heun3", True, False, grid="uneven", perturb=True),
        Case("mlp", "float16", "midpoint", False, False, perturb=True),
        Case("otflow", "float16", "rk4_38", True, True, grid="uneven"),
        Case("mlp", "float32", "heun3", False, True, grid="uneven", perturb=True),
    ]


def _problem(case: Case):
    """(func, y0, loss) on the CPU, float32 unless the case is pure."""
    if case.model in ("mlp", "mlp_steep"):
        func = TanhMLP()
        if case.model == "mlp_steep":
            with torch.no_grad():
                func.outer.weight.mul_(100.0)
                func.inner.weight.mul_(0.01)
        y0 = torch.randn(8, 4, generator=torch.Generator().manual_seed(5))

        def loss(trajectory):
            return (trajectory**2).mean() + trajectory[-1].sum()

    else:
        options = {"d": 3, "hidden": 8, "batch": 16}
        if case.model == "otflow_overflowing":
            options["alpha"] = "1,2e5,8e4"
        model = MODELS.get("otflow")
        problem = model.build(parse_options(model, options), torch.device("cpu"))
        func, y0, loss = problem.func, problem.y0, problem.loss
    if case.mode == "pure":
        func = func.to(getattr(torch, case.dtype))
        y0 = y0.to(getattr(torch, case.dtype))
    return func, y0, loss


def run(case: Case, oracle: bool = False) -> dict[str, torch.Tensor]:
    """Trajectory, loss and gradients (y0 first, then each parameter) of one solve, as plain tensors:
    by the solver, or with `oracle` by tests/native_oracle.py. One thread, so that both split their
    reductions alike."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(case, oracle)
    finally:
        torch.set_num_threads(threads)


def _run(case: Case, oracle: bool) -> dict[str, torch.Tensor]:
    func, y0, loss_fn = _problem(case)
    dtype = getattr(torch, case.dtype)
    y0 = y0.clone().requires_grad_(True)
    params = [p for p in func.parameters() if p.requires_grad]
    t = torch.linspace(0.0, 1.0, N_TIMESTEPS + 1)
    if case.grid == "uneven":
        steps = torch.rand(N_TIMESTEPS, generator=torch.Generator().manual_seed(7), dtype=torch.float64) + 0.5
        t = 1.0 - torch.cat([torch.zeros(1, dtype=torch.float64), steps.cumsum(0) / steps.sum()])
    scaler = DynamicAdjointScaler() if case.scaler else None
    with torch.autocast("cpu", dtype=dtype, enabled=case.mode == "autocast" and dtype != torch.float32):
        if oracle:
            trajectory = native_oracle.odeint(
                func, y0, t, case.method, scaler=scaler, perturb=case.perturb, stages=case.checkpoint == "stages"
            )
        else:
            trajectory = odeint(
                func,
                y0,
                t,
                method=METHODS.get(case.method),  # the sweep's rule of that name (the drop-in's "rk4" is torchdiffeq's)
                checkpoint=case.checkpoint,
                options={"perturb": True} if case.perturb else None,
                scaler=scaler,
                report=SolveReport() if case.report else None,
            )
    loss = loss_fn(trajectory.float())
    grads = torch.autograd.grad(loss, [y0, *params], allow_unused=True)
    result = {"trajectory": trajectory.detach(), "loss": loss.detach()}
    for i, g in enumerate(grads):
        result[f"grad_{i}"] = torch.zeros_like([y0, *params][i]) if g is None else g
    if scaler is not None:
        result["final_scale"] = torch.tensor(float(scaler.scale))
        result["scale_retries"] = torch.tensor(scaler.retries)
    return result
