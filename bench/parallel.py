"""Speedup of `--workers 2` over `--workers 1`, and whether both give the same numbers, on the two grids
below (each against its target speedup) or on a grid given on the command line.

Each grid runs twice in this one run, each into a fresh folder: sequentially in this process (what
`--workers 1` does) and with two worker processes (`--workers 2`: forked from the fork server, one
torch thread each on 2 cores, work split by reference group). Prints both wall times (worker start-up
included), the speedup against the target, both runs' errors side by side, and whether every error
column is equal bit for bit. Run it on an otherwise quiet machine; it prints the load average.

    python bench/parallel.py                                   # both grids of GRIDS
    python bench/parallel.py --grid default --timesteps 8,32   # the default otflow grid at other n_timesteps
    python bench/parallel.py --grid custom -o hidden=64 --dtype float16 --target 1.5
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from roundoff_analyzer.axes.grid import CONFIG_COLUMNS
from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring.columns import ERROR_METRICS
from roundoff_analyzer.planning import config

ERROR_COLUMNS = [f"{name}{suffix}" for name in ERROR_METRICS for suffix in ("", "_over_u", "_spread")]
# name -> (request, target speedup on 2 cores): the default grid, and a small grid of 16 configurations.
GRIDS = {
    "default": ({"model": "otflow", "timesteps": [8, 32, 128]}, 1.8),
    "16 configurations": (
        {
            "model": "otflow",
            "options": {"hidden": "32"},
            "timesteps": [8, 16],
            "dtype": ["bfloat16", "float32"],
            "scaling": ["none"],
            "library": ["torchdiffeq", "native"],
            "method": ["euler", "rk4"],
        },
        1.5,
    ),
}


def timed_sweep(request: config.SweepConfig, out: Path) -> tuple[float, pd.DataFrame, int]:
    started = time.perf_counter()
    outcome = engine.run(engine.plan(request), out)
    return time.perf_counter() - started, outcome.results, outcome.reference_solves


def compare(name: str, base: dict, target: float, workers: int) -> None:
    base = {**base, "device": "cpu"}
    print(f"\n== {name}: load average {os.getloadavg()[0]:.2f} (quiet: below 1.5)", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        one_s, one, one_refs = timed_sweep(config.validate({**base, "workers": 1}), Path(folder) / "one")
        many_s, many, many_refs = timed_sweep(config.validate({**base, "workers": workers}), Path(folder) / "many")

    keys = list(CONFIG_COLUMNS)
    side_by_side = one[keys + ["status", "sol_rel_err", "grad_params_rel_err"]].merge(
        many[keys + ["status", "sol_rel_err", "grad_params_rel_err"]], on=keys, suffixes=(" [1]", f" [{workers}]")
    )
    print(side_by_side.drop(columns=["model", "mode"]).to_string(index=False, float_format=lambda v: f"{v:.6e}"))
    same_rows = one[keys + ["status", "failure_class"]].equals(many[keys + ["status", "failure_class"]])
    unequal = [c for c in ERROR_COLUMNS if not one[c].equals(many[c])]
    speedup = one_s / many_s
    print(f"grid: {len(one)} configurations ({name}: {base})")
    print(f"--workers 1            {one_s:8.2f} s  ({one_refs} reference solves)")
    print(f"--workers {workers:<12d} {many_s:8.2f} s  ({many_refs} reference solves)")
    print(
        f"speedup                {speedup:8.2f}x (target >= {target}x on 2 cores: "
        f"{'met' if speedup >= target else 'NOT met'})"
    )
    print(
        f"identical results      {'yes' if same_rows and not unequal else 'NO'}: configurations, statuses and all "
        f"{len(ERROR_COLUMNS)} error columns"
        + (f"; differing: {', '.join(unequal)}" if unequal else " equal bit for bit")
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", choices=[*GRIDS, "custom", "both"], default="both")
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--timesteps", help="n_timesteps (overrides the grid's)")
    parser.add_argument("--dtype", help="dtypes, for --grid custom")
    parser.add_argument("--target", type=float, default=1.5, help="target speedup, for --grid custom")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    print(f"machine: {os.cpu_count()} cores")
    if args.grid == "custom":
        grids = {
            "custom": (
                {
                    "model": args.model,
                    "options": parse_option_pairs(args.option),
                    **({"dtype": args.dtype.split(",")} if args.dtype else {}),
                },
                args.target,
            )
        }
    else:
        grids = GRIDS if args.grid == "both" else {args.grid: GRIDS[args.grid]}
    for name, (request, target) in grids.items():
        if args.timesteps:
            request = {**request, "timesteps": [int(n) for n in args.timesteps.split(",")]}
        compare(name, request, target, args.workers)


if __name__ == "__main__":
    main()
