"""What the per-module measurement costs, against another checkout's, and that the sweep without it is not slower.

Runs the default sweep (`roundoff sweep --model otflow`, or the arguments given after --) through the command line, with
this checkout and with a baseline checkout (`--baseline`, e.g. the main branch's worktree, run with
`--baseline-python`), each without and with `--per-module`, alternating, `--rounds` times each. Prints each run's wall
time, its time running configurations (as the sweep reports them) and the CPU time of the command and its worker
processes, the load average before each, and the ratios measured in this one run (medians over the rounds):
  - this checkout without --per-module / the baseline (target: not above 1 beyond the noise of the alternation);
  - with --per-module / without it, for each checkout (the overhead of watching every module);
  - this checkout with --per-module / the baseline with it.
On a machine shared with other jobs, read the CPU time: wall time waits for the cores.

    python bench/per_module_cost.py --baseline /path/to/main [--baseline-python python3] [--rounds 2] [-- --model otflow
    ...]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TOOK = re.compile(r"the command took ([0-9.]+) s, ([0-9.]+) s of it running configurations")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(python: str, cwd: Path, args: list[str], out: Path) -> tuple[float, float, float, str]:
    """Wall seconds of the command, of its configurations, CPU seconds of the command and its processes, load before."""
    load, cpu = os.getloadavg()[0], _children_cpu()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    done = subprocess.run(
        [python, "-m", "roundoff_cli", "sweep", *args, "--out", str(out), "--no-report"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    found = TOOK.search(" ".join(done.stdout.split()))
    if done.returncode != 0 or found is None:
        sys.exit(f"the sweep in {cwd} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    # CPU time counts the sweep's worker processes too (reaped by it); on a machine shared with other jobs it moves far
    # less than wall time, which waits for the cores.
    return float(found.group(1)), float(found.group(2)), _children_cpu() - cpu, f"{load:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the code to compare with")
    parser.add_argument("--baseline-python", default="python3", help="the Python that runs the baseline's code")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("sweep", nargs="*", default=["--model", "otflow"], help="the sweep's arguments (after --)")
    args = parser.parse_args()
    names = ("baseline", "this", "baseline --per-module", "this --per-module")
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        checkouts = {"baseline": (args.baseline_python, args.baseline), "this": (sys.executable, HERE)}
        plan = [(name, *checkouts[name.split()[0]], name.split()[1:]) for name in names] * args.rounds
        for i, (name, python, cwd, extra) in enumerate(plan):
            took, running, cpu, load = run(python, cwd, [*args.sweep, *extra], Path(folder) / f"run{i}")
            times[name].append((took, running, cpu))
            print(
                f"{name:22s} command {took:7.1f} s, configurations {running:7.1f} s, CPU {cpu:7.1f} s  (load average "
                f"before: {load})",
                flush=True,
            )
    median = {name: [statistics.median(run[i] for run in v) for i in range(3)] for name, v in times.items()}

    def ratios(a: str, b: str) -> str:
        return ", ".join(f"{x / y:.2f}" for x, y in zip(median[a], median[b]))

    print("ratios of the medians (command wall, configurations wall, CPU):")
    print(f"  this / baseline, without --per-module: {ratios('this', 'baseline')}")
    print(f"  --per-module / without, baseline: {ratios('baseline --per-module', 'baseline')}")
    print(f"  --per-module / without, this: {ratios('this --per-module', 'this')}")
    print(f"  this / baseline, with --per-module: {ratios('this --per-module', 'baseline --per-module')}")


if __name__ == "__main__":
    main()
