"""How many torch threads a sweep's process uses: chosen from the size of the problem's largest matmul.

The problems of a roundoff sweep are small (OT-Flow at its defaults multiplies 64×32 by 32×32), and
torch splits such ops over threads little or not at all, while every extra thread waits on a core:
on a 2-core machine with one core taken by another process, `--timesteps 8,32` ran 3.4× slower
with torch's default 2 threads than with one. Extra threads pay only once a single
matmul is large; `bench/threads.py` measures the whole sweep both ways. The threshold below is where
one (b×m)·(m×m) matmul became faster on 2 threads than on 1 on this project's 2-core machine
(float32 and bfloat16, b·m·m from 2¹⁶ to 2³²: 0.6–0.98× below 2²³ multiply-adds, 1.3–1.9× from 2²⁴
up to 2²⁸). The thread count does not change the numbers on the CPUs tried (see `tests/test_threads.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from .cores import available_cores

# Multiply-adds of one matmul from which a second thread paid off (see above).
PARALLEL_MATMUL_MACS = 2**23


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    reason: str  # why this many, in words, for the manifest and the plan line
    # The count the process had before (torch's default, unless its caller set one): what a script of the user's
    # runs with unless it sets its own, which the answer's code compares with.
    default: int | None = None

    def as_dict(self) -> dict:
        default = {"threads_default": self.default} if self.default is not None else {}
        return {"threads": self.threads, "threads_reason": self.reason, **default}


class _LargestMatmul(TorchFunctionMode):
    """Records the multiply-adds of the largest matrix product called while it is active. A torch-function
    mode, not a dispatch mode: the latter imports torch._dynamo, seconds in every process that starts."""

    def __init__(self) -> None:
        super().__init__()
        self.macs = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name == "linear":  # (…, in) x (out, in)ᵀ
            self.macs = max(self.macs, args[0].numel() * args[1].shape[0])
        elif name in ("matmul", "__matmul__", "mm", "bmm", "addmm", "baddbmm"):
            a, b = args[1:3] if name in ("addmm", "baddbmm") else args[:2]
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                self.macs = max(self.macs, a.numel() * (b.shape[-1] if b.dim() >= 2 else 1))
        return func(*args, **(kwargs or {}))


def largest_matmul_macs(evaluate: Callable[[], object]) -> int:
    """Multiply-adds of the largest matrix product that `evaluate()` (one evaluation of the model) computes."""
    recorder = _LargestMatmul()
    with recorder:
        evaluate()
    return recorder.macs


def choose_threads(
    evaluate: Callable[[], object], device: torch.device, requested: int | None, processes: int = 1
) -> ThreadChoice:
    """`requested` when given; else one thread, unless the problem's largest matmul is large enough for
    more to pay off on the CPU, when this machine's cores are shared among `processes`."""
    default = torch.get_num_threads()
    if requested is not None:
        return ThreadChoice(requested, "--threads", default)
    share = max(1, available_cores() // processes)
    if device.type != "cpu":
        return ThreadChoice(1, f"{device.type}: the CPU only launches kernels", default)
    macs = largest_matmul_macs(evaluate)
    if macs < PARALLEL_MATMUL_MACS or share == 1:
        return ThreadChoice(
            1,
            f"largest matmul {macs:,} multiply-adds, below {PARALLEL_MATMUL_MACS:,}"
            if macs < PARALLEL_MATMUL_MACS
            else f"largest matmul {macs:,} multiply-adds, one core per process",
            default,
        )
    return ThreadChoice(
        share,
        f"largest matmul {macs:,} multiply-adds, from {PARALLEL_MATMUL_MACS:,} on: this process's cores",
        default,
    )


@contextmanager
def torch_threads(choice: ThreadChoice | None) -> Iterator[None]:
    """The chosen thread count while measuring, and the caller's afterwards (a notebook keeps its setting)."""
    previous = torch.get_num_threads()
    if choice is not None:
        torch.set_num_threads(choice.threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
