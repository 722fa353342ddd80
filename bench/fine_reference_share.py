"""The fine reference's share of a sweep, in CPU time: the whole sweep in one process on one thread, then each of the
fine reference's three solves (fine, half and quarter density) alone, each timed by this process's CPU clock (so
other work on the cores does not count).

    python bench/fine_reference_share.py                  # the default otflow sweep
    python bench/fine_reference_share.py --model cnf -o batch=256
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring.discretisation import COARSENINGS, fine_steps, solve_on_fine_grid
from roundoff_analyzer.planning import config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    request = {"model": args.model, "options": parse_option_pairs(args.option), "workers": 1, "threads": 1}
    plan = engine.plan(config.validate(request))
    started, wall = time.process_time(), time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        engine.run(plan, Path(folder) / "sweep")
    total, wall = time.process_time() - started, time.perf_counter() - wall
    copies, timesteps = ProblemCopies(plan.problem), list(plan.grid.timesteps)
    steps = fine_steps(timesteps)
    solves = {}
    for coarsening in COARSENINGS:
        started = time.process_time()
        solve_on_fine_grid(copies, timesteps, steps, plan.device, coarsening)
        solves[steps // coarsening] = time.process_time() - started
    print(f"sweep, one process on one thread: {total:.2f} s CPU ({wall:.2f} s wall)")
    for n, seconds in solves.items():
        print(f"fine reference at {n:>6} steps: {seconds:.2f} s CPU, {100 * seconds / total:.1f}% of the sweep")
    print(f"the three together: {100 * sum(solves.values()) / total:.1f}% of the sweep")


if __name__ == "__main__":
    main()
