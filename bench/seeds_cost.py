"""The default sweep's wall time with `--seeds 0,1,2` against the default (one seed), interleaved (A B A B ...) in
one run, with the load average beside each timing: the ratio the README's "Quick start" time is read against.

    python bench/seeds_cost.py [--rounds 2] [--out /tmp/seeds-cost] [-- SWEEP OPTIONS, e.g. -n 8,32 --no-timing]

Each round runs `roundoff sweep --model otflow` as a user would (the timing pass included), then the same with
`--seeds 0,1,2`, each into a fresh folder under --out (kept: the last round's folders hold the tables and reports).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

SETUPS = {"default": [], "seeds 0,1,2": ["--seeds", "0,1,2"]}


def run(args: list[str], out: Path) -> float:
    """Seconds of one `roundoff sweep` with `args`, its output kept beside its folder; a failed one stops the bench."""
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "roundoff_cli", "sweep", "--model", "otflow", *args, "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    (out.parent / f"{out.name}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}); see {out.parent / f'{out.name}.log'}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("/tmp/seeds-cost"))
    parser.add_argument("sweep_options", nargs="*", help="more `roundoff sweep` options, the same for both")
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    times: dict[str, list[float]] = {name: [] for name in SETUPS}
    for round_ in range(options.rounds):
        for name, args in SETUPS.items():
            load = os.getloadavg()[0]
            seconds = run([*args, *options.sweep_options], options.out / f"{name.split()[0]}-{round_}")
            times[name].append(seconds)
            print(f"round {round_}: {name:12s} {seconds:7.1f} s  (load average {load:.2f} as it began)", flush=True)
    ratios = [b / a for a, b in zip(times["default"], times["seeds 0,1,2"], strict=True)]
    print(
        f"--seeds 0,1,2 over the default: {statistics.median(ratios):.2f}x (median of {len(ratios)} rounds; "
        f"each: {', '.join(f'{r:.2f}x' for r in ratios)}); load average now {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
