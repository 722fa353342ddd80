"""Wall time of the default sweep with the tool's thread choice, with 1 thread and with torch's default,
on this machine as it is and with one core kept busy by a spinning process this script starts and stops.

Each run is `roundoff sweep --model otflow --no-report` in a fresh process (torch's import included),
into a fresh folder; the settings alternate within each round, so a change in the machine's load hits
them alike. Prints every time, the median per setting, the ratios against the targets below
(busy: the choice at most 1.25x the best setting; quiet: the choice no slower than torch's default,
which is what the tool did before it chose), and whether all runs gave the same errors bit for bit.

    python bench/threads.py                          # n_timesteps 8,32,128: 42 configurations, 1 round
    python bench/threads.py --timesteps 8,32 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from roundoff_analyzer.core.threads import available_cores
from roundoff_analyzer.measuring.columns import ERROR_METRICS

BUSY_TARGET = 1.25  # the choice against the best thread count, one core busy
QUIET_TARGET = 1.0  # the choice against torch's default, quiet
ERROR_COLUMNS = [f"{name}{suffix}" for name in ERROR_METRICS for suffix in ("", "_over_u")]


def timed_sweep(args: argparse.Namespace, threads: int | None, out: Path) -> tuple[float, pd.DataFrame, dict]:
    command = [
        sys.executable,
        "-m",
        "roundoff_cli",
        "sweep",
        "--model",
        "otflow",
        "--timesteps",
        args.timesteps,
        "--device",
        "cpu",
        "--no-report",
        "--out",
        str(out),
        *(["--threads", str(threads)] if threads else []),
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    return (
        seconds,
        pd.read_parquet(out / "results.parquet"),
        json.loads((out / "manifest.json").read_text())["execution"],
    )


def spinner() -> subprocess.Popen:
    """A process that keeps one core busy until it is stopped."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", default="8,32,128")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    cores = available_cores()
    settings = {"choice": None, "1 thread": 1, f"{cores} threads (torch's default)": cores}
    print(
        f"machine: {cores} cores; load average before: {os.getloadavg()[0]:.2f} (a quiet 2-core machine stays below 1)"
    )
    print(f"grid: roundoff sweep --model otflow --timesteps {args.timesteps} --no-report, {args.rounds} round(s)")
    times: dict[tuple[str, str], list[float]] = {}
    tables: list[pd.DataFrame] = []
    chosen = None
    with tempfile.TemporaryDirectory() as folder:
        for condition in ("no extra load", "one core busy"):
            busy = spinner() if condition != "no extra load" else None
            try:
                for round_ in range(args.rounds):
                    for name, threads in settings.items():
                        out = Path(folder) / f"{condition}-{name}-{round_}".replace(" ", "_")
                        seconds, table, execution = timed_sweep(args, threads, out)
                        times.setdefault((condition, name), []).append(seconds)
                        tables.append(table)
                        chosen = execution if threads is None else chosen
                        print(
                            f"  {condition:14s} {name:28s} {seconds:8.2f} s   (load {os.getloadavg()[0]:.2f})",
                            flush=True,
                        )
            finally:
                if busy is not None:
                    busy.terminate()
                    busy.wait()

    print(f"\nthe tool's choice: {chosen['threads']} thread(s) ({chosen['threads_reason']})")
    median = {key: statistics.median(values) for key, values in times.items()}
    for condition in ("no extra load", "one core busy"):
        row = "  ".join(f"{name} {median[(condition, name)]:.2f} s" for name in settings)
        print(f"{condition:14s} median: {row}")
    default = f"{cores} threads (torch's default)"
    busy_ratio = median[("one core busy", "choice")] / min(median[("one core busy", name)] for name in settings)
    quiet_ratio = median[("no extra load", "choice")] / median[("no extra load", default)]
    print(
        f"busy:  choice / best setting     = {busy_ratio:.2f}x (target <= {BUSY_TARGET}: "
        f"{'met' if busy_ratio <= BUSY_TARGET else 'NOT met'})"
    )
    print(
        f"no extra load: choice / torch's default = {quiet_ratio:.2f}x (target <= {QUIET_TARGET}: "
        f"{'met' if quiet_ratio <= QUIET_TARGET else 'NOT met'})"
    )
    print(
        "busy:  torch's default / choice  = "
        f"{median[('one core busy', default)] / median[('one core busy', 'choice')]:.2f}x"
    )
    unequal = [c for c in ERROR_COLUMNS if not all(t[c].equals(tables[0][c]) for t in tables[1:])]
    print(
        f"identical results: {'yes, all' if not unequal else 'NO'} {len(tables)} runs, {len(ERROR_COLUMNS)} error "
        "columns" + (f"; differing: {', '.join(unequal)}" if unequal else " equal bit for bit")
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
