"""What each reference group of a sweep costs, measured, against what planning estimates (planning/groups.py).

Runs the sweep (the default `roundoff sweep --model otflow`, or the model and options given) in this process, one
reference group after another as a worker takes them, after the yardsticks (fine reference, gradient noise), and
prints per group: the estimated cost, the CPU seconds it took and both as shares of the whole; then how the groups
would split over two processes that take them costliest-first as they free up (the processes executor), by the
estimate and by the measurement. With --profile, the groups run under cProfile and the top functions are printed.

    python bench/group_costs.py [--model otflow] [-o key=value ...] [--profile 30]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.core.threads import torch_threads
from roundoff_analyzer.execution import engine
from roundoff_analyzer.execution.in_process import (
    ProcessProblems,
    measure_in_process,
    yardstick_reference,
    yardstick_tasks,
)
from roundoff_analyzer.planning import config
from roundoff_analyzer.planning.groups import REFERENCE_RUNS, estimated_cost, evaluations, reference_groups
from roundoff_analyzer.planning.manifest import manifest
from roundoff_analyzer.storage.results import ResultStore


def greedy_split(costs: list[float], processes: int = 2) -> list[float]:
    """Each process's total when processes take the groups in this order, each the next one as it frees up."""
    loads = [0.0] * processes
    for cost in costs:
        loads[loads.index(min(loads))] += cost
    return loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--profile", type=int, default=0, help="print this many of cProfile's top functions")
    args = parser.parse_args()

    request = config.validate({"model": args.model, "options": parse_option_pairs(args.option), "workers": 1})
    plan = engine.plan(request)
    solved_by_yardsticks = yardstick_reference(plan)
    groups = reference_groups(plan.configurations, solved_by_yardsticks)
    profiler = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as folder:
        store = ResultStore(Path(folder) / "sweep")
        store.open(manifest(plan))
        try:
            problems = ProcessProblems.of(plan, store)
            with torch_threads(plan.threads):
                pieces: dict[str, float] = {}
                for task in yardstick_tasks(plan):
                    started = time.process_time()
                    problems.prepare(task)
                    pieces[task[1]] = time.process_time() - started
                measured: list[float] = []
                # (the reference's wall seconds, the rest's) of each group that solved its own reference
                reference_split: list[tuple[float, float, int]] = []
                for group in groups:
                    shared = problems.shared(plan, group[0].checkpoint)
                    started, wall = time.process_time(), time.perf_counter()
                    if profiler is not None:
                        profiler.enable()
                    measure_in_process(group, shared, store, lambda c: None, lambda c, r: None, lambda: False)
                    if profiler is not None:
                        profiler.disable()
                    measured.append(time.process_time() - started)
                    wall = time.perf_counter() - wall
                    if shared.references.seconds > 0:
                        reference_s = shared.references.seconds
                        reference_split.append((reference_s, wall - reference_s, len(group)))
        finally:
            store.close()

    def key(group):
        return (group[0].library, group[0].method, group[0].n_timesteps)

    estimated = [float(estimated_cost(group, key(group) == solved_by_yardsticks)) for group in groups]
    runs_only = [float(evaluations(group)) for group in groups]
    total_estimated, total_measured = sum(estimated), sum(measured)
    print(f"{plan.model.name}: {len(plan.configurations)} configurations in {len(groups)} reference groups")
    yardsticks_s = sum(pieces.values())
    print(f"yardsticks (fine reference, gradient noise): {yardsticks_s:.2f} CPU s, by piece in the order handed out:")
    print("  " + ", ".join(f"{piece} {seconds:.2f}" for piece, seconds in pieces.items()))
    print(f"{'group':<34} {'estimated':>10} {'share':>7} {'CPU s':>7} {'share':>7} {'ratio':>6}")
    for group, cost, seconds in zip(groups, estimated, measured, strict=True):
        first = group[0]
        label = f"{first.library} {first.method} n={first.n_timesteps} ({len(group)})"
        share_e, share_m = cost / total_estimated, seconds / total_measured
        print(f"{label:<34} {cost:>10.0f} {share_e:>7.1%} {seconds:>7.2f} {share_m:>7.1%} {share_m / share_e:>6.2f}")
    # What a group's own reference costs, in its configurations' work: REFERENCE_RUNS in the estimate.
    in_runs = sorted(reference_s / (rest_s / n) for reference_s, rest_s, n in reference_split)
    print(
        f"a group's float64 reference costs {in_runs[len(in_runs) // 2]:.2f} of its configurations' work (median; "
        f"{in_runs[0]:.2f}-{in_runs[-1]:.2f} over {len(in_runs)} groups; the estimate counts {REFERENCE_RUNS})"
    )
    by_runs = [measured[i] for i in sorted(range(len(groups)), key=lambda i: runs_only[i], reverse=True)]
    loads = greedy_split(by_runs)
    print(
        f"two processes, groups handed out costliest-first by the runs' evaluations alone: {loads[0]:.2f} and "
        f"{loads[1]:.2f} CPU s, the longer {max(loads) / (total_measured / 2):.2f}x an even split"
    )
    # The order the executor hands the groups out in is the estimate's; what each process then does is measured.
    loads = greedy_split(measured)
    print(
        f"two processes, groups handed out costliest-first by the estimate (runs and reference): "
        f"{loads[0]:.2f} and {loads[1]:.2f} CPU s, "
        f"the longer {max(loads) / (total_measured / 2):.2f}x an even split"
    )
    ideal = greedy_split(sorted(measured, reverse=True))
    print(
        f"the same, handed out by the measured costs: {ideal[0]:.2f} and {ideal[1]:.2f} CPU s, "
        f"the longer {max(ideal) / (total_measured / 2):.2f}x an even split"
    )
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)


if __name__ == "__main__":
    main()
