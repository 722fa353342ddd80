"""What is alive at the peak of one forward + backward on the CPU: each allocation held at the moment the CPU
allocator held most, with the operations that made it, for torchdiffeq and the native solver's two paths at one size
of `bench/native_cost.py`'s MLP ODE (its loss the mean square of the final state). It reads torch.profiler's memory
timeline (`profile_memory=True`, the profiler's own `_memory_profile`, a private API of torch 2.x), so it is a
diagnosis, not a measurement to quote: the peaks it finds equal native_cost.py's.

    python bench/peak_contents.py euler 256 256 16 --dtype float16 [--smallest 30000]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

import torch
from native_cost import MLP, STATE, Setup, forward_backward
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action


def innermost_ops(events, at: int, depth: int = 4) -> str:
    enclosing = sorted((e for e in events if e.start_ns() <= at <= e.end_ns()), key=lambda e: e.start_ns())
    return " > ".join(e.name().replace("autograd::engine::evaluate_function: ", "") for e in enclosing[-depth:])


def peak_contents(setup: Setup, func, y0, t, method: str, smallest: int) -> list[str]:
    forward_backward(setup, func, y0, t, method)  # first calls allocate and pick kernels
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        forward_backward(setup, func, y0, t, method)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() != "[memory]"]
    live: dict = {}
    held = peak = 0
    at_peak: dict = {}
    peak_time = 0
    for time_ns, action, (key, _), size in prof._memory_profile().timeline:
        if action == Action.CREATE:
            live[key] = (size, time_ns)
            held += size
        elif action == Action.DESTROY and key in live:
            held -= live.pop(key)[0]
        if held > peak:
            peak, at_peak, peak_time = held, dict(live), time_ns
    where = re.sub(r" at 0x[0-9a-f]+", "", innermost_ops(events, peak_time))
    lines = [f"{setup.label}: peak {peak / 2**20:.3f} MiB, in {where}"]
    # Allocations of one size made by the same operations (a tape's activations, one per stage) on one line.
    alike = Counter((size, innermost_ops(events, made)) for size, made in at_peak.values() if size >= smallest)
    for (size, made), count in sorted(alike.items(), key=lambda item: -item[0][0] * item[1]):
        lines.append(f"  {count:3d} x {size / 2**20:7.3f} MiB  made in {re.sub(r' at 0x[0-9a-f]+', '', made)[-130:]}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("method", choices=("euler", "rk4"))
    parser.add_argument("hidden", type=int)
    parser.add_argument("batch", type=int)
    parser.add_argument("n", type=int)
    parser.add_argument("--dtype", default="float16", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--smallest", type=int, default=30000, help="bytes: smaller allocations are not listed")
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    func = MLP(args.hidden)
    y0 = torch.randn(args.batch, STATE, generator=generator)
    t = torch.linspace(0.0, 1.0, args.n + 1)
    setups = [
        Setup("torchdiffeq", args.dtype),
        Setup("native", args.dtype, checkpoint="stages"),
        Setup("native", args.dtype, checkpoint="states"),
    ]
    for setup in setups:
        print("\n".join(peak_contents(setup, func, y0, t, args.method, args.smallest)), flush=True)


if __name__ == "__main__":
    main()
