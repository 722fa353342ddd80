"""Where the native solver's remaining time over torchdiffeq goes (stored stages), measured in one run.

For each size and dtype, on the MLP ODE of `bench/native_cost.py` (forward and backward of the final state's mean
square, one thread), these are timed interleaved round-robin (the order shuffled each round), in CPU time of this
process (a shared machine's other processes slow it far less than its wall time), for --rounds rounds:

  - torchdiffeq (its rk4, the 3/8 rule; so is the native "rk4");
  - native as a user calls it: the drop-in `roundoff_analyzer.solvers.odeint` with a closure field
    (`lambda t, y: net(t, y)`, which makes the drop-in watch for a later reach), `checkpoint="auto"`;
  - the same with one part switched off after another, each one's cost the median over the rounds of its time less
    the next's (paired in each round; the middle half of those differences printed beside it, the noise to read
    it against):
      1. the later-reach walk of the kept graphs after the forward (a no-op in its place);
      2. auto's measure of the tape (the first two steps' saved tensors counted): `checkpoint="stages"`;
      3. the discovery of the tensors the field reaches (its first evaluation watched): `params=` given;
      4. the drop-in layer (argument checks, the tableau's lookup): `roundoff_analyzer.solvers.native.odeint`.

The gap is the median of native-as-called less torchdiffeq, paired the same way. What is left after the four, the
stripped solver against torchdiffeq, is the per-step work itself; it is split by
torch.profiler, in --profiled extra runs of each (interleaved, untimed: profiling slows small operations), into the
self time of: matrix products, casts (`_to_copy` and the copies under it), the other ATen operations (elementwise,
reductions, allocations, views), and the rest of the run's wall time: Python, the autograd engine and dispatch (the
own time of each backward node and of `_NativeSolve`, and the time outside any recorded operation, where
torchdiffeq's Python runs). Each part's share of the gap is its difference over the gap (a negative share: native spends
less there).

The multiply by h after the low-precision product (the paper's ordering) is no part here: with stored stages it is
the `alpha` of the float32 sum, the same one operation per step as a sum without it (bench/op_counts.py).

    python bench/native_ablation.py [--size rk4,256,256,16 ...] [--dtype float32,...] [--rounds 9] [--profiled 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch
import torchdiffeq
from tabulate import tabulate
from torch.profiler import ProfilerActivity, profile

import roundoff_analyzer.solvers as solvers
from roundoff_analyzer.axes.methods import METHODS
from roundoff_analyzer.solvers import native
from roundoff_analyzer.solvers.drop_in import TORCHDIFFEQ_NAMES

sys.path.insert(0, str(Path(__file__).resolve().parent))
from native_cost import DTYPES, MLP, STATE  # noqa: E402  (a sibling script: the same field as the time bench)
from op_counts import CATEGORIES  # noqa: E402

SIZES = [("rk4", 256, 256, 16), ("euler", 256, 256, 16)]
# Each setup: what it switches off, cumulatively (a later one keeps the earlier ones off).
PARTS = ("later-reach walk", "auto's tape measure", "field-tensor discovery", "drop-in layer")
SETUPS = ("torchdiffeq", "native as called", *(f"- {part}" for part in PARTS))
PROFILE_CATEGORIES = ("matmul", "casts", "other ATen ops", "Python, engine and dispatch")


@contextmanager
def walk_off(off: bool):
    """`native._check_reach` replaced by a no-op inside the block, where asked."""
    kept = native._check_reach
    if off:
        native._check_reach = lambda *args, **kwargs: None
    try:
        yield
    finally:
        native._check_reach = kept


def solve(setup: str, net: MLP, y0: torch.Tensor, t: torch.Tensor, method: str) -> torch.Tensor:
    if setup == "torchdiffeq":
        return torchdiffeq.odeint(net, y0, t, method=method)
    off = SETUPS.index(setup) - 1  # how many parts are switched off
    with walk_off(off >= 1):

        def field(time, y):
            return net(time, y)

        checkpoint = "auto" if off < 2 else "stages"
        params = list(net.parameters()) if off >= 3 else None
        if off >= 4:  # the tableau the drop-in names so ("rk4" is torchdiffeq's 3/8 rule)
            tableau = METHODS.get(TORCHDIFFEQ_NAMES.get(method, method))
            return native.odeint(field, y0, t, tableau, params=params, checkpoint=checkpoint)
        return solvers.odeint(field, y0, t, method=method, params=params, checkpoint=checkpoint)


def forward_backward(setup: str, net: MLP, y0: torch.Tensor, t: torch.Tensor, method: str, dtype: str) -> None:
    y0 = y0.detach().requires_grad_(True)
    low = DTYPES[dtype]
    with torch.autocast(y0.device.type, dtype=low, enabled=low != torch.float32):
        trajectory = solve(setup, net, y0, t, method)
    trajectory[-1].float().pow(2).mean().backward()
    net.zero_grad(set_to_none=True)


def timed(run: Callable[[], None]) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def category(event) -> str:
    name = event.name
    if not name.startswith("aten::"):
        return "Python, engine and dispatch"
    op = name.removeprefix("aten::")
    if op in CATEGORIES["matmul"]:
        return "matmul"
    parent = event.cpu_parent
    if op == "_to_copy" or (op == "copy_" and parent is not None and parent.name == "aten::_to_copy"):
        return "casts"
    return "other ATen ops"


def profiled(run: Callable[[], None]) -> dict[str, float]:
    """Seconds of each category's self time in one profiled run, the wall time outside every recorded op counted as
    Python."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        started = time.perf_counter()  # inside: the profiler's own start and stop left out
        run()
        wall = time.perf_counter() - started
    seconds: dict[str, float] = defaultdict(float)
    for event in profiler.events():
        seconds[category(event)] += event.self_cpu_time_total / 1e6
    seconds["Python, engine and dispatch"] += wall - sum(seconds.values())
    return seconds


def measure(size, dtype: str, rounds: int, profiled_rounds: int) -> list[list[str]]:
    method, hidden, batch, n = size
    generator = torch.Generator().manual_seed(0)
    net = MLP(hidden)
    y0 = torch.randn(batch, STATE, generator=generator)
    t = torch.linspace(0.0, 1.0, n + 1)
    runs = {s: (lambda s=s: forward_backward(s, net, y0, t, method, dtype)) for s in SETUPS}
    for run in runs.values():  # warm-up: first calls allocate and pick kernels
        run()
    times: dict[str, list[float]] = {s: [] for s in SETUPS}
    order = random.Random(0)
    for _ in range(rounds):
        for s in order.sample(SETUPS, len(SETUPS)):
            times[s].append(timed(runs[s]))
    median = {s: statistics.median(v) for s, v in times.items()}

    def paired(slower: str, faster: str) -> float:
        return statistics.median(a - b for a, b in zip(times[slower], times[faster]))

    def spread(slower: str, faster: str) -> str:
        """The middle half of the paired differences: how far apart two rounds put the same comparison."""
        differences = [a - b for a, b in zip(times[slower], times[faster])]
        if len(differences) < 4:
            return ""
        low, _, high = statistics.quantiles(differences, n=4)
        return f"{low * 1e3:.2f} to {high * 1e3:.2f}"

    stripped = SETUPS[-1]
    parts: dict[str, list[float]] = {s: [] for s in ("torchdiffeq", stripped)}
    shares: dict[str, dict[str, list[float]]] = {s: defaultdict(list) for s in parts}
    for _ in range(profiled_rounds):
        for s in order.sample(list(parts), len(parts)):
            for name, seconds in profiled(runs[s]).items():
                shares[s][name].append(seconds)
    reference = median["torchdiffeq"]
    whole_gap = paired(SETUPS[1], "torchdiffeq")
    rows = []
    label = f"{method} h={hidden} batch={batch} n={n} {dtype}"
    for previous, s in zip(SETUPS[1:], SETUPS[2:]):
        saved = paired(previous, s)
        rows.append([label, f"{s} (off)", f"{saved * 1e3:.2f}", spread(previous, s), _share(saved, whole_gap)])
    as_called = f"{median[SETUPS[1]] / reference:.3f}"
    rows.append(
        [label, "native as called / torchdiffeq", f"{whole_gap * 1e3:.2f}", spread(SETUPS[1], "torchdiffeq"), as_called]
    )
    rest = paired(stripped, "torchdiffeq")
    ratio = f"{median[stripped] / reference:.3f}"
    rows.append(
        [label, "rest: stripped native / torchdiffeq", f"{rest * 1e3:.2f}", spread(stripped, "torchdiffeq"), ratio]
    )
    profiled_medians = {s: {c: statistics.median(shares[s][c] or [0.0]) for c in PROFILE_CATEGORIES} for s in parts}
    profiled_gap = sum(profiled_medians[stripped].values()) - sum(profiled_medians["torchdiffeq"].values())
    for c in PROFILE_CATEGORIES:
        difference = profiled_medians[stripped][c] - profiled_medians["torchdiffeq"][c]
        rows.append([label, f"  rest: {c} (profiled)", f"{difference * 1e3:.2f}", "", _share(difference, profiled_gap)])
    return rows


def _share(part: float, gap: float) -> str:
    return f"{part / gap:.0%} of the gap" if gap > 0 else "(native not slower)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", action="append", default=[], metavar="METHOD,H,BATCH,N", help="repeatable")
    parser.add_argument("--dtype", default=",".join(DTYPES), help=f"comma list of {', '.join(DTYPES)}")
    parser.add_argument("--rounds", type=int, default=21, help="timed runs per setup (median)")
    parser.add_argument("--profiled", type=int, default=5, help="profiled runs of the stripped solver and torchdiffeq")
    args = parser.parse_args()
    dtypes = [d for d in args.dtype.split(",") if d]
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown or not dtypes:
        parser.error(f"--dtype: {', '.join(unknown) or 'empty'} is not one of {', '.join(DTYPES)}")
    try:
        sizes = [(m, int(h), int(b), int(n)) for m, h, b, n in (s.split(",") for s in args.size)] or SIZES
    except ValueError:
        parser.error("--size: METHOD,H,BATCH,N, e.g. rk4,256,256,16")
    if args.rounds < 1 or args.profiled < 1:
        parser.error("--rounds and --profiled must be at least 1")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    started = time.perf_counter()
    print(f"torch {torch.__version__}, 1 thread; load average at start {os.getloadavg()}", flush=True)
    for size in sizes:
        for dtype in dtypes:
            rows = measure(size, dtype, args.rounds, args.profiled)
            headers = ["size", "part", "CPU ms", "middle half, ms", "share / ratio of medians"]
            print(tabulate(rows, headers=headers, tablefmt="simple"), flush=True)
            print(f"  load average now {os.getloadavg()}", flush=True)
    print(f"{time.perf_counter() - started:.0f} s in all; load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
