"""Memory that can never fit, found before anything is allocated.

Lower bounds, each against everything the device has (not what is free now, which changes):
the problem itself (its float32 weights and batch plus the float64 copy the reference needs), counted from
a built-in model's options, or found by building a model on PyTorch's `meta` device, where nothing is
allocated; one configuration's float64 reference trajectory and its own float32 one, (n_timesteps + 1)
states of y0's size each; and the yardsticks' fine reference (discretisation.py): its grid of exact
fractions while it is built, its float64 trajectory, the cotangent of the same size and at least two more
states per step on the tape. A problem over the
bound is bad input (exit 2); a configuration over it is an `oom` row that never ran, a fine reference over
it leaves the yardstick columns empty; a grid whose largest need is more than FAR_BEYOND times the device is
refused before anything runs, unless asked for (`allow_oom`).
"""

from __future__ import annotations

import torch

from ..axes.models.inputs import floating_inputs
from ..core.errors import InputError
from .device_memory import capacity_bytes, gigabytes
from .discretisation import fine_steps
from .failures import Failure
from .outcomes import FailureClass

FLOAT32_AND_FLOAT64 = 4 + 8  # bytes per element: the problem and its reference copy


def problem_elements(model, options, data) -> int | None:
    """Elements in the problem's weights and batch: counted from the options where the model can (the built-in ones,
    whose build on the meta device would import torch._dynamo, over a second, for PyTorch's meta versions of
    `normal_`, `randn`, `cat` and `eye`), else built on the meta device (None when the model cannot be built there)."""
    count = getattr(model, "problem_elements", None)
    if count is not None:
        return count(options)
    try:
        with torch.device("meta"):
            problem = model.build(options, torch.device("meta"), data)
    except Exception:  # noqa: BLE001 - the real build reports whatever is wrong with the request
        return None
    batch = problem.sample_batch(0)
    return sum(t.numel() for t in floating_inputs(batch)) + sum(t.numel() for t in problem.model.state_dict().values())


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
    return (
        isinstance(exc, (MemoryError, torch.OutOfMemoryError))
        or "can't allocate memory" in text
        or "out of memory" in text
    )


# Bytes per state value a configuration holds at least: its float64 reference trajectory and its own float32 one.
CONFIGURATION_BYTES_PER_VALUE = 8 + 4
# Per state value of the fine reference: its float64 trajectory, the cotangent as large,
# and at least two more states per
# step on the tape (bench/memory_estimate.py measured 4.6 states per step in all on otflow: the bound stays below it).
FINE_BYTES_PER_VALUE = 8 * (1 + 1 + 2)
# Per point of the fine grid while it is built (fine_grid): a Fraction with its two integers, in a list and a dict.
FINE_BYTES_PER_POINT = 200
# A grid needing more than this many times the device's memory is refused unless asked for (allow_oom).
FAR_BEYOND = 2


def configuration_bytes(n_timesteps: int, n_values: int) -> int:
    """A lower bound of what one configuration holds at once: its reference's and its own trajectory."""
    return (n_timesteps + 1) * n_values * CONFIGURATION_BYTES_PER_VALUE


def fine_reference_bytes(timesteps: list[int], n_values: int) -> int:
    """A lower bound of what the yardsticks' fine reference holds at once (its larger solve, of fine_steps steps)."""
    points = fine_steps(timesteps) + 1
    return points * (n_values * FINE_BYTES_PER_VALUE + FINE_BYTES_PER_POINT)


def configuration_oom(n_timesteps: int, n_values: int, device: torch.device) -> Failure | None:
    """An `oom` failure when the configuration's trajectories alone exceed the device (`n_values`: a state's
    elements)."""
    capacity = capacity_bytes(device)
    needed = configuration_bytes(n_timesteps, n_values)
    if capacity is None or needed <= capacity:
        return None
    return Failure(
        FailureClass.OOM,
        "MemoryEstimate",
        f"the float64 reference trajectory and the run's own alone need {gigabytes(needed)} "
        f"({n_timesteps + 1} states of {n_values} values each); {device} has {gigabytes(capacity)}; not run",
    )


def fine_reference_oom(timesteps: list[int], n_values: int, device: torch.device) -> str | None:
    """Why the fine reference is not computed (its estimate exceeds the device), or None."""
    capacity, needed = capacity_bytes(device), fine_reference_bytes(timesteps, n_values)
    if capacity is None or needed <= capacity:
        return None
    return (
        f"oom: the fine reference ({fine_steps(timesteps)} RK4 steps of {n_values} values) "
        f"needs at least {gigabytes(needed)}; "
        f"{device} has {gigabytes(capacity)}; not computed"
    )


def check_grid_fits(timesteps: list[int], n_values: int, device: torch.device) -> None:
    """Refuse a grid whose largest need (a configuration's, or the fine reference's) is far beyond the device: a
    typing slip (--timesteps 100000000) is told in a second rather than found after minutes of oom rows."""
    capacity = capacity_bytes(device)
    if capacity is None:
        return
    largest = max(timesteps)
    needs = {
        f"n_timesteps {largest}": configuration_bytes(largest, n_values),
        f"the fine reference ({fine_steps(timesteps)} RK4 steps)": fine_reference_bytes(timesteps, n_values),
    }
    what, needed = max(needs.items(), key=lambda item: item[1])
    if needed > FAR_BEYOND * capacity:
        raise InputError(
            f"{what} needs at least {gigabytes(needed)} ({n_values} state values), "
            f"more than {FAR_BEYOND} times all the memory of {device} ({gigabytes(capacity)}); "
            "use smaller --timesteps, or --allow-oom to record what cannot fit as oom rows"
        )
