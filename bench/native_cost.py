"""What the native solver costs against torchdiffeq, in time and memory, measured in one run.

An MLP ODE (widths 65 -> h -> h -> 64, tanh; the state is 64 wide, t is the 65th input), forward and
backward of the mean square of the final state, for each size:
  - time: median of fwd+bwd over --repeats runs, the setups interleaved round-robin in one process
    (so that a busy machine slows all of them alike), and native / torchdiffeq at equal dtype;
  - saved for backward: bytes packed through torch.autograd.graph.saved_tensors_hooks during the
    forward, each storage once, parameters, y0 and t left out;
  - peak: the most memory allocated at once during forward + backward, beyond what was allocated
    before: torch.cuda.max_memory_allocated on a GPU; on the CPU, the CPU allocator's own events as
    torch.profiler reports them (roundoff_analyzer/cpu_memory.py), in an extra, untimed run.
Setups: torchdiffeq and native in float32, bfloat16 and float16 (autocast), native with and without
the DynamicAdjointScaler, with the trajectory in the state's dtype or in the low dtype.

    python bench/native_cost.py [--quick | --size rk4,256,256,16 ...] [--repeats R] [--device cpu|cuda]
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from dataclasses import dataclass

import torch
import torchdiffeq
from tabulate import tabulate

from roundoff_analyzer.cpu_memory import cpu_peak_memory
from roundoff_analyzer.solvers import DynamicAdjointScaler, odeint

STATE = 64
# (method, hidden, batch, n_timesteps): the nine sizes, and a small subset for --quick.
SIZES = [
    ("rk4", 256, 256, 16), ("rk4", 256, 1024, 16), ("rk4", 1024, 256, 16), ("rk4", 1024, 1024, 16),
    ("rk4", 256, 256, 64), ("rk4", 1024, 256, 64),
    ("euler", 256, 256, 16), ("euler", 1024, 1024, 16), ("euler", 256, 256, 64),
]  # fmt: skip
QUICK_SIZES = [("rk4", 128, 128, 16), ("euler", 128, 128, 64)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Setup:
    library: str
    dtype: str
    scaler: bool = False
    trajectory: str = "state"

    @property
    def label(self) -> str:
        extra = [s for s in ("scaler" if self.scaler else "", "low trajectory" if self.trajectory == "low" else "") if s]
        return f"{self.library} {self.dtype}" + (f" ({', '.join(extra)})" if extra else "")


def setups() -> list[Setup]:
    chosen = []
    for dtype in DTYPES:
        chosen += [Setup("torchdiffeq", dtype), Setup("native", dtype)]
        if dtype != "float32":  # in float32 the stored states are the trajectory already; no scaling needed
            chosen += [Setup("native", dtype, True), Setup("native", dtype, False, "low"), Setup("native", dtype, True, "low")]
    return chosen


class MLP(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(STATE + 1, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden), torch.nn.Tanh(),
            torch.nn.Linear(hidden, STATE),
        )  # fmt: skip

    def forward(self, t, y):
        return self.net(torch.cat([y, t.to(y.dtype).expand(y.shape[0], 1)], dim=1))


def forward(setup: Setup, func, y0, t, method):
    dtype = DTYPES[setup.dtype]
    with torch.autocast(y0.device.type, dtype=dtype, enabled=dtype != torch.float32):
        if setup.library == "torchdiffeq":
            return torchdiffeq.odeint(func, y0, t, method=method)
        scaler = DynamicAdjointScaler() if setup.scaler else None
        return odeint(func, y0, t, method, scaler=scaler, trajectory_dtype=setup.trajectory)


def forward_backward(setup: Setup, func, y0, t, method) -> None:
    y0 = y0.detach().requires_grad_(True)
    # From the final state, as OT-Flow's and a CNF's losses are: a loss over every state would hold
    # float32 copies of the whole trajectory, the same for every setup, and hide the solvers' own memory.
    loss = forward(setup, func, y0, t, method)[-1].float().pow(2).mean()
    loss.backward()
    func.zero_grad(set_to_none=True)


def saved_bytes(setup: Setup, func, y0, t, method) -> int:
    y0 = y0.detach().requires_grad_(True)
    excluded = {x.untyped_storage().data_ptr() for x in (y0, t, *func.parameters())}
    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in excluded:
            seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        trajectory = forward(setup, func, y0, t, method)
    del trajectory
    return sum(seen.values())


def peak_bytes(setup: Setup, func, y0, t, method) -> int:
    if y0.device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        forward_backward(setup, func, y0, t, method)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    with cpu_peak_memory() as peak:
        forward_backward(setup, func, y0, t, method)
    return peak.bytes


def timed(setup: Setup, func, y0, t, method) -> float:
    if y0.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    forward_backward(setup, func, y0, t, method)
    if y0.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure_size(size, repeats: int, device: torch.device) -> list[dict]:
    method, hidden, batch, n = size
    generator = torch.Generator().manual_seed(0)
    func = MLP(hidden).to(device)
    y0 = torch.randn(batch, STATE, generator=generator).to(device)
    t = torch.linspace(0.0, 1.0, n + 1, device=device)
    chosen = setups()
    times: dict[Setup, list[float]] = {s: [] for s in chosen}
    for s in chosen:  # warm-up: first calls allocate and pick kernels
        forward_backward(s, func, y0, t, method)
    order = random.Random(0)
    for _ in range(repeats):
        for s in order.sample(chosen, len(chosen)):
            times[s].append(timed(s, func, y0, t, method))
    rows = []
    for s in chosen:
        rows.append({
            "method": method, "hidden": hidden, "batch": batch, "n": n, "setup": s, "time_s": statistics.median(times[s]),
            "saved_bytes": saved_bytes(s, func, y0, t, method), "peak_bytes": peak_bytes(s, func, y0, t, method),
        })  # fmt: skip
    by_setup = {r["setup"]: r for r in rows}
    for r in rows:
        s = r["setup"]
        r["vs_torchdiffeq"] = r["time_s"] / by_setup[Setup("torchdiffeq", s.dtype)]["time_s"]
        r["peak_vs_native_float32"] = r["peak_bytes"] / by_setup[Setup("native", "float32")]["peak_bytes"]
        r["theory_saved_bytes"] = (n + 1) * batch * STATE * DTYPES[s.dtype].itemsize if s.library == "native" else None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only {len(QUICK_SIZES)} small sizes")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per setup and size (median)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size", action="append", default=[], metavar="METHOD,H,BATCH,N",
                        help="only this size (repeatable), e.g. rk4,256,256,16")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"device: {where}; torch {torch.__version__}; load average at start {os.getloadavg()}")
    rows = []
    chosen = [(m, int(h), int(b), int(n)) for m, h, b, n in (s.split(",") for s in args.size)]
    for size in chosen or (QUICK_SIZES if args.quick else SIZES):
        size_rows = measure_size(size, args.repeats, device)
        rows += size_rows
        print()
        print(tabulate(
            [[r["setup"].label, f"{r['time_s'] * 1e3:.1f}", f"{r['vs_torchdiffeq']:.2f}", f"{r['saved_bytes'] / 2**20:.2f}",
              "" if r["theory_saved_bytes"] is None else f"{r['theory_saved_bytes'] / 2**20:.2f}",
              f"{r['peak_bytes'] / 2**20:.2f}", f"{r['peak_vs_native_float32']:.0%}"] for r in size_rows],
            headers=[f"{size[0]} h={size[1]} batch={size[2]} n={size[3]}", "fwd+bwd ms", "/ torchdiffeq", "saved MiB",
                     "theory MiB", "peak MiB", "peak / native f32"],
        ), flush=True)  # fmt: skip
    print(f"\nload average at end {os.getloadavg()}")
    print("\nnative / torchdiffeq at equal dtype (no scaler, state trajectory), median over sizes (target <= 1.45):")
    for dtype in DTYPES:
        ratios = [r["vs_torchdiffeq"] for r in rows if r["setup"] == Setup("native", dtype)]
        print(f"  {dtype:9s} median {statistics.median(ratios):.2f}  range {min(ratios):.2f}-{max(ratios):.2f}")
    print("float16 peak of forward + backward / native float32's (target <= 60% with the low trajectory):")
    for setup in (Setup("native", "float16"), Setup("native", "float16", False, "low"), Setup("native", "float16", True, "low")):
        shares = [r["peak_vs_native_float32"] for r in rows if r["setup"] == setup]
        print(f"  {setup.label:40s} median {statistics.median(shares):.0%}  range {min(shares):.0%}-{max(shares):.0%}")


if __name__ == "__main__":
    main()
