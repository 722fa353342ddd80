"""Why OT-Flow's parameter gradient gives `fine_reference_accuracy.py --oracle` no oracle: the fine reference solved at
doubling densities, with and without the HJB penalty in the loss, and where the penalty's residual changes sign.

    python bench/fine_reference_kink.py                          # 512, 1024, 2048 steps; the default otflow
    python bench/fine_reference_kink.py --levels 2048,4096,8192  # the oracle's levels (minutes each)

OT-Flow's right-hand side accumulates R' = |h|, h the HJB residual. The parameter gradient of α₂ E[R] integrates
sign(h) ∂h/∂θ (and the adjoint of x is forced by sign(h) ∂h/∂x), which jumps where h changes sign; fixed-step RK4 puts
an error of the order of one step's weight times the jump into the step that holds a crossing, its size and sign set by
where the crossing falls in that step, so the levels' differences need not shrink as a power of the step. Printed per
loss (α₂ as given, then α₂ = 0) and quantity: the relative differences between consecutive levels and the orders they
show; then how many samples' residual changes sign on the largest n_timesteps' grid. Float64 throughout: any CPU gives
the same to ~1e-15.
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring import metrics
from roundoff_analyzer.measuring.discretisation import ESTIMATED, solve_on_fine_grid
from roundoff_analyzer.planning import config


def copies_of(options: dict, timesteps: list[int]) -> tuple[ProblemCopies, torch.device]:
    plan = engine.plan(config.validate({"model": "otflow", "options": options, "timesteps": timesteps, "workers": 1}))
    return ProblemCopies(plan.problem), plan.device


def level_differences(options: dict, timesteps: list[int], levels: list[int]) -> dict:
    copies, device = copies_of(options, timesteps)
    largest = max(timesteps)
    solved = {}
    for steps in levels:
        started = time.perf_counter()
        solved[steps] = solve_on_fine_grid(copies, timesteps, steps, device)[largest]
        print(f"  {steps} steps: {time.perf_counter() - started:.1f} s", flush=True)
    for name, pick in ESTIMATED:
        values = [pick(solved[steps]) for steps in levels]
        differences = [metrics.rel_err(a, b) for a, b in zip(values, values[1:])]
        orders = [math.log2(a / b) if a > 0 and b > 0 else math.nan for a, b in zip(differences, differences[1:])]
        print(
            f"  {name:<12} differences {' '.join(f'{d:.3e}' for d in differences)}   "
            f"orders {' '.join(f'{o:.2f}' for o in orders)}"
        )
    return solved


def hjb_residual(field, t: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
    """h = −∂tΦ + α₀‖v‖²/2 of each row of `state` at time t, signed: the field's last entry is |h|."""
    d, a0 = field.potential.d, field.alpha0
    x = state[:, :d]
    gradient, _ = field.potential.gradient_and_trace(torch.cat([x, t.to(x.dtype).expand(x.shape[0], 1)], dim=1))
    velocity = -(1.0 / a0) * gradient[:, :d]
    return -gradient[:, -1] + a0 * 0.5 * torch.sum(velocity**2, 1)


def sign_changes(options: dict, timesteps: list[int], trajectory: torch.Tensor) -> None:
    """How many samples' HJB residual changes sign between the largest n_timesteps' points, on the finest solve."""
    copies, _ = copies_of(options, timesteps)
    field = copies.model.double()
    times = torch.linspace(0, 1, trajectory.shape[0], dtype=torch.float64)
    with torch.no_grad():
        residual = torch.stack([hjb_residual(field, t, state) for t, state in zip(times, trajectory)])
    changes = (torch.sign(residual[1:]) != torch.sign(residual[:-1])).sum(0)
    print(
        f"HJB residual on {trajectory.shape[0]} points: {int((changes > 0).sum())} of {residual.shape[1]} samples "
        f"change sign ({int(changes.sum())} changes); smallest |h| at a point {float(residual.abs().min()):.1e}, "
        f"median {float(residual.abs().median()):.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--timesteps", default="8,32,128")
    parser.add_argument("--levels", default="512,1024,2048")
    args = parser.parse_args()
    torch.set_num_threads(1)
    timesteps = [int(n) for n in args.timesteps.split(",")]
    levels = [int(n) for n in args.levels.split(",")]
    options = parse_option_pairs(args.option)
    alpha = [float(a) for a in options.get("alpha", "1,2000,800").split(",")]
    print(f"otflow, alpha {alpha}:")
    solved = level_differences(options, timesteps, levels)
    print(f"otflow, alpha {alpha[:2] + [0.0]} (no HJB penalty in the loss):")
    level_differences(options | {"alpha": ",".join(str(a) for a in alpha[:2] + [0.0])}, timesteps, levels)
    sign_changes(options, timesteps, solved[levels[-1]].trajectory)


if __name__ == "__main__":
    main()
