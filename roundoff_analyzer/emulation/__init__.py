"""Low-precision formats emulated in float32: formats, exact rounding, and the torch function mode that applies it."""

from .formats import CUSTOM_FORMS, NumberFormat, custom_format
from .mode import EmulatedPrecision, EmulationSettings, Saturations, active_emulation, emulate, is_low
from .rounding import round_by_cast, round_nearest, round_stochastic

__all__ = [
    "CUSTOM_FORMS",
    "NumberFormat",
    "custom_format",
    "EmulatedPrecision",
    "EmulationSettings",
    "Saturations",
    "active_emulation",
    "emulate",
    "is_low",
    "round_by_cast",
    "round_nearest",
    "round_stochastic",
]
