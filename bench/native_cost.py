"""What the native solver costs against torchdiffeq, in time and memory, measured in one run.

An MLP ODE (widths 65 -> h -> h -> 64, tanh; the state is 64 wide, t is the 65th input), forward and
backward of the mean square of the final state, for each size:
  - time: median of fwd+bwd over --repeats runs, the setups interleaved round-robin in one process
    (so that a busy machine slows all of them alike), and native / torchdiffeq at equal dtype;
  - saved for backward: bytes packed through torch.autograd.graph.saved_tensors_hooks during the
    forward and still held by the tape at its end, each storage once, parameters, y0 and t left out;
  - peak: the most memory allocated at once during forward + backward, beyond what was allocated
    before: torch.cuda.max_memory_allocated on a GPU; on the CPU, the CPU allocator's own events as
    torch.profiler reports them (roundoff_analyzer/measuring/cpu_memory.py), in an extra, untimed run.
Setups: torchdiffeq and native in float32, bfloat16 and float16 (autocast), both with the same tableau (torchdiffeq's
rk4, the 3/8 rule, which the drop-in's "rk4" is); native with its stored stages (`checkpoint="stages"`) and on its
low-memory path (`"states"`: the stored states only, each step recomputed in the backward), the latter also with the
DynamicAdjointScaler and with the trajectory in the low dtype. Every setup's memory is measured; by default only
torchdiffeq and native's two paths (no scaler, state trajectory) are timed, `--time-all` times every setup.
What a user switches between is printed too: native in a low dtype against torchdiffeq in float32 (the
columns "/ tdq f32": time and peak), per size and as medians.
`--baseline CHECKOUT` adds "native before": another checkout's native solver (its package imported under
another name, in this process), timed interleaved with the rest: a change's before and after in one run.

A dtype whose one forward + backward would take longer than --max-run-seconds at a size is skipped
there, with the estimate printed: the estimate is one step of torchdiffeq timed, times n_timesteps.
(float16 matrix products on a CPU without float16 arithmetic run at about 1 GFLOP/s, so at h = 1024 one
solve takes minutes.)

    python bench/native_cost.py [--quick | --size rk4,256,256,16 ...] [--dtype float16,...] [--repeats R] [--core]
                                [--device cpu|cuda] [--baseline CHECKOUT] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import platform
import random
import statistics
import sys
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
import torchdiffeq
from tabulate import tabulate

from roundoff_analyzer.measuring.cpu_memory import cpu_peak_memory
from roundoff_analyzer.solvers import DynamicAdjointScaler, odeint

STATE = 64
# (method, hidden, batch, n_timesteps): the nine sizes, and a small subset for --quick.
SIZES = [
    ("rk4", 256, 256, 16),
    ("rk4", 256, 1024, 16),
    ("rk4", 1024, 256, 16),
    ("rk4", 1024, 1024, 16),
    ("rk4", 256, 256, 64),
    ("rk4", 1024, 256, 64),
    ("euler", 256, 256, 16),
    ("euler", 1024, 1024, 16),
    ("euler", 256, 256, 64),
]
QUICK_SIZES = [("rk4", 128, 128, 16), ("euler", 128, 128, 64)]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BEFORE = "native before"
# The solvers of --baseline's checkout, when given.
baseline_odeint = None


def checkout_solvers(checkout: Path):
    """`checkout`'s `roundoff_analyzer.solvers`, imported as `roundoff_before.solvers`: both versions in one process
    (the package's own imports are relative, so the copy uses its own modules throughout)."""
    root = checkout / "roundoff_analyzer"
    spec = importlib.util.spec_from_file_location(
        "roundoff_before", root / "__init__.py", submodule_search_locations=[str(root)]
    )
    if spec is None or spec.loader is None or not root.is_dir():
        sys.exit(f"--baseline {checkout}: no roundoff_analyzer package there")
    package = importlib.util.module_from_spec(spec)
    sys.modules["roundoff_before"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("roundoff_before.solvers")


@dataclass(frozen=True)
class Setup:
    library: str
    dtype: str
    scaler: bool = False
    trajectory: str = "state"
    # The native solver's backward: "stages" (the forward's stage graphs kept) or "states" (the low-memory path).
    checkpoint: str = "stages"

    @property
    def label(self) -> str:
        extra = [
            s
            for s in (
                "low-memory" if self.checkpoint == "states" and self.library != "torchdiffeq" else "",
                "scaler" if self.scaler else "",
                "low trajectory" if self.trajectory == "low" else "",
            )
            if s
        ]
        return f"{self.library} {self.dtype}" + (f" ({', '.join(extra)})" if extra else "")


def setups(core: bool = False) -> list[Setup]:
    """Every setup measured; `core`: only those timed by default (no scaler, the state trajectory)."""
    chosen = []
    for dtype in DTYPES:
        chosen += [Setup("torchdiffeq", dtype), Setup("native", dtype), Setup("native", dtype, checkpoint="states")]
        if baseline_odeint is not None:
            chosen += [Setup(BEFORE, dtype), Setup(BEFORE, dtype, checkpoint="states")]
        if dtype != "float32" and not core:  # in float32 the stored states are the trajectory already
            chosen += [
                Setup("native", dtype, True, checkpoint="states"),
                Setup("native", dtype, False, "low", "states"),
                Setup("native", dtype, True, "low", "states"),
            ]
    return chosen


class MLP(torch.nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(STATE + 1, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, STATE),
        )

    def forward(self, t, y):
        return self.net(torch.cat([y, t.to(y.dtype).expand(y.shape[0], 1)], dim=1))


def forward(setup: Setup, func, y0, t, method):
    dtype = DTYPES[setup.dtype]
    with torch.autocast(y0.device.type, dtype=dtype, enabled=dtype != torch.float32):
        if setup.library == "torchdiffeq":
            return torchdiffeq.odeint(func, y0, t, method=method)
        scaler = DynamicAdjointScaler() if setup.scaler else None
        if setup.library == BEFORE:
            assert baseline_odeint is not None
            return baseline_odeint(
                func,
                y0,
                t,
                method=method,
                scaler=scaler,
                trajectory_dtype=setup.trajectory,
                checkpoint=setup.checkpoint,
            )
        return odeint(
            func, y0, t, method=method, scaler=scaler, trajectory_dtype=setup.trajectory, checkpoint=setup.checkpoint
        )


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
    saved: list[tuple[weakref.ref, int, int]] = []

    def pack(tensor):
        storage = tensor.untyped_storage()
        saved.append((weakref.ref(tensor), storage.data_ptr(), storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        trajectory = forward(setup, func, y0, t, method)
    # What the tape still holds: a node the solve dropped freed what it saved, and its address may be another's since.
    held = {pointer: size for tensor, pointer, size in saved if tensor() is not None and pointer not in excluded}
    del trajectory
    return sum(held.values())


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


def estimated_run_seconds(setup: Setup, func, y0, t, method) -> float:
    one_step = t[:2]
    forward_backward(setup, func, y0, one_step, method)  # first calls allocate and pick kernels
    return timed(setup, func, y0, one_step, method) * (len(t) - 1)


def measure_size(
    size, dtypes: list[str], repeats: int, time_all: bool, max_run_seconds: float, device, core: bool = False
) -> tuple[list[dict], list[str]]:
    method, hidden, batch, n = size
    generator = torch.Generator().manual_seed(0)
    func = MLP(hidden).to(device)
    y0 = torch.randn(batch, STATE, generator=generator).to(device)
    t = torch.linspace(0.0, 1.0, n + 1, device=device)
    estimates = {d: estimated_run_seconds(Setup("torchdiffeq", d), func, y0, t, method) for d in dtypes}
    skipped = [
        f"{d}: one forward + backward of torchdiffeq estimated at {e:.0f} s > --max-run-seconds {max_run_seconds:g}"
        for d, e in estimates.items()
        if e > max_run_seconds
    ]
    chosen = [s for s in setups(core) if s.dtype in estimates and estimates[s.dtype] <= max_run_seconds]
    to_time = [s for s in chosen if time_all or (not s.scaler and s.trajectory == "state")]
    times: dict[Setup, list[float]] = {s: [] for s in to_time}
    for s in to_time:  # warm-up: first calls allocate and pick kernels
        forward_backward(s, func, y0, t, method)
    order = random.Random(0)
    for _ in range(repeats):
        for s in order.sample(to_time, len(to_time)):
            times[s].append(timed(s, func, y0, t, method))
    rows = []
    for s in chosen:
        rows.append(
            {
                "method": method,
                "hidden": hidden,
                "batch": batch,
                "n": n,
                "setup": s,
                "time_s": statistics.median(times[s]) if s in times else None,
                "saved_bytes": saved_bytes(s, func, y0, t, method),
                "peak_bytes": peak_bytes(s, func, y0, t, method),
            }
        )
    by_setup = {r["setup"]: r for r in rows}
    float32 = by_setup.get(Setup("native", "float32"))
    user_float32 = by_setup[Setup("torchdiffeq", "float32")]
    for r in rows:
        s = r["setup"]
        reference = by_setup[Setup("torchdiffeq", s.dtype)]
        r["vs_torchdiffeq"] = r["time_s"] / reference["time_s"] if r["time_s"] is not None else None
        r["peak_vs_torchdiffeq"] = r["peak_bytes"] / reference["peak_bytes"]
        # What a user running torchdiffeq in float32 today switches to.
        r["vs_torchdiffeq_float32"] = r["time_s"] / user_float32["time_s"] if r["time_s"] is not None else None
        r["peak_vs_torchdiffeq_float32"] = r["peak_bytes"] / user_float32["peak_bytes"]
        r["peak_vs_native_float32"] = r["peak_bytes"] / float32["peak_bytes"] if float32 else None
        own_float32 = by_setup.get(Setup(s.library, "float32"))
        both_timed = r["time_s"] is not None and own_float32 is not None and own_float32["time_s"] is not None
        r["time_vs_float32"] = r["time_s"] / own_float32["time_s"] if both_timed else None
        r["theory_saved_bytes"] = (
            (n + 1) * batch * STATE * DTYPES[s.dtype].itemsize if s.library != "torchdiffeq" else None
        )
    return rows, skipped


def floors(size, rows: list[dict]) -> list[str]:
    """What native holds by its design, as a share of torchdiffeq's peak in each dtype: in a low dtype, the parameter
    gradients summed in float32 across the steps (torchdiffeq's autocast sums them in the weights' low-precision
    copies), held beside the whole tape from the backward's first step (not a bound on the peak: the two peaks fall
    at other moments, beside other temporaries); and the least the low-memory path holds from its second step on
    (those sums, the stored low-precision states and the loss's gradient with respect to the trajectory, N + 1
    float32 states, which torchdiffeq holds too), before that step's rebuilt graph."""
    method, hidden, batch, n = size
    sums = 4 * sum(p.numel() for p in MLP(hidden).parameters())
    lines = []
    for dtype in DTYPES:
        reference = next((r for r in rows if r["setup"] == Setup("torchdiffeq", dtype)), None)
        if reference is None:
            continue
        states = (n + 1) * batch * STATE
        least = sums + states * DTYPES[dtype].itemsize + states * 4
        # In float32 torchdiffeq sums the gradients in float32 too: nothing beyond its peak.
        beyond = (
            f"native's float32 parameter-gradient sums {sums / 2**20:.2f} MiB = {sums / reference['peak_bytes']:.1%} "
            "of torchdiffeq's peak (held beside the whole tape from the backward's first step); "
            if DTYPES[dtype] != torch.float32
            else ""
        )
        lines.append(
            f"{dtype}: {beyond}the low-memory path holds at least {least / 2**20:.2f} MiB = "
            f"{least / reference['peak_bytes']:.0%} of torchdiffeq's peak"
        )
    return lines


def size_table(size, rows: list[dict], tablefmt: str) -> str:
    def number(value, spec):
        return "" if value is None else format(value, spec)

    return tabulate(
        [
            [
                r["setup"].label,
                number(r["time_s"] and r["time_s"] * 1e3, ".1f"),
                number(r["vs_torchdiffeq"], ".2f"),
                f"{r['saved_bytes'] / 2**20:.2f}",
                number(r["theory_saved_bytes"] and r["theory_saved_bytes"] / 2**20, ".2f"),
                f"{r['peak_bytes'] / 2**20:.2f}",
                number(r["peak_vs_torchdiffeq"], ".0%"),
                number(r["peak_vs_native_float32"], ".0%"),
                number(r["vs_torchdiffeq_float32"], ".2f"),
                number(r["peak_vs_torchdiffeq_float32"], ".0%"),
            ]
            for r in rows
        ],
        headers=[
            f"{size[0]} h={size[1]} batch={size[2]} n={size[3]}",
            "fwd+bwd ms",
            "/ torchdiffeq",
            "saved MiB",
            "theory MiB",
            "peak MiB",
            "peak / tdq",
            "peak / native f32",
            "time / tdq f32",
            "peak / tdq f32",
        ],
        tablefmt=tablefmt,
    )


def summary(rows: list[dict], dtypes: list[str]) -> list[str]:
    lines = [
        "native / torchdiffeq at equal dtype (no scaler, state trajectory), over sizes; targets: stored stages time "
        "median <= 1.0, max <= 1.15, peak <= 105%; low-memory time <= 1.25 (float32), <= 1.45 (bfloat16, float16) at "
        "peak <= 40%:"
    ]
    for setup in [
        Setup(library, dtype, checkpoint=checkpoint)
        for checkpoint in ("stages", "states")
        for library in ("native", BEFORE)
        for dtype in dtypes
    ]:
        chosen = [r for r in rows if r["setup"] == setup and r["vs_torchdiffeq"] is not None]
        if chosen:
            ratios = [r["vs_torchdiffeq"] for r in chosen]
            peaks = [r["peak_vs_torchdiffeq"] for r in chosen]
            lines.append(
                f"  {setup.label:34s} time median {statistics.median(ratios):.2f}  range "
                f"{min(ratios):.2f}-{max(ratios):.2f}; peak median {statistics.median(peaks):.0%}  max "
                f"{max(peaks):.0%}  ({len(ratios)} sizes)"
            )
    lines.append("what a user switches to: native in a low dtype (no scaler) / torchdiffeq float32, median over sizes:")
    low = [d for d in dtypes if d != "float32"]
    for setup in [Setup(library, d) for library in ("native", BEFORE) for d in low] + [
        Setup("native", d, checkpoint="states") for d in low
    ]:
        chosen = [r for r in rows if r["setup"] == setup]
        times = [r["vs_torchdiffeq_float32"] for r in chosen if r["vs_torchdiffeq_float32"] is not None]
        peaks = [r["peak_vs_torchdiffeq_float32"] for r in chosen]
        for what, values, spec in (("time", times, ".2f"), ("peak", peaks, ".0%")):
            if values:
                lines.append(
                    f"  {setup.label:22s} {what} median {statistics.median(values):{spec}}  range "
                    f"{min(values):{spec}}-{max(values):{spec}}  ({len(values)} sizes)"
                )
    lines.append(
        "time / the same library's float32 (no scaler, state trajectory), median over sizes (below 1: faster):"
    )
    for library in ("torchdiffeq", "native", BEFORE):
        for dtype in [d for d in dtypes if d != "float32"]:
            ratios = [r["time_vs_float32"] for r in rows if r["setup"] == Setup(library, dtype)]
            ratios = [ratio for ratio in ratios if ratio is not None]
            if ratios:
                lines.append(
                    f"  {library + ' ' + dtype:22s} median {statistics.median(ratios):.2f}  range "
                    f"{min(ratios):.2f}-{max(ratios):.2f}  ({len(ratios)} sizes)"
                )
    lines.append("peak of forward + backward / native float32's (target for float16 <= 60% with the low trajectory):")
    for dtype in [d for d in dtypes if d != "float32"]:
        for setup in (
            Setup("native", dtype),
            Setup("native", dtype, checkpoint="states"),
            Setup("native", dtype, False, "low", "states"),
            Setup("native", dtype, True, "low", "states"),
        ):
            shares = [
                r["peak_vs_native_float32"]
                for r in rows
                if r["setup"] == setup and r["peak_vs_native_float32"] is not None
            ]
            if shares:
                lines.append(
                    f"  {setup.label:42s} median {statistics.median(shares):.0%}  range "
                    f"{min(shares):.0%}-{max(shares):.0%}  ({len(shares)} sizes)"
                )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only {len(QUICK_SIZES)} small sizes")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per setup and size (median)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU")
    parser.add_argument("--dtype", default=",".join(DTYPES), help=f"comma list of {', '.join(DTYPES)}")
    parser.add_argument("--time-all", action="store_true", help="time every setup, not only the pair the ratio needs")
    parser.add_argument(
        "--max-run-seconds", type=float, default=60.0, help="skip a dtype at a size whose one run would take longer"
    )
    parser.add_argument(
        "--markdown", type=argparse.FileType("w"), help="also write the tables and the summary as markdown"
    )
    parser.add_argument("--baseline", type=Path, help="also time this checkout's native solver, as 'native before'")
    parser.add_argument(
        "--core",
        action="store_true",
        help="measure only the setups the targets name (no scaler, no low trajectory): about a third less time",
    )
    parser.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="METHOD,H,BATCH,N",
        help="only this size (repeatable), e.g. rk4,256,256,16",
    )
    args = parser.parse_args()
    dtypes = [d for d in args.dtype.split(",") if d]
    unknown = sorted(set(dtypes) - set(DTYPES))
    if unknown or not dtypes:
        parser.error(f"--dtype: {', '.join(unknown) or 'empty'} is not one of {', '.join(DTYPES)}")
    if "float32" not in dtypes:
        dtypes.insert(0, "float32")  # the peak's yardstick
    if args.baseline is not None:
        global baseline_odeint
        baseline_odeint = checkout_solvers(args.baseline).odeint
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    where = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{platform.processor() or platform.machine()} cpu, {torch.get_num_threads()} threads"
    )
    header = f"device: {where}; torch {torch.__version__}; load average at start {os.getloadavg()}"
    print(header, flush=True)
    markdown = [f"`{' '.join(['python bench/native_cost.py', *sys.argv[1:]])}`", "", header, ""]
    rows = []
    chosen = [(m, int(h), int(b), int(n)) for m, h, b, n in (s.split(",") for s in args.size)]
    started = time.perf_counter()
    for size in chosen or (QUICK_SIZES if args.quick else SIZES):
        size_started = time.perf_counter()
        size_rows, skipped = measure_size(
            size, dtypes, args.repeats, args.time_all, args.max_run_seconds, device, args.core
        )
        rows += size_rows
        took = f"{time.perf_counter() - size_started:.0f} s, load average now {os.getloadavg()}"
        print()
        print(size_table(size, size_rows, "simple"), flush=True)
        print(f"  {took}", flush=True)
        markdown += [size_table(size, size_rows, "github"), "", f"- {took}", ""]
        for line in floors(size, size_rows):
            print(f"  {line}", flush=True)
            markdown += [f"- {line}", ""]
        for line in skipped:
            print(f"  skipped {line}", flush=True)
            markdown += [f"- skipped {line}", ""]
    footer = [
        f"load average at end {os.getloadavg()}; {time.perf_counter() - started:.0f} s in all",
        "",
        *summary(rows, dtypes),
    ]
    print("\n" + "\n".join(footer))
    if args.markdown:
        args.markdown.write("\n".join([*markdown, footer[0], "", "```", *footer[2:], "```", ""]))


if __name__ == "__main__":
    main()
