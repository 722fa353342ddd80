"""A watched call's inputs as they were before the call: a module that writes into its input (`nn.ELU(inplace=True)`)
leaves the run's tensor holding its output, so the float64 re-run and the backward's recomputation read a copy taken
before the call. Whether a call wrote in place is read from the tensors' version counters, which every in-place
operation advances."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


def map_tensors(value: Any, fn) -> Any:
    """`value` (a call's arguments: tensors, or lists, tuples and dicts of them) with `fn` applied to each tensor."""
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(map_tensors(item, fn) for item in value)
    if isinstance(value, dict):
        return {key: map_tensors(item, fn) for key, item in value.items()}
    return value


def _floating(value: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    map_tensors(value, lambda t: found.append(t) if t.is_floating_point() else None)
    return found


def _version(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:  # an inference tensor keeps no version counter
        return None


def to_float64(value: Any) -> Any:
    """Floating tensors as float64 copies (a float64 tensor copied too: the copy must outlive an in-place call)."""
    return map_tensors(
        value, lambda t: t.detach().to(torch.float64, copy=True) if t.is_floating_point() else t.detach()
    )


def _detached(value: Any) -> Any:
    return map_tensors(value, lambda t: t.detach())


@dataclass
class CallInputs:
    """The positional and keyword inputs of one call, taken before it ran."""

    args: tuple
    kwargs: dict
    versions: list[tuple[torch.Tensor, int | None]]
    float64: tuple[tuple, dict] | None = None  # float64 copies, taken where the forward's error is measured
    copies: tuple[tuple, dict] | None = None  # copies in the run's precision, for a callable known to write in place
    requires_grad: list[bool] = field(default_factory=list)  # per positional input, then per keyword input

    @classmethod
    def before(cls, args: tuple, kwargs: dict, float64: bool, copy: bool) -> CallInputs:
        """`float64`: keep float64 copies (the forward's error is measured); `copy`: keep copies in the run's precision
        too (the callable is known to write into its input)."""
        tensors = _floating((args, kwargs))
        return cls(
            args,
            kwargs,
            [(t, _version(t)) for t in tensors],
            to_float64((args, kwargs)) if float64 else None,
            map_tensors((args, kwargs), lambda t: t.detach().clone()) if copy else None,
            [isinstance(a, torch.Tensor) and a.requires_grad for a in (*args, *kwargs.values())],
        )

    def overwritten(self) -> bool:
        """Whether an input was written in place since the inputs were taken."""
        return any(_version(t) != version for t, version in self.versions)

    def float64_inputs(self) -> tuple[tuple, dict] | None:
        """float64 copies of the inputs as they were before the call: those taken then, or, where none were taken and
        no input was written since, copies taken now; None where an input was overwritten and no copy was kept."""
        if self.float64 is not None:
            return self.float64
        if self.overwritten():
            return None if self.copies is None else to_float64(self.copies)
        return to_float64((self.args, self.kwargs))

    def as_before(self) -> tuple[tuple, dict] | None:
        """The inputs in the run's precision as they were before the call, detached; None where an input was overwritten
        and no copy of it was kept."""
        if not self.overwritten():
            return _detached((self.args, self.kwargs))
        if self.copies is not None:
            return self.copies
        if self.float64 is not None:
            # float64 holds every value of the narrower dtypes exactly: cast back, it is the input itself.
            originals = iter(_floating((self.args, self.kwargs)))
            return map_tensors(self.float64, lambda t: t.to(next(originals).dtype) if t.is_floating_point() else t)
        return None


@dataclass
class SavedInputs:
    """A call's inputs kept for the backward's recomputation, with their versions then: an input overwritten after the
    call (by a later in-place operation) no longer holds what the call read."""

    args: tuple
    kwargs: dict
    requires_grad: list[bool]
    versions: list[tuple[torch.Tensor, int | None]]

    @classmethod
    def of(cls, inputs: tuple[tuple, dict], requires_grad: list[bool]) -> SavedInputs:
        args, kwargs = inputs
        return cls(args, kwargs, requires_grad, [(t, _version(t)) for t in _floating(inputs)])

    def overwritten(self) -> bool:
        return any(_version(t) != version for t, version in self.versions)
