"""An oracle for OT-Flow's parameter gradient whose own error is known: RK4 on grids that hold every sample's HJB
residual's sign changes, at doubling densities, and the default sweep's fine reference (and the 8× finer solve that
stood for the truth) measured against it.

    python bench/fine_reference_oracle.py                       # levels 64..1024 steps per unit time, about 4 min
    python bench/fine_reference_oracle.py --levels 128,256,512,1024,2048 --truth 0
    python bench/fine_reference_oracle.py --kept-abs --check-level 0 --truth 0   # why |h| is replaced

Why it can be done: OT-Flow's right-hand side acts on each sample's row alone (the potential's gradient and Hessian
trace are per column, no batch statistics), and its loss is α₀ mean(L) + α₁ mean(C) + α₂ mean(R) of the final state,
a mean over samples of per-sample terms; so each sample's kink can be put on its own grid points, and one grid that
holds every sample's serves the batch (checked: each sample solved alone on that grid, the loss's gradient formed as
the mean of theirs, against the batch's solve, `--check-level`). x is smooth (x' = v(x, t) reads neither ℓ, L nor
R), so the times t* where h(x(t), t) = 0 are found to float64 precision: a sign change of h on a uniform RK4 solve of
the batch (--search steps), then Brent's method on h at the sample's state carried from the grid point before the
change to t by RK4 (steps of at most 1/(4·search)). The grid cuts [0, 1] at t* ± ε for every crossing, one step
across each gap and the pieces between in ⌈length · level⌉ equal steps. On it the field is the model's with |h|
replaced by ±h, the sign h has on the true trajectory at that time: the same right-hand side on the trajectory, but
smooth in the state, because an RK4 stage's state is only about third-order accurate, and a stage next to a crossing
would otherwise take |h|'s derivative from whichever side its error puts it on (an O(step) error: with |h| kept,
`--kept-abs`, the gradients' orders are about 1 and then erratic). The step across each gap adds an error of order ε,
the same in every level: measured by solving the finest level again with 10ε (`ε share`: that difference / 9).

Printed: the crossings; the check; per quantity the relative differences between consecutive levels and the orders
they show, the oracle (the finest level) and its own error (Richardson over the two finest levels, with the order
observed); then per quantity the default sweep's fine reference's estimate (`fine_ref_*`), its error against the
oracle, their ratio, and the same ratio against the `--truth` solve (its steps per unit time, default 8× the fine
reference's; 0 skips it), with that solve's own error against the oracle. Float64 throughout: any CPU gives the same
to ~1e-15.
"""

from __future__ import annotations

import argparse
import math
import time

import torch
from fine_reference_kink import copies_of, hjb_residual
from scipy.optimize import brentq

from roundoff_analyzer.axes.methods.rk4 import CLASSICAL
from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.axes.modes import ProblemCopies, cast_run
from roundoff_analyzer.measuring import metrics
from roundoff_analyzer.measuring.discretisation import ESTIMATED, FineSolution, fine_steps, solve_on_fine_grid
from roundoff_analyzer.measuring.yardsticks import Yardsticks
from roundoff_analyzer.solvers import odeint

EPSILON = 1e-12  # half the gap around each crossing
REFINED_SUBSTEPS = 4  # RK4 steps from the search grid's point before a crossing to a trial time


def crossings(copies: ProblemCopies, search: int) -> tuple[list[list[float]], torch.Tensor]:
    """Each sample's times in (0, 1) where its HJB residual changes sign, to float64 precision, and its sign at 0."""
    prepared = cast_run(copies, torch.float64)
    field = prepared.model
    times = torch.linspace(0, 1, search + 1, dtype=torch.float64)
    with torch.no_grad():
        trajectory = odeint(field, prepared.batch.detach(), times, method=CLASSICAL)
        residual = torch.stack([hjb_residual(field, t, state) for t, state in zip(times, trajectory)])
    found: list[list[float]] = []
    for sample in range(residual.shape[1]):
        signs = torch.sign(residual[:, sample])
        changes = torch.nonzero(signs[1:] != signs[:-1]).flatten().tolist()
        start_states = [trajectory[k, sample : sample + 1] for k in changes]
        found.append([root(field, float(times[k]), float(times[k + 1]), s) for k, s in zip(changes, start_states)])
    with torch.no_grad():  # the signed h is the field's |h|: compared on every 64th point of the search
        field_h = torch.stack([field(t, state)[:, -1] for t, state in zip(times[::64], trajectory[::64])])
    apart = float((field_h - residual[::64].abs()).abs().max() / field_h.abs().max())
    if apart > 1e-13:
        raise SystemExit(f"fine_reference_oracle.py: |h| here differs from the field's by {apart:.1e}")
    if bool((residual[0] == 0).any()):
        raise SystemExit("fine_reference_oracle.py: a sample's HJB residual is 0 at t = 0; its side is not known")
    return found, torch.sign(residual[0])


class OneSided(torch.nn.Module):
    """The model's field with |h| replaced by ±h, the sign h has on the true trajectory at time t (flipped at each
    crossing, the crossing's own time counted after it): the same right-hand side on the trajectory, but smooth in
    the state, so an RK4 stage whose state lies off the trajectory near a crossing (a stage's state is only about
    third-order accurate) does not take |h|'s derivative from the wrong side."""

    def __init__(self, field: torch.nn.Module, kinks: list[list[float]], signs: torch.Tensor) -> None:
        super().__init__()
        self.field = field
        widest = max((len(k) for k in kinks), default=0)
        self.kinks = torch.tensor([k + [math.inf] * (widest - len(k)) for k in kinks], dtype=torch.float64)
        self.signs = signs

    def forward(self, t: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        out = self.field(t, state)
        passed = (self.kinks <= t).sum(1)
        side = self.signs * (1 - 2 * (passed % 2)).to(state.dtype)
        return torch.cat([out[:, :-1], (side * hjb_residual(self.field, t, state)).unsqueeze(1)], 1)


def root(field, start: float, end: float, state: torch.Tensor) -> float:
    def residual_at(t: float) -> float:
        if t == start:
            with torch.no_grad():
                return float(hjb_residual(field, torch.tensor(t, dtype=torch.float64), state)[0])
        grid = torch.linspace(start, t, REFINED_SUBSTEPS + 1, dtype=torch.float64)
        with torch.no_grad():
            carried = odeint(field, state, grid, method=CLASSICAL)[-1]
            return float(hjb_residual(field, grid[-1], carried)[0])

    return float(brentq(residual_at, start, end, xtol=1e-16, rtol=4 * 2.0**-52, maxiter=200))


def aligned_grid(kinks: list[list[float]], level: int, epsilon: float) -> torch.Tensor:
    """[0, 1] cut at t* ± ε for every crossing t* of every sample, one step across each gap, the pieces between in
    ⌈length · level⌉ equal steps: no step of any sample holds its own crossing, and doubling `level` doubles every
    piece's steps except the gaps'."""
    gaps = sorted((t - epsilon, t + epsilon) for sample in kinks for t in sample)
    if any(a[1] >= b[0] for a, b in zip(gaps, gaps[1:])):
        raise SystemExit("fine_reference_oracle.py: two crossings lie within 2ε of each other; give a smaller ε")
    edges = [0.0, *(t for gap in gaps for t in gap), 1.0]
    pieces = [torch.zeros(1, dtype=torch.float64)]
    for index, (a, b) in enumerate(zip(edges, edges[1:])):
        steps = 1 if index % 2 else max(1, math.ceil((b - a) * level))
        pieces.append(torch.linspace(a, b, steps + 1, dtype=torch.float64)[1:])
    return torch.cat(pieces)


def batch_solution(
    copies: ProblemCopies, grid: torch.Tensor, kinks: list[list[float]], signs: torch.Tensor, one_sided: bool = True
):
    """The batch solved on `grid` by RK4 (float64, the native solver) with the one-sided field (the model's own where
    not `one_sided`), the loss of its final state, its gradients."""
    problem = copies.trajectory
    assert problem is not None
    prepared = cast_run(copies, torch.float64)
    field = OneSided(prepared.model, kinks, signs) if one_sided else prepared.model
    with torch.enable_grad():
        trajectory = odeint(field, prepared.batch, grid, method=CLASSICAL)
        loss = problem.loss(trajectory)
        found = torch.autograd.grad(loss, prepared.leaves, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g.detach() for g, x in zip(found, prepared.leaves)]
    return FineSolution(trajectory.detach()[-1:], loss.detach(), grads, len(prepared.inputs))


def per_sample_solution(copies: ProblemCopies, grid: torch.Tensor, kinks: list[list[float]], signs: torch.Tensor):
    """`batch_solution` formed from each sample solved alone: the loss's gradient as the mean over samples of each
    sample's loss's gradient. Equal to it to roundoff where the field acts on each row alone and the loss is a mean
    of per-sample terms (OT-Flow's)."""
    problem = copies.trajectory
    assert problem is not None
    prepared = cast_run(copies, torch.float64)
    (y0,) = prepared.inputs
    parameters = prepared.leaves[len(prepared.inputs) :]
    samples = y0.shape[0]
    finals, losses = [], []
    grad_y0 = torch.zeros_like(y0)
    grad_parameters = [torch.zeros_like(p) for p in parameters]
    for sample in range(samples):
        row = y0[sample : sample + 1]
        field = OneSided(prepared.model, kinks[sample : sample + 1], signs[sample : sample + 1])
        with torch.enable_grad():
            trajectory = odeint(field, row, grid, method=CLASSICAL)
            loss = problem.loss(trajectory)
            found = torch.autograd.grad(loss, [row, *parameters], allow_unused=True)
        grad_y0[sample] = found[0][0] / samples
        for total, part in zip(grad_parameters, found[1:]):
            if part is not None:
                total += part / samples
        finals.append(trajectory[-1].detach())
        losses.append(loss.detach())
    final = torch.cat(finals)
    return FineSolution(final.unsqueeze(0), torch.stack(losses).mean(), [grad_y0.detach(), *grad_parameters])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--timesteps", default="8,32,128")
    parser.add_argument("--levels", default="64,128,256,512,1024", help="steps per unit time of each level, doubling")
    parser.add_argument(
        "--check-level", type=int, default=8, help="level at which each sample alone is checked against the batch"
    )
    parser.add_argument(
        "--kept-abs", action="store_true", help="the model's own field, |h| kept, on the same grids (no order 4)"
    )
    parser.add_argument("--search", type=int, default=4096, help="steps of the batch solve that finds the crossings")
    parser.add_argument("--truth", type=int, default=-1, help="steps of the old truth (default 8× the fine's; 0: none)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    timesteps = [int(n) for n in args.timesteps.split(",")]
    levels = [int(n) for n in args.levels.split(",")]
    options = parse_option_pairs(args.option)
    copies, device = copies_of(options, timesteps)
    largest = max(timesteps)

    started = time.perf_counter()
    kinks, signs = crossings(copies, args.search)
    counts = [len(k) for k in kinks]
    print(
        f"crossings of h = 0 ({args.search}-step search, Brent): {sum(counts)} in {sum(c > 0 for c in counts)} of "
        f"{len(kinks)} samples (at most {max(counts)} in one), t* from {min(min(k) for k in kinks if k):.4f} to "
        f"{max(max(k) for k in kinks if k):.4f}; {time.perf_counter() - started:.1f} s",
        flush=True,
    )

    if args.check_level:
        started = time.perf_counter()
        grid = aligned_grid(kinks, args.check_level, EPSILON)
        together, alone = batch_solution(copies, grid, kinks, signs), per_sample_solution(copies, grid, kinks, signs)
        apart = ", ".join(f"{name} {metrics.rel_err(pick(alone), pick(together)):.1e}" for name, pick in ESTIMATED)
        print(
            f"each sample solved alone vs the batch on one grid ({len(grid) - 1} steps): {apart} apart; "
            f"{time.perf_counter() - started:.1f} s",
            flush=True,
        )

    solved = {}
    for level in levels:
        started = time.perf_counter()
        solved[level] = batch_solution(copies, aligned_grid(kinks, level, EPSILON), kinks, signs, not args.kept_abs)
        print(f"  level {level}: {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    wide_gap = batch_solution(copies, aligned_grid(kinks, levels[-1], 10 * EPSILON), kinks, signs, not args.kept_abs)
    print(f"  level {levels[-1]} with the gaps 10ε wide: {time.perf_counter() - started:.1f} s", flush=True)

    started = time.perf_counter()
    fine = Yardsticks(copies, timesteps, 0, device).fine()
    assert fine is not None
    print(
        f"  the default sweep's fine reference ({fine.fine_steps} steps, three densities): "
        f"{time.perf_counter() - started:.1f} s",
        flush=True,
    )
    truth_steps = FINER_DEFAULT * fine_steps(timesteps) if args.truth < 0 else args.truth
    truth = None
    if truth_steps:
        started = time.perf_counter()
        truth = solve_on_fine_grid(copies, timesteps, truth_steps, device)[largest]
        print(f"  the {truth_steps}-step solve: {time.perf_counter() - started:.1f} s", flush=True)

    print(
        f"\noracle: RK4 on grids through every crossing ± ε (ε = {EPSILON:g}), "
        f"at {', '.join(map(str, levels))} steps per unit time"
    )
    oracle = {}
    for name, pick in ESTIMATED:
        values = [pick(solved[level]) for level in levels]
        differences = [metrics.rel_err(a, b) for a, b in zip(values, values[1:])]
        orders = [math.log2(a / b) if a > 0 and b > 0 else math.nan for a, b in zip(differences, differences[1:])]
        order = orders[-1]
        own = differences[-1] / (2.0**order - 1.0) if order > 0 else math.nan
        gap = metrics.rel_err(pick(wide_gap), values[-1])
        oracle[name] = (values[-1], own, gap)
        print(
            f"  {name:<12} differences {' '.join(f'{d:.2e}' for d in differences)}   "
            f"orders {' '.join(f'{o:.2f}' for o in orders)}   own error {own:.1e}   ε share {gap / 9:.1e}"
        )

    print(
        f"\n{'quantity':<12} {'estimate':>10} {'vs oracle':>10} {'est/oracle':>10} {'oracle own':>10}"
        + (f" {'vs ' + str(truth_steps):>10} {'est/that':>9} {'that off':>10} {'that/err':>9}" if truth else "")
    )
    for name, pick in ESTIMATED:
        value, own, gap = oracle[name]
        estimate = fine.estimated_error[name]
        error = metrics.rel_err(pick(fine.at[largest]), value)
        line = f"{name:<12} {estimate:10.3e} {error:10.3e} {estimate / error:10.2f} {max(own, gap / 9):10.1e}"
        if truth is not None:
            against_truth = metrics.rel_err(pick(fine.at[largest]), pick(truth))
            truth_off = metrics.rel_err(pick(truth), value)
            line += f" {against_truth:10.3e} {estimate / against_truth:9.2f} {truth_off:10.3e} {truth_off / error:9.1%}"
        print(line)
    orders = ", ".join(f"{name} {'-' if o is None else f'{o:.2f}'}" for name, o in fine.observed_order.items())
    print(f"(the fine reference's observed orders: {orders})")


FINER_DEFAULT = 8


if __name__ == "__main__":
    main()
