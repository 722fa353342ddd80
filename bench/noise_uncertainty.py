"""How well the sweep's stated uncertainty of the gradient noise (`grad_noise_uncertainty`) matches the spread of the
noise itself over independent draws of its batches. Numbers from one run, on this machine (float64 throughout).

    python bench/noise_uncertainty.py                                             # the default otflow, 100 draws
    python bench/noise_uncertainty.py --model bench/mlp_field.py:mlp_field --draws 200

Draw k (k = 0 … D − 1) measures the noise as a sweep does, from B batches of its own: the model's batches
k·B + 1 … (k + 1)·B, none shared with another draw. Printed: the relative standard deviation of `grad_noise_rel`
over the D draws (what the uncertainty should be), with a bootstrap 95% interval over the draws; the uncertainty a
sweep states (the median, and the 5th and 95th percentiles over the draws) and its ratio to that spread; and
1/sqrt(2(B − 1)), the spread of a standard deviation estimated along one direction.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from roundoff_analyzer.axes.models import parse_option_pairs
from roundoff_analyzer.axes.modes import ProblemCopies
from roundoff_analyzer.execution import engine
from roundoff_analyzer.measuring.gradient_noise import NOISE_TIMESTEPS, batch_gradients, noise_from, problem_batch_size
from roundoff_analyzer.planning import config

RESAMPLES = 2000


def relative_sd(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="otflow")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--batches", type=int, default=16, help="B, the batches of one draw (--noise-batches)")
    args = parser.parse_args()
    torch.set_num_threads(1)

    plan = engine.plan(
        config.validate(
            {"model": args.model, "options": parse_option_pairs(args.option), "timesteps": [NOISE_TIMESTEPS]}
        )
    )
    copies = ProblemCopies(plan.problem)
    count = args.draws * args.batches
    started = time.perf_counter()
    gradients, stopped = batch_gradients(copies, NOISE_TIMESTEPS, range(1, count + 1), plan.device)
    seconds = time.perf_counter() - started
    if stopped is not None or len(gradients) < count:
        raise SystemExit(f"the model gave {len(gradients)} of the {count} batches asked for: {stopped}")
    draws = [
        noise_from(gradients[k * args.batches : (k + 1) * args.batches], None, args.batches, NOISE_TIMESTEPS, 0.0)
        for k in range(args.draws)
    ]
    noise = [d.rel for d in draws if d.rel is not None]
    stated = sorted(d.uncertainty for d in draws if d.uncertainty is not None)
    truth = relative_sd(noise)
    generator = torch.Generator().manual_seed(0)
    values = torch.tensor(noise, dtype=torch.float64)
    resampled = values[torch.randint(len(noise), (RESAMPLES, len(noise)), generator=generator)]
    boot = (resampled.std(dim=1) / resampled.mean(dim=1)).sort().values
    low, high = float(boot[int(0.025 * RESAMPLES)]), float(boot[int(0.975 * RESAMPLES)])
    median = statistics.median(stated)
    parameters = gradients[0].numel()

    print(f"model {args.model} {' '.join(args.option)}: {parameters} parameters, batch {problem_batch_size(copies)}")
    print(f"{args.draws} draws of {args.batches} batches ({count} float64 gradients, {seconds:.1f} s)")
    print(f"grad_noise_rel over the draws: mean {statistics.fmean(noise):.4g}")
    print(f"its relative standard deviation (the truth):  {truth:.2%}  (bootstrap 95% [{low:.2%}, {high:.2%}])")
    print(
        f"stated (grad_noise_uncertainty): median {median:.2%}, 5–95% {stated[int(0.05 * len(stated))]:.2%} – "
        f"{stated[int(0.95 * len(stated)) - 1]:.2%}; median / truth {median / truth:.2f}"
    )
    floor = 1 / math.sqrt(2 * (args.batches - 1))
    print(f"1/sqrt(2(B − 1)) = {floor:.2%} ({floor / truth:.2f}× the truth)")


if __name__ == "__main__":
    main()
