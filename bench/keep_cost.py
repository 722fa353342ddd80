"""What keeping modules in float32 costs per vector-field evaluation, against another checkout's keep_float32.

Evaluates OT-Flow's field (default options) forward and backward under float16 autocast, on one thread, keeping each
value in float32 as a kept configuration's timed runs do, in a fresh process per measurement: this checkout and a
baseline checkout (`--baseline`, run with `--baseline-python`) alternating, `--rounds` times. Prints CPU milliseconds
per evaluation and, per value, the ratio of the medians (this / baseline). A kept module whose weights the model uses
outside its forward has those uses run in float32 here (a TorchFunctionMode while the model's forward runs).

    python bench/keep_cost.py --baseline /path/to/main [--baseline-python python3] [--rounds 3]
        [--values none,potential.opening]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
EVALUATE = """
import contextlib, sys, time, warnings
import torch
warnings.simplefilter("ignore")
torch.set_num_threads(1)
from roundoff_analyzer.axes.keep_float32 import kept_in_float32
from roundoff_analyzer.axes.models import MODELS
model = MODELS.get("otflow")
problem = model.build(model.options_type(), torch.device("cpu"))
func, y0, t = problem.func, problem.y0, torch.tensor(0.5)
value, n = sys.argv[1], int(sys.argv[2])

def evaluate(count):
    for _ in range(count):
        y = y0.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.float16):
            out = func(t, y)
        out.float().pow(2).sum().backward()

with kept_in_float32(func, value) if value != "none" else contextlib.nullcontext():
    evaluate(20)
    start = time.process_time()
    evaluate(n)
    print((time.process_time() - start) / n * 1e3)
"""


def measure(python: str, cwd: Path, value: str, n: int) -> float:
    done = subprocess.run(
        [python, "-c", EVALUATE, value, str(n)],
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"the evaluation in {cwd} failed: {done.stderr.strip()[-500:]}")
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the code to compare with")
    parser.add_argument("--baseline-python", default="python3", help="the Python that runs the baseline's code")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--evaluations", type=int, default=400)
    parser.add_argument("--values", default="none,potential.opening,potential.layers.0")
    args = parser.parse_args()
    checkouts = {"baseline": (args.baseline_python, args.baseline), "this": (sys.executable, HERE)}
    found: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for value in args.values.split(","):
            for name, (python, cwd) in checkouts.items():
                ms = measure(python, cwd, value, args.evaluations)
                found.setdefault((name, value), []).append(ms)
                print(f"{name:8s} keeping {value:20s} {ms:6.3f} ms per evaluation", flush=True)
    for value in args.values.split(","):
        this, baseline = (statistics.median(found[(name, value)]) for name in ("this", "baseline"))
        print(f"keeping {value}: this / baseline {this / baseline:.2f} (medians {this:.3f} and {baseline:.3f} ms)")


if __name__ == "__main__":
    main()
