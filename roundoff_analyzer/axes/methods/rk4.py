"""The two fourth-order rules of four stages. `rk4` is the classical one in this project (that of rampde and of its
paper, "Mixed Precision Training of Neural ODEs", and of torchdyn and torchode); torchdiffeq's `rk4` is Kutta's 3/8
rule, here `rk4_38`. A sweep records the rule each row ran in its `tableau` column."""

from .base import METHODS, ExplicitRK

_CLASSICAL_A = ((), (0.5,), (0.0, 0.5), (0.0, 0.0, 1.0))
_CLASSICAL_B = (1 / 6, 1 / 3, 1 / 3, 1 / 6)
_CLASSICAL_C = (0.0, 0.5, 0.5, 1.0)
CLASSICAL = "rk4_classical"
THREE_EIGHTHS = "rk4_38"

METHODS.register(
    ExplicitRK(
        "rk4",
        a=_CLASSICAL_A,
        b=_CLASSICAL_B,
        c=_CLASSICAL_C,
        tableau=CLASSICAL,
        description=(
            "classical Runge-Kutta, order 4 (each library's own rk4: torchdiffeq's is the 3/8 rule, see the "
            "tableau column)"
        ),
    )
)
METHODS.register(
    ExplicitRK(
        CLASSICAL,
        a=_CLASSICAL_A,
        b=_CLASSICAL_B,
        c=_CLASSICAL_C,
        description="classical Runge-Kutta, order 4, in every library",
    )
)
METHODS.register(
    ExplicitRK(
        THREE_EIGHTHS,
        a=((), (1 / 3,), (-1 / 3, 1.0), (1.0, -1.0, 1.0)),
        b=(1 / 8, 3 / 8, 3 / 8, 1 / 8),
        c=(0.0, 1 / 3, 2 / 3, 1.0),
        description="Kutta's 3/8 rule, order 4: torchdiffeq's rk4",
    )
)
