"""The memory bounds against the measured peak, in one run: three configurations of the default otflow grid
(n_timesteps 8, 32, 128 x rk4 x torchdiffeq float16 without scaling) and the yardsticks' fine reference.

For each configuration: the bound a configuration is refused by (measuring/memory.py's configuration_bytes: its
float64 reference trajectory and its own float32 one) and the peak the CPU allocator reached during the run
(`--cpu-memory`, torch.profiler's memory events; the reference, solved before, is not in it). For the fine reference:
fine_reference_bytes against the peak of its larger solve. A bound is a lower bound: every ratio peak / bound should
be at least 1 for the fine reference, and the table says how far below the peak each bound lies.

    python bench/memory_estimate.py [--timesteps 8,32,128]
"""

from __future__ import annotations

import argparse
import tempfile

import roundoff_analyzer as ra
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.execution.executors import EXECUTORS
from roundoff_analyzer.measuring.cpu_memory import cpu_peak_memory
from roundoff_analyzer.measuring.discretisation import fine_steps, solve_on_fine_grid
from roundoff_analyzer.measuring.memory import configuration_bytes, fine_reference_bytes
from roundoff_analyzer.planning.config import validate
from roundoff_analyzer.planning.sweep_plan import make_plan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timesteps", default="8,32,128")
    args = parser.parse_args()
    timesteps = [int(n) for n in args.timesteps.split(",")]
    settings = dict(
        model="otflow",
        timesteps=timesteps,
        method=["rk4"],
        library=["torchdiffeq"],
        dtype=["float16"],
        scaling=["none"],
        device="cpu",
        cpu_memory=True,
        noise_batches=0,
    )
    with tempfile.TemporaryDirectory() as folder:
        result = ra.sweep(out=f"{folder}/sweep", report=False, progress=False, **settings)
    plan = make_plan(validate(settings), EXECUTORS)
    n_values = plan.problem.y0.numel()
    print(f"otflow {plan.options.model_dump()}: y0 holds {n_values} values")
    print(f"{'what':<34} {'bound':>12} {'peak':>12} {'peak / bound':>13}")
    for row in result.results.itertuples():
        bound, peak = configuration_bytes(row.n_timesteps, n_values), row.peak_memory_bytes
        print(
            f"{'rk4 torchdiffeq float16 n=' + str(row.n_timesteps):<34} {bound:>12,} {peak:>12,} {peak / bound:>13.2f}"
        )
    copies = ProblemCopies(plan.problem)
    with cpu_peak_memory() as peak:
        solve_on_fine_grid(copies, timesteps, fine_steps(timesteps), plan.device)
    bound = fine_reference_bytes(timesteps, n_values)
    print(
        f"{'fine reference (' + str(fine_steps(timesteps)) + ' RK4 steps)':<34} {bound:>12,} {peak.bytes:>12,} "
        f"{peak.bytes / bound:>13.2f}"
    )


if __name__ == "__main__":
    main()
