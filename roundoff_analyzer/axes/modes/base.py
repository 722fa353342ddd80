"""The mode axis: what is low precision: the arithmetic only (autocast) or parameters and inputs too (pure)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ...core.registry import Registry
from ..models import Problem


@dataclass
class PreparedRun:
    func: torch.nn.Module
    y0: torch.Tensor  # a fresh leaf that requires grad
    context: Callable[[], AbstractContextManager]
    # After the run: (phase, count) of values that left the dtype's range without becoming non-finite
    # (a format that saturates instead of overflowing), or None.
    silent_overflow: Callable[[], tuple[str, int] | None] | None = None

    @property
    def leaves(self) -> list[torch.Tensor]:
        return [self.y0, *(p for p in self.func.parameters() if p.requires_grad)]


@dataclass
class ProblemCopies:
    """The problem and its copies cast to other dtypes, each made once per sweep."""

    problem: Problem
    _casts: dict[torch.dtype, torch.nn.Module] = field(default_factory=dict)

    def func_in(self, dtype: torch.dtype) -> torch.nn.Module:
        if dtype == torch.float32:
            return self.problem.func
        if dtype not in self._casts:
            self._casts[dtype] = copy.deepcopy(self.problem.func).to(dtype)
        return self._casts[dtype]


class Mode(Protocol):
    name: str
    description: str

    def prepare(self, copies: ProblemCopies, dtype: torch.dtype) -> PreparedRun: ...


MODES: Registry[Mode] = Registry("mode")


def cast_run(copies: ProblemCopies, dtype: torch.dtype) -> PreparedRun:
    """Parameters and inputs in `dtype`, no autocast: pure low precision, and also the float64 reference."""
    y0 = copies.problem.y0.detach().to(dtype).requires_grad_(True)
    return PreparedRun(copies.func_in(dtype), y0, nullcontext)
