"""The operations the native solver and torchdiffeq dispatch per step, forward and backward, counted.

On a GPU that waits on kernel launches a solve's time is its number of kernels; on the CPU the number of operations
dispatched is that same number, and it can be counted on any machine. For the MLP ODE of `bench/native_cost.py`
(64-wide state, --hidden units, three Linear layers, tanh) at n_timesteps --n, one forward and one backward of the
final state's mean square, for each library, dtype (float32, and bfloat16 and float16 under autocast) and method,
a `TorchDispatchMode` counts every ATen operation dispatched, and prints per step (the solve's counts / n):

  - all: every operation, views included (`t`, `view`, `select`, `detach`, ...: metadata only, no kernel);
  - compute: the rest, what launches a kernel on a GPU, broken down into casts (`_to_copy`), matrix products
    (`addmm`, `mm`, ...), adds (add, sub and their in-place and `_foreach_` forms), muls (mul, div, ...), copies
    (`copy_`, `clone`), allocations (`empty`, `zeros`, ...), syncs (`_local_scalar_dense`: `.item()`, a host-device
    synchronisation on a GPU) and the other operations;
  - on CUDA (`--device cuda`), the kernels the profiler saw launched.

Both libraries run the same tableau: "rk4" is torchdiffeq's 3/8 rule in the drop-in too (the classical rule is
"rk4_classical").

`--baseline CHECKOUT` counts the same with another checkout's package (this script run in a subprocess with
PYTHONPATH at it) and prints both side by side: the counts before and after a change.

    python bench/op_counts.py [--n 16] [--hidden 64] [--batch 64] [--device cpu|cuda] [--baseline CHECKOUT]
                              [--markdown FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
import torchdiffeq
from tabulate import tabulate
from torch.utils._python_dispatch import TorchDispatchMode

from roundoff_analyzer.solvers import odeint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from native_cost import DTYPES, MLP, STATE  # noqa: E402  (a sibling script: the same field as the time bench)

LIBRARIES = ("torchdiffeq", "native")
METHODS = ("rk4", "euler")
CATEGORIES = {
    "casts": ("_to_copy",),
    "matmul": ("addmm", "mm", "bmm", "baddbmm", "addmv", "mv", "dot", "addbmm"),
    "adds": ("add", "add_", "sub", "sub_", "rsub", "_foreach_add", "_foreach_add_", "_foreach_sub_", "neg"),
    "muls": ("mul", "mul_", "div", "div_", "_foreach_mul", "_foreach_mul_", "_foreach_div_"),
    "copies": ("copy_", "clone"),
    "allocations": ("empty", "zeros", "zeros_like", "ones_like", "full", "new_empty_strided", "empty_like", "ones"),
    "syncs": ("_local_scalar_dense",),
}
COLUMNS = ("all", "compute", *CATEGORIES, "other")


class OperationCounter(TorchDispatchMode):
    """Counts the ATen operations dispatched inside it, views apart (no kernel: metadata only)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()
        self.views = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.is_view or func.overloadpacket.__name__ in ("detach", "alias", "unbind", "split"):
            self.views += 1
        else:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def columns(self, n: int) -> dict[str, float]:
        counted = {name: sum(self.ops[op] for op in ops) for name, ops in CATEGORIES.items()}
        compute = sum(self.ops.values())
        return {
            "all": (compute + self.views) / n,
            "compute": compute / n,
            **{name: value / n for name, value in counted.items()},
            "other": (compute - sum(counted.values())) / n,
        }


def kernel_launches(run) -> tuple[int, int]:
    """(forward, backward) CUDA kernels the profiler saw, memory copies and sets included."""
    from torch.profiler import ProfilerActivity, profile

    counts = []
    for phase in ("forward", "backward"):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run(phase)
            torch.cuda.synchronize()
        counts.append(sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA))
    return counts[0], counts[1]


def count(library: str, dtype: str, method: str, n: int, hidden: int, batch: int, device: torch.device) -> dict:
    generator = torch.Generator().manual_seed(0)
    func = MLP(hidden).to(device)
    y0 = torch.randn(batch, STATE, generator=generator).to(device).requires_grad_(True)
    t = torch.linspace(0.0, 1.0, n + 1, device=device)
    low = DTYPES[dtype]
    held: dict[str, torch.Tensor] = {}

    def run(phase: str) -> None:
        if phase == "forward":
            with torch.autocast(device.type, dtype=low, enabled=low != torch.float32):
                solve = torchdiffeq.odeint if library == "torchdiffeq" else odeint
                held["loss"] = solve(func, y0, t, method=method)[-1].float().pow(2).mean()
        else:
            held.pop("loss").backward()
            func.zero_grad(set_to_none=True)
            y0.grad = None

    run("forward")  # first calls pick kernels and fill caches
    run("backward")
    counted = {}
    for phase in ("forward", "backward"):
        with OperationCounter() as counter:
            run(phase)
        counted[phase] = counter.columns(n)
    if device.type == "cuda":
        counted["kernels"] = dict(zip(("forward", "backward"), (k / n for k in kernel_launches(run))))
    return counted


def measure(n: int, hidden: int, batch: int, device: torch.device) -> dict[str, dict]:
    return {
        f"{library} {dtype} {method}": count(library, dtype, method, n, hidden, batch, device)
        for method in METHODS
        for dtype in DTYPES
        for library in LIBRARIES
    }


def in_checkout(checkout: Path, args: argparse.Namespace) -> dict[str, dict]:
    """This script's counts with `checkout`'s package, from a subprocess."""
    command = [sys.executable, __file__, "--json", "--n", str(args.n), "--hidden", str(args.hidden)]
    command += ["--batch", str(args.batch), "--device", args.device]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"counting with {checkout} failed: {done.stderr.strip()[-800:]}")
    return json.loads(done.stdout)


def table(found: dict[str, dict[str, dict]], tablefmt: str) -> str:
    """One row per library, dtype, method and phase; one column group per checkout (`found`'s keys)."""
    versions = list(found)
    rows = []
    for key in found[versions[0]]:
        phases = ["forward", "backward", "forward + backward"]
        phases += ["CUDA kernels"] if "kernels" in found[versions[0]][key] else []
        for phase in phases:
            row = [key, phase]
            for version in versions:
                counted = found[version][key]
                if phase == "CUDA kernels":
                    row += [f"{sum(counted['kernels'].values()):.1f}"] + [""] * (len(COLUMNS) - 1)
                    continue
                both = {c: counted["forward"][c] + counted["backward"][c] for c in COLUMNS}
                values = both if phase == "forward + backward" else counted[phase]
                row += [f"{values[c]:.1f}" for c in COLUMNS]
            rows.append(row)
    headers = ["library dtype method", "phase"]
    for version in versions:
        headers += [f"{c} ({version})" if len(versions) > 1 else c for c in COLUMNS]
    return tabulate(rows, headers=headers, tablefmt=tablefmt, disable_numparse=True)


def verdict(counted: dict[str, dict]) -> list[str]:
    """native against torchdiffeq, forward + backward, per dtype and method (target: native <= torchdiffeq)."""
    lines = []
    for method in METHODS:
        for dtype in DTYPES:
            total = {
                library: {
                    c: counted[f"{library} {dtype} {method}"]["forward"][c]
                    + counted[f"{library} {dtype} {method}"]["backward"][c]
                    for c in ("all", "compute")
                }
                for library in LIBRARIES
            }
            native, reference = total["native"], total["torchdiffeq"]
            lines.append(
                f"{method:5s} {dtype:8s} native / torchdiffeq per step: all {native['all']:.1f} / "
                f"{reference['all']:.1f} = {native['all'] / reference['all']:.2f}, compute {native['compute']:.1f} / "
                f"{reference['compute']:.1f} = {native['compute'] / reference['compute']:.2f}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=16, help="n_timesteps")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--baseline", type=Path, help="also count with this checkout's package, side by side")
    parser.add_argument("--markdown", type=argparse.FileType("w"), help="also write the table as markdown")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = torch.device(args.device)
    counted = measure(args.n, args.hidden, args.batch, device)
    if args.json:
        print(json.dumps(counted))
        return
    found = {"before": in_checkout(args.baseline, args), "after": counted} if args.baseline else {"": counted}
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    header = (
        f"operations per step: MLP h={args.hidden}, batch {args.batch}, n_timesteps {args.n}, one forward and one "
        f"backward; {where}, torch {torch.__version__}" + (f"; before: {args.baseline}" if args.baseline else "")
    )
    print(header + "\n")
    print(table(found, "simple"))
    for version, one in found.items():
        print(f"\n{version or 'this checkout'}:")
        print("\n".join(verdict(one)))
    if args.markdown:
        args.markdown.write(f"{header}\n\n{table(found, 'github')}\n")


if __name__ == "__main__":
    main()
