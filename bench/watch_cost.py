"""What the watch (`roundoff_analyzer.watch`) costs a training: the default model (OT-Flow at its default options),
trained in float16 under autocast with torchdiffeq's rk4, unwatched and watched at every = 10 and every = 100, in
rounds interleaved (each round runs the three, one after another, each round starting one further on) so that a
change of the machine's load falls on each alike. Prints, per round, each watched training's time over the
unwatched one's, with the load average as the round began; then the same ratio from its parts, measured in the same
rounds: (step + call + measurement / N) / step, with the median unwatched iteration (step), the median call of the
watch that measures nothing (call: it keeps a batch) and the median call that measures with a gradient noise
(measurement; the first has no earlier batch, so no noise, and is left out). The parts say what a training of any
length costs; the whole trainings say it only where they run several measurements (at least 2·N iterations).

    python bench/watch_cost.py [--iterations 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import torch
from torchdiffeq import odeint as torchdiffeq_odeint

import roundoff_analyzer as ra

N_TIMESTEPS = 16


def train(iterations: int, every: int | None, out: str) -> tuple[float, list[float], list[float], list[float]]:
    """Seconds of `iterations` steps of the user's loop (watched every `every` iterations, unless None), and the
    seconds of each step, of each watch call that measured with a gradient noise and of each that did not measure."""
    torch.manual_seed(0)
    problem = ra.model("otflow")
    model, loss_of = problem.model, problem.loss
    times = torch.linspace(0.0, 1.0, N_TIMESTEPS + 1)

    def step(model, batch, odeint):
        return loss_of(odeint(model, batch, times, method="rk4"))

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = [problem.sample_batch(k) for k in range(1, iterations + 1)]
    watched = ra.watch(model, step, every=every, out=out, n_timesteps=N_TIMESTEPS) if every else None
    steps: list[float] = []
    measured: list[float] = []
    calls: list[float] = []
    started = time.perf_counter()
    for iteration, batch in enumerate(batches):
        if watched is not None:
            before = time.perf_counter()
            row = watched(iteration, batch)
            seconds = time.perf_counter() - before
            # A first measurement has no earlier batch, so no gradient noise: only later ones cost what most do.
            if row is not None and row["grad_noise_batches"] is not None:
                measured.append(seconds)
            elif row is None:
                calls.append(seconds)
        before = time.perf_counter()
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = step(model, batch, torchdiffeq_odeint)
        loss.backward()
        optimizer.step()
        steps.append(time.perf_counter() - before)
    return time.perf_counter() - started, steps, measured, calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore", ra.RoundoffWarning)
    runs: list[tuple[str, int | None]] = [("unwatched", None), ("every=10", 10), ("every=100", 100)]
    seconds: dict[str, list[float]] = {name: [] for name, _ in runs}
    steps: list[float] = []
    measured: list[float] = []
    calls: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        train(2, None, folder)  # first-call costs, untimed
        for round_ in range(args.rounds):
            load = os.getloadavg()[0]
            for k in range(len(runs)):
                name, every = runs[(round_ + k) % len(runs)]
                whole, its_steps, its_measured, its_calls = train(args.iterations, every, f"{folder}/{round_}-{name}")
                seconds[name].append(whole)
                if every is None:
                    steps += its_steps
                measured += its_measured
                calls += its_calls
            plain = seconds["unwatched"][-1]
            ratios = ", ".join(f"{name} {seconds[name][-1] / plain:.3f}×" for name, _ in runs[1:])
            print(f"round {round_ + 1}: unwatched {plain:.1f} s; {ratios} (load average {load:.2f})", flush=True)
    print(
        f"{args.iterations} iterations of OT-Flow, float16 autocast, torchdiffeq rk4 n={N_TIMESTEPS}, "
        f"{args.rounds} rounds"
    )
    if not measured:
        raise SystemExit("no measurement with a gradient noise: give --iterations above 10")
    step_s, measure_s = statistics.median(steps), statistics.median(measured)
    call_s = statistics.median(calls) if calls else 0.0
    print(
        f"parts: step {step_s:.3f} s, call {call_s * 1e3:.2f} ms, measurement {measure_s:.2f} s "
        f"({measure_s / step_s:.2f} steps; {len(steps)} steps, {len(measured)} measurements)"
    )
    for name, every in runs[1:]:
        assert every is not None
        ratios = [w / p for w, p in zip(seconds[name], seconds["unwatched"], strict=True)]
        print(
            f"{name}: whole trainings {statistics.median(ratios):.3f}× the unwatched one's time (rounds: "
            + ", ".join(f"{r:.3f}" for r in ratios)
            + f"); from the parts {(step_s + call_s + measure_s / every) / step_s:.3f}×"
        )
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
