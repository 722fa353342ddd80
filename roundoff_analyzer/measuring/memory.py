"""Memory that can never fit, found before anything is allocated.

Two lower bounds, each against everything the device has (not what is free now, which changes):
the problem itself (its float32 weights and batch plus the float64 copy the reference needs), found
by building it on PyTorch's `meta` device, where nothing is allocated; and one configuration's float64
reference trajectory, (n_timesteps + 1) states of y0's size. A problem over the bound is bad input (exit
2); a configuration over it is an `oom` row that never ran.
"""
from __future__ import annotations

import os

import torch

from ..core.errors import InputError
from .failures import OOM, Failure

FLOAT32_AND_FLOAT64 = 4 + 8  # bytes per element: the problem and its reference copy


def capacity_bytes(device: torch.device) -> int | None:
    """All the memory of `device` (physical memory for the CPU), or None where it cannot be told."""
    try:
        if device.type == "cuda":
            return torch.cuda.get_device_properties(device.index or 0).total_memory
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError, RuntimeError, AssertionError):
        return None


def gigabytes(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.3g} GB"


def problem_elements(model, options, data) -> int | None:
    """Elements in the problem's weights and batch, counted on the meta device (None when the model cannot be built there)."""
    try:
        with torch.device("meta"):
            problem = model.build(options, torch.device("meta"), data)
    except Exception:  # noqa: BLE001 - the real build reports whatever is wrong with the request
        return None
    return problem.y0.numel() + sum(t.numel() for t in problem.func.state_dict().values())


def check_problem_fits(model, options, data, device: torch.device) -> None:
    """Refuse a problem that cannot fit on `device` even once (a built-in model's options, such as hidden=10000000)."""
    elements, capacity = problem_elements(model, options, data), capacity_bytes(device)
    if elements is None or capacity is None:
        return
    needed = elements * FLOAT32_AND_FLOAT64
    if needed > capacity:
        raise InputError(
            f"model {model.name} with these options has {elements:,} weights and batch values, which need at least "
            f"{gigabytes(needed)} (float32 and the float64 copy of the reference); {device} has {gigabytes(capacity)}"
        )


def allocation_failed(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "can't allocate memory" in text or "out of memory" in text


def configuration_oom(n_timesteps: int, y0: torch.Tensor, device: torch.device) -> Failure | None:
    """An `oom` failure when the configuration's float64 reference trajectory alone exceeds the device."""
    capacity = capacity_bytes(device)
    needed = (n_timesteps + 1) * y0.numel() * 8
    if capacity is None or needed <= capacity:
        return None
    return Failure(OOM, "MemoryEstimate", f"the float64 reference trajectory alone needs {gigabytes(needed)} "
                   f"({n_timesteps + 1} states of {y0.numel()} values); {device} has {gigabytes(capacity)}; not run")  # fmt: skip
