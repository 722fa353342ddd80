"""How far the fine reference's own error estimate (`fine_ref_*`) is from its error against a solve 8× finer, and the
discretisation errors (`disc_*`) of each (library, method, n_timesteps) measured against it and against that finer
solve. Numbers from one run, on this machine (float64 throughout, so any CPU gives the same to ~1e-15).

    python bench/fine_reference_accuracy.py                      # the default otflow sweep's grid
    python bench/fine_reference_accuracy.py --model linear -o d=3 --timesteps 4,8
    python bench/fine_reference_accuracy.py --oracle             # against an oracle whose own error is known

Prints, per quantity (final state, gradient w.r.t. y0, parameter gradient): the estimate the sweep records (three
densities: fine, half and quarter), the estimate of the two-density rule it replaced (|half − fine| / 15, RK4's
order assumed), the fine solve's error against the 8× finer solve, and the order observed; then, per grid, `disc_*`
against the fine reference (as the sweep records it, ≈ where not resolved: below 3× the estimate) and against the
finer solve.

With --oracle, instead: the fine reference's estimate against an oracle whose own error is itself estimated. The
8× finer solve is no exact truth where the field has a kink (OT-Flow's: order about 1 to 2), so three solves 4×, 8×
and 16× finer than the fine reference are extrapolated (Richardson, with the order their two differences show), from
the two coarser and from the two finer of them; the oracle is the second, its own error estimated by its distance from
the first. Printed per quantity: the estimate over the fine solve's error against the oracle, over its error against
the 8× finer solve (the ratio above), the 8× finer solve's own error against the oracle, and the oracle's own error
against the fine solve's error (how far the ratio can be trusted); where the levels' differences do not shrink, no
oracle, and the line says so.
"""

from __future__ import annotations

import argparse
import math
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
ORACLE_LEVELS = (4, 8, 16)  # × the fine reference's steps: the solves the oracle is extrapolated from
QUANTITIES = {"final_state": "disc_final_rel_err", "grad_y0": "disc_grad_y0_rel_err", "grad_params": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--timesteps", default="8,32,128")
    parser.add_argument("--method", default="euler,rk4")
    parser.add_argument("--library", default="torchdiffeq,native")
    parser.add_argument("--oracle", action="store_true", help="against an extrapolated oracle, its own error known")
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
    if args.oracle:
        against_oracle(copies, timesteps, steps, fine, plan.device)
        return
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


def richardson(coarse: torch.Tensor, middle: torch.Tensor, fine: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """Three solves, each with twice the steps of the one before: the extrapolation from the two finer (error term
    of the order their differences show removed), its own error estimated as its distance from the extrapolation from
    the two coarser, and that order."""
    wide, narrow = metrics.norm(coarse - middle), metrics.norm(middle - fine)
    order = math.log2(wide / narrow) if wide > 0 and narrow > 0 else math.nan
    if not order > 0:  # the differences do not shrink: no extrapolation stands for the solution
        return fine, math.nan, order
    factor = 2.0**order - 1.0
    extrapolated = fine + (fine - middle) / factor
    earlier = middle + (middle - coarse) / factor
    return extrapolated, metrics.norm(extrapolated - earlier) / metrics.norm(extrapolated), order


def against_oracle(copies: ProblemCopies, timesteps: list[int], steps: int, fine: FineReference, device) -> None:
    levels = {}
    for level in ORACLE_LEVELS:
        started = time.perf_counter()
        levels[level] = solve_on_fine_grid(copies, timesteps, level * steps, device)
        print(f"{level * steps} steps: {time.perf_counter() - started:.1f} s", flush=True)
    print(
        f"\nfine reference: {steps} steps; oracle: Richardson over {', '.join(str(k * steps) for k in ORACLE_LEVELS)}"
    )
    print(
        f"{'quantity':<12} {'estimate':>10} {'vs oracle':>10} {'est/oracle':>10} {'est/8x':>8} "
        f"{'8x off':>8} {'oracle own':>10} {'order':>6}"
    )
    for name, pick in ESTIMATED:
        rows = []
        for n in timesteps:
            coarse, middle, finest = (pick(levels[k][n]) for k in ORACLE_LEVELS)
            oracle, own, order = richardson(coarse, middle, finest)
            # The fine solve's error against the oracle and against the 8× finer solve; that solve's own error.
            error = metrics.rel_err(pick(fine.at[n]), oracle)
            rows.append((error, metrics.rel_err(pick(fine.at[n]), middle), metrics.rel_err(middle, oracle), own, order))
        estimate = fine.estimated_error[name]
        if any(not row[4] > 0 for row in rows):
            orders = ", ".join(f"{row[4]:.2f}" for row in rows)
            print(f"{name:<12} {estimate:10.3e}  no oracle: the levels' differences do not shrink (orders {orders})")
            continue
        error, eight, eight_off, own, order = max(rows)
        print(
            f"{name:<12} {estimate:10.3e} {error:10.3e} {estimate / error:10.2f} {estimate / eight:8.2f} "
            f"{eight_off / error:8.1%} {own / error:10.1%} {order:6.2f}"
        )


if __name__ == "__main__":
    main()
