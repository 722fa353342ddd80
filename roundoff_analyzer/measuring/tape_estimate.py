"""A solve whose autograd tape cannot fit, stopped within its first steps rather than after filling the device; a
float64 reference whose tape cannot fit, solved again with its field recomputed in the backward (RecomputedField).

A library that differentiates through its steps (torchdiffeq without the adjoint) keeps every stage's activations
until the backward: the tape grows by the same bytes each step. What the solve saves for backward (the field's
activations and the solver's combinations of stages) is counted through torch.autograd.graph.saved_tensors_hooks
over its first steps, each storage the tape still holds once (what a node the solve dropped saved is freed with it):
what the last of them adds is the growth per step (what an earlier one saved and a later one reuses, the weights and
their autocast copies, is kept once). What the steps so far saved plus
the growth times the steps to come is the estimate; over the memory the device has left, the solve stops at the
start of the next step with a `TapeTooLarge`, which the row records as `oom` with the estimate and the limit. Only
the first WATCHED_STEPS steps are watched, so the rest of the solve runs as it would without the watch. A solver
that keeps no tape (native, the adjoint: no grad in their forward) saves nothing, and is never stopped.
"""

from __future__ import annotations

import resource
import sys
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.utils.checkpoint

from .device_memory import capacity_bytes, gigabytes


class TapeTooLarge(MemoryError):
    """The tape a solve would build exceeds the device (its message gives the estimate and the limit)."""


@dataclass(frozen=True)
class TapeBudget:
    """What a run's solves may keep: `available` bytes of `device`, each solve `n_steps` steps of `evals_per_step`
    evaluations."""

    device: torch.device
    available: int
    n_steps: int
    evals_per_step: int

    @classmethod
    def for_run(cls, device: torch.device, n_steps: int, evals_per_step: int) -> TapeBudget | None:
        """The budget on `device` now, or None where the memory cannot be told: on a GPU what is free there (other
        processes' use counted: workers or other jobs sharing the card) and what this process's allocator has
        reserved but not handed out; on the CPU all its memory, or what the process's address-space limit leaves (a
        job under `ulimit -v`, as batch systems set it)."""
        capacity = capacity_bytes(device)
        if capacity is None:
            return None
        if device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
            return cls(device, free + cached, n_steps, evals_per_step)
        return cls(device, min(capacity, _address_space_left()), n_steps, evals_per_step)


def _address_space_left() -> int:
    """Bytes of address space this process may still map (unbounded where no limit is set)."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    if limit == resource.RLIM_INFINITY:
        return sys.maxsize
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return limit
    mapped_kb = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmSize:")), 0)
    return limit - 1024 * mapped_kb


# Steps whose saved tensors are counted. The third is the first that adds only what every later step adds: the second
# may save for the first time what is then reused (a weight the first did not need, as when y0 takes no gradient;
# its autocast copy).
WATCHED_STEPS = 3


class TapeWatch(torch.nn.Module):
    """`func` unchanged, called by a solve that `watching()` surrounds: what the solve saves for backward in its first
    steps is counted (the field's activations and the solver's own combinations of stages), and the solve stops at
    the start of a step once its estimated tape cannot fit. After WATCHED_STEPS steps, nothing is watched."""

    def __init__(self, func: Callable[..., torch.Tensor], budget: TapeBudget, kept_before: int = 0) -> None:
        super().__init__()
        self.func, self.budget, self.kept_before = func, budget, kept_before
        self.calls = 0
        self.estimate = kept_before  # bytes the whole solve keeps for backward, with what earlier solves keep
        self.step_bytes = 0  # the growth per step, from the last step measured
        # Each step's saved tensors: their storage's address and size, and the tensor the tape holds, which dies with
        # the tape's node: a node whose output the solve drops (torchdiffeq's `y.abs()` for a dtype) frees what it
        # saved at once, and the allocator may hand its address to a tensor saved later.
        self._saved: list[list[tuple[int, int, weakref.ref[torch.Tensor]]]] = [[] for _ in range(WATCHED_STEPS)]
        self._hooks: torch.autograd.graph.saved_tensors_hooks | None = None

    def forward(self, t, y):
        if self._hooks is not None and self.calls and self.calls % self.budget.evals_per_step == 0:
            self._measure(steps_done=self.calls // self.budget.evals_per_step)
        self.calls += 1
        return self.func(t, y)

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Count the saved tensors of the solve inside, until its first steps are measured."""
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpacked)
        self._hooks.__enter__()
        try:
            yield
        finally:
            self._stop_watching()

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        step = min(max(self.calls - 1, 0) // self.budget.evals_per_step, WATCHED_STEPS - 1)
        storage = tensor.untyped_storage()
        # A detached view: the saved tensor itself would tie a saved output to its own graph node (a cycle).
        packed = tensor.detach()
        self._saved[step].append((storage.data_ptr(), storage.nbytes(), weakref.ref(packed)))
        return packed

    def _measure(self, steps_done: int) -> None:
        """The estimate after `steps_done` steps: what they saved and the tape still holds, and the last one's new
        storages for each step still to come."""
        seen: set[int] = set()
        saved = 0
        for step_saved in self._saved[:steps_done]:
            held = {pointer: size for pointer, size, packed in step_saved if packed() is not None}
            self.step_bytes = sum(size for pointer, size in held.items() if pointer not in seen)
            saved += self.step_bytes
            seen.update(held)
        self.estimate = self.kept_before + saved + self.step_bytes * (self.budget.n_steps - steps_done)
        if steps_done == WATCHED_STEPS:
            self._stop_watching()
        if self.estimate > self.budget.available:
            raise TapeTooLarge(
                f"its tape for backward would hold about {gigabytes(self.estimate)} "
                f"({gigabytes(self.step_bytes)} per step, measured on its first {steps_done} of "
                f"{self.budget.n_steps} steps); {self.budget.device} has {gigabytes(self.budget.available)} "
                f"available; stopped after step {steps_done}"
            )

    def _stop_watching(self) -> None:
        hooks, self._hooks = self._hooks, None
        if hooks is not None:
            hooks.__exit__(None, None, None)


class RecomputedField(torch.nn.Module):
    """`func` unchanged, its activations not kept for backward but computed again there (torch.utils.checkpoint):
    each evaluation keeps only its inputs on the tape. The same operations on the same inputs give the same values,
    so a float64 reference solved this way equals one that kept its tape; it costs one more evaluation of the field
    per evaluation, in the backward."""

    def __init__(self, func: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.func = func

    def forward(self, t, y):
        if not torch.is_grad_enabled():
            return self.func(t, y)
        return torch.utils.checkpoint.checkpoint(self.func, t, y, use_reentrant=False)


def _unpacked(tensor: torch.Tensor) -> torch.Tensor:
    return tensor
