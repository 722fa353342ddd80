"""The arithmetic axis: a dtype's arithmetic run by the device itself, or emulated in float32."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ...core.registry import Registry
from ..dtypes import DtypeSpec
from ..modes import Mode, PreparedRun, ProblemCopies

# Formats this narrow get per-tensor power-of-two scaling of low-precision op inputs and outputs, unless switched off.
FP8_BITS = 8


@dataclass(frozen=True)
class ArithmeticRequest:
    rounding: str = "nearest"
    fp8_scaling: bool = True
    repeat: int = 0  # which of the configuration's repeats: seeds stochastic rounding


def tensor_scaling(dtype: DtypeSpec, arithmetic: str, fp8_scaling: bool) -> bool | None:
    """Whether a run scales per tensor (None where the question does not arise: hardware, or a format wider than 8
    bits)."""
    if arithmetic == "hardware" or dtype.bits > FP8_BITS:
        return None
    return fp8_scaling


class Arithmetic(Protocol):
    name: str
    description: str
    # Optional (False where left out): whether runs of one setup that differ in their scaling may share a forward.
    # shares_forward: bool

    def skip_reason(self, dtype: DtypeSpec, rounding: str) -> str | None: ...

    def unsupported_reason(self, dtype: DtypeSpec, device: torch.device) -> str | None: ...

    def prepare(
        self, mode: Mode, copies: ProblemCopies, dtype: DtypeSpec, request: ArithmeticRequest
    ) -> PreparedRun: ...


ARITHMETICS: Registry[Arithmetic] = Registry("arithmetic")
