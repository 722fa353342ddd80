"""How `roundoff report` grows with the number of formats swept: its time and size at a few and at many.

Sweeps the linear model (native, no scaling, euler, n_timesteps 2) over FEW and then MANY eXmY formats, writes each
report, and prints, measured in this one run: the report's seconds (wall and CPU), its size in bytes and its figures'
pixel sizes, and the ratios many / few. A report bounded in size and time keeps the ratios near 1 although the
formats multiply (targets for 80 formats: at most 10 s and 40 KB).

    python bench/report_scaling.py [--few 8] [--many 80]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from matplotlib.image import imread

from roundoff_analyzer.execution import engine
from roundoff_analyzer.planning import config
from roundoff_analyzer.report import write_report


def formats(count: int) -> list[str]:
    """`count` formats, 5 to 8 exponent bits and 4 to 23 mantissa bits, spread over the exponent widths."""
    every = [f"e{e}m{m}" for m in range(4, 24) for e in range(5, 9)]
    return every[:count]


def measure(folder: Path, count: int) -> dict[str, float]:
    request = config.validate(
        {
            "model": "linear",
            "library": ["native"],
            "scaling": ["none"],
            "method": ["euler"],
            "timesteps": [2],
            "dtype": formats(count),
        }
    )
    engine.run(engine.plan(request), folder)
    wall, cpu = time.perf_counter(), time.process_time()
    report = write_report(folder)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    widest = max(imread(p).shape[1] for p in (folder / "figures").glob("*.png"))
    return {"seconds": wall, "cpu seconds": cpu, "bytes": report.stat().st_size, "widest figure (px)": widest}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--few", type=int, default=8)
    parser.add_argument("--many", type=int, default=80)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        few = measure(Path(folder) / "few", args.few)
        many = measure(Path(folder) / "many", args.many)
    for key in few:
        print(
            f"{key:>20}: {args.few} formats {few[key]:10.3g}   {args.many} formats {many[key]:10.3g}   ratio "
            f"{many[key] / few[key]:.2f}"
        )


if __name__ == "__main__":
    main()
