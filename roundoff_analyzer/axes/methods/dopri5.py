from .base import METHODS, AdaptiveRK

METHODS.register(
    AdaptiveRK(
        "dopri5",
        order=5,
        n_stages=7,
        description="Dormand-Prince 5(4), adaptive steps (--rtol, --atol, --max-steps); output grid by interpolation",
    )
)
