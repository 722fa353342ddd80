"""Time per iteration of a training's setups, measured in one run with the setups interleaved (one iteration of each
in turn), so that a machine whose load changes during the run slows every setup alike.

Each setup trains its own copy of the initial weights on the same batches, as `roundoff train` does (the sweep's
run for the loss and gradient, the optimizer, the update's rounding into the stored weights); prints each setup's
median seconds per iteration and its ratio to the first setup's.

    python bench/weights_update.py [--config configs/cnf_2spirals_weights.toml] [--iters 40]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from dataclasses import replace

from roundoff_analyzer import training
from roundoff_analyzer.core.threads import torch_threads
from roundoff_analyzer.training.step import SetupStep
from roundoff_analyzer.training.stored_weights import StoredWeights


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/cnf_2spirals_weights.toml")
    parser.add_argument("--iters", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        plan = training.plan(config=args.config, out=f"{folder}/t", iters=args.iters, save_at=[args.iters])
    runs = []
    for setup in plan.setups:
        problem = replace(plan.problem, func=copy.deepcopy(plan.problem.func))
        params = [p for p in problem.func.parameters() if p.requires_grad]
        stored = StoredWeights(params, setup.weights, setup.update, setup.optimizer_state, plan.options.seed)
        runs.append(
            (
                setup.setup_label,
                SetupStep(setup, problem, plan.config.scaler),
                params,
                stored,
                plan.optimizer.build(params, plan.config.lr),
                [],
            )
        )
    with torch_threads(plan.threads):
        for iteration in range(1, args.iters + 1):
            batch = plan.stream.train_batch(iteration)
            for _, step, params, stored, optimizer, seconds in runs:
                began = time.perf_counter()
                result = step(batch)
                if result.gradients is not None:
                    for p, g in zip(params, result.gradients):
                        p.grad = g
                    before = stored.before_step()
                    optimizer.step()
                    stored.after_step(before, optimizer)
                    optimizer.zero_grad(set_to_none=True)
                seconds.append(time.perf_counter() - began)
    first = statistics.median(runs[0][5][1:])
    print(f"{'setup':58} {'s / iter':>9} {'vs first':>9}")
    for label, *_, seconds in runs:
        median = statistics.median(seconds[1:])  # the first iteration warms up
        print(f"{label:58} {median:9.4f} {median / first:8.2f}x")


if __name__ == "__main__":
    main()
