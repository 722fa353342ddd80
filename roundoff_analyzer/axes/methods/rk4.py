from .base import METHODS, ExplicitRK

METHODS.register(
    ExplicitRK(
        "rk4",
        a=((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0)),
        b=(1 / 6, 1 / 3, 1 / 3, 1 / 6),
        c=(0.0, 0.5, 0.5, 1.0),
        description="classical Runge-Kutta, order 4 (native); torchdiffeq's rk4 is its 3/8-rule variant",
    )
)
