"""Heun's methods as torchdiffeq names them: heun2 (the trapezoidal predictor-corrector) and heun3."""

from .base import METHODS, ExplicitRK

METHODS.register(ExplicitRK("heun2", a=((), (1.0,)), b=(0.5, 0.5), c=(0.0, 1.0), description="Heun's method, order 2"))
METHODS.register(
    ExplicitRK(
        "heun3",
        a=((), (1 / 3,), (0.0, 2 / 3)),
        b=(0.25, 0.0, 0.75),
        c=(0.0, 1 / 3, 2 / 3),
        description="Heun's method, order 3",
    )
)
