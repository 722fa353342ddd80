"""Speedup of `--workers 2` over `--workers 1`, and whether both give the same numbers.

Runs one grid twice in this one run, each into a fresh folder: sequentially in this process (what
`--workers 1` does) and with two worker processes (`--workers 2`: spawned workers, one torch thread
each on 2 cores, work split by reference group). Prints both wall times (worker start-up included),
the speedup (target >= 1.6x on 2 cores), both runs' errors side by side, and whether every error
column is equal bit for bit. Run it on an otherwise quiet machine.

    python bench/parallel.py                     # default otflow, n_timesteps 8,32,128: 42 configurations
    python bench/parallel.py --timesteps 8,32 -o hidden=64
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from roundoff_analyzer import config, sweep
from roundoff_analyzer.grid import CONFIG_COLUMNS
from roundoff_analyzer.measure import ERROR_METRICS
from roundoff_analyzer.models import parse_option_pairs

ERROR_COLUMNS = [f"{name}{suffix}" for name in ERROR_METRICS for suffix in ("", "_over_u", "_spread")]
TARGET = 1.6


def timed_sweep(request: config.SweepConfig, out: Path) -> tuple[float, pd.DataFrame, int]:
    started = time.perf_counter()
    outcome = sweep.run(sweep.plan(request), out)
    return time.perf_counter() - started, outcome.results, outcome.reference_solves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--timesteps", default="8,32,128")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    base = {"model": args.model, "options": parse_option_pairs(args.option), "device": "cpu",
            "timesteps": [int(n) for n in args.timesteps.split(",")]}  # fmt: skip
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} (quiet: below 1.5)")
    with tempfile.TemporaryDirectory() as folder:
        one_s, one, one_refs = timed_sweep(config.validate({**base, "workers": 1}), Path(folder) / "one")
        many_s, many, many_refs = timed_sweep(config.validate({**base, "workers": args.workers}), Path(folder) / "many")

    keys = list(CONFIG_COLUMNS)
    side_by_side = one[keys + ["status", "sol_rel_err", "grad_params_rel_err"]].merge(
        many[keys + ["status", "sol_rel_err", "grad_params_rel_err"]], on=keys, suffixes=(" [1]", f" [{args.workers}]")
    )
    print(side_by_side.drop(columns=["model", "mode"]).to_string(index=False, float_format=lambda v: f"{v:.6e}"))

    same_rows = one[keys + ["status", "failure_class"]].equals(many[keys + ["status", "failure_class"]])
    unequal = [c for c in ERROR_COLUMNS if not one[c].equals(many[c])]
    speedup = one_s / many_s
    print()
    options = ' '.join(f'-o {pair}' for pair in args.option)
    print(f"grid: {len(one)} configurations ({' '.join(filter(None, [args.model, options]))}, n_timesteps {args.timesteps})")
    print(f"--workers 1            {one_s:8.2f} s  ({one_refs} reference solves)")
    print(f"--workers {args.workers:<12d} {many_s:8.2f} s  ({many_refs} reference solves)")
    print(f"speedup                {speedup:8.2f}x (target >= {TARGET}x on 2 cores: {'met' if speedup >= TARGET else 'NOT met'})")
    print(f"identical results      {'yes' if same_rows and not unequal else 'NO'}: configurations, statuses and all "
          f"{len(ERROR_COLUMNS)} error columns" + (f"; differing: {', '.join(unequal)}" if unequal else " equal bit for bit"))  # fmt: skip


if __name__ == "__main__":
    main()
