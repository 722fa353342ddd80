"""The whole `roundoff sweep` command timed with this checkout and with other checkouts, in rounds that rotate the
order (A, B, C, then B, C, A, ...), each run into a fresh folder: wall time, the command's CPU time (its processes',
workers included), the 1-minute load average before it and the command's own summary line; then the per-round ratios
of this checkout to each other one and their median; finally whether this checkout's last tables equal each other
checkout's in every column but the times, the memory and the load.

Each checkout runs with an interpreter of its own (its `.venv/bin/python`, or the one given after `=`), from an empty
folder and without PYTHONPATH, so that each imports its own roundoff_analyzer: a checkout as old as beb49af has
another package layout, and importing the current one beside it would mix the two. Checked before the first round.
Make one with its own environment (the system's site-packages hold torch and the rest):

    git worktree add --detach /work/wt/beb49af beb49af
    cd /work/wt/beb49af && python -m venv --system-site-packages .venv
    .venv/bin/pip uninstall -y setuptools   # the venv's own is too old for pyproject.toml; the system's builds it
    .venv/bin/pip install --no-deps --no-build-isolation -e .

    python bench/sweep_side_by_side.py --baseline /work/wt/beb49af                 # the default sweep, 3 rounds
    python bench/sweep_side_by_side.py --baseline /work/wt/main --baseline /work/wt/beb49af --rounds 4
    python bench/sweep_side_by_side.py --baseline /work/wt/beb49af=/usr/bin/python3 -- --workers 1
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
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parents[1]
# Columns that differ between two runs of the same code: what the runs took and held, and the machine's load.
VARYING = ("time_", "peak_memory_bytes", "load_average")
TABLES = ("results", "param_errors", "profile")


@dataclass(frozen=True)
class Checkout:
    name: str
    root: Path
    python: Path


def checkout(text: str, name: str) -> Checkout:
    root, _, python = text.partition("=")
    folder = Path(root).resolve()
    interpreter = Path(python) if python else folder / ".venv" / "bin" / "python"
    if not interpreter.is_file():
        sys.exit(f"{folder}: no interpreter at {interpreter}; give one as {root}=/path/to/python")
    return Checkout(name, folder, interpreter)


def environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def imported_from(code: Checkout, folder: Path) -> Path:
    """The checkout whose roundoff_analyzer `code`'s interpreter imports, run in `folder`."""
    line = "import roundoff_analyzer, roundoff_cli; print(roundoff_analyzer.__file__); print(roundoff_cli.__file__)"
    done = subprocess.run(
        [str(code.python), "-c", line], env=environment(), cwd=folder, check=True, capture_output=True, text=True
    )
    package, cli = (Path(path).parents[1] for path in done.stdout.split())
    if package != cli:
        sys.exit(f"{code.name}: roundoff_analyzer from {package}, roundoff_cli from {cli}")
    return package


def timed_sweep(code: Checkout, out: Path, extra: list[str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s of the command and its children, 1-minute load average before it started, its summary line)."""
    command = [str(code.python), "-m", "roundoff_cli", "sweep", "--model", "otflow", *extra, "--out", str(out)]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # Run from the output's (empty) parent folder: `-m` puts the working directory first on the path.
    done = subprocess.run(command, env=environment(), check=True, capture_output=True, text=True, cwd=out.parent)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    summary = next((line for line in done.stdout.splitlines() if "the command took" in line), "")
    return wall, cpu, load, next((part.strip() for part in summary.split(";") if "the command took" in part), "")


def same_tables(a: Path, b: Path) -> str:
    said = []
    for table in TABLES:
        if not (a / f"{table}.parquet").is_file() or not (b / f"{table}.parquet").is_file():
            said.append(f"{table}: not in both")
            continue
        left, right = pd.read_parquet(a / f"{table}.parquet"), pd.read_parquet(b / f"{table}.parquet")
        if list(left.columns) != list(right.columns):
            only = sorted(set(left.columns) ^ set(right.columns))
            said.append(f"{table}: the columns differ ({len(only)} in one only: {', '.join(only[:6])} ...)")
            continue
        columns = [c for c in left.columns if not c.startswith(VARYING)]
        try:
            pd.testing.assert_frame_equal(left[columns], right[columns], check_exact=True)
        except AssertionError as exc:
            said.append(f"{table}: differ: {' '.join(str(exc).split())[:300]}")
            continue
        said.append(f"{table}: equal in all {len(columns)} columns but times/memory/load ({len(left)} rows)")
    return "; ".join(said)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--baseline", action="append", required=True, help="another checkout's root[=its python]; repeatable"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("extra", nargs="*", help="more `roundoff sweep` options, after --")
    args = parser.parse_args()
    this = Checkout("this", HERE, Path(sys.executable))
    others = [checkout(text, f"base{i + 1}") for i, text in enumerate(args.baseline)]
    codes = [this, *others]
    print(f"{os.cpu_count()} CPUs; sweep --model otflow {' '.join(args.extra)}")
    ratios: dict[str, tuple[list[float], list[float]]] = {code.name: ([], []) for code in others}
    walls: dict[str, list[float]] = {code.name: [] for code in codes}
    with tempfile.TemporaryDirectory() as folder:
        for code in codes:
            found = imported_from(code, Path(folder))
            if found != code.root:
                sys.exit(f"{code.name}: roundoff_analyzer imported from {found}, not {code.root}")
            print(f"{code.name:<6} {code.root} ({code.python})")
        started = time.perf_counter()
        for round_ in range(args.rounds):
            measured = {}
            # Each round starts one further along, so that a drift of the load falls on every checkout alike.
            for code in codes[round_ % len(codes) :] + codes[: round_ % len(codes)]:
                run = Path(folder) / f"{code.name}-{round_}"
                run.parent.mkdir(exist_ok=True)
                measured[code.name] = wall, cpu, load, summary = timed_sweep(code, run, args.extra)
                walls[code.name].append(wall)
                print(
                    f"round {round_ + 1} {code.name:<6} wall {wall:6.1f} s  CPU {cpu:6.1f} s  load {load:5.2f}  "
                    f"| {summary}",
                    flush=True,
                )
            for code in others:
                ratios[code.name][0].append(measured["this"][0] / measured[code.name][0])
                ratios[code.name][1].append(measured["this"][1] / measured[code.name][1])
                print(
                    f"round {round_ + 1} this/{code.name}: wall {ratios[code.name][0][-1]:.2f}x, "
                    f"CPU {ratios[code.name][1][-1]:.2f}x",
                    flush=True,
                )
        print(f"{args.rounds} rounds in {time.perf_counter() - started:.0f} s")
        for code in codes:
            print(f"median wall {code.name:<6} {statistics.median(walls[code.name]):6.1f} s  ({code.root.name})")
        for code in others:
            wall, cpu = ratios[code.name]
            print(
                f"median this/{code.name} ({code.root.name}) over {args.rounds} rounds: wall "
                f"{statistics.median(wall):.2f}x ({min(wall):.2f}-{max(wall):.2f}), CPU {statistics.median(cpu):.2f}x "
                f"({min(cpu):.2f}-{max(cpu):.2f})"
            )
        last = args.rounds - 1
        for code in others:
            mine, theirs = Path(folder) / f"this-{last}", Path(folder) / f"{code.name}-{last}"
            print(f"tables this vs {code.name}:", same_tables(mine, theirs))


if __name__ == "__main__":
    main()
