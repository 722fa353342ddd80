"""How far the fine reference's own error estimate (`fine_ref_*`) is from its error against a solve 8× finer, and the
discretisation errors (`disc_*`) of each (library, method, n_timesteps) measured against it and against that finer
solve. Numbers from one run, on this machine (float64 throughout, so any CPU gives the same to ~1e-15).

    python bench/fine_reference_accuracy.py                      # the default otflow sweep's grid
    python bench/fine_reference_accuracy.py --model linear -o d=3 --timesteps 4,8

Prints, per quantity (final state, gradient w.r.t. y0, parameter gradient): the estimate the sweep records (three
densities: fine, half and quarter), the estimate of the two-density rule it replaced (|half − fine| / 15, RK4's
order assumed), the fine solve's error against the 8× finer solve, and the order observed; then, per grid, `disc_*`
against the fine reference (as the sweep records it, ≈ where not resolved: below 3× the estimate) and against the
finer solve.
"""

from __future__ import annotations

import argparse
import time

import torch

from roundoff_analyzer.axes.libraries import LIBRARIES
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.axes.scalings import ScalerSettings
from roundoff_analyzer.execution import engine
from roundoff_analyzer.judging.verdict import RESOLVED
from roundoff_analyzer.measuring import metrics
from roundoff_analyzer.measuring.discretisation import ESTIMATED, FineReference, fine_steps, solve_on_fine_grid
from roundoff_analyzer.measuring.gradient_noise import GradientNoise
from roundoff_analyzer.measuring.references import ReferenceCache
from roundoff_analyzer.measuring.yardsticks import Yardsticks, yardstick_columns
from roundoff_analyzer.planning import config

FINER = 8
QUANTITIES = {"final_state": "disc_final_rel_err", "grad_y0": "disc_grad_y0_rel_err", "grad_params": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--timesteps", default="8,32,128")
    parser.add_argument("--method", default="euler,rk4")
    parser.add_argument("--library", default="torchdiffeq,native")
    args = parser.parse_args()
    torch.set_num_threads(1)

    timesteps = [int(n) for n in args.timesteps.split(",")]
    plan = engine.plan(
        config.validate(
            {"model": args.model, "options": parse_option_pairs(args.option), "timesteps": timesteps, "workers": 1}
        )
    )
    copies = ProblemCopies(plan.problem)
    started = time.perf_counter()
    fine = Yardsticks(copies, timesteps, 0, plan.device).fine()
    assert fine is not None
    seconds = time.perf_counter() - started
    steps = fine_steps(timesteps)
    started = time.perf_counter()
    finer = FineReference(FINER * steps, solve_on_fine_grid(copies, timesteps, FINER * steps, plan.device))
    finer_seconds = time.perf_counter() - started
    half = solve_on_fine_grid(copies, timesteps, steps, plan.device, coarsening=2)

    print(f"fine reference: {steps} steps and a half and a quarter of them, {seconds:.2f} s")
    print(f"truth: {FINER * steps} steps, {finer_seconds:.2f} s\n")
    print(f"{'quantity':<12} {'estimate':>10} {'/15 rule':>10} {'true':>10} {'est/true':>9} {'/15/true':>9} order")
    for name, pick in ESTIMATED:
        true = max(metrics.rel_err(pick(fine.at[n]), pick(finer.at[n])) for n in timesteps)
        old = max(metrics.rel_err(pick(half[n]), pick(fine.at[n])) / 15 for n in timesteps)
        estimate, order = fine.estimated_error[name], fine.observed_order[name]
        print(
            f"{name:<12} {estimate:10.3e} {old:10.3e} {true:10.3e} {estimate / true:9.2f} {old / true:9.2f} "
            f"{'-' if order is None else f'{order:.2f}'}"
        )

    print(f"\n{'library':<12} {'method':<6} {'n':>4}  disc: measured (≈ not resolved) / true, per quantity")
    cache = ReferenceCache(copies, ScalerSettings())
    unknown = GradientNoise(None, 0, None)
    for library in args.library.split(","):
        for method in args.method.split(","):
            for n in timesteps:
                reference = cache.get(LIBRARIES.get(library), METHODS.get(method), n)
                measured = yardstick_columns(None, reference, fine, unknown, n, {})
                true = yardstick_columns(None, reference, finer, unknown, n, {})
                cells = []
                for column, estimate in (
                    ("disc_final_rel_err", "fine_ref_final_rel_err"),
                    ("disc_grad_y0_rel_err", "fine_ref_grad_y0_rel_err"),
                    ("disc_grad_params_rel_err", "fine_ref_grad_params_rel_err"),
                ):
                    value = measured[column]
                    resolved = value >= RESOLVED * measured[estimate]
                    cells.append(f"{'' if resolved else '≈'}{value:.3e} / {true[column]:.3e}")
                print(f"{library:<12} {method:<6} {n:>4}  " + "   ".join(cells))


if __name__ == "__main__":
    main()
