"""The whole `roundoff sweep` command timed with this checkout and with a baseline checkout, alternating (A, B, A, B,
...), each run into a fresh folder: wall time, the command's CPU time (its processes', workers included) and the load
average beside each, then the per-pair ratios and their median; finally whether the two checkouts' last results are
equal in every column but the times and the memory.

The baseline is another checkout of the project (a `git worktree add /tmp/base <commit>`), run with this environment
and PYTHONPATH at it; the checkout's own roundoff_analyzer is what its processes import (the workers check it).

    python bench/sweep_side_by_side.py --baseline /tmp/base                    # the default sweep, 3 pairs
    python bench/sweep_side_by_side.py --baseline /tmp/base --pairs 4 -- --workers 1
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parents[1]


def environment(checkout: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])}


def imported_from(checkout: Path, folder: Path) -> Path:
    """The folder roundoff_analyzer is imported from with `checkout`'s environment, run in `folder`."""
    code = "import roundoff_analyzer; print(roundoff_analyzer.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=environment(checkout), cwd=folder, check=True, capture_output=True, text=True
    )
    return Path(done.stdout.strip()).parents[1]


def timed_sweep(checkout: Path, out: Path, extra: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s of the command and its children, 1-minute load average before it started)."""
    env = environment(checkout)
    command = [sys.executable, "-c", "from roundoff_cli.app import main; main()", "sweep", "--model", "otflow"]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # Run from the output's folder: `python -c` puts the working directory first on the path, before PYTHONPATH.
    subprocess.run([*command, *extra, "--out", str(out)], env=env, check=True, capture_output=True, cwd=out.parent)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, load


def same_results(a: Path, b: Path) -> str:
    left, right = pd.read_parquet(a / "results.parquet"), pd.read_parquet(b / "results.parquet")
    columns = [c for c in left.columns if not c.startswith("time_") and c != "peak_memory_bytes"]
    if list(left.columns) != list(right.columns):
        return "the columns differ"
    try:
        pd.testing.assert_frame_equal(left[columns], right[columns], check_exact=True)
    except AssertionError as exc:
        return f"differ: {str(exc).splitlines()[0]}"
    return f"equal in all {len(columns)} columns but the times and the memory ({len(left)} rows)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout's root")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="more `roundoff sweep` options, after --")
    args = parser.parse_args()
    checkouts = {"this": HERE, "baseline": args.baseline.resolve()}
    ratios_wall, ratios_cpu = [], []
    with tempfile.TemporaryDirectory() as folder:
        for name, checkout in checkouts.items():
            found = imported_from(checkout, Path(folder))
            assert found == checkout, f"{name}: roundoff_analyzer imported from {found}, not {checkout}"
        for pair in range(args.pairs):
            measured = {}
            # Each pair starts with the other checkout than the last, so that a drift of the load falls on both.
            order = ["this", "baseline"] if pair % 2 == 0 else ["baseline", "this"]
            for name in order:
                measured[name] = timed_sweep(checkouts[name], Path(folder) / f"{name}-{pair}", args.extra)
                wall, cpu, load = measured[name]
                print(f"pair {pair + 1} {name:<8} wall {wall:6.1f} s  CPU {cpu:6.1f} s  load {load:5.2f}", flush=True)
            ratios_wall.append(measured["this"][0] / measured["baseline"][0])
            ratios_cpu.append(measured["this"][1] / measured["baseline"][1])
            print(f"pair {pair + 1} this/baseline: wall {ratios_wall[-1]:.2f}x, CPU {ratios_cpu[-1]:.2f}x", flush=True)
        last = args.pairs - 1
        print(
            f"median this/baseline over {args.pairs} pairs: wall {statistics.median(ratios_wall):.2f}x "
            f"({min(ratios_wall):.2f}-{max(ratios_wall):.2f}), CPU {statistics.median(ratios_cpu):.2f}x "
            f"({min(ratios_cpu):.2f}-{max(ratios_cpu):.2f})"
        )
        print("results:", same_results(Path(folder) / f"this-{last}", Path(folder) / f"baseline-{last}"))


if __name__ == "__main__":
    main()
