"""Share of a sweep's wall time spent outside solver forward/backward and reference solves.

Runs the default sweep (`roundoff sweep --model otflow`, or the model and options given) in this
process, then prints, measured in this one run:
  - wall time, the time inside the runs' forward and backward passes, and the reference solves;
  - the overhead share (target <= 10%);
  - reference solves against configurations (target: one per distinct library x method x n_timesteps);
  - what the discretisation error and the gradient noise cost: the fine reference (with its half- and
    quarter-density solves) and the noise batches, solved again here as the sweep solved them, against the
    reference solves.

    python bench/sweep_overhead.py [--model otflow] [-o key=value ...]
    python bench/sweep_overhead.py --config configs/otflow_bsds300.toml --out results/seed-grid   # a config's grid
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from roundoff_analyzer.axes.grid import CONFIG_COLUMNS, Configuration
from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.execution import engine
from roundoff_analyzer.execution.in_process import fine_quarter_reference
from roundoff_analyzer.measuring.measure import forward_families
from roundoff_analyzer.measuring.yardsticks import Yardsticks
from roundoff_analyzer.planning import config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--workers", type=int, default=None, help="processes (default: the sweep's own choice)")
    parser.add_argument("--config", type=Path, default=None, help="a sweep's config file (its grid, model and device)")
    parser.add_argument("--out", type=Path, default=None, help="keep the sweep folder here (default: temporary)")
    args = parser.parse_args()

    if args.config is not None:
        request = config.resolve(args.config, {"workers": args.workers} if args.workers else {})
    else:
        request = config.validate(
            {"model": args.model, "options": parse_option_pairs(args.option), "workers": args.workers}
        )
    plan = engine.plan(request)
    with tempfile.TemporaryDirectory() as folder:
        outcome = engine.run(plan, args.out or Path(folder) / "sweep")
    # The sweep computed these once inside; computed again here, alone, to time them (the quarter density as the
    # sweep solved it: where it is a reference's solve, that reference's time is in it, not in the reference solves).
    yardsticks = Yardsticks(
        ProblemCopies(plan.problem),
        list(plan.grid.timesteps),
        request.noise_batches,
        plan.device,
        coarsest_is=fine_quarter_reference(plan),
    )
    fine, noise = yardsticks.fine(), yardsticks.noise()
    context_seconds = fine.seconds + noise.seconds

    table = outcome.results
    backward = table.time_backward_s.fillna(0).mul(table.n_repeats)
    # The configurations of one family share each repeat's forward (measuring/measure.py): counted once.
    forwards = {family[0].id: family for family in forward_families(list(plan.configurations), plan.config.timeout)}
    by_id = table.assign(
        id=[Configuration(**{c: getattr(r, c) for c in CONFIG_COLUMNS}).id for r in table.itertuples()]
    )
    forward_rows = by_id[by_id["id"].isin(forwards)]
    forward = float(forward_rows.time_forward_s.fillna(0).mul(forward_rows.n_repeats).sum())
    inside_runs = forward + float(backward.sum())
    accounted = inside_runs + outcome.reference_seconds + context_seconds
    overhead = outcome.wall_seconds - accounted
    distinct = len(table[table.status != "skipped"][["library", "method", "n_timesteps"]].drop_duplicates())
    print(f"configurations            {len(table)}")
    print(f"wall time                 {outcome.wall_seconds:8.2f} s")
    print(f"processes                 {plan.config.workers} ({plan.workers_reason})")
    print(f"runs forward+backward     {inside_runs:8.2f} s  (summed over the processes)")
    print(f"reference solves          {outcome.reference_seconds:8.2f} s  ({outcome.reference_solves} solves)")
    print(
        f"fine reference            {fine.seconds:8.2f} s  ({fine.fine_steps} rk4 steps, and a half and a quarter of "
        "them to know its own error)"
    )
    print(
        f"gradient noise            {noise.seconds:8.2f} s  ({noise.n_batches} batches at n_timesteps "
        f"{noise.n_timesteps})"
    )
    print(f"context / reference solves = {context_seconds / outcome.reference_seconds:.2f}")
    if plan.config.workers == 1:
        print(
            f"outside solver and refs   {overhead:8.2f} s  = {overhead / outcome.wall_seconds:.1%} of wall time "
            "(target <= 10%)"
        )
    else:  # the times above are summed over processes that ran side by side
        print(f"summed times / wall time  {accounted / outcome.wall_seconds:8.2f}  (processes side by side)")
    shared = sum(len(family) > 1 for family in forwards.values())
    print(f"  forward passes            {forward:8.2f} s  ({len(forwards)}, {shared} shared by a setup's scalings)")
    for scaling, seconds in table.assign(seconds=backward).groupby("scaling")["seconds"].sum().items():
        print(f"  backward, scaling {scaling:8s}{seconds:8.2f} s  ({seconds / inside_runs:.0%} of the runs)")
    print(
        f"reference solves / configurations = {outcome.reference_solves} / {len(table)}; "
        f"distinct library x method x n_timesteps = {distinct} (target: solves == distinct)"
    )


if __name__ == "__main__":
    main()
