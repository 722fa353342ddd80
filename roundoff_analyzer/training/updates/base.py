"""The update axis: how an optimizer's step is rounded into weights stored in a low-precision format.

A rule takes the stored weights `w` (float32 tensors whose every value is a value of `fmt`), the step `delta`
the optimizer computed in float32, and the rule's compensation buffer (None for rules without one), and returns
the new stored weights; a rule with a buffer updates it in place. Every result is a value of `fmt`.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ...core.registry import Registry
from ...emulation import NumberFormat


class UpdateRule(Protocol):
    name: str
    description: str
    compensated: bool  # keeps a per-weight compensation buffer (in the weights' format)
    stochastic: bool  # draws from the training's rounding stream

    def apply(
        self,
        w: torch.Tensor,
        delta: torch.Tensor,
        compensation: torch.Tensor | None,
        fmt: NumberFormat,
        generator: torch.Generator,
    ) -> torch.Tensor: ...


UPDATES: Registry[UpdateRule] = Registry("update")
