"""Emulated against hardware float16 arithmetic: wall time of the same grid, measured in one run.

Runs the float16 part of the default otflow grid (n_timesteps 8, 32, 128 x euler, rk4 x the default
grid's float16 (library, scaling) pairs) twice in this process, once with `--arithmetic hardware` and once
with `--arithmetic emulated`, and prints each sweep's wall time, the time inside the runs' forward
and backward passes, and the ratios emulated / hardware (target: at most 1.5).

    python bench/emulation.py [--model otflow] [-o key=value ...] [--timesteps 8,32,128]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from roundoff_analyzer.axes.grid import DEFAULT_TRIPLES
from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.execution import engine
from roundoff_analyzer.planning import config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--timesteps", default=",".join(map(str, config.DEFAULT_TIMESTEPS)))
    args = parser.parse_args()

    pairs = [(library, scaling) for library, dtype, scaling in DEFAULT_TRIPLES if dtype == "float16"]
    timings = {}
    for arithmetic in ("hardware", "emulated"):
        wall = inside = 0.0
        for library in dict.fromkeys(library for library, _ in pairs):
            request = config.validate(
                {
                    "model": args.model,
                    "options": parse_option_pairs(args.option),
                    "timesteps": [int(n) for n in args.timesteps.split(",")],
                    "library": [library],
                    "dtype": ["float16"],
                    "scaling": [s for lib, s in pairs if lib == library],
                    "arithmetic": [arithmetic],
                }
            )
            with tempfile.TemporaryDirectory() as folder:
                outcome = engine.run(engine.plan(request), Path(folder) / "sweep")
            table = outcome.results
            assert (table.status == "ok").all(), table[table.status != "ok"][["library", "failure_message"]]
            wall += outcome.wall_seconds - outcome.reference_seconds
            inside += float((table.time_forward_s + table.time_backward_s).sum())
        timings[arithmetic] = (wall, inside)
        print(f"{arithmetic:9s} wall time (without references) {wall:8.2f} s   forward+backward {inside:8.2f} s")
    (hw_wall, hw_inside), (em_wall, em_inside) = timings["hardware"], timings["emulated"]
    print(
        f"emulated / hardware: wall time {em_wall / hw_wall:.2f}x, forward+backward {em_inside / hw_inside:.2f}x "
        "(target <= 1.5x)"
    )


if __name__ == "__main__":
    main()
