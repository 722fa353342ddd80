"""What the drop-in's check of every later evaluation costs: `roundoff_analyzer.solvers.odeint` refuses a field that
uses, at a later time, a tensor requiring grad its first evaluation did not (a closure switching modules at t = 0.5,
whose late module would get no gradient). With stored stages (`checkpoint="stages"`) the kept graphs are walked once
after the forward; on the low-memory path (`"states"`) each evaluation of the forward is watched. The time of a forward
and backward of a closure field (an MLP, rk4, 16 steps, one thread) with the check and without, for each path,
interleaved in one run, and the ratio of the medians.

    python bench/later_reach_check.py --repeats 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from roundoff_analyzer.solvers import native

SIZES = ((64, 64), (256, 256))  # (hidden width, batch)


def _timed(hidden: int, batch: int, repeats: int, checkpoint: str) -> dict[bool, float]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(16, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden), torch.nn.Tanh()
    )
    head = torch.nn.Linear(hidden, 16)
    y0 = torch.randn(batch, 16, requires_grad=True)
    t = torch.linspace(0, 1, 17)

    def run(checked: bool) -> float:
        started = time.perf_counter()
        stepping = native.Stepping(later_reach_checked=checked)
        states = native.odeint(
            lambda s, y: head(net(y)), y0, t, "rk4_classical", stepping=stepping, checkpoint=checkpoint
        )
        states[-1].square().sum().backward()
        return time.perf_counter() - started

    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(3):
        run(False), run(True)
    for _ in range(repeats):
        for checked in (False, True):
            times[checked].append(run(checked))
    return {checked: statistics.median(values) for checked, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30, help="timed runs of each, interleaved")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"load average at start {os.getloadavg()}")
    print("| checkpoint | hidden | batch | without the check (ms) | with it (ms) | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for checkpoint in ("stages", "states"):
        for hidden, batch in SIZES:
            median = _timed(hidden, batch, args.repeats, checkpoint)
            print(
                f"| {checkpoint} | {hidden} | {batch} | {median[False] * 1e3:.2f} | {median[True] * 1e3:.2f} | "
                f"{median[True] / median[False]:.3f} |",
                flush=True,
            )
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
