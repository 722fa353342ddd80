"""Whether the native solver keeps each step's stage graph from the forward (`checkpoint="stages"`: the backward takes
each step's vector-Jacobian product through it, no recomputation) or only the N+1 stored low-precision states
(`"states"`: the backward rebuilds each step from its state, the paper's low-memory design), and `"auto"`: the stage
graphs where the tape they make fits the memory budget, the states otherwise.

The tape is measured, not guessed: the bytes the first two steps' graphs save for backward (through
`saved_tensors_hooks`, each storage once, what the graph no longer holds left out), the second step's being the growth
per step (the weights' autocast copies are saved by the first and reused after it); the first plus the growth times
the steps to come is the estimate. Over the budget, the solve drops what it kept and goes on with stored states only.
"""

from __future__ import annotations

import os
import weakref
from typing import Literal

import torch

Checkpoint = Literal["auto", "stages", "states"]
CHECKPOINTS: tuple[str, ...] = ("auto", "stages", "states")
# The share of the memory available when the solve starts that "auto" lets the kept stage graphs take.
BUDGET_SHARE = 0.5


def checked_checkpoint(checkpoint: str, memory_budget: int | None) -> None:
    if checkpoint not in CHECKPOINTS:
        raise ValueError(f"checkpoint must be one of {', '.join(CHECKPOINTS)}, not {checkpoint!r}")
    whole = isinstance(memory_budget, int) and not isinstance(memory_budget, bool)
    if memory_budget is not None and not (whole and memory_budget >= 0):
        raise ValueError(f"memory_budget must be a number of bytes (an int >= 0) or None, not {memory_budget!r}")


def default_budget(device: torch.device) -> int:
    """Half the memory available now: on a GPU what the device has free plus what this process's allocator holds
    unused, on the CPU the system's available memory (Linux's MemAvailable, else the free pages)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(BUDGET_SHARE * (free + cached))
    return int(BUDGET_SHARE * _cpu_available())


def _cpu_available() -> int:
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


class TapeMeter:
    """Counts what the graphs built inside `counting()` save for backward, each storage once."""

    def __init__(self) -> None:
        self._saved: dict[int, tuple[weakref.ref, int]] = {}

    def counting(self) -> torch.autograd.graph.saved_tensors_hooks:
        def pack(tensor: torch.Tensor) -> torch.Tensor:
            storage = tensor.untyped_storage()
            self._saved.setdefault(storage.data_ptr(), (weakref.ref(tensor), storage.nbytes()))
            return tensor

        return torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor)

    def held(self) -> int:
        """The bytes counted so far that a graph still holds."""
        return sum(size for tensor, size in self._saved.values() if tensor() is not None)


def fits(first_two: int, first: int, n_steps: int, budget: int) -> bool:
    """Whether `n_steps` steps' graphs fit `budget`, the first step's graph holding `first` bytes and the first two's
    `first_two`."""
    growth = first_two - first
    return first + growth * max(n_steps - 1, 0) <= budget
