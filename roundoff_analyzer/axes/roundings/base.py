"""The rounding axis: how emulated arithmetic rounds a value to the format (hardware always rounds to nearest)."""

from __future__ import annotations

from typing import Protocol

from ...core.registry import Registry


class Rounding(Protocol):
    name: str
    description: str
    # Whether repeated runs differ, so that their spread estimates the significant digits.
    random: bool


ROUNDINGS: Registry[Rounding] = Registry("rounding")
