from .base import METHODS, AdaptiveRK

METHODS.register(
    AdaptiveRK(
        "tsit5",
        order=5,
        n_stages=7,
        description="Tsitouras 5(4), adaptive steps (--rtol, --atol, --max-steps); output grid by interpolation",
    )
)
